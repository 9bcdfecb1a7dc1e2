"""Stateful windowed bolts (stormlet/state/windowed.py): the partitioned window on its own, larger
than memory; then real topologies in a LocalCluster: exact windows acked at checkpoints, a window
longer than the message timeout, a window that raises rolled back and replayed, a topology
killed mid-window and resumed from its store, and bad settings refused at build."""

from __future__ import annotations

import collections
import time

import pytest
from redis_server import redis_server  # noqa: F401 (a fixture)
from support import running, wait_until

from stormlet import Spout, TopologyBuilder
from stormlet.errors import TopologyError
from stormlet.state import StatefulWindowedBolt
from stormlet.state.store import MemoryStore
from stormlet.state.windowed import (
    MIN_PARTITIONS_IN_MEMORY,
    PARTITION_EVENTS,
    PersistentWindowManager,
    SpillingState,
    StatefulWindowedBoltRunner,
    WindowPartitions,
)
from stormlet.tuples import StreamInfo, Tuple
from stormlet.windowing import Count, Duration

INFO = StreamInfo("numbers", "default", ["n"])


class _Context:
    def get_component_output_fields(self, component, stream):
        return ["n"]


def codec():
    from stormlet.state.windowed import EventCodec
    return EventCodec(_Context())


def event(n):
    return (n, n, Tuple([n], INFO, 7))


# ----- the partitioned window, on its own

def test_a_window_larger_than_memory_spills_partitions_and_reads_them_back_in_order():
    store = MemoryStore("w")
    state = SpillingState(store)
    parts = WindowPartitions(state, max_events=1, codec=codec())   # the floor: 10 partitions
    assert parts.capacity == MIN_PARTITIONS_IN_MEMORY
    total = (MIN_PARTITIONS_IN_MEMORY + 5) * PARTITION_EVENTS + 17
    for n in range(total):
        parts.append(event(n))
    assert len(parts) == total and parts.spills == 6   # the oldest six went to the store
    assert [tup[0] for _ms, _s, tup in parts] == list(range(total))
    assert parts.loads >= 6                              # and came back to be read
    for n in range(2500):
        assert parts.popleft()[2][0] == n
    assert parts[0][2][0] == 2500 and len(parts) == total - 2500
    # Checkpointed, then read by a new view of the store: the same window, oldest first.
    parts.flush()
    state.prepare_commit(1)
    state.commit(1)
    again = WindowPartitions(SpillingState(store), max_events=1, codec=codec())
    assert [tup[0] for _ms, _s, tup in again] == list(range(2500, total))
    assert again[0][2].source_task == 7 and again[0][2]["n"] == 2500
    # Emptied partitions left the store: 2 of the first 3 are gone (the 3rd holds 2500..).
    assert ("p", 0) not in dict(state.items()) and ("p", 1) not in dict(state.items())


def test_a_persistent_window_fires_as_a_plain_one_and_its_bookkeeping_resumes():
    state = SpillingState(MemoryStore("w"))
    parts = WindowPartitions(state, 0, codec())
    fired: list = []
    windows: list = []

    def run(window):
        windows.append(window)
        fired.append([t[0] for t in window.get_iter()])

    manager = PersistentWindowManager(Count(3), Count(2), 0, parts, run)
    for n in range(1, 6):
        manager.add(Tuple([n], INFO, 1), n)
    assert fired == [[1, 2], [2, 3, 4]]
    PersistentWindowManager(Count(3), Count(2), 0, parts, run)._fire(10)
    window = windows[-1]
    with pytest.raises(NotImplementedError, match="get_new"):
        window.get_new()
    with pytest.raises(NotImplementedError, match="get_expired"):
        window.get_expired()
    system = manager.system()
    fired.clear()
    resumed = PersistentWindowManager(Count(3), Count(2), 0, parts,
                                      lambda window: fired.append([t[0] for t in window.get()]))
    resumed.restore(system)
    resumed.add(Tuple([6], INFO, 1), 6)
    assert fired == [[4, 5, 6]]


def test_a_checkpoint_s_bookkeeping_from_before_the_fired_serial_was_dropped_still_restores():
    manager = PersistentWindowManager(Count(3), Count(2), 0, collections.deque(), print)
    manager.restore([7, 5, 1, None])   # serial, fired serial (dropped), added since fire, next
    assert manager.system() == [7, 1, None]


# ----- topologies

class Numbers(Spout):
    """Emits 0..test.count-1, tracked; replays what fails; records acks."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.todo = collections.deque(range(int(conf["test.count"])))
        self.acked, self.failed, self.emitted = [], [], {}

    def next_tuple(self):
        if not self.todo:
            time.sleep(0.001)
            return
        n = self.todo.popleft()
        self.emitted[n] = time.monotonic()
        self.collector.emit([n], msg_id=n)

    def ack(self, msg_id):
        self.acked.append((msg_id, time.monotonic()))

    def fail(self, msg_id, reason):
        self.failed.append((msg_id, reason.message))
        self.todo.append(msg_id)


class Sums(StatefulWindowedBolt):
    """Each window's numbers, sorted, and its running total in the state. With test.raise_at,
    the first window holding that number raises (once per process)."""

    outputs = ["numbers", "total"]
    raised = False

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.raise_at = conf.get("test.raise_at")
        self.windows = []

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        numbers = sorted(t["n"] for t in window.get_iter())
        total = self.state.get("total", 0) + sum(numbers)
        self.state.put("total", total)
        for n in numbers:
            self.state.put(("seen", n), self.state.get(("seen", n), 0) + 1)
        if self.raise_at in numbers and not Sums.raised:
            Sums.raised = True
            raise RuntimeError("a bad window")
        self.windows.append(numbers)
        self.collector.emit([numbers, total])


def sums_topology(bolt):
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("sums", bolt).shuffle_grouping("numbers")
    return builder.build()


def conf(**extra):
    return {"topology.state.provider": "memory", "topology.state.checkpoint.interval.ms": 100,
            "topology.message.timeout.secs": 5, "test.count": 1000, **extra}


def test_a_persistent_window_gives_exact_windows_and_acks_its_tuples_at_checkpoints():
    bolt = Sums().with_tumbling_window(Count(100)).with_persistence()
    with running(sums_topology(bolt), conf()) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        runner = cluster.instances("test", "sums")[0]
        wait_until(lambda: len(spout.acked) == 1000, 20, "every number acked")
        assert runner.inner.windows == [list(range(k, k + 100)) for k in range(0, 1000, 100)]
        assert runner.state.get("total") == sum(range(1000))
        assert spout.failed == []
        # Acked at a checkpoint, not as they left a window: the last window's tuples too,
        # and none at once.
        delays = [at - spout.emitted[n] for n, at in spout.acked]
        assert min(delays) > 0.002


def test_a_starting_task_restores_its_window_once_when_its_state_is_initialized(monkeypatch):
    restores = []
    restore = StatefulWindowedBoltRunner._restore

    def counted(runner):
        restores.append(runner.initialized)
        restore(runner)

    monkeypatch.setattr(StatefulWindowedBoltRunner, "_restore", counted)
    bolt = Sums().with_tumbling_window(Count(10)).with_persistence()
    with running(sums_topology(bolt), conf(**{"test.count": 10})) as cluster:
        runner = cluster.instances("test", "sums")[0]
        wait_until(lambda: runner.inner.windows == [list(range(10))], 10, "the window to fire")
    assert restores == [False]   # at INITSTATE, not at prepare as well


def test_a_persistent_window_may_be_longer_than_the_message_timeout():
    # A plain window of this length is refused; with persistence its tuples are acked at
    # checkpoints, well within the timeout.
    plain_problem = "longer than the message timeout"
    from stormlet.windowing import WindowedBolt

    class Plain(WindowedBolt):
        def execute(self, window):
            pass

    short = conf(**{"topology.message.timeout.secs": 1})
    plain = sums_topology(Plain().with_tumbling_window(Duration(seconds=3)))
    assert any(plain_problem in p for p in plain.config_problems(short))
    bolt = Sums().with_tumbling_window(Duration(seconds=3)).with_persistence()
    topology = sums_topology(bolt)
    assert topology.config_problems(short) == []
    with running(topology, conf(**{"topology.message.timeout.secs": 1,
                                   "test.count": 50})) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        wait_until(lambda: len(spout.acked) == 50, 10, "every number acked")
        assert spout.failed == []      # none timed out, though the window is 3 s
        runner = cluster.instances("test", "sums")[0]
        assert runner.inner.windows == []   # and the window has not fired yet
        assert len(runner.partitions) == 50


def test_a_window_that_raises_is_rolled_back_and_replayed_and_every_number_counted_once():
    Sums.raised = False
    bolt = Sums().with_tumbling_window(Count(100)).with_persistence()
    with running(sums_topology(bolt), conf(**{"test.raise_at": 450})) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        runner = cluster.instances("test", "sums")[0]
        wait_until(lambda: len({n for n, _ in spout.acked}) == 1000, 20, "every number acked")
        wait_until(lambda: not spout.todo, 5, "no replays left")
        assert Sums.raised and spout.failed, "nothing was rolled back: it tested nothing"
        assert {why for _, why in spout.failed} <= {f"checkpoint {t} rolled back"
                                                    for t in range(1000)}
        # The rolled-back window and the tuples since were replayed: ten windows of a hundred
        # counted each number once.
        seen = {key[1]: n for key, n in runner.state.items() if isinstance(key, tuple)}
        assert seen == {n: 1 for n in range(1000)}
        assert runner.state.get("total") == sum(seen)
        windows = runner.inner.windows
        assert all(len(w) == 100 for w in windows)
        # The windows as committed: those that fired, less the run of them the rollback undid
        # (those that fired after the last committed checkpoint: they fire again from the
        # replays; how many depends on where the checkpoints fell).
        assert any(sorted(n for w in windows[:k] + windows[k + undone:] for n in w)
                   == list(range(1000))
                   for k in range(len(windows)) for undone in range(len(windows) - k + 1))
        assert cluster.metrics("test")["sums"]["errors"] >= 1


@pytest.mark.parametrize("provider", ["embedded", "redis"])
def test_a_topology_killed_mid_window_resumes_its_window_from_the_store(provider, tmp_path,
                                                                         request):
    """The first run is killed with a window half full and its tuples acked (committed); the
    second, on the same store, finishes that window with the tuples it never saw."""
    bolt = Sums().with_tumbling_window(Count(300)).with_persistence()
    if provider == "redis":
        server = request.getfixturevalue("redis_server")
        server.client().flushall()
        store = {"topology.state.provider.config": server.provider_config}
    else:
        store = {"topology.state.provider.config": {"dir": str(tmp_path)}}
    settings = conf(**{"topology.state.provider": provider, **store, "test.count": 450})
    with running(sums_topology(bolt), settings) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        runner = cluster.instances("test", "sums")[0]
        wait_until(lambda: len(spout.acked) == 450, 20, "every number acked")
        assert runner.inner.windows == [list(range(300))]
        cluster.kill("test", wait_secs=0)
    # Numbers 300..449 were acked in a window that had not fired: only the store has them.
    resumed = dict(settings, **{"test.count": 0})
    with running(sums_topology(bolt), resumed) as cluster:
        runner = cluster.instances("test", "sums")[0]
        wait_until(lambda: runner.initialized, 10, "the state restored")
        # The fired window's 300 leave it at the next firing, as in a plain window.
        assert len(runner.partitions) == 450
        spout = cluster.instances("test", "numbers")[0]
        spout.todo.extend(range(450, 600))
        wait_until(lambda: len(spout.acked) == 150, 20, "the new numbers acked")
        assert runner.inner.windows == [list(range(300, 600))]
        assert runner.state.get("total") == sum(range(600))


def test_a_window_larger_than_max_events_in_memory_fires_whole():
    size = (MIN_PARTITIONS_IN_MEMORY + 3) * PARTITION_EVENTS
    bolt = (Sums().with_tumbling_window(Count(size)).with_persistence()
            .with_max_events_in_memory(5000))
    with running(sums_topology(bolt), conf(**{"test.count": size})) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        runner = cluster.instances("test", "sums")[0]
        wait_until(lambda: len(runner.inner.windows) == 1, 60, "the window to fire")
        assert runner.inner.windows == [list(range(size))]
        assert runner.partitions.evictions >= 3 and runner.partitions.loads >= 3
        wait_until(lambda: len(spout.acked) == size, 20, "every number acked")


def test_a_persistent_time_window_fires_on_the_test_kit_s_simulated_clock():
    from stormlet.testing import SimulatedCluster, advance_cluster_time, simulated_time
    bolt = Sums().with_tumbling_window(Duration(seconds=10)).with_persistence()
    with simulated_time() as clock, SimulatedCluster(clock) as cluster:
        cluster.submit("test", conf(**{"test.count": 30}), sums_topology(bolt))
        runner = cluster.instances("test", "sums")[0]
        wait_until(lambda: runner.initialized and len(runner.partitions) == 30, 10,
                   "the numbers in the window")
        advance_cluster_time(cluster, 9)
        assert runner.inner.windows == []
        advance_cluster_time(cluster, 2)
        assert runner.inner.windows == [list(range(30))]
        spout = cluster.instances("test", "numbers")[0]
        wait_until(lambda: len(spout.acked) == 30, 10, "every number acked")
        cluster.kill("test", wait_secs=0)


def build_problems(bolt):
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("sums", bolt).shuffle_grouping("numbers")
    with pytest.raises(TopologyError) as raised:
        builder.build()
    return str(raised.value)


def test_bad_settings_are_refused_at_build_naming_the_bolt():
    assert "'sums' needs with_persistence()" in build_problems(
        Sums().with_tumbling_window(Count(10)))
    assert "event-time windows cannot be persisted" in build_problems(
        Sums().with_tumbling_window(Duration(seconds=1)).with_timestamp_field("n")
        .with_persistence())
    assert "'sums' has no window" in build_problems(Sums().with_persistence())
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(TopologyError, match="max events in memory"):
            Sums().with_max_events_in_memory(bad)
    # 0 is Storm's "the default".
    assert Sums().with_max_events_in_memory(0).max_events_in_memory == 1_000_000


def test_the_checkpoint_interval_must_fit_in_the_message_timeout():
    topology = sums_topology(Sums().with_tumbling_window(Count(10)).with_persistence())
    problems = topology.config_problems(conf(**{"topology.state.checkpoint.interval.ms": 6000}))
    assert any("must not be longer than the message timeout" in p for p in problems)


def test_a_stateful_windowed_bolt_gets_the_checkpoint_stream():
    topology = sums_topology(Sums().with_tumbling_window(Count(10)).with_persistence())
    assert "__checkpointspout" in topology.components


def test_a_time_window_fired_by_a_later_tuple_holds_only_its_own_tuples():
    # A persistent window reads its tuples from the partitions: it must run as it fires,
    # before the tuple whose arrival fired it joins them, and before a later firing evicts.
    import collections

    from stormlet.state.windowed import PersistentWindowManager

    shown = []
    ten = Duration(seconds=10)
    manager = PersistentWindowManager(ten, ten, 0, collections.deque(),
                                      lambda window: shown.append(list(window.get_iter())))
    manager.add("a", 1_000)
    manager.add("b", 5_000)
    manager.add("c", 12_000)            # fires [0, 10 s) on arrival
    assert shown == [["a", "b"]]
    manager.add("d", 35_000)            # fires [10, 20 s) and [20, 30 s) on arrival
    assert shown == [["a", "b"], ["c"]]
