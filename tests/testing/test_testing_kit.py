"""stormlet.testing beyond its documented examples: refusals, event-time windows and ticks in
complete_topology, the same windows on every run, and a run that cannot complete."""

from __future__ import annotations

import pytest

from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder, TopologyError
from stormlet import config as cfg
from stormlet.testing import (
    BoltHarness,
    CompleteTopologyParam,
    MockedSources,
    MockOutputCollector,
    complete_topology,
    make_tuple,
    simulated_time,
    spout_harness,
    tick_tuple,
)
from stormlet.values import SerializationError
from stormlet.windowing import Duration, WindowedBolt


class Events(Spout):
    outputs = ["id", "ts"]


class Sums(WindowedBolt):
    outputs = ["ids", "start", "end"]

    def execute(self, window):
        self.collector.emit([sorted(t["id"] for t in window.get()), window.start, window.end])


class Echo(Bolt):
    """Passes tuples on: anchored from ``events``, unanchored from ``watermark`` (whose
    tuple then completes at once, though the window keeps it forever)."""

    outputs = ["id", "ts"]

    def execute(self, tup):
        anchors = () if tup.source_component == "watermark" else tup
        self.collector.emit(list(tup.values), anchors)
        self.collector.ack(tup)


def test_event_time_windows_complete_on_simulated_ticks():
    """The watermark moves on ticks, which come from the simulated clock once everything
    emitted is in: every window up to the watermark fires, the same on every run."""
    builder = TopologyBuilder()
    builder.set_spout("events", Events())
    builder.set_spout("watermark", Events())
    builder.set_bolt("echo", Echo(), parallelism=2).shuffle_grouping("events") \
        .all_grouping("watermark")   # both input tasks of "sums" see the far timestamp
    builder.set_bolt("sums", Sums().with_tumbling_window(Duration(seconds=10))
                     .with_timestamp_field("ts").with_lag(Duration(seconds=1))
                     .with_late_tuple_stream("late")).global_grouping("echo")
    sources = (MockedSources()
               .add_mock_data("events", [1, 1_000], [2, 9_000], [3, 12_000], [4, 25_000])
               .add_mock_data("watermark", [0, 100_000]))
    result = complete_topology(builder.build(), CompleteTopologyParam(sources))
    assert result.read_tuples("sums") == [
        [[1, 2], 0, 10_000], [[3], 10_000, 20_000], [[4], 20_000, 30_000]]
    assert result.read_tuples("sums", "late") == []
    assert sorted(result.acked["events"]) == [0, 1, 2, 3]


def test_the_same_windows_on_every_run():
    class Numbers(Spout):
        outputs = ["id"]

    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("pass", PassOn(), parallelism=3).shuffle_grouping("numbers")
    builder.set_bolt("sliding", Ids().with_window(Duration(seconds=6), Duration(seconds=3))) \
        .global_grouping("pass")
    topology = builder.build()
    sources = MockedSources().add_mock_data("numbers", *([i] for i in range(10)))
    for _run in range(3):
        result = complete_topology(topology, CompleteTopologyParam(sources))
        # All ten arrive at simulated 0 s; windows fire at 3 and 6 s; at 9 s they leave.
        assert result.read_tuples("sliding") == [[10, 3_000], [10, 6_000]]
        assert sorted(result.acked["numbers"]) == list(range(10))


class PassOn(BasicBolt):
    outputs = ["id"]

    def execute(self, tup, collector):
        collector.emit(list(tup.values))


class Ids(WindowedBolt):
    outputs = ["ids", "end"]

    def execute(self, window):
        self.collector.emit([len(window.get()), window.end])


class Clock(Bolt):
    """Emits, unanchored, one tuple per tick: captured although no spout tuple leads to it."""

    outputs = ["tick"]

    def get_component_configuration(self):
        return {cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS: 2}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.ticks = 0

    def execute(self, tup):
        if tup.is_tick():
            self.ticks += 1
            self.collector.emit([self.ticks])
        else:
            self.collector.ack(tup)


def test_refusals_name_the_spout_and_stream():
    builder = TopologyBuilder()
    builder.set_spout("events", Events())
    builder.set_bolt("echo", Echo()).shuffle_grouping("events")
    topology = builder.build()
    with pytest.raises(TopologyError, match=r"mock data for \['nope'\], which are not spouts"):
        complete_topology(topology, CompleteTopologyParam(MockedSources().add_mock_data(
            "nope", [1])))
    with pytest.raises(TopologyError, match=r"spout 'events' stream 'default': the spout "
                                            r"declares \['id', 'ts'\]"):
        complete_topology(topology, CompleteTopologyParam(MockedSources().add_mock_data(
            "events", [1])))


def test_unfinished_run_raises_naming_the_spout():
    class Sink(Bolt):
        def execute(self, tup):
            pass   # never acks: the tuples stay in flight past the kit's timeout

    builder = TopologyBuilder()
    builder.set_spout("events", Events())
    builder.set_bolt("sink", Sink()).shuffle_grouping("events")
    builder.set_bolt("clock", Clock()).shuffle_grouping("events")
    sources = MockedSources().add_mock_data("events", [1, 0], [2, 0])
    with pytest.raises(TimeoutError, match="mock tuples unfinished after 0.5 s: events 2"):
        complete_topology(builder.build(), CompleteTopologyParam(sources, timeout_secs=0.5))


def test_mock_collector_checks_emits_as_the_runtime_does():
    harness = BoltHarness(Echo())
    with pytest.raises(SerializationError, match="emitted 1 values on stream 'default'"):
        harness.collector.emit([1])
    with pytest.raises(ValueError, match="does not declare"):
        harness.collector.emit([1, 2], stream="other")
    with pytest.raises(SerializationError, match="is not a type a tuple may hold"):
        harness.collector.emit([object(), 1])
    assert MockOutputCollector().emit([object()]) == []   # no streams given: no checks


def test_harness_ticks_and_make_tuple_defaults():
    tup = make_tuple([1, "a"])
    assert tup.fields == ["field1", "field2"] and tup.source_component == "component"
    assert tick_tuple().is_tick()
    with simulated_time():
        harness = BoltHarness(Clock())
        harness.tick()
        harness.tick()
    assert harness.collector.emitted_values() == [[1], [2]]


def test_an_offset_spout_fails_a_message_under_spout_harness(tmp_path):
    # OffsetSpout.fail asked the collector whether the topology is stopping (``closed``), which
    # only the runtime's collector had: under the harness, a fail raised AttributeError.
    from stormlet.sources import LogSpout
    from stormlet.sources.partitioned_log import PartitionedLog

    log = PartitionedLog.create(tmp_path / "log", 1)
    log.append("hello")
    spout = LogSpout(str(tmp_path / "log"), spout_id="reader")
    collector = spout_harness(spout)
    spout.next_tuple()
    [emitted] = collector.emitted
    spout.fail(emitted.msg_id, "boom")
    spout.close()


def test_bolt_harness_refuses_a_bolt_class_naming_it():
    class Upper(Bolt):
        def execute(self, tup):
            pass

    with pytest.raises(TypeError, match=r"the class Upper \(make one: Upper\(\)\)"):
        BoltHarness(Upper)
