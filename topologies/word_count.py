"""Word count: the "hello world" of Storm.

A spout emits each line of a small corpus a fixed number of times (tracked, so every sentence is
acked only when all its words are counted), a basic bolt splits lines into words, and a bolt
grouped by word keeps the counts. The counts are exact: every word is counted once per sentence.

    stormlet local topologies/word_count.py
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter

from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder

log = logging.getLogger("word_count")

CORPUS = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]
REPEATS = 2000  # each line is emitted this many times per spout task


class Sentences(Spout):
    outputs = ["sentence"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.repeats = int(conf.get("wordcount.repeats", REPEATS))
        self.total = self.repeats * len(CORPUS)
        self.next_id = 0
        self.unacked = set()

    def next_tuple(self):
        if self.next_id < self.total:
            line = CORPUS[self.next_id % len(CORPUS)]
            self.unacked.add(self.next_id)
            self.collector.emit([line], msg_id=self.next_id)
            self.next_id += 1

    def ack(self, msg_id):
        self.unacked.discard(msg_id)

    def fail(self, msg_id, reason):
        # Replay: the same line goes out again under the same id.
        log.warning("sentence %s failed (%s); replaying", msg_id, reason)
        self.collector.emit([CORPUS[msg_id % len(CORPUS)]], msg_id=msg_id)


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word])


class Count(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts = Counter()
        self.output_dir = conf.get("wordcount.output.dir")
        self.task_id = context.task_id

    def execute(self, tup):
        word = tup[0]
        self.counts[word] += 1
        self.collector.emit([word, self.counts[word]], anchors=[tup])
        self.collector.ack(tup)

    def cleanup(self):
        if self.output_dir:
            os.makedirs(self.output_dir, exist_ok=True)
            path = os.path.join(self.output_dir, f"counts-{self.task_id}.json")
            with open(path, "w") as f:
                json.dump(self.counts, f, sort_keys=True)
        top = ", ".join(f"{w}={n}" for w, n in self.counts.most_common(5))
        log.info("count task %d: %d distinct words; top: %s", self.task_id, len(self.counts), top)


def expected_counts(spout_tasks: int, repeats: int = REPEATS) -> Counter:
    counts: Counter = Counter()
    for line in CORPUS:
        counts.update(line.split())
    return Counter({w: n * repeats * spout_tasks for w, n in counts.items()})


builder = TopologyBuilder()
builder.set_spout("sentences", Sentences(), parallelism=2)
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
topology = builder.build()

config = {"topology.max.spout.pending": 2000}
