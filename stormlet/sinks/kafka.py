"""A bolt that writes tuples to Kafka: storm-kafka-client's ``KafkaBolt``.

    bolt = (KafkaBolt("127.0.0.1:9092")
            .with_topic_selector(DefaultTopicSelector("words"))
            .with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("word", "count")))
    builder.set_bolt("to-kafka", bolt).fields_grouping("count", ["word"])

Each input becomes one record: the mapper gives its key and value (``str``, ``bytes`` or None),
the topic selector its topic. An input is acked only once the broker confirms the record, and
failed, with the broker's error as the reason (``"kafka MSG_SIZE_TOO_LARGE: ..."``), if
delivery fails (after librdkafka's own retries); the error is reported too. A topic selector
that answers None skips the input: acked, with a warning, as in Storm (one line a minute per
source component, with how many were skipped since, not one a tuple). An input the mapper
cannot turn into a record is failed and reported. With ``set_fire_and_forget(True)`` every
input is acked as soon as its record is queued, and delivery is not awaited (Storm's option:
records may be lost). ``set_async(False)`` waits for each record's delivery before the next
input (Storm's synchronous mode: one record in flight, slow).

Deliveries are reported on the bolt's own thread: the bolt asks for a tick every
``poll_secs`` (default 0.1 s) and looks for them then and on every input, so an input is acked
within about that long of its delivery. On ``cleanup`` it waits up to ``close_timeout_secs``
for the records still in flight.

KafkaBolt is at least once: ``topology.guarantee: effectively-once`` refuses it.

Transactions: ``TransactionalKafkaBolt``
----------------------------------------

    bolt = (TransactionalKafkaBolt("127.0.0.1:9092")
            .with_topic_selector("word-counts")
            .with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("word", "count")))

A stateful bolt (``stormlet.sinks.checkpointed``) whose writes of checkpoint ``t`` go in one
Kafka transaction, the two-phase commit of Flink's ``KafkaSink`` (EXACTLY_ONCE) on stormlet's
checkpoint actions: records are produced into the open transaction as their inputs come;
``PREPARE t`` flushes them (every record is with the broker, or the PREPARE fails and the
checkpoint rolls back) and stages them in the task's checkpointed state; ``COMMIT t`` commits
the transaction; ``ROLLBACK`` (and a new epoch) aborts it (the abort purges its records, whose
delivery reports, ``_PURGE_QUEUE``, count against no later transaction). Readers with
``isolation.level=read_committed`` see each checkpoint's records once, whole, in order.

- The transactional.id is stable per task, ``<prefix>.<topology>.<component>.<task>``: a
  restarted task's ``init_transactions`` fences its zombie predecessor (whose later calls fail
  with PRODUCER_FENCED) and ends what it left open (aborted). A fenced instance that is sent a
  COMMIT takes the id back with a new producer and reads the mark before it writes: the one
  that is behind publishes nothing, so fencing churns but never duplicates.
- The mark: each transaction also commits, with ``send_offsets_to_transaction``, the offset
  ``t`` of partition 0 of the marker topic for the task's consumer group (named as its
  transactional.id), so whether ``t`` is out is read from Kafka itself, atomically with the
  records.
- A commit that fails after the checkpoint is decided: the checkpoint spout decides ``t`` when
  it saves it COMMITTING, before any bolt commits, and every other bolt may have committed ``t``
  already; ``t``'s records cannot be given up. Flink keeps the transaction open across the
  failure and resumes it by its producer id and epoch (which confluent-kafka cannot do), and
  loses the records if the broker times it out meanwhile. Here the records are staged in the
  checkpoint itself, so nothing depends on the broker keeping a transaction: the failing COMMIT
  fails its checkpoint action, the checkpoint spout's recovery sends COMMIT ``t`` again (as for
  any bolt), and the sink, with a new producer (whose init ends the old transaction, committed
  if its commit had reached the broker), reads its mark: at ``t``, the commit had succeeded and
  only its answer was lost; below, it produces ``t``'s staged records in a new transaction with
  mark ``t`` and commits that. A task that died instead does the same from ``init_state``,
  whose state is the checkpoint ``t`` with its staged records. So a decided checkpoint's
  records are committed once, however often the commit is tried.
- What it costs: each checkpoint's records are written twice (to Kafka, and to the state store
  at PREPARE), and readers in read_committed see them only at the commit, a checkpoint interval
  late. ``transaction.timeout.ms`` (librdkafka's default 60 s) must exceed the checkpoint
  interval plus the PREPARE.
- Fewer tasks: a running topology's task count never changes (a rebalance changes only its
  executors), but a topology resubmitted under its name with fewer sink tasks (or with its task
  ids moved by another component's count) leaves the transactional.ids of tasks that no longer
  exist. The component's lowest task takes them over in its ``init_state``, as every
  checkpointed sink does (``checkpointed``): a checkpoint that was decided while a former task
  had not yet committed its transaction (the run stopped between the two) has its records,
  staged in that task's state, produced again in a transaction of that task's id with that
  task's mark, unless the mark says they are out. Then ``init_transactions`` on the id of each
  former task aborts what it left open, which read_committed readers would otherwise wait at
  until the broker's ``transaction.timeout.ms``, and fences any zombie still holding it. Flink's
  KafkaSink ends them at init too, but finds the former ids by probing subtask indexes upward
  until one was never used (its producer epoch is 0); confluent-kafka does not tell the epoch,
  and a probe by the marks would stop at a task that never committed (the one most likely to
  have left a transaction open) or at a gap of task ids moved by another component, so the
  tasks are recorded instead. (In at-least-once another task may begin writing before the
  lowest task has recorded this run's tasks, and a crash of the whole run in that moment,
  followed by a resubmission with fewer tasks, would leave that task's transaction to the
  broker's timeout.)
- The marks follow the checkpoint txids: a topology whose state is wiped must use a new
  ``transactional_id_prefix``.
- librdkafka's mock cluster (the tests' broker) accepts the transactional calls but keeps no
  transaction semantics; the tests prove the protocol on a fake that does
  (``tests/fake_kafka_txn.py``) and run the real client against the mock without failures.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol, Self

from .. import config as cfg
from ..components import Bolt
from ..repeats import Repeats
from ..tuples import Tuple
from .base import Sink
from .checkpointed import CheckpointedSink

log = logging.getLogger(__name__)

DEFAULT_POLL_SECS = 0.1
DEFAULT_CLOSE_TIMEOUT_SECS = 30.0
# Storm's FieldNameBasedTupleToKafkaMapper defaults.
DEFAULT_KEY_FIELD = "key"
DEFAULT_MESSAGE_FIELD = "message"


# A tuple the sinks skip, or send to a default topic, is logged once a minute per kind and
# source, with how many were since, not once a tuple.
_repeats = Repeats(log)   # thread-safe: every sink task in the process


class TupleToKafkaMapper(Protocol):
    """How an input tuple becomes a record's key and value (Storm's ``TupleToKafkaMapper``)."""

    def get_key_from_tuple(self, tup: Tuple) -> str | bytes | None: ...

    def get_message_from_tuple(self, tup: Tuple) -> str | bytes | None: ...


class KafkaTopicSelector(Protocol):
    """Which topic an input tuple's record goes to; None skips it (Storm's
    ``KafkaTopicSelector``)."""

    def get_topic(self, tup: Tuple) -> str | None: ...


@dataclass(frozen=True)
class FieldNameBasedTupleToKafkaMapper:
    """Key from field ``key_field`` (None if the tuple has no such field), value from field
    ``message_field``: Storm's defaults are ``key`` and ``message``."""

    key_field: str = DEFAULT_KEY_FIELD
    message_field: str = DEFAULT_MESSAGE_FIELD

    def get_key_from_tuple(self, tup: Tuple) -> str | bytes | None:
        return tup.get(self.key_field)

    def get_message_from_tuple(self, tup: Tuple) -> str | bytes | None:
        return tup[self.message_field]


@dataclass(frozen=True)
class DefaultTopicSelector:
    """Every record to ``topic``."""

    topic: str

    def get_topic(self, tup: Tuple) -> str | None:
        return self.topic


@dataclass(frozen=True)
class FieldNameTopicSelector:
    """The topic named by the tuple's field ``field``, or ``default_topic`` if the tuple has no
    such field (Storm logs that; so does this)."""

    field: str
    default_topic: str

    def get_topic(self, tup: Tuple) -> str | None:
        if self.field in tup.fields:
            return tup[self.field]
        # The default topic is in the key: two sinks' lines for one stream are two conditions.
        _repeats.warning(("no field", tup.source_component, tup.stream, self.field,
                          self.default_topic),
                         "tuples from %r stream %r have no field %r: their records go to "
                         "topic %r", tup.source_component, tup.stream, self.field,
                         self.default_topic)
        return self.default_topic


@dataclass(frozen=True)
class FieldIndexTopicSelector:
    """The topic in the tuple's value at ``index``, or ``default_topic`` if it has fewer."""

    index: int
    default_topic: str

    def get_topic(self, tup: Tuple) -> str | None:
        if 0 <= self.index < len(tup):
            return tup[self.index]
        _repeats.warning(("no value", tup.source_component, tup.stream, self.index,
                          self.default_topic),
                         "tuples from %r stream %r have no value %d: their records go to "
                         "topic %r", tup.source_component, tup.stream, self.index,
                         self.default_topic)
        return self.default_topic


def _record_bytes(what: str, value: Any) -> str | bytes | None:
    if value is None or isinstance(value, (str, bytes)):
        return value
    raise TypeError(f"the record's {what} must be str, bytes or None, got "
                    f"{type(value).__name__} {value!r}: map it in the TupleToKafkaMapper")


def _reason(error: Any) -> str:
    """A fail reason: the client's error code and words, or the exception's."""
    if hasattr(error, "name") and hasattr(error, "str"):   # a KafkaError
        return f"kafka {error.name()}: {error.str()}"
    first = error.args[0] if getattr(error, "args", None) else None
    if hasattr(first, "name") and hasattr(first, "str"):   # a KafkaException
        return _reason(first)
    return f"kafka: {type(error).__name__}: {error}"


class _RecordsOf:
    """What both Kafka sinks share: how an input becomes a record, and the builder methods
    that say so."""

    bootstrap_servers: str
    producer_config: dict[str, Any]
    mapper: TupleToKafkaMapper
    topic_selector: KafkaTopicSelector | None

    def with_tuple_to_kafka_mapper(self, mapper: TupleToKafkaMapper) -> Self:
        self.mapper = mapper
        return self

    def with_topic_selector(self, selector: KafkaTopicSelector | str) -> Self:
        """A ``KafkaTopicSelector``, or a topic name for a ``DefaultTopicSelector``."""
        self.topic_selector = (DefaultTopicSelector(selector) if isinstance(selector, str)
                               else selector)
        return self

    def with_producer_properties(self, config: dict[str, Any]) -> Self:
        self.producer_config.update(config)
        return self

    def _check_selector(self, component: str) -> None:
        if self.topic_selector is None:
            raise ValueError(f"{type(self).__name__} {component!r} has no topic selector: "
                             f"call with_topic_selector(...)")

    def _record_of(self, tup: Tuple, component: str) -> list[Any] | None:
        """``[topic, key, value]`` of ``tup``'s record, or None (logged) when the topic
        selector gives no topic. Raises TypeError for a key or value that is not bytes."""
        assert self.topic_selector is not None   # prepare checked
        topic = self.topic_selector.get_topic(tup)
        if topic is None:
            _repeats.warning(("no topic", component, tup.source_component),
                             "%s: skipping tuples from %r: the topic selector gave no topic",
                             component, tup.source_component)
            return None
        return [topic, _record_bytes("key", self.mapper.get_key_from_tuple(tup)),
                _record_bytes("value", self.mapper.get_message_from_tuple(tup))]


def _produce(producer: Any, record: list[Any], on_delivery: Any, poll_secs: float) -> None:
    """Queue ``record`` (``[topic, key, value]``) on ``producer``, waiting on deliveries while
    its local queue is full."""
    topic, key, value = record
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=on_delivery)
            return
        except BufferError:   # the local queue is full: deliveries make room
            producer.poll(poll_secs)


class KafkaBolt(_RecordsOf, Bolt, Sink):
    """Writes each input to Kafka and acks it once the broker has it (see the module doc).

    ``producer_config`` is librdkafka's (``bootstrap.servers`` given apart); the producer is
    made in ``prepare``, one per task."""

    outputs = None   # a sink: it emits nothing
    why_not = ("it sends each record as its input comes, outside any transaction, so a "
               "replay after a rollback sends it again")

    def __init__(self, bootstrap_servers: str, producer_config: dict[str, Any] | None = None,
                 poll_secs: float = DEFAULT_POLL_SECS,
                 close_timeout_secs: float = DEFAULT_CLOSE_TIMEOUT_SECS):
        self.bootstrap_servers = bootstrap_servers
        self.producer_config = dict(producer_config or {})
        self.poll_secs = poll_secs
        self.close_timeout_secs = close_timeout_secs
        self.mapper: TupleToKafkaMapper = FieldNameBasedTupleToKafkaMapper()
        self.topic_selector: KafkaTopicSelector | None = None
        self.fire_and_forget = False
        self.is_async = True

    def set_fire_and_forget(self, fire_and_forget: bool) -> KafkaBolt:
        """Ack each input once its record is queued, without waiting for the broker."""
        self.fire_and_forget = fire_and_forget
        return self

    def set_async(self, is_async: bool) -> KafkaBolt:
        """False: wait for each record's delivery before taking the next input."""
        self.is_async = is_async
        return self

    def get_component_configuration(self) -> dict[str, Any] | None:
        return {cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.poll_secs}

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        from confluent_kafka import Producer  # only a topology that writes to Kafka needs it

        self._check_selector(context.component_id)
        self.collector = collector
        self.component = context.component_id
        self.producer = Producer({"logger": log, **self.producer_config,
                                  "bootstrap.servers": self.bootstrap_servers})
        self.in_flight = 0   # records sent whose delivery is not yet known

    def execute(self, tup: Tuple) -> None:
        if not tup.is_tick():
            self._send(tup)
        if self.in_flight:
            self.producer.poll(0)   # runs the delivery callbacks: acks and fails

    def _send(self, tup: Tuple) -> None:
        try:
            record = self._record_of(tup, self.component)
            if record is None:
                self.collector.ack(tup)
                return
            callback = None if self.fire_and_forget else self._on_delivery(tup)
            _produce(self.producer, record, callback, self.poll_secs)
        except Exception as exc:
            self.collector.report_error(exc)
            self.collector.fail(tup, _reason(exc))
            return
        if self.fire_and_forget:
            self.collector.ack(tup)
            return
        self.in_flight += 1
        if not self.is_async:
            self.producer.flush()

    def _on_delivery(self, tup: Tuple) -> Any:
        def delivered(err: Any, _msg: Any) -> None:
            self.in_flight -= 1
            if err is None:
                self.collector.ack(tup)
                return
            reason = _reason(err)
            self.collector.report_error(f"{self.component}: record not delivered ({reason})")
            self.collector.fail(tup, reason)
        return delivered

    def cleanup(self) -> None:
        producer = getattr(self, "producer", None)
        if producer is not None:
            left = producer.flush(self.close_timeout_secs)
            if left:
                log.warning("%s: %d record(s) not delivered within %g s of shutdown: their "
                            "inputs time out and are replayed", self.component, left,
                            self.close_timeout_secs)


def _fenced(error: Any) -> bool:
    """True for a KafkaException saying a newer producer took this transactional.id."""
    from confluent_kafka import KafkaError

    err: Any = error.args[0] if getattr(error, "args", None) else None
    code = err.code() if hasattr(err, "code") else None
    return code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                    KafkaError.INVALID_PRODUCER_EPOCH)


class TransactionalKafkaBolt(_RecordsOf, CheckpointedSink):
    """Writes each checkpoint's records in one Kafka transaction, committed when the checkpoint
    commits: exactly once for readers with ``isolation.level=read_committed`` (see the
    "Transactions" part of the module's docstring).

    ``producer_config`` is librdkafka's (``bootstrap.servers`` and ``transactional.id`` are
    set here). ``transactional_id_prefix``: each task's transactional.id is
    ``<prefix>.<topology>.<component>.<task>``, and its mark's consumer group the same.
    ``marker_topic``: the topic whose partition 0 carries the mark (an offset of that group,
    never a record); by default the ``DefaultTopicSelector``'s topic. ``timeout_secs`` bounds
    each call to the broker (init, flush, commit, abort)."""

    def __init__(self, bootstrap_servers: str, producer_config: dict[str, Any] | None = None,
                 transactional_id_prefix: str = "stormlet", marker_topic: str | None = None,
                 timeout_secs: float = DEFAULT_CLOSE_TIMEOUT_SECS):
        self.bootstrap_servers = bootstrap_servers
        self.producer_config = dict(producer_config or {})
        self.transactional_id_prefix = transactional_id_prefix
        self.marker_topic = marker_topic
        self.timeout_secs = timeout_secs
        self.mapper = FieldNameBasedTupleToKafkaMapper()
        self.topic_selector = None

    # ----- the clients (a test puts fakes in their place)

    def make_producer(self, config: dict[str, Any]) -> Any:
        from confluent_kafka import Producer

        return Producer(config)

    def make_consumer(self, config: dict[str, Any]) -> Any:
        from confluent_kafka import Consumer

        return Consumer(config)

    # ----- CheckpointedSink

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self._check_selector(self.component)
        topic = self.marker_topic or getattr(self.topic_selector, "topic", None)
        if topic is None:
            raise ValueError(f"TransactionalKafkaBolt {self.component!r}: give marker_topic "
                             f"(a topic to carry each task's mark) with a topic selector other "
                             f"than DefaultTopicSelector")
        self.mark_topic = topic
        self.transactional_id = self._transactional_id(self.task)
        self.producer: Any = None
        self.consumer: Any = None
        self.open = False             # a transaction is open on the producer
        # The open transaction's first delivery error, and its number: a report carries the
        # number of the transaction its record was produced in (see _delivery_of).
        self.undelivered: str | None = None
        self.generation = 0
        self._delivered = self._delivery_of(self.generation)

    def started(self) -> None:
        self._close_clients()   # those of an INITSTATE that failed, if this one is tried again
        self.consumer = self._mark_consumer(self.task)
        self._new_producer()

    def _transactional_id(self, task: int) -> str:
        return f"{self.transactional_id_prefix}.{self.topology}.{self.component}.{task}"

    def _mark_consumer(self, task: int) -> Any:
        """A consumer of task ``task``'s mark (its group is named as its transactional.id)."""
        return self.make_consumer({
            "logger": log, "bootstrap.servers": self.bootstrap_servers,
            "group.id": self._transactional_id(task), "enable.auto.commit": False})

    def end_former_task(self, task: int) -> None:
        # Its init aborts the task's open transaction, which read_committed readers would
        # otherwise wait at until the broker's transaction.timeout.ms, and fences its zombies.
        _close(self._fenced_producer(task))

    def publish_former(self, task: int, txid: int, writes: list[Any]) -> None:
        producer = consumer = None
        try:
            producer, consumer = self._fenced_producer(task), self._mark_consumer(task)
            if _mark_of(consumer, self.mark_topic, self.timeout_secs) >= txid:
                return
            producer.begin_transaction()
            undelivered: list[str] = []

            def delivered(err: Any, _msg: Any) -> None:
                if err is not None:
                    undelivered.append(_reason(err))
            for write in writes:
                _produce(producer, write, delivered, 0.1)
            left = producer.flush(self.timeout_secs)
            if left or undelivered:
                why = undelivered[0] if undelivered else f"{left} record(s) not delivered"
                raise RuntimeError(f"{self.component}: checkpoint {txid}'s records staged by "
                                   f"task {task} of an earlier run cannot be published: {why}")
            self._commit_with(producer, consumer, txid)
        finally:
            _close(producer)
            _close(consumer)

    def _new_producer(self) -> None:
        """This task's producer, made anew (``_fenced_producer``)."""
        self.producer, self.open = None, False
        self.producer = self._fenced_producer(self.task)

    def _fenced_producer(self, task: int) -> Any:
        """A producer of task ``task``'s transactional.id, initialized: its init fences every
        older producer of the id (a zombie of that task) and ends what that left open (aborted,
        or, if its commit had begun, committed)."""
        producer = self.make_producer({
            "logger": log, **self.producer_config, "bootstrap.servers": self.bootstrap_servers,
            "transactional.id": self._transactional_id(task)})
        try:
            producer.init_transactions(self.timeout_secs)
        except BaseException:
            _close(producer)
            raise
        return producer

    def gather(self, tup: Tuple) -> Any:
        return self._record_of(tup, self.component)

    def write_ahead(self, write: Any) -> None:
        if self.producer is None:   # the last one failed: see publish
            self._new_producer()
        if not self.open:
            self.producer.begin_transaction()
            self.open = True
            self.generation += 1
            self.undelivered = None
            self._delivered = self._delivery_of(self.generation)
        _produce(self.producer, write, self._delivered, 0.1)

    def _delivery_of(self, generation: int) -> Any:
        """The delivery callback of the records of transaction ``generation``."""
        def delivered(err: Any, _msg: Any) -> None:
            # An aborted transaction's records are purged, and their reports (_PURGE_QUEUE)
            # come during the abort or at a later poll, when another transaction may be open:
            # they say nothing about that one's records.
            if err is not None and generation == self.generation and self.undelivered is None:
                self.undelivered = _reason(err)
        return delivered

    def sealed(self, txid: int) -> None:
        # Flink's pre-commit: every record of the checkpoint is with the broker (in the open
        # transaction) before the checkpoint may complete.
        if not self.open:
            return
        left = self.producer.flush(self.timeout_secs)
        if left or self.undelivered:
            why = self.undelivered or f"{left} record(s) not delivered in {self.timeout_secs} s"
            raise RuntimeError(f"{self.component}: checkpoint {txid}'s transaction cannot be "
                               f"prepared: {why}")

    def publish(self, txid: int, writes: list[Any], ahead: bool) -> None:
        if ahead and self.open:
            try:
                self._commit(txid)
                return
            except Exception as exc:
                # Committed or not? A new producer ends the transaction either way, and the
                # mark then says which. Fenced, too: by a zombie that took the id back, or by
                # this task's successor (then this is the zombie, and the mark keeps its
                # publish out).
                why = ("fenced by another instance of this task" if _fenced(exc)
                       else _reason(exc))
                log.warning("%s: committing checkpoint %d's transaction failed (%s): "
                            "checking its mark", self.component, txid, why)
                self.producer = None
        elif self.open:
            self.discard()
        if not writes:
            return
        if self.producer is None:
            self._new_producer()   # before reading the mark: its init fences the others
        if self._mark() >= txid:
            return
        for write in writes:
            self.write_ahead(write)
        self.sealed(txid)
        self._commit(txid)

    def _commit(self, txid: int) -> None:
        self._commit_with(self.producer, self.consumer, txid)
        self.open = False

    def _commit_with(self, producer: Any, consumer: Any, txid: int) -> None:
        """Commit ``producer``'s open transaction with mark ``txid`` (``consumer``'s group)."""
        from confluent_kafka import TopicPartition

        # The mark goes in the transaction: committed with its records or not at all.
        producer.send_offsets_to_transaction(
            [TopicPartition(self.mark_topic, 0, txid)], consumer.consumer_group_metadata(),
            self.timeout_secs)
        producer.commit_transaction(self.timeout_secs)

    def _mark(self) -> int:
        """The txid of the last checkpoint this task's transactions committed, or -1."""
        return _mark_of(self.consumer, self.mark_topic, self.timeout_secs)

    def discard(self) -> None:
        if not self.open or self.producer is None:
            self.open = False
            return
        try:
            self.producer.abort_transaction(self.timeout_secs)
            self.open = False
        except Exception as exc:
            log.warning("%s: aborting the transaction failed (%s): a new producer ends it",
                        self.component, _reason(exc))
            self._new_producer()

    def cleanup(self) -> None:
        # An open transaction is left to the next instance of this task (its init aborts it)
        # or to the broker's transaction.timeout.ms.
        self._close_clients()

    def _close_clients(self) -> None:
        for client in (getattr(self, "producer", None), getattr(self, "consumer", None)):
            _close(client)


def _mark_of(consumer: Any, topic: str, timeout_secs: float) -> int:
    """The txid of the last checkpoint committed with ``consumer``'s group as its mark (the
    offset of partition 0 of ``topic``), or -1."""
    from confluent_kafka import TopicPartition

    found = consumer.committed([TopicPartition(topic, 0)], timeout_secs)
    offset = found[0].offset if found else -1
    return offset if offset >= 0 else -1


def _close(client: Any) -> None:
    # The tests' fake clients may have no close.
    if client is not None and hasattr(client, "close"):
        client.close()
