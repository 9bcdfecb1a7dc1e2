"""Word count over a partitioned log: the shape of most real topologies.

The spout reads a 4-partition log of sentences with an offset-tracking ``LogSpout``: every
sentence is tracked until all its words are counted, failures are retried with backoff and
dead-lettered when they keep failing, and each partition's offset is committed once everything
below it is done, so a restart (or a killed worker) resumes where processing stopped.

    stormlet log create /tmp/stormlet/sentences --partitions 4
    stormlet log append /tmp/stormlet/sentences --file my-sentences.txt
    stormlet local topologies/log_word_count.py
    stormlet log describe /tmp/stormlet/sentences        # committed offsets and lag

On a cluster, give the log's path (the same on every machine) with
``-c sentences.log=/data/sentences``; offsets are then committed to ZooKeeper.
"""

from __future__ import annotations

import logging
from collections import Counter

from stormlet import BasicBolt, Bolt, TopologyBuilder
from stormlet.sources import LogSpout, RetryPolicy

log = logging.getLogger("log_word_count")


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup["value"].split():
            collector.emit([word.lower()])


class Count(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: Counter = Counter()
        self.task_id = context.task_id

    def execute(self, tup):
        word = tup["word"]
        self.counts[word] += 1
        self.collector.emit([word, self.counts[word]], anchors=[tup])
        self.collector.ack(tup)

    def cleanup(self):
        top = ", ".join(f"{w}={n}" for w, n in self.counts.most_common(5))
        log.info("count task %d: %d distinct words; top: %s", self.task_id, len(self.counts), top)


sentences = LogSpout(path_config="sentences.log", spout_id="log-word-count",
                     retry=RetryPolicy(initial_delay=1.0, multiplier=2.0, max_attempts=6))

builder = TopologyBuilder()
builder.set_spout("sentences", sentences, parallelism=2)
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
topology = builder.build()

config = {"sentences.log": "/tmp/stormlet/sentences", "topology.max.spout.pending": 2000}
