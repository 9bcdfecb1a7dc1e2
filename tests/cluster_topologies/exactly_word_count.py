"""A stateful word count over the partitioned log in effectively-once, for the cluster test of
exact state under failures (tests/state/test_cluster_exactly.py); exactly_kafka_word_count.py is
the same over Kafka.

Each record is a sentence ``<id> w<a> w<b>``; ``Split`` sends its words on, each with its
partition and offset, and ``Count`` (stateful, fields grouping on the word) keeps every word's
total and, for the test's accounting, how many times it counted each (partition, offset, word):
in effectively-once every one of those is exactly 1 in the committed state, whatever failed.

``Count`` also emits each word's running total with its record's name
``<partition>:<offset>:<word>``, and the sinks of effectively-once write it out
(``add_sinks``): an ``EmbeddedUpsertBolt`` (table ``SINK_TABLE`` of the topology's embedded
state file, shared by the workers of a host) and a ``RedisUpsertBolt`` (hash ``SINK_TABLE`` of
the Redis at ``-c words.redis=<provider config JSON>``), each upserting record name -> total;
over Kafka, also a ``TransactionalKafkaBolt`` (a record of key record name, value total, to the
topic ``-c words.sink.topic=<topic>``). A failure-free run writes each record name once, and a
word's totals are 1..n whatever the order of the records: the committed output must be exactly
that after the faults too.
"""

from __future__ import annotations

import json

from stormlet import Bolt, TopologyBuilder
from stormlet.sinks.upsert import EmbeddedUpsertBolt, RedisUpsertBolt
from stormlet.sources import LogSpout
from stormlet.state import StatefulBolt

SINK_TABLE = "exactly-sink"   # the upsert sinks' table (embedded) and hash (Redis)


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
    outputs = ["word", "total", "record"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        word, key = tup["word"], ("seen", tup["partition"], tup["offset"], tup["word"])
        total, seen = self.state.get(word, 0) + 1, self.state.get(key, 0) + 1
        self.state.put(word, total)
        self.state.put(key, seen)
        record = f"{tup['partition']}:{tup['offset']}:{word}"
        self.collector.emit([word, total, record], anchors=[tup])
        self.collector.ack(tup)


class ConfiguredRedisUpsertBolt(RedisUpsertBolt):
    """A ``RedisUpsertBolt`` whose server comes from the topology config at prepare
    (``words.redis``: the Redis state provider's config, as JSON): the test's port."""

    def __init__(self) -> None:
        super().__init__({}, SINK_TABLE, key_fields=["record"], value_field="total")

    def prepare(self, conf, context, collector):
        config = conf["words.redis"]
        self.config = json.loads(config) if isinstance(config, str) else dict(config)
        super().prepare(conf, context, collector)


def add_sinks(builder: TopologyBuilder) -> None:
    """The upsert sinks, on ``count``'s output: each record name to its running total."""
    builder.set_bolt("to-table", EmbeddedUpsertBolt(SINK_TABLE, key_fields=["record"],
                                                    value_field="total"),
                     parallelism=2).fields_grouping("count", ["word"])
    builder.set_bolt("to-redis", ConfiguredRedisUpsertBolt(),
                     parallelism=2).fields_grouping("count", ["word"])


builder = TopologyBuilder()
builder.set_spout("sentences", LogSpout(path_config="words.log", spout_id="exactly-words",
                                        commit_interval=0.5), parallelism=2)
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
add_sinks(builder)
topology = builder.build()

# A checkpoint (its drain, or an action) not done in 3 s is recovered from: a worker killed
# mid-checkpoint costs that, not the 10 s message timeout (15 s on average, measured).
config = {"topology.guarantee": "effectively-once", "topology.message.timeout.secs": 10,
          "topology.max.spout.pending": 200, "topology.state.checkpoint.interval.ms": 300,
          "topology.state.checkpoint.timeout.secs": 3}
