"""KafkaBolt against librdkafka's mock broker, with delivery failures injected: every input is
acked once the broker has its record, or failed with the broker's error."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError
from kafka_mock import MockKafkaCluster

from stormlet import Spout, TopologyBuilder
from stormlet.sinks.kafka import FieldNameBasedTupleToKafkaMapper, FieldNameTopicSelector, KafkaBolt
from stormlet.sources.kafka import KafkaSource
from stormlet.sources.source import Record
from stormlet.testing import (
    BoltHarness,
    CompleteTopologyParam,
    MockedSources,
    complete_topology,
    make_tuple,
)

FIELDS = ["key", "message"]
# One record a request: each injected error fails exactly one record.
ONE_AT_A_TIME = {"linger.ms": 0, "max.in.flight.requests.per.connection": 1}


@pytest.fixture
def topic(request, mock_kafka: MockKafkaCluster) -> Iterator[str]:
    name = "bolt-" + request.node.name
    mock_kafka.create_topic(name, partitions=1)
    yield name
    mock_kafka.clear_produce_errors()   # batched records may have left some unmet


def written(mock_kafka: MockKafkaCluster, topic: str) -> list[tuple[bytes | None, bytes]]:
    """Every record in partition 0 of ``topic``, as (key, value)."""
    source = KafkaSource(mock_kafka.bootstrap_servers, topic, timeout=5.0)
    try:
        end = source.latest(0)
        source.assign({0: source.earliest(0)})
        records: list[Record] = []
        deadline = time.monotonic() + 10
        while len(records) < end and time.monotonic() < deadline:
            records += source.fetch(end - len(records), timeout=0.2)
        return [(r.key, r.value) for r in records]
    finally:
        source.close()


def settle(harness: BoltHarness, n: int, timeout: float = 10.0) -> None:
    """Tick the bolt until ``n`` inputs were acked or failed."""
    deadline = time.monotonic() + timeout
    collector = harness.collector
    while len(collector.acked) + len(collector.failed) < n:
        assert time.monotonic() < deadline, f"{len(collector.acked)} acked, " \
                                            f"{len(collector.failed)} failed of {n}"
        harness.tick()
        time.sleep(0.01)


def test_each_input_is_acked_on_delivery_or_failed_with_the_brokers_error(mock_kafka, topic):
    bolt = KafkaBolt(mock_kafka.bootstrap_servers, ONE_AT_A_TIME).with_topic_selector(topic)
    harness = BoltHarness(bolt)
    tuples = [make_tuple([f"k{i}", f"v{i}"], FIELDS) for i in range(6)]
    mock_kafka.fail_produce_requests(KafkaError.MSG_SIZE_TOO_LARGE,
                                     KafkaError.RECORD_LIST_TOO_LARGE)
    for n, tup in enumerate(tuples, start=1):
        harness.execute(tup)
        settle(harness, n)
    collector = harness.collector
    assert [(t, reason.split(":")[0]) for t, reason in collector.failed] == [
        (tuples[0], "kafka MSG_SIZE_TOO_LARGE"), (tuples[1], "kafka RECORD_LIST_TOO_LARGE")]
    assert collector.acked == tuples[2:]
    assert len(collector.errors) == 2 and "MSG_SIZE_TOO_LARGE" in collector.errors[0]
    assert written(mock_kafka, topic) == [(f"k{i}".encode(), f"v{i}".encode())
                                          for i in range(2, 6)]
    harness.cleanup()


def test_fire_and_forget_acks_at_once_even_when_delivery_fails(mock_kafka, topic):
    bolt = (KafkaBolt(mock_kafka.bootstrap_servers, ONE_AT_A_TIME).with_topic_selector(topic)
            .set_fire_and_forget(True))
    harness = BoltHarness(bolt)
    mock_kafka.fail_produce_requests(KafkaError.MSG_SIZE_TOO_LARGE)
    tuples = [make_tuple([None, f"v{i}"], FIELDS) for i in range(3)]
    for tup in tuples:
        harness.execute(tup)
        assert harness.collector.acked[-1] is tup   # before any delivery
    harness.cleanup()   # waits for the records in flight
    assert harness.collector.failed == []
    # The failed request held the first record, maybe more (queued together): lost, and the
    # spout never hears of it.
    assert len(written(mock_kafka, topic)) < 3


def test_selector_without_topic_skips_and_bad_values_fail(mock_kafka, topic):
    class NoneForSkip:
        def get_topic(self, tup):
            return None if tup["message"] == "skip" else topic

    bolt = (KafkaBolt(mock_kafka.bootstrap_servers).with_topic_selector(NoneForSkip())
            .with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("id", "message")))
    harness = BoltHarness(bolt)
    skip = make_tuple(["skip"], ["message"])        # no "id" field: key None
    bad = make_tuple(["k", 2.5], ["id", "message"])   # a float value: not a record
    good = make_tuple(["a", "b"], ["id", "message"])
    for tup in (skip, bad, good):
        harness.execute(tup)
    settle(harness, 3)
    assert harness.collector.acked == [skip, good]
    (failed, reason), = harness.collector.failed
    assert failed is bad and reason.startswith("kafka: TypeError: the record's value must be")
    assert written(mock_kafka, topic) == [(b"a", b"b")]
    assert FieldNameTopicSelector("t", "other").get_topic(good) == "other"
    copy = pickle.loads(pickle.dumps(KafkaBolt("h:1").with_topic_selector("t")))   # to workers
    assert copy.topic_selector.get_topic(good) == "t"


class Words(Spout):
    outputs = ["topic", "message"]


def test_in_a_topology_every_input_is_acked_or_failed_as_delivered(mock_kafka, topic):
    """Asynchronous sends, records batched as librdkafka likes: whatever fails, the spout hears
    of exactly the records that are not in the topic."""
    n = 40
    builder = TopologyBuilder()
    builder.set_spout("words", Words())
    builder.set_bolt("kafka", KafkaBolt(mock_kafka.bootstrap_servers, {"linger.ms": 1})
                     .with_topic_selector(FieldNameTopicSelector("topic", "unused")),
                     parallelism=2).shuffle_grouping("words")
    sources = MockedSources().add_mock_data("words", *([topic, f"w{i}"] for i in range(n)))
    mock_kafka.fail_produce_requests(*[KafkaError.MSG_SIZE_TOO_LARGE] * 3)
    result = complete_topology(builder.build(), CompleteTopologyParam(sources, timeout_secs=30))
    acked = set(result.acked.get("words", []))
    failed = {index: reason for index, reason in result.failed.get("words", [])}
    assert acked | set(failed) == set(range(n)) and not acked & set(failed)
    assert 1 <= len(failed) and all("MSG_SIZE_TOO_LARGE" in r.message for r in failed.values())
    assert sorted(v for _k, v in written(mock_kafka, topic)) == sorted(
        f"w{i}".encode() for i in acked)


def test_synchronous_mode_settles_each_input_before_the_next(mock_kafka, topic):
    bolt = (KafkaBolt(mock_kafka.bootstrap_servers).with_topic_selector(topic)
            .set_async(False))
    harness = BoltHarness(bolt)
    mock_kafka.fail_produce_requests(KafkaError.MSG_SIZE_TOO_LARGE)
    first, second = make_tuple([None, "a"], FIELDS), make_tuple([None, "b"], FIELDS)
    harness.execute(first)    # no tick needed: execute waits for the delivery
    assert [t for t, _reason in harness.collector.failed] == [first]
    harness.execute(second)
    assert harness.collector.acked == [second]
    assert written(mock_kafka, topic) == [(None, b"b")]
