"""KafkaSpout end to end against a Kafka-protocol broker on loopback (librdkafka's mock cluster):
every message tracked to its ack and committed, retries and dead letters, out-of-range records,
and a broker that goes away for a while."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter

import pytest
import support

from stormlet import Bolt, TopologyBuilder
from stormlet import config as cfg
from stormlet.errors import TopologyError
from stormlet.failed import read_failed
from stormlet.sources import KafkaSpout, RetryPolicy
from stormlet.sources.offset_store import FileOffsetStore
from stormlet.testing import spout_harness

FAST = {"topology.message.timeout.secs": 5}


class Sink(Bolt):
    outputs = ["value"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.poison = set(conf.get("test.poison", []))
        self.seen: list[str] = []

    def execute(self, tup):
        value = tup["value"].decode()
        self.seen.append(value)
        if value in self.poison:
            self.collector.fail(tup, "poison")
        else:
            self.collector.ack(tup)


def topology(spout, spout_tasks=2):
    builder = TopologyBuilder()
    builder.set_spout("source", spout, parallelism=spout_tasks)
    builder.set_bolt("sink", Sink(), parallelism=2).shuffle_grouping("source")
    return builder.build()


def seen(cluster) -> Counter:
    return Counter(v for sink in cluster.instances("test", "sink") for v in sink.seen)


def commits(store: FileOffsetStore, spout_id: str) -> dict[int, int]:
    return {p: r["offset"] for p, r in store.all().get(spout_id, {}).items()}


def test_a_four_partition_topic_is_read_acked_and_committed(mock_kafka, tmp_path):
    mock_kafka.create_topic("words", 4)
    for p in range(4):
        mock_kafka.produce("words", [f"p{p}-{i}" for i in range(500)], partition=p)
    store = FileOffsetStore(tmp_path / "offsets")
    spout = KafkaSpout(mock_kafka.bootstrap_servers, "words", spout_id="words-reader",
                       offsets=store, commit_interval=0.2)
    with support.running(topology(spout), FAST) as cluster:
        cluster.wait_for(lambda: commits(store, "words-reader") == {p: 500 for p in range(4)},
                         timeout=30)
        assert seen(cluster) == Counter(f"p{p}-{i}" for p in range(4) for i in range(500))
        lags = [m["lag"] for s in cluster.instances("test", "source")
                for m in s.partition_metrics().values()]
        assert lags == [0, 0, 0, 0]


def test_a_poison_message_from_kafka_is_dead_lettered_with_its_offset(mock_kafka, tmp_path):
    mock_kafka.create_topic("poison", 1)
    mock_kafka.produce("poison", [f"m{i}" for i in range(50)], partition=0)
    store = FileOffsetStore(tmp_path / "offsets")
    spout = KafkaSpout(mock_kafka.bootstrap_servers, "poison", spout_id="poison-reader",
                       offsets=store, commit_interval=0.2, failed_dir=str(tmp_path / "failed"),
                       retry=RetryPolicy(initial_delay=0.05, max_attempts=2))
    with support.running(topology(spout, 1), {**FAST, "test.poison": ["m20"]}) as cluster:
        cluster.wait_for(lambda: commits(store, "poison-reader") == {0: 50}, timeout=30)
        assert seen(cluster)["m20"] == 2
    [record] = read_failed(tmp_path / "failed")
    assert record["source"] == {"kind": "kafka", "name": "poison", "partition": 0, "offset": 20}
    assert record["payload"]["value"] == b"m20" and record["attempts"] == 2


def test_deleted_records_follow_the_out_of_range_policy(mock_kafka, tmp_path, caplog):
    mock_kafka.create_topic("retention", 1)
    mock_kafka.produce("retention", [f"m{i}" for i in range(100)], partition=0)
    store = FileOffsetStore(tmp_path / "offsets")
    store.save("r", 0, {"offset": 10, "partition": 0})
    mock_kafka.delete_records("retention", 0, 40)
    spout = KafkaSpout(mock_kafka.bootstrap_servers, "retention", spout_id="r", offsets=store,
                       commit_interval=0.2)
    with caplog.at_level(logging.WARNING, logger="stormlet.sources.offset_spout"):
        with support.running(topology(spout, 1), FAST) as cluster:
            cluster.wait_for(lambda: commits(store, "r") == {0: 100}, timeout=30)
            assert seen(cluster) == Counter(f"m{i}" for i in range(40, 100))
    assert any("offset 10 is out of range" in r.message and "30 messages skipped" in r.message
               for r in caplog.records)


def test_a_broker_outage_pauses_reading_and_loses_nothing(mock_kafka, tmp_path):
    mock_kafka.create_topic("outage", 2)
    for p in range(2):
        mock_kafka.produce("outage", [f"a{p}-{i}" for i in range(200)], partition=p)
    store = FileOffsetStore(tmp_path / "offsets")
    spout = KafkaSpout(mock_kafka.bootstrap_servers, "outage", spout_id="o", offsets=store,
                       commit_interval=0.2)
    with support.running(topology(spout, 1), FAST) as cluster:
        cluster.wait_for(lambda: commits(store, "o") == {0: 200, 1: 200}, timeout=30)
        mock_kafka.broker_down(1)
        time.sleep(2)
        mock_kafka.broker_up(1)
        for p in range(2):
            mock_kafka.produce("outage", [f"b{p}-{i}" for i in range(200)], partition=p)
        cluster.wait_for(lambda: commits(store, "o") == {0: 400, 1: 400}, timeout=60)
        expected = Counter(f"{x}{p}-{i}" for x in "ab" for p in range(2) for i in range(200))
        assert seen(cluster) == expected


# ----- the brokers from the topology config

def test_the_brokers_and_consumer_settings_come_from_the_topology_config_at_open(mock_kafka,
                                                                                 tmp_path):
    mock_kafka.create_topic("configured", 1)
    mock_kafka.produce("configured", [f"m{i}" for i in range(20)], partition=0)
    store = FileOffsetStore(tmp_path / "offsets")
    spout = KafkaSpout(topic="configured", spout_id="configured", offsets=store,
                       consumer_config={"fetch.wait.max.ms": 50}, commit_interval=0.2)
    conf = {**FAST, cfg.KAFKA_SPOUT_BOOTSTRAP_SERVERS: mock_kafka.bootstrap_servers,
            cfg.KAFKA_SPOUT_CONSUMER_CONFIG: json.dumps({"fetch.wait.max.ms": 10,
                                                         "client.id": "from-config"})}
    with support.running(topology(spout, spout_tasks=1), conf) as cluster:
        cluster.wait_for(lambda: commits(store, "configured") == {0: 20}, timeout=30)
        assert seen(cluster) == Counter(f"m{i}" for i in range(20))
        [running] = cluster.instances("test", "source")
        # The spout's own settings win over the config's.
        assert running.source.config == {"fetch.wait.max.ms": 50, "client.id": "from-config"}
    # A broker given when built wins over the config's: this one is nowhere.
    built = KafkaSpout(mock_kafka.bootstrap_servers, "configured", spout_id="c", offsets=store)
    spout_harness(built, {cfg.KAFKA_SPOUT_BOOTSTRAP_SERVERS: "127.0.0.1:1"})
    assert built.source.bootstrap_servers == mock_kafka.bootstrap_servers
    built.close()


NO_BROKERS = ("a KafkaSpout with no bootstrap servers: give bootstrap_servers, or set "
              "'kafka.spout.bootstrap.servers' in the topology config")
NO_TOPIC = "a KafkaSpout whose topic comes from topology config 'orders.topic', which is not set"


def test_a_kafka_spout_with_no_brokers_or_topic_anywhere_is_refused_at_submit_naming_itself():
    unconfigured = topology(KafkaSpout(topic_config="orders.topic", spout_id="o"))
    assert unconfigured.config_problems({}) == [f"spout 'source': {NO_BROKERS}",
                                                f"spout 'source': {NO_TOPIC}"]
    with support.LocalCluster() as cluster, pytest.raises(TopologyError, match=NO_TOPIC):
        cluster.submit("orders", {cfg.KAFKA_SPOUT_BOOTSTRAP_SERVERS: "127.0.0.1:1"},
                       unconfigured)
    # Either one given in the config, or when built, is enough; so is a consumer config that
    # parses, and one that does not is refused.
    assert unconfigured.config_problems({cfg.KAFKA_SPOUT_BOOTSTRAP_SERVERS: "127.0.0.1:1",
                                         "orders.topic": "orders"}) == []
    built = topology(KafkaSpout("127.0.0.1:1", "orders", spout_id="o"))
    assert built.config_problems({}) == []
    [wrong] = built.config_problems({cfg.KAFKA_SPOUT_CONSUMER_CONFIG: "{not json"})
    assert "kafka.spout.consumer.config" in wrong


def test_a_kafka_spout_with_no_brokers_anywhere_fails_to_open_naming_itself():
    # Run without a submit's check (a test harness, say), it still says so at open.
    with pytest.raises(ValueError, match=f"spout 'orders': {NO_BROKERS}"):
        spout_harness(KafkaSpout(topic="orders", spout_id="o"), component_id="orders")
    with pytest.raises(ValueError, match=f"spout 'orders': {NO_TOPIC}"):
        spout_harness(KafkaSpout("127.0.0.1:1", topic_config="orders.topic", spout_id="o"),
                      component_id="orders")
    with pytest.raises(ValueError, match="exactly one of topic and topic_config"):
        KafkaSpout("127.0.0.1:1", spout_id="o")


def test_a_consumer_setting_the_spout_cannot_take_is_refused_when_built_brokers_or_not():
    for servers in ("127.0.0.1:1", None):   # brokers given, or from the config at open
        with pytest.raises(ValueError, match="'enable.auto.commit'=True is not supported"):
            KafkaSpout(servers, "orders", spout_id="o",
                       consumer_config={"enable.auto.commit": True})


def test_the_kafka_spout_keys_are_checked_at_submit():
    # A consumer setting the spouts cannot take is refused at submit, not at every task's open.
    [wrong] = cfg.problems({cfg.KAFKA_SPOUT_CONSUMER_CONFIG: '{"auto.offset.reset": "latest"}'})
    assert wrong.startswith("kafka.spout.consumer.config must be") and "auto.offset.reset" in wrong
    assert cfg.problems({cfg.KAFKA_SPOUT_CONSUMER_CONFIG: {"auto.offset.reset": "error",
                                                           "client.id": "c"}}) == []
    # A misspelt key is named, as one under topology. is.
    [unread] = cfg.unread({"kafka.spout.bootstrap.server": "broker:9092"})
    assert "did you mean kafka.spout.bootstrap.servers?" in unread
