"""topology.debug: every emit, plain and direct, from spouts and bolts, is logged with its stream
and the tasks it went to."""

import logging

from stormlet import BasicBolt, Bolt, LocalCluster, OutputFieldsDeclarer, Spout, TopologyBuilder


class TwoSentences(Spout):
    outputs = ["sentence"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.left = ["a b", "c d"]

    def next_tuple(self):
        if self.left:
            self.collector.emit([self.left.pop()], msg_id=len(self.left))


class SplitDirect(Bolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])
        declarer.declare(["word"], stream="direct", direct=True)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.sink = context.get_component_tasks("sink")[0]

    def execute(self, tup):
        for word in tup["sentence"].split():
            self.collector.emit([word], tup)
            self.collector.emit_direct(self.sink, [word.upper()], tup, stream="direct")
        self.collector.ack(tup)


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)


def test_debug_logs_every_emit_with_its_stream_and_tasks(caplog):
    b = TopologyBuilder()
    b.set_spout("sentences", TwoSentences())
    b.set_bolt("split", SplitDirect()).shuffle_grouping("sentences")
    b.set_bolt("sink", Sink()).shuffle_grouping("split").direct_grouping("split", "direct")
    caplog.set_level(logging.INFO, logger="stormlet.runtime.task_collectors")
    with LocalCluster() as cluster:
        cluster.submit("dbg", {"topology.debug": True}, b.build())
        cluster.wait_for(lambda: cluster.metrics("dbg")["sentences"]["acked"] == 2, timeout=20)
    lines = [r.getMessage() for r in caplog.records if r.name == "stormlet.runtime.task_collectors"]
    assert sum("emitted ['a b'] on 'default'" in m or "emitted ['c d'] on 'default'" in m
               for m in lines) == 2
    for word in "abcd":
        assert sum(f"emitted ['{word}'] on 'default' to tasks" in m for m in lines) == 1
        assert sum(f"emitted ['{word.upper()}'] on 'direct' to tasks" in m for m in lines) == 1


class BasicSplit(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word])


def test_debug_logs_a_basic_bolts_emits_too(caplog):
    b = TopologyBuilder()
    b.set_spout("sentences", TwoSentences())
    b.set_bolt("split", BasicSplit()).shuffle_grouping("sentences")
    b.set_bolt("sink", Sink()).shuffle_grouping("split")
    caplog.set_level(logging.INFO, logger="stormlet.runtime.task_collectors")
    with LocalCluster() as cluster:
        cluster.submit("dbg", {"topology.debug": True}, b.build())
        cluster.wait_for(lambda: cluster.metrics("dbg")["sentences"]["acked"] == 2, timeout=20)
    lines = [r.getMessage() for r in caplog.records if r.name == "stormlet.runtime.task_collectors"]
    for word in "abcd":
        assert sum(m.startswith("split:") and f"emitted ['{word}'] on 'default' to tasks" in m
                   for m in lines) == 1, lines
