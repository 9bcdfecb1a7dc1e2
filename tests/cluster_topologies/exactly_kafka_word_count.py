"""exactly_word_count.py's stateful word count in effectively-once, over a Kafka topic (the
test's mock broker) in place of the partitioned log: ``-c words.kafka=<bootstrap servers>
-c words.topic=<topic>`` say which."""

from __future__ import annotations

from exactly_word_count import Count, Split, config

from stormlet import TopologyBuilder
from stormlet.sources import KafkaSpout

builder = TopologyBuilder()
# The broker and topic come from the topology config at open (the broker's port is the test's).
builder.set_spout("sentences", KafkaSpout(servers_config="words.kafka", topic_config="words.topic",
                                          spout_id="exactly-kafka-words", commit_interval=0.5),
                  parallelism=2)
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
topology = builder.build()

config = dict(config)
