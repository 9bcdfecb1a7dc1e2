"""A stateful word count over the partitioned log in effectively-once, for the cluster test of
exact state under failures (tests/state/test_cluster_exactly.py); exactly_kafka_word_count.py is
the same over Kafka.

Each record is a sentence ``<id> w<a> w<b>``; ``Split`` sends its words on, each with its
partition and offset, and ``Count`` (stateful, fields grouping on the word) keeps every word's
total and, for the test's accounting, how many times it counted each (partition, offset, word):
in effectively-once every one of those is exactly 1 in the committed state, whatever failed.
"""

from __future__ import annotations

from stormlet import Bolt, TopologyBuilder
from stormlet.sources import LogSpout
from stormlet.state import StatefulBolt


class Split(Bolt):
    outputs = ["word", "partition", "offset"]

    def execute(self, tup):
        value = tup["value"]
        if isinstance(value, bytes):   # a Kafka record's value
            value = value.decode()
        for word in value.split()[1:]:
            self.collector.emit([word, tup["partition"], tup["offset"]], anchors=[tup])
        self.collector.ack(tup)


class Count(StatefulBolt):
    outputs = ["word", "total"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        word, key = tup["word"], ("seen", tup["partition"], tup["offset"], tup["word"])
        total, seen = self.state.get(word, 0) + 1, self.state.get(key, 0) + 1
        self.state.put(word, total)
        self.state.put(key, seen)
        self.collector.emit([word, total], anchors=[tup])
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("sentences", LogSpout(path_config="words.log", spout_id="exactly-words",
                                        commit_interval=0.5), parallelism=2)
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
topology = builder.build()

# A checkpoint (its drain, or an action) not done in 3 s is recovered from: a worker killed
# mid-checkpoint costs that, not the 10 s message timeout (15 s on average, measured).
config = {"topology.guarantee": "effectively-once", "topology.message.timeout.secs": 10,
          "topology.max.spout.pending": 200, "topology.state.checkpoint.interval.ms": 300,
          "topology.state.checkpoint.timeout.secs": 3}
