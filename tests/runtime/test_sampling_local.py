"""Tuple sampling in a running local topology: every emit path is sampled (a spout's emit and
emit_direct, a bolt's emit and emit_direct, a basic bolt's emit and emit_direct), at 100 % every
emit and at a lower percentage a share within statistical bounds; turned off, or when its time
runs out, nothing more; and LocalCluster's own calls, as the UI makes them."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from support import wait_until, whole_json_lines

from stormlet import BasicBolt, Bolt, LocalCluster, OutputFieldsDeclarer, Spout, TopologyBuilder
from stormlet.runtime.live_settings import LiveSettings
from stormlet.runtime.sampling import SampleSink

N = 4000   # tuples the spout emits on each of its two streams


class Gate:
    """Holds the spout until the test has turned sampling on, and paces it if asked
    (components are copied, so they share it through the class)."""
    go = threading.Event()
    pause = 0.0   # seconds after each emit


class Source(Spout):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["n"])
        declarer.declare(["n"], stream="direct", direct=True)

    def open(self, conf, context, collector):
        self.collector = collector
        self.sink = context.get_component_tasks("sink")[0]
        self.n = 0

    def next_tuple(self):
        if not Gate.go.is_set() or self.n >= N:
            time.sleep(0.001)
            return
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)
        self.collector.emit_direct(self.sink, [self.n], stream="direct")
        if Gate.pause:
            time.sleep(Gate.pause)


class Plain(Bolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["n"])
        declarer.declare(["n"], stream="direct", direct=True)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.sink = context.get_component_tasks("sink")[0]

    def execute(self, tup):
        self.collector.emit([tup[0]], tup)
        self.collector.emit_direct(self.sink, [tup[0]], tup, stream="direct")
        self.collector.ack(tup)
        self.executed = getattr(self, "executed", 0) + 1   # after its emits: see emits_done


class Basic(BasicBolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["n"])
        declarer.declare(["n"], stream="direct", direct=True)

    def prepare(self, conf, context):
        self.sink = context.get_component_tasks("sink")[0]

    def execute(self, tup, collector):
        collector.emit([tup[0]])
        collector.emit_direct(self.sink, [tup[0]], stream="direct")
        self.executed = getattr(self, "executed", 0) + 1


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = 0

    def execute(self, tup):
        self.seen += 1
        self.collector.ack(tup)


# Every (component, stream) the topology emits on, each N times.
PATHS = [(c, s) for c in ("source", "plain", "basic") for s in ("default", "direct")]


def topology():
    b = TopologyBuilder()
    b.set_spout("source", Source())
    b.set_bolt("plain", Plain()).shuffle_grouping("source")
    b.set_bolt("basic", Basic()).shuffle_grouping("source")
    sink = b.set_bolt("sink", Sink())
    sink.direct_grouping("source", "direct")
    for bolt in ("plain", "basic"):
        sink.shuffle_grouping(bolt).direct_grouping(bolt, "direct")
    return b.build()


@pytest.fixture
def cluster():
    Gate.go.clear()
    with LocalCluster() as cluster:
        cluster.submit("s", {"topology.max.spout.pending": 500}, topology())
        yield cluster
    Gate.go.clear()
    Gate.pause = 0.0


def all_done(cluster) -> bool:
    sink, = cluster.instances("s", "sink")
    return sink.seen == 5 * N


def emits_done(cluster) -> Callable[[], bool]:
    """Whether every emitting component has finished an emit since this was called, or has no
    more to make: an emit under way when it was called (sampled or not) is over."""
    def counts() -> list[int]:
        (source,), (plain,), (basic,) = (cluster.instances("s", c)
                                         for c in ("source", "plain", "basic"))
        return [source.n, getattr(plain, "executed", 0), getattr(basic, "executed", 0)]
    then = counts()
    return lambda: all(now > was or now == N for now, was in zip(counts(), then))


def sampled(path) -> Counter:
    """The samples in ``path`` by (component, stream): the whole lines only, as the file may be
    read while the sink's thread is part way through writing one."""
    if not path.exists():
        return Counter()
    return Counter((s["component"], s["stream"]) for s in whole_json_lines(path))


def run_sampled(cluster, tmp_path, sampling: dict) -> tuple[Counter, list[dict]]:
    """Sample the whole run as ``sampling`` says; the samples written, by path, and all.
    Every sample of the run fits the buffer and is written, however slowly the writing thread
    gets its turns on a busy machine: the counts are the sampling's alone."""
    sink = SampleSink(tmp_path / "samples.jsonl", pending=len(PATHS) * N, written_per_sec=None)
    settings = LiveSettings(cluster.runtime("s"), samples=sink).start()
    try:
        settings.follow({"sampling": sampling})
        Gate.go.set()
        wait_until(lambda: all_done(cluster), 60, "every tuple at the sink")
    finally:
        settings.close()
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    return sampled(tmp_path / "samples.jsonl"), [json.loads(line) for line in lines]


def test_at_100_percent_every_emit_of_every_path_is_sampled(cluster, tmp_path):
    counts, samples = run_sampled(cluster, tmp_path, {"*": {"percent": 100, "until": None}})
    assert counts == {path: N for path in PATHS}
    spout = [s for s in samples if s["component"] == "source" and s["stream"] == "default"]
    assert sorted(s["msg_id"] for s in spout) == list(range(1, N + 1))
    assert all(s["values"] == [s["msg_id"]] and len(s["roots"]) == 1 for s in spout)
    direct = [s for s in samples if s["stream"] == "direct"]
    sink_task = cluster.runtime("s").layout.component_tasks["sink"][0]
    assert all(s["to_tasks"] == [sink_task] for s in direct)
    # A bolt's emits are anchored: each sample names its tree's root, a spout root.
    roots = {s["roots"][0] for s in spout}
    assert all(s["roots"][0] in roots for s in samples if s["component"] == "plain")


def test_at_a_percentage_each_path_is_sampled_within_statistical_bounds(cluster, tmp_path):
    percent = 10.0
    counts, _ = run_sampled(cluster, tmp_path, {"*": {"percent": percent, "until": None}})
    p = percent / 100
    mean, sd = N * p, math.sqrt(N * p * (1 - p))   # 400 and 19 of each path's 4000
    for path in PATHS:
        assert abs(counts[path] - mean) < 5 * sd, (path, counts)


def test_one_components_own_percentage_wins_over_every_components(cluster, tmp_path):
    counts, _ = run_sampled(cluster, tmp_path, {"*": {"percent": 100, "until": None},
                                                "basic": {"percent": 1, "until": None}})
    assert counts[("plain", "default")] == N and counts[("source", "direct")] == N
    assert counts[("basic", "default")] < N / 10


def test_turned_off_or_run_out_nothing_more_is_sampled(cluster, tmp_path):
    path = tmp_path / "samples.jsonl"
    Gate.pause = 0.0005   # N emits take 2 s at least: the changes come while it runs
    sink = SampleSink(path, pending=len(PATHS) * N, written_per_sec=None)
    settings = LiveSettings(cluster.runtime("s"), samples=sink).start()
    try:
        settings.follow({"sampling": {"plain": {"percent": 100, "until": None},
                                      "basic": {"percent": 100, "until": time.time() + 0.3}}})
        Gate.go.set()
        wait_until(lambda: sampled(path)[("plain", "default")] > 50, 20, "plain's samples")
        settings.follow({"sampling": {}})
        # What was sampled before: the emits under way as it was turned off are over, and
        # closing writes every sample made (its thread stopped: from here the test writes).
        wait_until(emits_done(cluster), 20, "an emit of each component since")
        settings.close()
        before = sampled(path)
        wait_until(lambda: all_done(cluster), 60, "every tuple at the sink")
        sink.write()   # anything sampled since would now be in the file
        after = sampled(path)
        assert after == before
        assert 0 < after[("basic", "default")] < N and after[("plain", "default")] < N
    finally:
        settings.close()


def test_local_cluster_debug_and_samples_as_the_ui_calls_them(cluster):
    settings = cluster.debug("s", 100, component="plain", seconds=60)
    assert settings["sampling"]["plain"]["percent"] == 100.0
    Gate.go.set()
    wait_until(lambda: len(cluster.samples("s", "plain", 10)) == 10, 20, "plain's samples")
    samples = cluster.samples("s", "plain", 10)
    assert all(s["component"] == "plain" for s in samples)
    assert [s["time"] for s in samples] == sorted(s["time"] for s in samples)
    assert cluster.samples("s", "basic", 10) == []
    assert cluster.debug("s", None, component="plain")["sampling"] == {}
    assert cluster.live_settings("s")["sampling"] == {}
    with pytest.raises(ValueError, match="no component"):
        cluster.debug("s", 5, component="nope")
    with pytest.raises(ValueError, match="percentage"):
        cluster.debug("s", 500)
