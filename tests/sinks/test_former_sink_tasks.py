"""A checkpointed sink resubmitted with fewer tasks (stormlet/sinks/checkpointed.py): what a task
of the earlier run staged for a decided checkpoint, and never published because the run stopped
before its COMMIT, is published by the new run's lowest task as that task, once; what it
prepared for a checkpoint never decided is not. On the Kafka sink (the fake broker that keeps
Kafka's transactions, tests/fake_kafka_txn.py), the embedded upsert table and the Redis upsert
hash (with the state in Redis too) alike."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from fake_kafka_txn import BROKERS, FakeKafka, on_fake
from redis_server import redis_server  # noqa: F401 (a fixture)

from stormlet import config as cfg
from stormlet.sinks.checkpointed import LEGACY_TASKS_KEY, TASKS_KEY, CheckpointedSink
from stormlet.sinks.kafka import FieldNameBasedTupleToKafkaMapper, TransactionalKafkaBolt
from stormlet.sinks.upsert import EmbeddedUpsertBolt, RedisUpsertBolt, read_table
from stormlet.state import KeyValueState, StateError
from stormlet.state.providers import namespace, open_state
from stormlet.testing import MockOutputCollector, make_tuple, mock_context

_brokers = itertools.count()


class KafkaSide:
    """The Kafka sink and what read_committed readers see of it."""

    def __init__(self, request, tmp_path):
        self.name = f"former-{next(_brokers)}"
        BROKERS[self.name] = self.broker = FakeKafka()
        self.conf = {cfg.TOPOLOGY_STATE_PROVIDER: "embedded",
                     cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: {"dir": str(tmp_path / "state")}}

    def sink(self) -> CheckpointedSink:
        return on_fake(TransactionalKafkaBolt("fake:9092").with_topic_selector("counts")
                       .with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("word", "n")),
                       self.name)

    def published(self) -> list[tuple[str, Any]]:
        return sorted((key, value) for _topic, key, value in self.broker.committed)


class TableSide(KafkaSide):
    """The embedded upsert sink and its table."""

    def __init__(self, request, tmp_path):
        super().__init__(request, tmp_path)
        self.path = tmp_path / "table.sqlite3"

    def sink(self) -> CheckpointedSink:
        return EmbeddedUpsertBolt("t", ["word"], "n", path=self.path)

    def published(self) -> list[tuple[str, Any]]:
        return sorted(read_table(self.path, "t").items())


class RedisSide:
    """The Redis upsert sink and its hash, the sink's state in Redis too."""

    def __init__(self, request, tmp_path):
        server = request.getfixturevalue("redis_server")
        self.client = server.client()
        self.client.flushall()
        self.config = server.provider_config
        self.conf = {cfg.TOPOLOGY_STATE_PROVIDER: "redis",
                     cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: self.config}

    def sink(self) -> CheckpointedSink:
        return RedisUpsertBolt(self.config, "totals", ["word"], "n")

    def published(self) -> list[tuple[str, Any]]:
        return sorted((k.decode(), v.decode()) for k, v in self.client.hgetall("totals").items())


class Task:
    """A task of component ``sink`` with its own state, driven through the checkpoint actions
    as ``StatefulBoltRunner`` drives them."""

    def __init__(self, side, conf: dict, task: int, tasks: list[int]):
        self.bolt = side.sink()
        context = mock_context("sink", task_id=task, conf=conf)
        context._layout.component_tasks["sink"] = list(tasks)
        self.bolt.prepare(conf, context, MockOutputCollector())
        self.state: KeyValueState = open_state(conf, "test", namespace("test", "sink", task))

    def init(self, txid: int) -> Task:
        self.bolt.pre_init_state(txid)
        self.bolt.init_state(self.state)
        return self

    def write(self, word: str, n: str) -> None:
        self.bolt.execute(make_tuple([word, n], fields=["word", "n"]))

    def prepare(self, txid: int) -> None:
        self.bolt.pre_prepare(txid)
        self.state.prepare_commit(txid)

    def commit(self, txid: int) -> None:
        self.bolt.pre_commit(txid)
        self.state.commit(txid)

    def stop(self) -> None:
        self.bolt.cleanup()


@pytest.fixture(params=[KafkaSide, TableSide, RedisSide],
                ids=["kafka", "embedded-upsert", "redis-upsert"])
def side(request, tmp_path):
    return request.param(request, tmp_path)


def test_a_decided_checkpoint_staged_by_a_task_the_next_run_lacks_is_published_once(side):
    conf = side.conf
    first = {task: Task(side, conf, task, [1, 2, 3]).init(0) for task in (1, 2, 3)}
    for task, sink in first.items():
        sink.write(f"w{task}", "1")
        sink.prepare(1)
    # Checkpoint 1 is decided. Its COMMIT reaches tasks 1 and 3, not 2, before the run stops;
    # 3 goes on to prepare checkpoint 2, which is never decided.
    first[1].commit(1)
    first[3].commit(1)
    first[3].write("w3", "2")
    first[3].prepare(2)
    for sink in first.values():
        sink.stop()
    assert side.published() == [("w1", "1"), ("w3", "1")]

    # Resubmitted with task 1 alone: the recovery commits 1 (task 1 has it already), then
    # INITSTATE 1. Task 1 takes over 2 and 3: 2's writes of checkpoint 1 are out, once; 3's
    # of checkpoint 2 are not, nor its of 1 again.
    second = Task(side, conf, 1, [1]).init(1)
    assert side.published() == [("w1", "1"), ("w2", "1"), ("w3", "1")]
    second.stop()
    # A start of the same run again publishes nothing more: the marks say it is out.
    Task(side, conf, 1, [1]).init(1).stop()
    Task(side, conf, 1, [1, 2, 3]).init(1).stop()
    assert side.published() == [("w1", "1"), ("w2", "1"), ("w3", "1")]


def registry(conf: dict) -> KeyValueState:
    return open_state(conf, "test", namespace("test", "sink"))


def stopped_at_the_decision(side) -> None:
    """A run of tasks 1 and 2 in which each wrote a record and prepared checkpoint 1, which was
    decided; its COMMIT reached task 1 alone before the run stopped."""
    first = {task: Task(side, side.conf, task, [1, 2]).init(0) for task in (1, 2)}
    for task, sink in first.items():
        sink.write(f"w{task}", "1")
        sink.prepare(1)
    first[1].commit(1)
    for sink in first.values():
        sink.stop()


def test_the_tasks_an_earlier_release_recorded_for_the_kafka_sink_are_taken_over_too(tmp_path):
    side = KafkaSide(None, tmp_path)
    stopped_at_the_decision(side)
    # The tasks as a release before 2026-11-30 recorded them: the Kafka sink's own key.
    record = registry(side.conf)
    record.put(LEGACY_TASKS_KEY, record.get(TASKS_KEY))
    record.delete(TASKS_KEY)
    record.commit()
    record.close()
    Task(side, side.conf, 1, [1]).init(1).stop()
    assert side.published() == [("w1", "1"), ("w2", "1")]
    record = registry(side.conf)
    assert record.get(TASKS_KEY) == [1] and record.get(LEGACY_TASKS_KEY) is None
    record.close()


def test_a_former_task_prepared_before_the_decided_checkpoint_is_left_as_it_is(tmp_path):
    side = TableSide(None, tmp_path)
    stopped_at_the_decision(side)
    # A checkpoint 2 decided without task 2 (its record lost, say): 2's prepared 1 is not
    # dropped, nor taken for 2, and 2 stays recorded.
    with pytest.raises(StateError, match="task 2 of an earlier run has checkpoint 1 prepared"):
        Task(side, side.conf, 1, [1]).init(2)
    assert side.published() == [("w1", "1")]
    assert registry(side.conf).get(TASKS_KEY) == [1, 2]


def test_a_checkpointed_sink_that_cannot_publish_as_a_former_task_is_refused_at_submit():
    class OwnTasksOnly(CheckpointedSink):
        def gather(self, tup):
            return list(tup.values)

        def publish(self, txid, writes, ahead):
            pass

    problems = OwnTasksOnly().config_problems({})
    assert len(problems) == 1 and "publish_former" in problems[0]
    assert TableSide(None, Path(".")).sink().config_problems({}) == []
