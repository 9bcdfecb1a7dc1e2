"""exactly_word_count.py's stateful word count in effectively-once, over a Kafka topic (the
test's mock broker) in place of the partitioned log: ``-c words.kafka=<bootstrap servers>
-c words.topic=<topic>`` say which. Besides the upsert sinks, a ``TransactionalKafkaBolt``
writes each running total to the topic ``-c words.sink.topic=<topic>`` of the same broker."""

from __future__ import annotations

from exactly_word_count import Count, Split, add_sinks, config

from stormlet import TopologyBuilder
from stormlet.sinks.kafka import TransactionalKafkaBolt
from stormlet.sources import KafkaSpout


class RecordMapper:
    """A record's key is the input's record name, its value its total (as text)."""

    def get_key_from_tuple(self, tup):
        return tup["record"]

    def get_message_from_tuple(self, tup):
        return str(tup["total"])


class ConfiguredTransactionalKafkaBolt(TransactionalKafkaBolt):
    """A ``TransactionalKafkaBolt`` whose broker and topic come from the topology config at
    prepare (``words.kafka``, ``words.sink.topic``)."""

    def __init__(self) -> None:
        super().__init__("", transactional_id_prefix="exactly")
        self.with_tuple_to_kafka_mapper(RecordMapper())

    def prepare(self, conf, context, collector):
        self.bootstrap_servers = conf["words.kafka"]
        self.with_topic_selector(conf["words.sink.topic"])
        super().prepare(conf, context, collector)


builder = TopologyBuilder()
# The broker and topic come from the topology config at open (the broker's port is the test's).
builder.set_spout("sentences", KafkaSpout(servers_config="words.kafka", topic_config="words.topic",
                                          spout_id="exactly-kafka-words", commit_interval=0.5),
                  parallelism=2)
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
add_sinks(builder)
builder.set_bolt("to-kafka", ConfiguredTransactionalKafkaBolt(),
                 parallelism=2).fields_grouping("count", ["word"])
topology = builder.build()

config = dict(config)
