"""Trending words: a sliding-window top-N, the windowed bolt users copy.

A spout emits sentences (tracked) at a steady rate, a basic bolt splits them into words, and a
windowed bolt keeps the last 6 seconds of words, sliding every second: each second it emits
the window's top words, anchored to every word in the window. A word tuple is acked when it
leaves the last window that holds it (6 to 7 seconds after it arrived), which completes its
sentence.

    stormlet local topologies/top_words.py --duration 10
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter

from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder
from stormlet.windowing import Duration, WindowedBolt

log = logging.getLogger("top_words")

WORDS = ("storm stream tuple bolt spout window ack anchor nimbus worker supervisor "
         "zookeeper python fast reliable").split()
TOP = 5


class Sentences(Spout):
    outputs = ["sentence"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.rate = float(conf.get("top_words.rate", 500))   # sentences per second
        self.random = random.Random(context.this_task_index)
        self.started = None
        self.sent = 0

    def next_tuple(self):
        now = time.monotonic()
        self.started = self.started or now
        if self.sent >= (now - self.started) * self.rate:
            time.sleep(0.001)
            return
        # Some words trend: the first few are drawn far more often.
        words = self.random.choices(WORDS, weights=range(len(WORDS), 0, -1), k=6)
        self.collector.emit([" ".join(words)], msg_id=self.sent)
        self.sent += 1

    def fail(self, msg_id, reason):
        log.warning("sentence %s failed: %s", msg_id, reason)


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word])


class TopWords(WindowedBolt):
    outputs = ["start", "end", "top"]

    def execute(self, window):
        counts = Counter(t[0] for t in window.get())
        self.collector.emit([window.start, window.end, counts.most_common(TOP)])


class Report(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        start, end, top = tup
        shown = ", ".join(f"{word} {n}" for word, n in top)
        log.info("words in the %.0f s to %s: %s", (end - start) / 1000,
                 time.strftime("%H:%M:%S", time.localtime(end / 1000)), shown)
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("sentences", Sentences())
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("top", TopWords().with_window(Duration(seconds=6), Duration(seconds=1))
                 ).global_grouping("split")
builder.set_bolt("report", Report()).global_grouping("top")
topology = builder.build()

config = {"topology.message.timeout.secs": 30}
