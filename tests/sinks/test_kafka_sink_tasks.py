"""TransactionalKafkaBolt (stormlet/sinks/kafka.py) across runs with different task counts, on
the fake broker that keeps Kafka's transactions (tests/fake_kafka_txn.py); and the Kafka sinks'
one line for tuples whose topic selector gives no topic."""

from __future__ import annotations

import logging

import pytest
from fake_kafka_txn import BROKERS, FakeKafka, FakeProducer, on_fake
from support import running, wait_until

from stormlet import TopologyBuilder
from stormlet import config as cfg
from stormlet.sinks.checkpointed import TASKS_KEY
from stormlet.sinks.kafka import (
    FieldIndexTopicSelector,
    FieldNameBasedTupleToKafkaMapper,
    FieldNameTopicSelector,
    KafkaBolt,
    TransactionalKafkaBolt,
)
from stormlet.sources import LogSpout
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.state import KeyValueState
from stormlet.state.store import MemoryStore
from stormlet.testing import MockOutputCollector, make_tuple, mock_context


def sink_task(broker: str, conf: dict, task: int, tasks: list[int]) -> TransactionalKafkaBolt:
    """Task ``task`` of component ``sink`` (tasks ``tasks``), prepared and initialized as a run
    starts it."""
    bolt = on_fake(TransactionalKafkaBolt("fake:9092").with_topic_selector("counts")
                   .with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("word", "n")),
                   broker)
    context = mock_context("sink", task_id=task, conf=conf)
    context._layout.component_tasks["sink"] = list(tasks)
    bolt.prepare(conf, context, MockOutputCollector())
    bolt.pre_init_state(0)   # as INITSTATE 0 does, at a topology's first start
    bolt.init_state(KeyValueState(MemoryStore()))
    return bolt


def run(broker: str, conf: dict, tasks: list[int]) -> dict[int, TransactionalKafkaBolt]:
    """A run of the sink's tasks in which each has written a record into its open transaction
    (none is committed: the run stops before its checkpoint does)."""
    started = {task: sink_task(broker, conf, task, tasks) for task in tasks}
    for task, bolt in started.items():
        bolt.execute(make_tuple([f"w{task}", "1"], fields=["word", "n"]))
    return started


def test_a_run_with_fewer_tasks_ends_the_open_transactions_of_the_tasks_it_no_longer_has(
        tmp_path, monkeypatch):
    BROKERS["fewer"] = broker = FakeKafka()
    conf = {cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: {"dir": str(tmp_path)}}
    first = run("fewer", conf, [4, 5, 6])
    assert broker.open == {"stormlet.test.sink.4", "stormlet.test.sink.5",
                           "stormlet.test.sink.6"}
    # Resubmitted with one sink task; another component's count moved its id, too.
    second = run("fewer", conf, [3])
    # 4, 5 and 6 are ended (their readers need not wait for the broker's timeout): only the
    # new task's transaction is open, and the old producers are fenced.
    assert broker.open == {"stormlet.test.sink.3"}
    for bolt in first.values():
        with pytest.raises(Exception, match="fenced"):
            bolt.producer.commit_transaction(1)
    second[3].pre_prepare(1)
    second[3].pre_commit(1)
    assert broker.committed == [("counts", "w3", "1")] and broker.open == set()
    registry = second[3].open_registry()
    assert registry.get(TASKS_KEY) == [3]
    registry.close()
    # Another run with more tasks: nothing to end, and only the lowest task opens the record
    # (the tasks start at once: two writing it could lose one's tasks).
    opened = []
    open_registry = TransactionalKafkaBolt.open_registry
    monkeypatch.setattr(TransactionalKafkaBolt, "open_registry",
                        lambda bolt: opened.append(bolt.task) or open_registry(bolt))
    run("fewer", conf, [3, 4])
    assert broker.open == {"stormlet.test.sink.3", "stormlet.test.sink.4"}
    assert opened == [3]


def test_a_crash_while_ending_former_transactions_leaves_them_recorded_for_the_next_start(
        tmp_path):
    BROKERS["crash"] = broker = FakeKafka()
    conf = {cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: {"dir": str(tmp_path)}}
    run("crash", conf, [1, 2, 3])
    # The next run has tasks 1 and 4, and (at least once) 4 starts and writes first.
    sink_task("crash", conf, 4, [1, 4]).execute(make_tuple(["w4", "1"], fields=["word", "n"]))
    ended = []

    bolt = on_fake(TransactionalKafkaBolt("fake:9092").with_topic_selector("counts"), "crash")
    make_producer = bolt.make_producer

    def crashing(config):   # the task dies after ending 2's transaction, before 3's
        if config["transactional.id"].endswith(".3"):
            raise RuntimeError("crashed")
        ended.append(config["transactional.id"])
        return make_producer(config)
    bolt.make_producer = crashing
    context = mock_context("sink", task_id=1, conf=conf)
    context._layout.component_tasks["sink"] = [1, 4]
    bolt.prepare(conf, context, MockOutputCollector())
    bolt.pre_init_state(0)
    with pytest.raises(RuntimeError, match="crashed"):
        bolt.init_state(KeyValueState(MemoryStore()))
    # Its own producer first (whose init ended its predecessor's transaction), then 2's.
    assert ended == ["stormlet.test.sink.1", "stormlet.test.sink.2"]
    assert broker.open == {"stormlet.test.sink.3", "stormlet.test.sink.4"}
    # Resubmitted with task 1 alone: 3, and 4, which the crashed run recorded before ending
    # anything, are ended.
    run("crash", conf, [1])
    assert broker.open == {"stormlet.test.sink.1"}


def copy_topology(log_path, broker: str, sink_tasks: int):
    builder = TopologyBuilder()
    builder.set_spout("lines", LogSpout(str(log_path), spout_id="lines", commit_interval=0.05))
    sink = on_fake(TransactionalKafkaBolt("fake:9092").with_topic_selector("copy")
                   .with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("key", "value")),
                   broker)
    builder.set_bolt("sink", sink, parallelism=sink_tasks).shuffle_grouping("lines")
    return builder.build()


def test_a_topology_resubmitted_with_fewer_sink_tasks_ends_what_the_others_left_open(tmp_path):
    BROKERS["resubmit"] = broker = FakeKafka()
    lines = [f"line {i}" for i in range(100)]
    log = PartitionedLog.create(tmp_path / "log", 1)
    log.append_many(lines)
    log.close()
    conf = {cfg.TOPOLOGY_GUARANTEE: cfg.EFFECTIVELY_ONCE,
            cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: {"dir": str(tmp_path / "state")},
            cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS: 100}

    def copied():
        with broker.lock:
            return sorted(value for _, _, value in broker.committed)
    with running(copy_topology(tmp_path / "log", "resubmit", 3), conf) as cluster:
        wait_until(lambda: copied() == sorted(lines), 30, "every line copied")
        tasks = sorted(runner.inner.task for runner in cluster.instances("test", "sink"))
    # What a crash would leave: the two last tasks each with a transaction open.
    for task in tasks[1:]:
        producer = FakeProducer(broker, {"transactional.id": f"stormlet.test.sink.{task}"})
        producer.init_transactions(1)
        producer.begin_transaction()
        producer.produce("copy", "late")
    assert len(broker.open) == 2
    with running(copy_topology(tmp_path / "log", "resubmit", 1), conf) as cluster:
        wait_until(lambda: not broker.open, 30, "the former tasks' transactions ended")
        [runner] = cluster.instances("test", "sink")
        assert runner.inner.task == tasks[0]
        # INITSTATE told it the checkpoint it restores, the first run's last: what it takes
        # the former tasks' state over at.
        assert runner.inner.restored >= 1
        assert copied() == sorted(lines)   # and nothing more


@pytest.mark.parametrize("sink_class", [KafkaBolt, TransactionalKafkaBolt])
def test_tuples_without_a_topic_are_logged_in_one_line_not_one_each(sink_class, caplog):
    class NoTopic:
        def get_topic(self, tup):
            return None
    sink = sink_class("fake:9092").with_topic_selector(NoTopic())
    component = f"sink-{sink_class.__name__}"
    with caplog.at_level(logging.WARNING, logger="stormlet.sinks.kafka"):
        for n in range(50):
            assert sink._record_of(make_tuple(["w", str(n)], fields=["key", "message"]),
                                   component) is None
    records = [r for r in caplog.records if "gave no topic" in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].funcName == "_record_of"   # the line names where the tuple was skipped


@pytest.mark.parametrize("selector_class, where", [(FieldNameTopicSelector, "topic"),
                                                   (FieldIndexTopicSelector, 5)])
def test_two_sinks_default_topics_for_one_stream_are_each_logged_once(selector_class, where,
                                                                      caplog):
    """Two sinks fed the same stream, each with its own default topic: one line each, though
    their tuples come in turn (a line whose text changes is logged again at once)."""
    selectors = [selector_class(where, f"default-{n}") for n in range(2)]
    with caplog.at_level(logging.WARNING, logger="stormlet.sinks.kafka"):
        for n in range(50):
            for selector in selectors:
                tup = make_tuple(["w", str(n)], fields=["key", "message"],
                                 component=f"src-{selector_class.__name__}")
                assert selector.get_topic(tup) == selector.default_topic
    records = [r for r in caplog.records if "their records go to" in r.getMessage()]
    assert len(records) == 2, [r.getMessage() for r in records]
    assert {r.funcName for r in records} == {"get_topic"}
