"""The benchmark's word count as a topology file, for the cluster benchmark: two of everything,
one worker per core. The splitters take sentences from the spout in their own worker
(local-or-shuffle); the counters are chosen by word (fields), so about half the words cross
between the two workers over ZeroMQ."""

from stormlet import TopologyBuilder
from wordcount import CountBolt, SentenceSpout, SplitBolt

builder = TopologyBuilder()
builder.set_spout("sentences", SentenceSpout(tracked=True), parallelism=2)
builder.set_bolt("split", SplitBolt(), parallelism=2).local_or_shuffle_grouping("sentences")
builder.set_bolt("count", CountBolt(), parallelism=2).fields_grouping("split", ["word"])
topology = builder.build()

config = {"topology.workers": 2, "topology.max.spout.pending": 2000}
