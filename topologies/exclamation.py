"""Exclamation: Storm's first example. Words flow through two bolts that each append "!!!".

    stormlet local topologies/exclamation.py --duration 5
"""

from __future__ import annotations

import logging
import random

from stormlet import BasicBolt, Spout, TopologyBuilder

log = logging.getLogger("exclamation")

WORDS = ["nathan", "mike", "jackson", "golda", "bertels"]


class WordSpout(Spout):
    outputs = ["word"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.rng = random.Random(context.task_id)
        self.sent = 0

    def next_tuple(self):
        self.sent += 1
        self.collector.emit([self.rng.choice(WORDS)], msg_id=self.sent)


class Exclaim(BasicBolt):
    outputs = ["word"]

    def prepare(self, conf, context):
        self.seen = 0
        self.last = None

    def execute(self, tup, collector):
        self.seen += 1
        self.last = tup["word"] + "!!!"
        collector.emit([self.last])

    def cleanup(self):
        log.info("exclaimed %d words; the last was %r", self.seen, self.last)


builder = TopologyBuilder()
builder.set_spout("word", WordSpout(), parallelism=1)
builder.set_bolt("exclaim1", Exclaim(), parallelism=2).shuffle_grouping("word")
builder.set_bolt("exclaim2", Exclaim(), parallelism=2).shuffle_grouping("exclaim1")
topology = builder.build()

config = {"topology.max.spout.pending": 1000}
