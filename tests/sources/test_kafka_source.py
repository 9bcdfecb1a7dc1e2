"""KafkaSource and produce() against librdkafka's mock cluster, over TCP (see kafka_mock.py)."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import pytest
from kafka_mock import MockKafkaCluster
from support import SteppedClock
from zookeeper_server import free_port

from stormlet.sources import kafka as kafka_module
from stormlet.sources.kafka import KafkaSource, produce
from stormlet.sources.source import OffsetOutOfRange, Record, SourceError

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def topic(request) -> str:
    # One topic per test, so tests sharing the module's cluster do not see each other's data.
    return "t-" + request.node.name.replace("[", "-").replace("]", "")


@pytest.fixture
def source(mock_kafka: MockKafkaCluster, topic: str):
    src = KafkaSource(mock_kafka.bootstrap_servers, topic, timeout=5.0)
    yield src
    src.close()


def read(source: KafkaSource, n: int, timeout: float = 10.0) -> list[Record]:
    """Fetch until ``n`` records arrived (or ``timeout``); never more than ``n``."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(records) < n and time.monotonic() < deadline:
        records += source.fetch(n - len(records), timeout=0.2)
    return records


def by_partition(records: list[Record]) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        out[r.partition].append(r)
    return out


def values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_partitions_and_watermarks(mock_kafka, topic, source):
    mock_kafka.create_topic(topic, 3)
    mock_kafka.produce(topic, values(5), partition=1)
    assert source.name == topic
    assert source.partitions() == [0, 1, 2]
    assert (source.earliest(1), source.latest(1)) == (0, 5)
    assert (source.earliest(0), source.latest(0)) == (0, 0)


def test_fetch_returns_each_partition_in_offset_order_with_keys_and_values(
        mock_kafka, topic, source):
    mock_kafka.create_topic(topic, 4)
    before = time.time()
    written = produce(mock_kafka.bootstrap_servers, topic,
                      [(f"k{i}".encode(), f"p{p}-{i}".encode(), p)
                       for i in range(50) for p in range(4)])
    assert written == 200
    source.assign({p: 0 for p in range(4)})
    records = read(source, 200)
    assert len(records) == 200
    assert source.fetch(10, timeout=0.3) == []
    for p, recs in by_partition(records).items():
        assert [r.offset for r in recs] == list(range(50))
        assert [r.value for r in recs] == [f"p{p}-{i}".encode() for i in range(50)]
        assert [r.key for r in recs] == [f"k{i}".encode() for i in range(50)]
        assert all(before - 1 <= r.timestamp <= time.time() + 1 for r in recs)


def test_assign_starts_at_the_given_offsets_and_drops_partitions_left_out(
        mock_kafka, topic, source):
    mock_kafka.create_topic(topic, 2)
    for p in range(2):
        mock_kafka.produce(topic, values(20, f"p{p}-"), partition=p)
    source.assign({0: 7, 1: 15})
    got = by_partition(read(source, 13 + 5))
    assert (source.position(0), source.position(1)) == (20, 20)
    assert [r.offset for r in got[0]] == list(range(7, 20))
    assert [r.offset for r in got[1]] == list(range(15, 20))
    assert got[0][0].value == b"p0-7"

    source.assign({1: 3})
    records = read(source, 17)
    assert [(r.partition, r.offset) for r in records] == [(1, o) for o in range(3, 20)]
    assert source.fetch(10, timeout=0.3) == []


def test_seek_before_and_after_fetching(mock_kafka, topic, source):
    mock_kafka.create_topic(topic, 1)
    mock_kafka.produce(topic, values(30), partition=0)
    source.assign({0: 0})
    source.seek(0, 10)  # assigned, nothing fetched yet
    assert [r.offset for r in read(source, 5)] == [10, 11, 12, 13, 14]
    source.seek(0, 2)  # backwards, past records librdkafka already buffered
    assert [r.value for r in read(source, 3)] == [b"v2", b"v3", b"v4"]
    source.seek(0, 25)  # forwards
    assert [r.offset for r in read(source, 5)] == [25, 26, 27, 28, 29]
    with pytest.raises(SourceError, match=r"cannot seek partitions \[3\]: they are not assigned"):
        source.seek(3, 0)
    with pytest.raises(SourceError, match="offset must be an int >= 0"):
        source.seek(0, -2)


class CountingConsumer:
    """A consumer that counts the watermark requests that go to the broker."""

    def __init__(self, consumer):
        self.consumer = consumer
        self.watermark_requests = 0

    def get_watermark_offsets(self, partition, timeout=None, cached=False):
        if not cached:
            self.watermark_requests += 1
        more = {} if timeout is None else {"timeout": timeout}
        return self.consumer.get_watermark_offsets(partition, cached=cached, **more)

    def __getattr__(self, name):
        return getattr(self.consumer, name)


def test_lag_ends_of_partitions_being_read_come_from_their_fetches(mock_kafka, topic,
                                                                   monkeypatch):
    source = KafkaSource(mock_kafka.bootstrap_servers, topic, timeout=5.0, watermark_ttl=0.0,
                         lag_refresh=3.0)
    mock_kafka.create_topic(topic, 2)
    for p in range(2):
        mock_kafka.produce(topic, values(50, f"p{p}-"), partition=p)
    counting = source._consumer = CountingConsumer(source._client())
    try:
        assert source.lag_end(0) == 50          # nothing fetched yet: asked of the broker
        assert counting.watermark_requests == 1
        source.assign({0: 0, 1: 0})
        assert len(read(source, 100)) == 100
        mock_kafka.produce(topic, values(7, "late-"), partition=0)
        assert len(read(source, 7)) == 7
        asked = counting.watermark_requests
        # Being read, their fetches carry their ends: no request, and the newest end.
        assert (source.lag_end(0), source.lag_end(1)) == (57, 50)
        assert counting.watermark_requests == asked
        # Where reading starts is always asked of the broker.
        assert (source.earliest(0), source.latest(0)) == (0, 57)
        assert counting.watermark_requests == asked + 2
        # Paused, a partition is not fetched: its end is asked of the broker once the last
        # one is lag_refresh old (on a clock the test moves).
        clock = SteppedClock()
        monkeypatch.setattr(kafka_module, "time", clock)
        source.pause([0])
        mock_kafka.produce(topic, values(3, "paused-"), partition=0)
        assert source.lag_end(0) == 57
        clock.now += 1.0
        assert source.lag_end(0) == 57
        assert counting.watermark_requests == asked + 2
        clock.now += 2.0
        assert source.lag_end(0) == 60
        assert counting.watermark_requests == asked + 3
    finally:
        source.close()


def test_pause_holds_back_a_partition_and_resume_continues_where_it_stopped(
        mock_kafka, topic, source):
    mock_kafka.create_topic(topic, 2)
    for p in range(2):
        mock_kafka.produce(topic, values(100, f"p{p}-"), partition=p)
    source.assign({0: 0, 1: 0})
    first = read(source, 20)  # librdkafka has buffered more of both partitions by now
    source.pause([0])
    while_paused = read(source, 1000, timeout=1.5)
    assert {r.partition for r in while_paused} == {1}
    source.resume([0])
    rest = read(source, 200 - len(first) - len(while_paused))
    got = by_partition(first + while_paused + rest)
    assert [r.offset for r in got[0]] == list(range(100))
    assert [r.offset for r in got[1]] == list(range(100))
    assert source.fetch(10, timeout=0.3) == []
    with pytest.raises(SourceError, match=r"cannot pause partitions \[5\]"):
        source.pause([5])


def test_out_of_range_after_delete_records_then_seek_to_earliest(mock_kafka, topic, source):
    mock_kafka.create_topic(topic, 2)
    mock_kafka.produce(topic, values(100), partition=0)
    mock_kafka.delete_records(topic, 0, before_offset=60)

    source.assign({0: 10, 1: 0})
    with pytest.raises(OffsetOutOfRange) as caught:
        read(source, 1000)
    e = caught.value
    assert (e.partition, e.requested, e.earliest, e.latest) == (0, 10, 60, 100)
    assert "offset 10 is out of range" in str(e)
    # The partition stays where it was: fetching again reports it again rather than skipping.
    with pytest.raises(OffsetOutOfRange):
        source.fetch(10, timeout=0.2)
    # Paused, it no longer blocks the other partitions.
    source.pause([0])
    mock_kafka.produce(topic, values(10, "p1-"), partition=1)
    p1 = read(source, 10)
    assert [(r.partition, r.offset) for r in p1] == [(1, o) for o in range(10)]

    source.seek(0, source.earliest(0))  # a partition librdkafka stopped fetching
    source.resume([0])
    p0 = read(source, 40)
    assert [(r.partition, r.offset) for r in p0] == [(0, o) for o in range(60, 100)]
    assert p0[0].value == b"v60"

    # The same from a seek below the new start, after fetching.
    source.seek(0, 5)
    with pytest.raises(OffsetOutOfRange) as caught:
        read(source, 1000)
    assert (caught.value.requested, caught.value.earliest) == (5, 60)
    source.seek(0, 90)
    assert [r.offset for r in read(source, 10)] == list(range(90, 100))


def test_records_fetched_together_with_an_out_of_range_error_are_not_lost(
        mock_kafka, topic, source):
    mock_kafka.create_topic(topic, 2)
    mock_kafka.produce(topic, values(20), partition=0)
    mock_kafka.produce(topic, values(10, "p1-"), partition=1)
    mock_kafka.delete_records(topic, 0, before_offset=15)
    # One Fetch answers both: partition 1's records, partition 0's error.
    source.assign({0: 0, 1: 0})
    records, errors = [], []
    deadline = time.monotonic() + 10
    while (len(records) < 10 or not errors) and time.monotonic() < deadline:
        try:
            records += source.fetch(1000, timeout=0.2)
        except OffsetOutOfRange as e:
            errors.append(e)
            source.pause([0])
    assert [(e.partition, e.requested, e.earliest, e.latest) for e in errors] == [(0, 0, 15, 20)]
    assert [(r.partition, r.offset) for r in records] == [(1, o) for o in range(10)]


def test_unknown_topic_is_a_quick_source_error(mock_kafka):
    src = KafkaSource(mock_kafka.bootstrap_servers, "no-such-topic", timeout=2.0)
    start = time.monotonic()
    with pytest.raises(SourceError, match="topic 'no-such-topic'.*create it or fix the topic name"):
        src.partitions()
    assert time.monotonic() - start < 5
    src.close()


@pytest.mark.slow   # waits out two 2 s connection timeouts
def test_unreachable_bootstrap_is_a_quick_source_error():
    servers = f"127.0.0.1:{free_port()}"   # a port nothing listens on
    src = KafkaSource(servers, "events", timeout=2.0)
    for call in (src.partitions, lambda: src.latest(0)):
        start = time.monotonic()
        with pytest.raises(SourceError,
                           match=f"Kafka at {servers}: cannot read the .* of topic 'events'"):
            call()
        assert time.monotonic() - start < 5
    src.close()


def test_source_survives_a_broker_outage(mock_kafka, topic, source):
    mock_kafka.create_topic(topic, 1)
    mock_kafka.produce(topic, values(10), partition=0)
    source.assign({0: 0})
    got = read(source, 10)
    mock_kafka.broker_down(1)
    try:
        assert source.fetch(10, timeout=1.0) == []  # no error: librdkafka keeps reconnecting
    finally:
        mock_kafka.broker_up(1)
    mock_kafka.produce(topic, values(20)[10:], partition=0)
    got += read(source, 10, timeout=20)
    assert [r.offset for r in got] == list(range(20))


def test_deep_copies_and_pickles_cleanly_before_and_after_use(mock_kafka, topic):
    mock_kafka.create_topic(topic, 1)
    mock_kafka.produce(topic, values(5), partition=0)
    # A setting librdkafka rejects shows when the consumer is made: not at construction or copy.
    bad = KafkaSource(mock_kafka.bootstrap_servers, topic, {"fetch.wait.max.ms": "soon"})
    bad_copy = copy.deepcopy(bad)
    with pytest.raises(SourceError, match="cannot create a Kafka consumer"):
        bad_copy.partitions()

    original = KafkaSource(mock_kafka.bootstrap_servers, topic, timeout=5.0)
    for clone in (copy.deepcopy(original), pickle.loads(pickle.dumps(original))):
        clone.assign({0: 1})
        assert [r.value for r in read(clone, 4)] == [b"v1", b"v2", b"v3", b"v4"]
        clone.close()

    original.assign({0: 3})
    assert [r.offset for r in read(original, 2)] == [3, 4]
    used_copy = copy.deepcopy(original)  # a fresh source: same settings, no assignment
    assert used_copy.fetch(10, timeout=0.3) == []
    used_copy.assign({0: 0})
    assert [r.offset for r in read(used_copy, 5)] == [0, 1, 2, 3, 4]
    used_copy.close()
    original.close()


def test_config_that_would_break_the_source_is_refused(mock_kafka):
    with pytest.raises(ValueError, match="'auto.offset.reset'='earliest' is not supported"):
        KafkaSource(mock_kafka.bootstrap_servers, "t", {"auto.offset.reset": "earliest"})


def test_produce_to_an_unreachable_broker_fails_within_its_timeout():
    start = time.monotonic()
    with pytest.raises(SourceError, match="2 of 2 messages to topic 'events' were not written"):
        produce("127.0.0.1:1", "events", [(None, b"a"), (None, b"b")], timeout=1.0)
    assert time.monotonic() - start < 5


def test_a_consumer_in_another_process_reads_the_mock_cluster(mock_kafka, topic):
    mock_kafka.create_topic(topic, 2)
    for p in range(2):
        mock_kafka.produce(topic, values(25, f"p{p}-"), partition=p, key=b"k")
    code = textwrap.dedent(f"""
        import json, sys, time
        from stormlet.sources.kafka import KafkaSource
        src = KafkaSource({mock_kafka.bootstrap_servers!r}, {topic!r}, timeout=5.0)
        src.assign({{p: 0 for p in src.partitions()}})
        out, deadline = [], time.monotonic() + 20
        while len(out) < 50 and time.monotonic() < deadline:
            out += [[r.partition, r.offset, r.key.decode(), r.value.decode()]
                    for r in src.fetch(50 - len(out), timeout=0.2)]
        src.close()
        json.dump(out, sys.stdout)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = sorted(tuple(r) for r in json.loads(proc.stdout))
    assert got == sorted((p, i, "k", f"p{p}-{i}") for p in range(2) for i in range(25))


def test_an_error_of_no_partition_is_logged_not_lost(caplog):
    # librdkafka's client-wide errors (all brokers down, transport) come from consume() as
    # messages whose partition() is None; the warning formatted it with %d and was lost.
    from confluent_kafka import KafkaError

    source = KafkaSource("127.0.0.1:1", "t")
    with caplog.at_level("WARNING", logger="stormlet.sources.kafka"):
        source._on_error(None, KafkaError(KafkaError._ALL_BROKERS_DOWN))
    [record] = caplog.records
    assert "partition None" in record.getMessage()
