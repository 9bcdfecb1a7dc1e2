"""The benchmark's word count as a topology file, for the cluster benchmark: two of everything,
one worker per core. The splitters take sentences from the spout in their own worker
(local-or-shuffle); the counters are chosen by word (fields), so about half the words cross
between the two workers over ZeroMQ.

``build(crossing=False)`` (wordcount_no_crossing_topology.py) sends each word to the counter in
its splitter's own worker instead: the counts are then split between the two counters, but the
same work is done with nothing crossing, which tells what crossing costs."""

from wordcount import CountBolt, SentenceSpout, SplitBolt

from stormlet import TopologyBuilder


def build(crossing: bool = True, shuffle: bool = False):
    """``shuffle``: the splitters take sentences by shuffle, not local-or-shuffle (as a
    topology ported from Storm would): load-aware, they stay in the worker as local-or-shuffle
    does; plain (topology.disable.loadaware.messaging), half the sentences cross."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(tracked=True), parallelism=2)
    split = builder.set_bolt("split", SplitBolt(), parallelism=2)
    if shuffle:
        split.shuffle_grouping("sentences")
    else:
        split.local_or_shuffle_grouping("sentences")
    count = builder.set_bolt("count", CountBolt(), parallelism=2)
    if crossing:
        count.fields_grouping("split", ["word"])
    else:
        count.local_or_shuffle_grouping("split")
    return builder.build()


topology = build()

config = {"topology.workers": 2, "topology.max.spout.pending": 2000}
