"""An in-process stand-in for Kafka's transactions, for the transactional sink's tests.

librdkafka's mock cluster (kafka_mock.py) takes the transactional calls but keeps none of their
meaning (seen with confluent-kafka 2.16): a ``read_committed`` consumer reads aborted and open
transactions' records, a second producer of the same transactional.id does not fence the
first, and an offset sent to a transaction is never committed. This fake keeps what the sink
relies on, as Kafka's broker does: a transaction's records and offsets become visible at once
at its commit and never after an abort; ``init_transactions`` of a transactional.id aborts
what an earlier producer of it left open and fences that producer (its later calls raise
PRODUCER_FENCED). ``open`` holds the transactional.ids with a transaction open: a
``read_committed`` reader of their partitions waits at the first one's records.

Delivery reports come, as the real client's, from ``poll``, ``flush`` and
``abort_transaction``: an abort purges the records not yet reported, whose reports carry
``_PURGE_QUEUE`` and are served by the abort itself (librdkafka's abort flushes; seen with
confluent-kafka 2.16), or, with ``purge_reports_late``, by the next ``poll`` or ``flush`` (as
when the abort's flush runs out of time).

    broker = FakeKafka()
    sink = fake_sink(broker, bolt)   # the bolt's clients become the fake's
    broker.committed                 # [(topic, key, value)], in commit order
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

OFFSET_INVALID = -1001


class FakeKafka:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.committed: list[tuple[str, Any, Any]] = []
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.epochs: dict[str, int] = {}
        self.open: set[str] = set()   # transactional.ids with a transaction open
        self.commits = 0
        self.aborts = 0
        self.fenced = 0
        # Fault injection: the next commit is applied but its answer lost (raises), or fails.
        self.lose_next_commit_answer = False
        self.fail_next_commit = False
        self.purge_reports_late = False


class FakeProducer:
    def __init__(self, broker: FakeKafka, config: dict[str, Any]):
        self.broker = broker
        self.tid = config["transactional.id"]
        self.epoch = -1
        self.records: list[tuple[str, Any, Any]] = []
        self.offsets: list[tuple[str, str, int, int]] = []
        self.reports: list[tuple[Any, KafkaError | None]] = []   # (on_delivery, error)
        self.open = False

    def _check(self) -> None:
        if self.broker.epochs.get(self.tid) != self.epoch:
            self.broker.fenced += 1
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))

    def init_transactions(self, timeout: float) -> None:
        with self.broker.lock:
            self.epoch = self.broker.epochs.get(self.tid, 0) + 1
            self.broker.epochs[self.tid] = self.epoch   # the older producer's work is gone
            if self.tid in self.broker.open:          # aborted, as Kafka's init does
                self.broker.open.discard(self.tid)
                self.broker.aborts += 1

    def begin_transaction(self) -> None:
        with self.broker.lock:
            self._check()
            self.broker.open.add(self.tid)
        self.records, self.offsets, self.open = [], [], True

    def produce(self, topic: str, value: Any, key: Any = None, on_delivery: Any = None) -> None:
        assert self.open, "produce outside a transaction"
        self.records.append((topic, key, value))
        self.reports.append((on_delivery, None))

    def poll(self, timeout: float = 0) -> int:
        return self.flush()

    def flush(self, timeout: float | None = None) -> int:
        reports, self.reports = self.reports, []
        for callback, error in reports:
            if callback is not None:
                callback(error, None)
        return 0

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], group: str,
                                    timeout: float) -> None:
        self.offsets += [(group, tp.topic, tp.partition, tp.offset) for tp in offsets]

    def commit_transaction(self, timeout: float) -> None:
        broker = self.broker
        with broker.lock:
            self._check()
            if broker.fail_next_commit:
                broker.fail_next_commit = False
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out"))
            broker.committed += self.records
            for group, topic, partition, offset in self.offsets:
                broker.offsets[(group, topic, partition)] = offset
            broker.commits += 1
            broker.open.discard(self.tid)
            self.records, self.offsets, self.open = [], [], False
            if broker.lose_next_commit_answer:
                broker.lose_next_commit_answer = False
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "answer lost"))

    def abort_transaction(self, timeout: float) -> None:
        with self.broker.lock:
            self._check()
            self.broker.aborts += 1
            self.broker.open.discard(self.tid)
        self.records, self.offsets, self.open = [], [], False
        purged = KafkaError(KafkaError._PURGE_QUEUE, "Local: Purged in queue")
        self.reports = [(callback, purged) for callback, _ in self.reports]
        if not self.broker.purge_reports_late:
            self.flush()


class FakeConsumer:
    def __init__(self, broker: FakeKafka, config: dict[str, Any]):
        self.broker = broker
        self.group = config["group.id"]

    def consumer_group_metadata(self) -> str:
        return self.group

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        with self.broker.lock:
            return [TopicPartition(tp.topic, tp.partition,
                                   self.broker.offsets.get((self.group, tp.topic, tp.partition),
                                                           OFFSET_INVALID))
                    for tp in partitions]

    def close(self) -> None:
        pass


BROKERS: dict[str, FakeKafka] = {}   # by name: a bolt is copied into its tasks


def on_fake(bolt: Any, broker_name: str) -> Any:
    """``bolt`` (a TransactionalKafkaBolt) with its clients from ``BROKERS[broker_name]``."""
    bolt.make_producer = lambda config: FakeProducer(BROKERS[broker_name], config)
    bolt.make_consumer = lambda config: FakeConsumer(BROKERS[broker_name], config)
    return bolt
