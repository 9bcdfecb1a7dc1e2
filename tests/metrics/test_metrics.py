"""Built-in and user metrics, checked against what real topologies did.

Each topology runs in a LocalCluster and emits a known set of tuples, so every count in the
metrics snapshot (and in the views over it) has an exact expected value: words emitted and
executed, failures by reason and by component, timeouts. Rolling windows are checked against a
fake clock, since their shortest window is ten minutes.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import msgpack
import pytest
import support

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.cluster.inspect import summary as inspect_summary
from stormlet.metrics.structure import topology_structure
from stormlet.metrics.views import (
    component_stats,
    edge_rates,
    topology_stats,
    worker_stats,
)
from stormlet.metrics.windows import RollingWindows
from stormlet.runtime.metrics import TaskMetrics, window_stats
from stormlet.sources import LogSpout
from stormlet.sources.partitioned_log import PartitionedLog

MESSAGE_TIMEOUT = "topology.message.timeout.secs"
WINDOWS = ("600", "10800", "86400", "all")

SENTENCES = [f"the {animal} jumped over the {thing} number {i}"
             for i, (animal, thing) in enumerate(
                 [("cow", "moon"), ("dog", "fence"), ("cat", "wall"), ("fox", "dog")] * 10)]
WORDS = Counter(word for sentence in SENTENCES for word in sentence.split())


# ----- components


class ListSpout(Spout):
    """Emits ``test.values`` once each, tracked by index, and records acks and fails."""

    outputs = ["value"]

    def open(self, conf, context, collector):
        self.collector = collector
        values = conf["test.values"]
        # Dealt to the spout's tasks by index, so the tasks emit them all once between them.
        tasks = len(context.get_this_component_tasks())
        self.todo = [i for i in range(len(values)) if i % tasks == context.this_task_index]
        self.todo.reverse()
        self.values = values
        self.acked, self.failed = [], []

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop()
            self.collector.emit([self.values[i]], msg_id=i)

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        self.failed.append((msg_id, reason))


class FloodSpout(Spout):
    """Emits untracked tuples as fast as it is called."""

    outputs = ["value"]

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        self.collector.emit(["x"])


class Split(Bolt):
    outputs = {"default": ["word"], "lengths": ["length"]}

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        words = tup["value"].split()
        for word in words:
            self.collector.emit([word], tup)
        self.collector.emit([len(words)], tup, stream="lengths")
        self.collector.ack(tup)


class Count(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts = Counter()

    def execute(self, tup):
        self.counts[tup["word"]] += 1
        self.collector.ack(tup)


class Sink(Bolt):
    """Acks everything; sleeps ``test.sleep`` seconds per tuple first."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.sleep = float(conf.get("test.sleep", 0))

    def execute(self, tup):
        if self.sleep:
            time.sleep(self.sleep)
        self.collector.ack(tup)


class Judge(Bolt):
    """By value % 4: 0 fails the tuple, 1 raises, 2 passes it (anchored) to a bolt that never
    acks, so its tree times out having last been acked here; 3 acks."""

    outputs = ["value"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        verdict = tup["value"] % 4
        if verdict == 0:
            self.collector.fail(tup, "not this one")
        elif verdict == 1:
            raise ValueError("cannot judge")
        else:
            if verdict == 2:
                self.collector.emit([tup["value"]], tup)
            self.collector.ack(tup)


class BlackHole(Bolt):
    def prepare(self, conf, context, collector):
        pass

    def execute(self, tup):
        pass


class Measured(Bolt):
    """Registers one metric of each kind and feeds them from every tuple."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task_id = context.task_id
        self.seen = []
        self.tuples = context.register_counter("tuples")
        self.values = context.register_histogram("values")
        context.register_gauge("seen", lambda: len(self.seen))
        assert context.register_counter("tuples") is self.tuples
        with pytest.raises(ValueError, match="already registered as a counter"):
            context.register_histogram("tuples")

    def execute(self, tup):
        self.seen.append(tup["value"])
        self.tuples.inc()
        self.values.update(tup["value"])
        self.collector.ack(tup)


class HoldingBolt(Bolt):
    """Acks each tuple on the first tick at least ``test.hold`` seconds after it arrived."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.hold = float(conf["test.hold"])
        self.held = []

    def execute(self, tup):
        if tup.is_tick():
            now = time.monotonic()
            while self.held and now - self.held[0][0] >= self.hold:
                self.collector.ack(self.held.pop(0)[1])
        else:
            self.held.append((time.monotonic(), tup))


# ----- helpers


def snapshot(cluster, name="test"):
    return cluster.metrics_snapshot(name)


def tasks_of(snap, component):
    return [row for row in snap["tasks"] if row["component"] == component]


def window_total(snap, component, key, window="all"):
    return sum(row["windows"][window][key] for row in tasks_of(snap, component))


def emitted(snap, component, stream="default", window="all"):
    return sum(row["windows"][window]["emitted"][stream] for row in tasks_of(snap, component))


def spout_done(cluster, n, name="test"):
    spouts = cluster.instances(name, "spout")
    return sum(len(s.acked) + len(s.failed) for s in spouts) >= n


def word_count_topology():
    b = TopologyBuilder()
    b.set_spout("spout", ListSpout(), parallelism=2)
    b.set_bolt("split", Split(), parallelism=2).shuffle_grouping("spout")
    b.set_bolt("count", Count(), parallelism=3).fields_grouping("split", ["word"])
    b.set_bolt("lengths", Sink()).shuffle_grouping("split", "lengths")
    return b.build()


# ----- counts


def test_counts_latencies_and_views_match_what_the_topology_did():
    n, words = len(SENTENCES), sum(WORDS.values())
    topology = word_count_topology()
    with support.running(topology, {"test.values": SENTENCES}) as cluster:
        cluster.wait_for(lambda: spout_done(cluster, n), timeout=20)
        # Everything acked has been executed; what the bolts transferred is flushed by now.
        cluster.wait_for(lambda: window_total(snapshot(cluster), "split", "transferred")
                         == words + n, timeout=5)
        snap = snapshot(cluster)
        structure = cluster.structure("test")
        counted = [sum(bolt.counts.values()) for bolt in cluster.instances("test", "count")]

    assert json.loads(json.dumps(snap)) == snap
    assert msgpack.unpackb(msgpack.packb(snap), strict_map_key=False) == snap
    assert snap["name"] == "test" and snap["topology_id"].startswith("test-")
    assert snap["worker"]["pid"] == os.getpid() and snap["worker"]["host"] is None
    assert snap["worker"]["rss_bytes"] > 0
    kinds = Counter(row["kind"] for row in snap["tasks"])
    assert kinds == {"spout": 2, "bolt": 6, "acker": 1}

    for window in WINDOWS:   # the run is shorter than a window's first slot: all agree
        assert emitted(snap, "spout", window=window) == n
        assert window_total(snap, "spout", "acked", window) == n
        assert window_total(snap, "spout", "transferred", window) == n
        assert window_total(snap, "split", "executed", window) == n
        assert window_total(snap, "split", "acked", window) == n
        assert emitted(snap, "split", window=window) == words
        assert emitted(snap, "split", "lengths", window) == n
        assert window_total(snap, "count", "executed", window) == words
        assert window_total(snap, "count", "acked", window) == words
        assert window_total(snap, "lengths", "executed", window) == n
    # The words went to the count task their field hashed to: per task counts match the bolts'.
    count_tasks = {row["task"]: row["windows"]["all"]["executed"]
                   for row in tasks_of(snap, "count")}
    assert sorted(count_tasks.values()) == sorted(counted)
    spout_window = tasks_of(snap, "spout")[0]["windows"]["600"]
    assert spout_window["complete_latency_ms"]["p50"] is not None
    assert 0 < spout_window["seconds"] < 60

    stats = component_stats(structure, [snap], "600")
    assert set(stats) == {"spout", "split", "count", "lengths"}
    assert stats["spout"]["emitted"] == n and stats["spout"]["acked"] == n
    assert stats["split"]["emitted_by_stream"] == {"default": words, "lengths": n}
    assert stats["count"]["executed"] == words and stats["count"]["tasks"] == 3
    assert [row["executed"] for row in stats["count"]["task_rows"]] == [
        count_tasks[t] for t in sorted(count_tasks)]
    for component in ("split", "count", "lengths"):
        latency = stats[component]["execute_latency_ms"]
        assert latency["mean"] is not None and latency["p50"] <= latency["p99"]
        assert stats[component]["process_latency_ms"]["p99"] is not None
        assert stats[component]["capacity"] > 0
    assert stats["spout"]["complete_latency_ms"]["p99"] is not None
    assert stats["count"]["failed"] == 0 and stats["count"]["fail_reasons"] == []

    topo = topology_stats(structure, [snap], "all")
    assert topo["acked"] == n and topo["failed"] == 0
    assert topo["emitted"] == n + words + n
    assert topo["transferred"] == n + words + n
    assert topo["failed_by_kind"] == {} and topo["failed_by_component"] == []

    edges = {(e["from"], e["to"], e["stream"]): e for e in edge_rates(structure, [snap], "all")}
    assert set(edges) == {("spout", "split", "default"), ("split", "count", "default"),
                          ("split", "lengths", "lengths")}
    assert edges[("split", "count", "default")]["grouping"] == "fields"
    # The same run's rates: words per second is the sentences' rate times words per sentence.
    ratio = (edges[("split", "count", "default")]["rate"]
             / edges[("spout", "split", "default")]["rate"])
    assert ratio == pytest.approx(words / n, rel=0.25)

    (worker,) = worker_stats([snap])
    assert worker["pid"] == os.getpid() and worker["tasks"] == 9
    assert worker["components"] == ["__acker", "count", "lengths", "split", "spout"]


def test_failures_are_counted_by_reason_and_by_component():
    values = list(range(20))   # by value % 4: fail, error, timeout, ack; five of each
    b = TopologyBuilder()
    b.set_spout("spout", ListSpout())
    b.set_bolt("judge", Judge(), parallelism=2).shuffle_grouping("spout")
    b.set_bolt("hole", BlackHole()).shuffle_grouping("judge")
    conf = {"test.values": values, MESSAGE_TIMEOUT: 1}
    with support.running(b.build(), conf) as cluster:
        cluster.wait_for(lambda: spout_done(cluster, 20), timeout=15)
        snap = snapshot(cluster)
        structure = cluster.structure("test")
        (spout,) = cluster.instances("test", "spout")
        assert Counter(reason.kind for _, reason in spout.failed) == {
            "fail": 5, "error": 5, "timeout": 5}

    (spout_row,) = tasks_of(snap, "spout")
    window = spout_row["windows"]["600"]
    assert window["acked"] == 5 and window["failed"] == 15
    assert sorted(window["fail_reasons"]) == [["error", "judge", 5], ["fail", "judge", 5],
                                              ["timeout", "judge", 5]]
    judge = component_stats(structure, [snap], "600")["judge"]
    assert judge["executed"] == 20 and judge["acked"] == 10 and judge["failed"] == 10
    assert sorted(judge["fail_reasons"]) == [["error", "judge", 5], ["fail", "judge", 5]]

    topo = topology_stats(structure, [snap], "600")
    assert topo["acked"] == 5 and topo["failed"] == 15
    assert topo["failed_by_kind"] == {"fail": 5, "error": 5, "timeout": 5}
    assert topo["failed_by_component"] == [["judge", 15]]


def test_the_summary_the_cli_shows_adds_up_the_same_counters():
    values = list(range(8))
    b = TopologyBuilder()
    b.set_spout("spout", ListSpout())
    b.set_bolt("judge", Judge()).shuffle_grouping("spout")
    b.set_bolt("hole", BlackHole()).shuffle_grouping("judge")
    with support.running(b.build(), {"test.values": values, MESSAGE_TIMEOUT: 1}) as cluster:
        cluster.wait_for(lambda: spout_done(cluster, 8), timeout=15)
        summary = cluster.metrics("test")
    assert summary["spout"]["emitted"] == 8
    assert summary["spout"]["fail_reasons"] == {"fail": 2, "error": 2, "timeout": 2}
    assert summary["judge"]["fail_reasons"] == {"fail": 2, "error": 2}
    assert summary["judge"]["emitted"] == 2 and summary["judge"]["executed"] == 8


# ----- time: capacity, process latency, backpressure


def test_a_bolt_that_sleeps_is_busy_for_that_long():
    b = TopologyBuilder()
    b.set_spout("spout", ListSpout())
    b.set_bolt("slow", Sink()).shuffle_grouping("spout")
    conf = {"test.values": list(range(30)), "test.sleep": 0.01}
    with support.running(b.build(), conf) as cluster:
        cluster.wait_for(lambda: spout_done(cluster, 30), timeout=15)
        snap = snapshot(cluster)
        stats = component_stats(cluster.structure("test"), [snap], "600")["slow"]
        summary = cluster.metrics("test")["slow"]   # since the start, as `stormlet local` shows
    assert stats["executed"] == 30
    assert 0.3 <= stats["busy_secs"] < 3
    assert summary["busy_secs"] == pytest.approx(stats["busy_secs"], abs=0.01)
    assert 0 < stats["capacity"] <= 1
    assert stats["capacity"] == pytest.approx(stats["busy_secs"] / stats["seconds"], abs=0.002)
    assert stats["execute_latency_ms"]["p50"] >= 10


def test_process_latency_runs_from_execute_to_a_later_ack():
    b = TopologyBuilder()
    b.set_spout("spout", ListSpout())
    b.set_bolt("holding", HoldingBolt()).shuffle_grouping("spout")
    conf = {"test.values": list(range(20)), "test.hold": 0.2,
            "topology.tick.tuple.freq.secs": 0.02}
    with support.running(b.build(), conf) as cluster:
        cluster.wait_for(lambda: spout_done(cluster, 20), timeout=15)
        stats = component_stats(cluster.structure("test"), [snapshot(cluster)], "600")
    holding = stats["holding"]
    assert holding["process_latency_ms"]["p50"] >= 200
    assert holding["execute_latency_ms"]["p99"] < 100
    assert stats["spout"]["complete_latency_ms"]["p50"] >= 200


def test_a_slow_bolt_throttles_a_fast_spout_and_fills_its_queue():
    b = TopologyBuilder()
    b.set_spout("flood", FloodSpout())
    b.set_bolt("slow", Sink()).shuffle_grouping("flood")
    conf = {"test.sleep": 0.001, "topology.executor.receive.buffer.size": 2,
            "topology.acker.executors": 0}
    with support.running(b.build(), conf) as cluster:
        cluster.wait_for(lambda: window_total(snapshot(cluster), "flood", "throttled_secs")
                         > 0.2, timeout=10)
        snap = snapshot(cluster)
        summary = cluster.metrics("test")
    assert summary["flood"]["throttled_secs"] > 0.2 and summary["slow"]["throttled_secs"] == 0
    (slow,) = tasks_of(snap, "slow")
    assert slow["queue_capacity"] == 2 and slow["queue_depth"] >= 1
    (flood,) = tasks_of(snap, "flood")
    assert flood["windows"]["600"]["throttled_secs"] > 0.2
    assert slow["windows"]["600"]["throttled_secs"] == 0


# ----- user metrics and partitions


def test_user_metrics_are_shown_per_task():
    values = list(range(1, 41))
    b = TopologyBuilder()
    b.set_spout("spout", ListSpout())
    b.set_bolt("measured", Measured(), parallelism=2).shuffle_grouping("spout")
    with support.running(b.build(), {"test.values": values}) as cluster:
        cluster.wait_for(lambda: spout_done(cluster, 40), timeout=15)
        rows = tasks_of(snapshot(cluster), "measured")
        seen = {bolt.task_id: bolt.seen for bolt in cluster.instances("test", "measured")}
    assert sum(row["user"]["tuples"] for row in rows) == 40
    for row in rows:
        values = seen[row["task"]]
        assert row["user"]["tuples"] == row["user"]["seen"] == len(values)
        histogram = row["user"]["values"]
        assert histogram["count"] == len(values)
        assert histogram["mean"] == pytest.approx(sum(values) / len(values))
        assert histogram["p50"] == sorted(values)[(len(values) + 1) // 2 - 1]
        assert histogram["p99"] == max(values)


def test_an_offset_spout_reports_its_partitions(tmp_path: Path):
    path = tmp_path / "log"
    log = PartitionedLog.create(path, 4)
    messages = [f"m{i}" for i in range(200)]
    for i, value in enumerate(messages):
        log.append(value, partition=i % 4)
    log.flush()
    b = TopologyBuilder()
    b.set_spout("source", LogSpout(str(path), spout_id="metrics", commit_interval=0.1),
                parallelism=2)
    b.set_bolt("sink", Sink()).shuffle_grouping("source")

    def partitions(cluster):
        stats = component_stats(cluster.structure("test"), [snapshot(cluster)], "600")
        return stats["source"].get("partitions", [])

    with support.running(b.build(), {MESSAGE_TIMEOUT: 5}) as cluster:
        cluster.wait_for(lambda: sum(p["acked"] for p in partitions(cluster)) == 200
                         and all(p["lag"] == 0 for p in partitions(cluster)), timeout=20)
        rows = partitions(cluster)
    assert sorted(p["partition"] for p in rows) == [0, 1, 2, 3]
    assert {p["partition"]: p["committed"] for p in rows} == {p: 50 for p in range(4)}
    # Each task reports the partitions it owns: two each, dealt by index.
    owned: dict[int, list[int]] = {}
    for p in rows:
        owned.setdefault(p["task"], []).append(p["partition"])
    assert sorted(sorted(partitions) for partitions in owned.values()) == [[0, 2], [1, 3]]


# ----- windows, on a fake clock


def test_windows_subtract_the_sample_at_their_start():
    metrics = TaskMetrics("count", 1, streams=["default"])
    windows = RollingWindows(0.0, metrics.sample())

    def stats(now):
        return {key: window_stats(seconds, delta)
                for key, (seconds, delta) in windows.deltas(now, metrics.sample()).items()}

    default = SimpleNamespace(emitted=0)   # what counts the stream's emits: a route, running
    metrics.count_emits_with({"default": default})
    # 10 tuples every 10 s for 15 min: 1 ms each for the first 5 minutes, then 100 ms.
    for now in range(10, 901, 10):
        metrics.executed += 10
        default.emitted += 20
        metrics.execute_latency.record_many(0.001 if now <= 300 else 0.1, 10)
        windows.add(float(now), metrics.sample())
        if now == 100:
            early = stats(100.0)
    assert early["600"]["seconds"] == 100 and early["600"]["executed"] == 100
    assert early["86400"] == early["600"] and early["all"]["seconds"] == 100

    late = stats(900.0)
    # Samples 30 s apart: the 600 s window starts at the sample taken at 300 s.
    assert late["600"]["seconds"] == 600
    assert late["600"]["executed"] == 600 and late["600"]["emitted"] == {"default": 1200}
    assert late["600"]["execute_latency_ms"]["p50"] == pytest.approx(100, rel=0.13)
    assert late["600"]["execute_latency_ms"]["mean"] == pytest.approx(100)
    assert late["600"]["histograms"]["execute"]["count"] == 600
    # The longer windows reach back to the start; they hold both kinds of tuple.
    for key in ("10800", "86400", "all"):
        assert late[key]["seconds"] == 900 and late[key]["executed"] == 900
        assert late[key]["execute_latency_ms"]["p50"] == pytest.approx(100, rel=0.13)
        assert late[key]["execute_latency_ms"]["p99"] >= 100
    assert late["all"]["execute_latency_ms"]["mean"] == pytest.approx((300 + 600 * 100) / 900)
    assert all(len(ring) <= 21 for ring in windows.rings.values())


def test_a_window_forgets_what_is_older_than_it():
    metrics = TaskMetrics("spout", 1)
    windows = RollingWindows(0.0, metrics.sample())
    metrics.count_fail("timeout", "count")
    metrics.count_fail("fail", None)
    windows.add(100.0, metrics.sample())
    for now in range(130, 2000, 30):   # nothing more happens
        windows.add(float(now), metrics.sample())
    stats = {key: window_stats(seconds, delta)
             for key, (seconds, delta) in windows.deltas(2000.0, metrics.sample()).items()}
    assert stats["600"]["failed"] == 0 and stats["600"]["fail_reasons"] == []
    assert 570 <= stats["600"]["seconds"] <= 600
    assert stats["10800"]["failed"] == 2
    assert stats["10800"]["fail_reasons"] == [["fail", None, 1], ["timeout", "count", 1]]
    # A day's slots are 72 minutes: its first sample after the start is due at 4320 s.
    assert stats["86400"]["seconds"] == 2000


# ----- structure


def test_structure_describes_components_streams_and_groupings(tmp_path):
    structure = topology_structure(word_count_topology())
    assert structure == {"components": {
        "spout": {"kind": "spout", "tasks": 2, "executors": 2,
                  "streams": {"default": ["value"]}, "inputs": []},
        "count": {"kind": "bolt", "tasks": 3, "executors": 3,
                  "streams": {"default": ["word", "count"]},
                  "inputs": [{"component": "split", "stream": "default", "grouping": "fields",
                              "fields": ["word"]}]},
        "lengths": {"kind": "bolt", "tasks": 1, "executors": 1, "streams": {},
                    "inputs": [{"component": "split", "stream": "lengths",
                                "grouping": "shuffle"}]},
        "split": {"kind": "bolt", "tasks": 2, "executors": 2,
                  "streams": {"default": ["word"], "lengths": ["length"]},
                  "inputs": [{"component": "spout", "stream": "default",
                              "grouping": "shuffle"}]},
    }}
    topology_file = tmp_path / "topology.py"
    topology_file.write_text(
        "from stormlet import TopologyBuilder\n"
        "from stormlet.sources import LogSpout\n"
        "b = TopologyBuilder()\n"
        "b.set_spout('source', LogSpout('/nowhere', spout_id='x'), parallelism=2)\n"
        "topology = b.build()\n")
    assert inspect_summary(str(topology_file))["structure"]["components"]["source"] == {
        "kind": "spout", "tasks": 2, "executors": 2,
        "streams": {"default": ["partition", "offset", "key", "value"]}, "inputs": []}


# ----- a broken metric, spout or snapshot must not break anything else


class JunkPartitionsSpout(Spout):
    """Emits tracked tuples forever; its partition_metrics returns ``test.junk``, which is not
    the dict of dicts it should be."""

    outputs = ["value"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.junk = conf["test.junk"]
        self.n = 0
        self.acked = []

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        pass

    def partition_metrics(self):
        return self.junk


@pytest.mark.parametrize("junk", [["not", "a", "dict"], {0: 5}])
def test_a_spout_whose_partition_metrics_returns_junk_keeps_emitting(monkeypatch, junk):
    from stormlet.runtime import spout_executor
    monkeypatch.setattr(spout_executor, "PARTITIONS_SECS", 0.05)
    b = TopologyBuilder()
    b.set_spout("spout", JunkPartitionsSpout())
    b.set_bolt("sink", Sink()).shuffle_grouping("spout")
    conf = {"test.junk": junk, "topology.max.spout.pending": 50}
    with support.running(b.build(), conf) as cluster:
        cluster.wait_for(lambda: cluster.errors("test"), timeout=10)
        (spout,) = cluster.instances("test", "spout")
        acked = len(spout.acked)
        # Refreshed every 50 ms: several more refreshes fail while the spout goes on.
        cluster.wait_for(lambda: len(spout.acked) >= acked + 500, timeout=10)
        errors = cluster.errors("test")
        (row,) = tasks_of(snapshot(cluster), "spout")
    assert errors[0].component == "spout" and "partition_metrics" in errors[0].error
    assert "partitions" not in row


class TickCounter(Bolt):
    def prepare(self, conf, context, collector):
        self.ticks = 0

    def execute(self, tup):
        if tup.is_tick():
            self.ticks += 1


def test_ticks_go_on_when_sampling_the_windows_fails(monkeypatch, caplog):
    from stormlet.runtime import engine

    def broken(self, now):
        raise RuntimeError("sampling broke")

    monkeypatch.setattr(engine, "SAMPLE_SECS", 0.01)
    monkeypatch.setattr(engine.TopologyRuntime, "sample_windows", broken)
    b = TopologyBuilder()
    b.set_spout("spout", ListSpout())
    b.set_bolt("ticked", TickCounter()).shuffle_grouping("spout")
    conf = {"test.values": [], "topology.tick.tuple.freq.secs": 0.02}
    with support.running(b.build(), conf) as cluster:
        (bolt,) = cluster.instances("test", "ticked")
        cluster.wait_for(lambda: bolt.ticks >= 20, timeout=10)
    failures = [r for r in caplog.records if "sampling the metrics windows failed" in r.message]
    assert len(failures) == 1   # logged once, though it failed every 10 ms


GAUGE_ENTERED = threading.Event()
GAUGE_GATE = threading.Event()


def slow_gauge():
    GAUGE_ENTERED.set()
    GAUGE_GATE.wait(10)
    return 7


class Gauged(Bolt):
    """Gauges that are slow, broken, or not a number JSON can carry."""

    def prepare(self, conf, context, collector):
        context.register_gauge("slow", slow_gauge)
        context.register_gauge("broken", lambda: 1 / 0)
        context.register_gauge("nan", lambda: float("nan"))

    def execute(self, tup):
        pass


def test_a_slow_gauge_does_not_hold_up_sampling_and_a_broken_one_reads_as_none(caplog):
    b = TopologyBuilder()
    b.set_spout("spout", ListSpout())
    b.set_bolt("gauged", Gauged()).shuffle_grouping("spout")
    GAUGE_ENTERED.clear()
    GAUGE_GATE.clear()
    with support.running(b.build(), {"test.values": []}) as cluster:
        runtime = cluster.runtime("test")
        taken: list[dict] = []
        snapshotting = threading.Thread(target=lambda: taken.append(runtime.metrics_snapshot()))
        snapshotting.start()
        try:
            assert GAUGE_ENTERED.wait(5)
            # The snapshot is stuck in the gauge; sampling (the tick thread's) is not.
            sampling = threading.Thread(target=runtime.sample_windows, args=(time.monotonic(),))
            sampling.start()
            sampling.join(2)
            assert not sampling.is_alive()
        finally:
            GAUGE_GATE.set()
            snapshotting.join(10)
        again = snapshot(cluster)
    for snap in (taken[0], again):
        (row,) = tasks_of(snap, "gauged")
        assert row["user"] == {"slow": 7, "broken": None, "nan": None}
        json.dumps(snap, allow_nan=False)
    assert len([r for r in caplog.records if "raised" in r.message]) == 1   # once, not per read


def test_user_metric_values_json_cannot_carry_read_as_none():
    from stormlet.metrics.user import UserMetrics
    metrics = UserMetrics()
    metrics.gauge("nan", lambda: float("nan"))
    metrics.gauge("inf", lambda: float("-inf"))
    metrics.gauge("fine", lambda: 1.5)
    metrics.histogram("infinite").update(float("inf"))
    mixed = metrics.histogram("mixed")
    mixed.update(1.0)
    mixed.update(float("nan"))
    read = metrics.read()
    assert read["nan"] is None and read["inf"] is None and read["fine"] == 1.5
    assert read["infinite"] == {"count": 1, "mean": None, "p50": None, "p99": None}
    assert read["mixed"]["count"] == 2 and read["mixed"]["mean"] is None
    json.dumps(read, allow_nan=False)


def good_row(component: str, task: int, kind: str) -> dict:
    metrics = TaskMetrics(component, task, streams=["default"])
    metrics.count_emits_with({"default": SimpleNamespace(emitted=10)})   # a route's counter
    metrics.acked = 10
    metrics.complete_latency.record(0.01)
    windows = RollingWindows(0.0, TaskMetrics(component, task, streams=["default"]).sample())
    return {"component": component, "task": task, "kind": kind, "executor": [task, task],
            "queue_depth": 0, "queue_capacity": 1024, "user": {},
            "windows": {key: window_stats(seconds, delta) for key, (seconds, delta)
                        in windows.deltas(60.0, metrics.sample()).items()}}


def test_the_views_skip_a_malformed_task_row_or_snapshot():
    structure = topology_structure(word_count_topology())
    no_emitted = good_row("split", 3, "bolt")
    del no_emitted["windows"]["600"]["emitted"]
    bad_buckets = good_row("count", 5, "bolt")
    bad_buckets["windows"]["all"]["histograms"]["execute"]["buckets"] = [[1]]
    bad_rows = [
        "not a row",
        {"component": "split", "task": 4, "kind": "bolt"},   # no windows, queues or user
        no_emitted,
        bad_buckets,
        {**good_row("count", 6, "bolt"), "user": None},
        {**good_row("count", 7, "bolt"), "queue_depth": "full"},
    ]
    worker = {"host": None, "port": None, "pid": 1, "started": 0.0, "uptime": 60.0,
              "cpu_percent": 1.0, "rss_bytes": 1}
    good = {"topology_id": "t-1", "name": "t", "time": 100.0, "worker": worker,
            "tasks": [good_row("spout", 1, "spout"), *bad_rows]}
    bad_snapshot = {**good, "time": None, "tasks": [good_row("spout", 2, "spout")]}
    for window in WINDOWS:
        stats = component_stats(structure, [good, bad_snapshot], window)
        assert [row["task"] for row in stats["spout"]["task_rows"]] == [1]
        assert stats["spout"]["emitted"] == 10 and stats["spout"]["acked"] == 10
        assert topology_stats(structure, [good, bad_snapshot], window)["acked"] == 10
        edge_rates(structure, [good, bad_snapshot], window)
    # The row with a bad histogram is bad in the "all" window only: other windows show it.
    assert [r["task"] for r in component_stats(structure, [good], "600")["count"]["task_rows"]] \
        == [5]
    assert component_stats(structure, [good], "all")["count"]["task_rows"] == []
    (row,) = worker_stats([good, bad_snapshot])
    assert row["pid"] == 1 and row["components"] == ["count", "split", "spout"]
