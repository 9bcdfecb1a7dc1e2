"""The sinks of effectively-once (stormlet/sinks/checkpointed.py, kafka.py, upsert.py): what
a topology writes outside is exactly once for readers of committed data.

A stateful word count over the partitioned log, in a LocalCluster with failures injected (a
bolt that raises upstream, the sink raising, a commit failing or its answer lost), writes each
running count to a sink; the sink's committed records must equal a failure-free run's exactly.
Then a sink task restarted between a decided checkpoint and its publish, a zombie fenced, and
the refusals at submit of sinks that cannot take part."""

from __future__ import annotations

from collections import Counter

import pytest
from fake_kafka_txn import BROKERS, FakeKafka, FakeProducer, on_fake
from redis_server import redis_server  # noqa: F401
from support import InjectedFault, exactly_conf, running, wait_until

from stormlet import Bolt, TopologyBuilder
from stormlet import config as cfg
from stormlet.errors import TopologyError
from stormlet.sinks.base import Sink
from stormlet.sinks.kafka import (
    FieldNameBasedTupleToKafkaMapper,
    KafkaBolt,
    TransactionalKafkaBolt,
)
from stormlet.sinks.redis import (
    FieldsStoreMapper,
    RedisDataType,
    RedisDataTypeDescription,
    RedisStoreBolt,
)
from stormlet.sinks.upsert import EmbeddedUpsertBolt, RedisUpsertBolt, read_table
from stormlet.sources import LogSpout
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.state import KeyValueState, StatefulBolt
from stormlet.state.embedded import state_file
from stormlet.state.store import MemoryStore
from stormlet.testing import BoltHarness, make_tuple

SENTENCES = [f"w{i % 7} w{i % 3} common" for i in range(200)]
FAULT = InjectedFault()


def totals() -> dict[str, int]:
    return dict(Counter(word for s in SENTENCES for word in s.split()))


def running_counts() -> Counter:
    """What a failure-free run's sink gets: each word's every running count, once."""
    return Counter((w, str(n)) for w, total in totals().items() for n in range(1, total + 1))



class Split(Bolt):
    outputs = ["word"]

    def execute(self, tup):
        for word in tup["value"].split():
            self.collector.emit([word], anchors=[tup])
        if tup["value"] == SENTENCES[120] and FAULT.fire("split raises"):
            raise RuntimeError("injected in split")
        self.collector.ack(tup)


class Count(StatefulBolt):
    outputs = ["word", "n"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        n = self.state.get(tup["word"], 0) + 1
        self.state.put(tup["word"], n)
        self.collector.emit([tup["word"], str(n)], anchors=[tup])
        self.collector.ack(tup)


def faulty(sink_class):
    """``sink_class`` with the sink's own faults: raising on an input, failing a commit."""
    class Faulty(sink_class):
        def execute(self, tup):
            if tup["word"] == "common" and tup["n"] == "150" and FAULT.fire("sink raises"):
                raise RuntimeError("injected in the sink")
            super().execute(tup)

        def publish(self, txid, writes, ahead):
            if ahead and writes and FAULT.fire("publish fails"):
                raise RuntimeError("injected: the sink's commit failed")
            super().publish(txid, writes, ahead)
    Faulty.__name__ = sink_class.__name__
    return Faulty


def word_count(log_path, sink):
    builder = TopologyBuilder()
    builder.set_spout("sentences", LogSpout(str(log_path), spout_id="s", commit_interval=0.05),
                      parallelism=2)
    builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
    builder.set_bolt("sink", sink, parallelism=2).fields_grouping("count", ["word"])
    return builder.build()



def sentence_log(tmp_path):
    path = tmp_path / "log"
    log = PartitionedLog.create(path, 2)
    log.append_many(SENTENCES)
    log.flush()
    log.close()
    return path


def run_until(tmp_path, sink, fault, done, what):
    FAULT.arm(fault)
    with running(word_count(sentence_log(tmp_path), sink), exactly_conf(tmp_path)):
        wait_until(done, 60, f"{what} after {fault}")
    if fault in ("split raises", "sink raises", "publish fails"):
        assert FAULT.fired(fault), f"{fault} never fired"


FAULT_NAMES = ["none", "split raises", "sink raises", "publish fails"]


# ----- the embedded store and Redis: the committed table equals the final totals, never more

@pytest.mark.parametrize("fault", FAULT_NAMES)
def test_the_embedded_upsert_table_is_exact_after_failures(tmp_path, fault):
    sink = faulty(EmbeddedUpsertBolt)("totals", key_fields=["word"], value_field="n")
    expected = {w: str(n) for w, n in totals().items()}
    too_many = []

    def done():
        path = state_file(tmp_path / "state", "test")
        table = read_table(path, "totals") if path.exists() else {}
        too_many.extend(w for w, n in table.items() if int(n) > int(expected[w]))
        return table == expected
    run_until(tmp_path, sink, fault, done, "the table holding every total")
    assert too_many == []


@pytest.mark.parametrize("fault", ["none", "sink raises", "publish fails"])
def test_the_redis_upsert_hash_is_exact_after_failures(tmp_path, fault, redis_server):
    client = redis_server.client()
    client.flushall()
    sink = faulty(RedisUpsertBolt)(redis_server.provider_config, "totals", ["word"], "n")
    expected = {w.encode(): str(n).encode() for w, n in totals().items()}
    too_many = []

    def done():
        table = client.hgetall("totals")
        too_many.extend(w for w, n in table.items() if int(n) > int(expected[w]))
        return table == expected
    run_until(tmp_path, sink, fault, done, "the hash holding every total")
    assert too_many == []
    marks = client.hgetall("totals:stormlet-marks")   # each sink task's last published txid
    assert len(marks) == 2 and all(k.startswith(b"test.sink.") and int(v) > 0
                                   for k, v in marks.items()), marks


# ----- Kafka: the committed records equal a failure-free run's, with no record twice

def kafka_sink(name, sink_class=TransactionalKafkaBolt):
    BROKERS[name] = FakeKafka()
    bolt = sink_class("fake:9092").with_topic_selector("counts").with_tuple_to_kafka_mapper(
        FieldNameBasedTupleToKafkaMapper("word", "n"))
    return on_fake(bolt, name)


@pytest.mark.parametrize("fault", [*FAULT_NAMES, "commit answer lost", "commit fails"])
def test_the_kafka_transactions_commit_each_record_once_after_failures(tmp_path, fault):
    sink = kafka_sink(fault, faulty(TransactionalKafkaBolt))
    broker = BROKERS[fault]
    broker.lose_next_commit_answer = fault == "commit answer lost"
    broker.fail_next_commit = fault == "commit fails"
    expected = running_counts()
    twice = []

    def done():
        with broker.lock:
            got = Counter((k, v) for _, k, v in broker.committed)
        twice.extend(r for r, n in got.items() if n > 1)
        return got == expected
    run_until(tmp_path, sink, fault, done, "every running count committed once")
    assert twice == []
    if fault.startswith("commit"):   # fired by the broker
        assert not broker.lose_next_commit_answer and not broker.fail_next_commit
    if fault in ("split raises", "sink raises"):
        assert broker.aborts >= 1   # the open transaction of the rolled-back epoch


# ----- a sink task restarted between a decided checkpoint and its publish; a zombie

def kafka_harness(name, state):
    bolt = kafka_sink(name) if name not in BROKERS else on_fake(
        TransactionalKafkaBolt("fake:9092").with_topic_selector("counts")
        .with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("word", "n")), name)
    # memory: the sink's record of its tasks (kafka.py's TASKS_KEY) goes nowhere on disk.
    harness = BoltHarness(bolt, {cfg.TOPOLOGY_STATE_PROVIDER: "memory"}, component_id="sink")
    bolt.init_state(state)
    return harness, bolt


def test_a_restarted_kafka_sink_publishes_the_decided_checkpoint_once_and_fences_its_zombie():
    BROKERS.pop("restart", None)
    state = KeyValueState(MemoryStore())
    harness, first = kafka_harness("restart", state)
    broker = BROKERS["restart"]
    for n in ("1", "2"):
        harness.execute(make_tuple(["a", n], fields=["word", "n"]))
    first.pre_prepare(1)
    state.prepare_commit(1)
    state.commit(1)   # the checkpoint is decided and committed; the sink died before publishing
    assert broker.committed == []
    _, second = kafka_harness("restart", state)   # init_state: fences the first, publishes 1
    assert broker.committed == [("counts", "a", "1"), ("counts", "a", "2")]
    fenced = broker.fenced
    first.pre_commit(1)                             # the zombie's late COMMIT: fenced, and
    assert broker.fenced > fenced                   # the mark keeps its publish out
    assert broker.committed == [("counts", "a", "1"), ("counts", "a", "2")]
    _, third = kafka_harness("restart", state)     # restarted again: 1 is out already
    assert broker.committed == [("counts", "a", "1"), ("counts", "a", "2")]
    assert broker.commits == 1


@pytest.mark.parametrize("late", [False, True], ids=["reported-in-abort", "reported-later"])
def test_an_aborted_transactions_purged_records_do_not_fail_the_next_prepare(late):
    """The abort purges the rolled-back checkpoint's records, whose delivery reports say
    _PURGE_QUEUE (from the abort itself, or a later poll): none counts against the next one."""
    name = f"purge-{late}"
    BROKERS.pop(name, None)
    BROKERS[name] = FakeKafka()
    broker = BROKERS[name]
    broker.purge_reports_late = late
    harness, sink = kafka_harness(name, KeyValueState(MemoryStore()))
    harness.execute(make_tuple(["a", "1"], fields=["word", "n"]))
    sink.pre_rollback()                       # checkpoint 1 rolled back: its record purged
    assert broker.aborts == 1
    harness.execute(make_tuple(["a", "1"], fields=["word", "n"]))   # replayed
    sink.pre_prepare(1)                       # raised "_PURGE_QUEUE" before
    sink.pre_commit(1)
    assert broker.committed == [("counts", "a", "1")]


def test_a_restarted_upsert_sink_publishes_again_only_what_is_not_out(tmp_path):
    path = tmp_path / "t.sqlite3"
    state = KeyValueState(MemoryStore())
    sink = EmbeddedUpsertBolt("t", ["word"], "n", path=path)
    harness = BoltHarness(sink, {cfg.TOPOLOGY_STATE_PROVIDER: "memory"}, component_id="sink")
    sink.init_state(state)
    harness.execute(make_tuple(["a", 1], fields=["word", "n"]))
    harness.execute(make_tuple(["a", 2], fields=["word", "n"]))
    sink.pre_prepare(1)
    state.prepare_commit(1)
    state.commit(1)
    assert read_table(path, "t") == {}
    again = EmbeddedUpsertBolt("t", ["word"], "n", path=path)
    BoltHarness(again, {cfg.TOPOLOGY_STATE_PROVIDER: "memory"}, component_id="sink")
    again.init_state(state)
    assert read_table(path, "t") == {"a": 2}
    # A later checkpoint, then a zombie's late publish of 1: the mark keeps it out.
    again.store.publish(again.writer, 2, [(b"\xa1a", b"\x03")])
    sink.pre_commit(1)
    assert read_table(path, "t") == {"a": 3}



def test_a_late_redis_publish_of_an_older_checkpoint_writes_nothing(redis_server):
    client = redis_server.client()
    client.flushall()
    sink = RedisUpsertBolt(redis_server.provider_config, "late", ["word"], "n")
    BoltHarness(sink, {cfg.TOPOLOGY_STATE_PROVIDER: "memory"}, component_id="sink")
    sink.init_state(KeyValueState(MemoryStore()))
    sink.publish(2, [["a", "2"]], ahead=True)
    sink.publish(1, [["a", "1"], ["b", "1"]], ahead=True)   # a zombie's, or a COMMIT again
    sink.publish(2, [["a", "1"]], ahead=True)
    assert client.hgetall("late") == {b"a": b"2"}
    assert client.hgetall("late:stormlet-marks") == {sink.writer.encode(): b"2"}
    sink.cleanup()

# ----- refusals at submit

class UserSink(Bolt, Sink):
    why_not = "it appends to a file as inputs come"

    def execute(self, tup):
        pass


class ClaimsToTakePart(Bolt, Sink):
    takes_part = True

    def execute(self, tup):
        pass


def test_sinks_that_cannot_take_part_are_refused_at_submit_naming_them(tmp_path):
    log_path = sentence_log(tmp_path)
    conf = exactly_conf(tmp_path)
    redis = {"host": "127.0.0.1", "port": 1}
    refused = {
        "KafkaBolt": KafkaBolt("fake:9092").with_topic_selector("counts"),
        "RedisStoreBolt": RedisStoreBolt(redis, FieldsStoreMapper(
            RedisDataTypeDescription(RedisDataType.HASH, "totals"), "word", "n")),
        "UserSink": UserSink(),
    }
    for kind, sink in refused.items():
        problems = word_count(log_path, sink).config_problems(conf)
        assert any(f"sink 'sink' ({kind}) cannot take part" in p for p in problems), problems
    problems = word_count(log_path, ClaimsToTakePart()).config_problems(conf)
    assert any("'sink' (ClaimsToTakePart) says it takes part" in p and "not a StatefulBolt" in p
               for p in problems), problems
    taking_part = [TransactionalKafkaBolt("fake:9092").with_topic_selector("counts"),
                   RedisUpsertBolt(redis, "totals", ["word"], "n"),
                   EmbeddedUpsertBolt("totals", ["word"], "n")]
    for sink in taking_part:
        assert word_count(log_path, sink).config_problems(conf) == []
    for sink in refused.values():   # at least once (the default) takes them, as before
        assert word_count(log_path, sink).config_problems({}) == []
    from stormlet import LocalCluster
    with LocalCluster() as cluster, pytest.raises(TopologyError, match="KafkaBolt"):
        cluster.submit("t", conf, word_count(log_path, refused["KafkaBolt"]))


def test_the_fake_fences_as_kafka_does():
    broker = FakeKafka()
    first = FakeProducer(broker, {"transactional.id": "x"})
    first.init_transactions(1)
    first.begin_transaction()
    first.produce("t", b"v")
    FakeProducer(broker, {"transactional.id": "x"}).init_transactions(1)
    with pytest.raises(Exception, match="fenced"):
        first.commit_transaction(1)
    assert broker.committed == []


def test_the_real_client_runs_the_transactions_on_librdkafkas_mock_broker(tmp_path, mock_kafka):
    """The calls the sink makes, through confluent-kafka, against a Kafka-protocol broker
    (failure-free: the mock keeps no transaction semantics to test failures against)."""
    from confluent_kafka import Consumer, TopicPartition

    mock_kafka.create_topic("sink-counts", partitions=1)
    sink = TransactionalKafkaBolt(mock_kafka.bootstrap_servers).with_topic_selector(
        "sink-counts").with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("word", "n"))
    expected = running_counts()
    consumer = Consumer({"bootstrap.servers": mock_kafka.bootstrap_servers, "group.id": "read",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("sink-counts", 0, 0)])
    got: Counter = Counter()

    def done():
        while (message := consumer.poll(0.05)) is not None:
            assert message.error() is None, message.error()
            got[(message.key().decode(), message.value().decode())] += 1
        return sum(got.values()) >= sum(expected.values())
    try:
        run_until(tmp_path, sink, "none", done, "every running count in the topic")
        done()   # and nothing more
    finally:
        consumer.close()
    assert got == expected
