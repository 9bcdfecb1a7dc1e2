"""Nimbus's metrics store across reassignments: what a replaced worker counted (its totals, its
share of each window, its fail reasons) stays in the topology's numbers and ages out of the
windows as live counts do. Synthetic snapshots of workers that fail a steady RATE of tuples, on
a clock the test moves (``cluster.metrics_store``, ``cluster.retired_metrics``)."""

from __future__ import annotations

from stormlet.cluster.metrics_store import MetricsStore
from stormlet.metrics.views import component_stats, topology_stats, worker_stats
from stormlet.metrics.windows import ALL_TIME, WINDOWS
from stormlet.runtime.metrics import window_stats

TID = "t-1"
HOST = "10.0.0.1"
RATE = 10   # tuples per second each worker's spout emits and fails
STRUCTURE = {"components": {
    "source": {"kind": "spout", "tasks": 1, "executors": 1, "inputs": []},
    "explode": {"kind": "bolt", "tasks": 1, "executors": 1,
                "inputs": [{"component": "source", "stream": "default",
                            "grouping": "shuffle"}]}}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counts(n: int) -> dict:
    """The spout's counters after ``n`` tuples, each failed by bolt explode's error."""
    none = {"count": 0, "sum": 0.0, "buckets": {}}
    return {"emitted": {"default": n}, "transferred": n, "executed": 0, "acked": 0, "failed": n,
            "fail_reasons": {("error", "explode"): n} if n else {}, "busy_secs": n / 1000,
            "throttled_secs": 0.0,
            "execute": none, "process": none, "complete": {"count": n, "sum": n * 0.01,
                                                           "buckets": {60: n} if n else {}}}


class Worker:
    """A worker process whose spout task 1 emits and fails RATE tuples a second from ``started``
    (on the store's clock), reporting as the engine does: each window is what it gained over
    the window's seconds, as far back as it has run."""

    pids = iter(range(100, 1000))

    def __init__(self, store: MetricsStore, clock: Clock, port: int):
        self.store, self.clock, self.port = store, clock, port
        self.started = clock.now
        self.pid = next(self.pids)

    def report(self) -> dict:
        ran = self.clock.now - self.started
        windows = {key: window_stats(min(ran, length), counts(round(RATE * min(ran, length))))
                   for key, length in WINDOWS.items()}
        windows[ALL_TIME] = window_stats(ran, counts(round(RATE * ran)))
        row = {"component": "source", "task": 1, "kind": "spout", "executor": [1, 1],
               "queue_depth": 0, "queue_capacity": 1024, "user": {}, "windows": windows}
        snapshot = {"topology_id": TID, "name": "t", "time": self.clock.now,
                    "worker": {"host": HOST, "port": self.port, "pid": self.pid,
                               "started": self.started, "uptime": ran, "cpu_percent": 1.0,
                               "rss_bytes": 1},
                    "tasks": [row]}
        self.store.put(TID, HOST, self.port, snapshot)
        return snapshot

    def run(self, seconds: float, every: float = 5.0) -> None:
        """Run (and report every ``every`` seconds) for ``seconds`` more."""
        end = self.clock.now + seconds
        while self.clock.now < end:
            self.clock.now = min(end, self.clock.now + every)
            self.report()


def stats(store: MetricsStore, ports: set[int], window: str) -> dict:
    return topology_stats(STRUCTURE, store.snapshots(TID, {(HOST, p) for p in ports}, 60),
                          window)


def test_a_replaced_worker_s_totals_windows_and_fail_reasons_outlive_it():
    clock = Clock()
    store = MetricsStore(clock)
    a = Worker(store, clock, 6700)
    a.run(900)
    assert stats(store, {6700}, "all")["failed"] == 9000
    assert stats(store, {6700}, "600")["failed"] == 6000
    # A's host dies: its slot leaves the assignment, and B runs its task on another slot.
    b = Worker(store, clock, 6701)
    b.run(51)
    found = store.snapshots(TID, {(HOST, 6701)}, 60)
    assert [w["pid"] for w in worker_stats(found)] == [b.pid]   # A is no worker any more
    total = topology_stats(STRUCTURE, found, "all")
    assert total["failed"] == 9000 + 510
    assert total["fail_reasons"] == [["error", "explode", 9510]]
    assert total["failed_by_component"] == [["explode", 9510]]
    assert total["seconds"] >= 951
    # The last 10 minutes: A's last 549 s and B's 51 s, not B's 51 s alone; within one slot of
    # the window (30 s of traffic), as a worker's own window is.
    recent = topology_stats(STRUCTURE, found, "600")
    assert recent["seconds"] == 600
    assert 6000 - 30 * RATE <= recent["failed"] <= 6000
    assert recent["fail_reasons"] == [["error", "explode", recent["failed"]]]
    assert stats(store, {6701}, "10800")["failed"] == 9510   # all of it: 951 s < 3 h
    component = component_stats(STRUCTURE, found, "all")["source"]
    assert (component["failed"], component["emitted"]) == (9510, 9510)
    assert component["complete_latency_ms"]["p50"] is not None
    # Ten minutes on, A's traffic has aged out of the 10-minute window, and is still in the
    # totals and the longer windows.
    b.run(600)
    assert stats(store, {6701}, "600")["failed"] == 6000
    assert stats(store, {6701}, "10800")["failed"] == 9000 + 6510
    assert stats(store, {6701}, "all")["failed"] == 9000 + 6510


def test_a_worker_restarted_on_its_slot_starts_from_zero_and_the_totals_do_not_drop():
    clock = Clock()
    store = MetricsStore(clock)
    a = Worker(store, clock, 6700)
    a.run(300)
    before = stats(store, {6700}, "all")["failed"]
    clock.now += 2   # A crashed; its supervisor starts B on the same slot
    b = Worker(store, clock, 6700)
    b.run(5)
    assert [s["worker"]["pid"] for s in store.snapshots(TID, {(HOST, 6700)}, 60)] == [b.pid]
    assert stats(store, {6700}, "all")["failed"] == before + 50
    assert stats(store, {6700}, "600")["failed"] == before + 50
    # A report of A still in flight does not bring it back, nor count it twice.
    late = Worker.__new__(Worker)
    late.__dict__.update(a.__dict__)
    late.report()
    assert stats(store, {6700}, "all")["failed"] == before + 50


def test_a_task_no_worker_reports_yet_keeps_its_counts_in_the_retired_snapshot():
    clock = Clock()
    store = MetricsStore(clock)
    Worker(store, clock, 6700).run(100)
    found = store.snapshots(TID, {(HOST, 6701)}, 60)   # moved; the new worker has not reported
    assert [s.get("retired") for s in found] == [True]
    assert worker_stats(found) == []
    assert topology_stats(STRUCTURE, found, "all")["fail_reasons"] == [["error", "explode", 1000]]
    assert topology_stats(STRUCTURE, found, "600")["failed"] == 1000
    (row,) = component_stats(STRUCTURE, found, "600")["source"]["task_rows"]
    assert (row["task"], row["host"], row["retired"]) == (1, None, True)


def test_a_silent_worker_s_counts_stay_and_are_not_counted_twice_when_it_reports_again():
    clock = Clock()
    store = MetricsStore(clock)
    a = Worker(store, clock, 6700)
    a.run(100)
    clock.now += 100   # A is silent (a stalled link to nimbus) but still assigned
    found = store.snapshots(TID, {(HOST, 6700)}, 60)
    assert [s.get("retired") for s in found] == [True]
    assert topology_stats(STRUCTURE, found, "all")["failed"] == 1000
    a.report()   # it comes back: its own counts, once
    assert stats(store, {6700}, "all")["failed"] == 2000


def test_retired_counts_are_merged_per_task_and_bounded_however_many_workers_ran_it():
    clock = Clock()
    store = MetricsStore(clock)
    for i in range(200):   # 200 workers in turn, on two slots, over about 33 hours
        Worker(store, clock, 6700 + i % 2).run(600, every=60)
        store.snapshots(TID, {(HOST, 6700 + i % 2)}, 60)   # nimbus reads: the other is gone
    ((key, retired),) = store._retired.items()
    assert key == (TID, 1)
    for window, length in WINDOWS.items():
        assert len(retired.slots[window]) <= 21, window
    assert len(store._workers) == 1
    # Every worker's traffic is in the totals; the day window holds the last day's.
    assert stats(store, {6700 + 199 % 2}, "all")["failed"] == 200 * 6000
    assert 86400 * RATE - 4320 * RATE <= stats(store, {6701}, "86400")["failed"] <= 86400 * RATE
