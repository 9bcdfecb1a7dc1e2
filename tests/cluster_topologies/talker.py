"""Components that log, for the cluster tests of `stormlet logs`.

A spout emits a word ``talker.rate`` times a second. The bolts ``shout`` (two tasks) and
``quiet`` log what they hear now and then, and when ``<talker.dir>/say`` holds text they have
not said yet, each task logs "said: <text>" once: a test makes a line appear in every task's
log at a moment of its choosing. ``shout`` also prints the text, which the worker logs as the
``stdout`` logger's, naming the component all the same.
"""

from __future__ import annotations

import logging
import os
import time

from stormlet import BasicBolt, Spout, TopologyBuilder

log = logging.getLogger("talker")


class Words(Spout):
    outputs = ["word"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.every = 1.0 / float(conf.get("talker.rate", 20))
        self.next_at = 0.0
        self.n = 0

    def next_tuple(self):
        now = time.monotonic()
        if now >= self.next_at:
            self.next_at = now + self.every
            self.collector.emit([f"w{self.n}"])
            self.n += 1


class Talker(BasicBolt):
    prints = False

    def prepare(self, conf, context):
        self.say = os.path.join(conf["talker.dir"], "say")
        self.task = context.task_id
        self.said = ""
        self.heard = 0

    def execute(self, tup, collector):
        self.heard += 1
        if self.heard % 50 == 1:
            log.info("task %d heard %s", self.task, tup["word"])
        try:
            with open(self.say) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return
        if text and text != self.said:
            self.said = text
            log.info("said: %s", text)
            if self.prints:
                print(f"printed: {text}")


class Shout(Talker):
    prints = True


class Quiet(Talker):
    pass


builder = TopologyBuilder()
builder.set_spout("words", Words())
builder.set_bolt("shout", Shout(), parallelism=2).all_grouping("words")
builder.set_bolt("quiet", Quiet()).shuffle_grouping("words")
topology = builder.build()

config = {"topology.acker.executors": 0}
