"""Kafka as a ``Source`` (through confluent-kafka), and ``produce`` to append to a topic.

``KafkaSource`` is a consumer with manual assignment: no subscription, no group rebalancing, no
commits (the spout stores its offsets itself). Usage::

    source = KafkaSource("127.0.0.1:9092", "events")
    source.assign({p: source.earliest(p) for p in source.partitions()})
    for record in source.fetch(500, timeout=0.1):
        ...

    produce("127.0.0.1:9092", "events", [(b"key", b"value"), (None, b"to partition 2", 2)])
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stormlet import config as cfg
from stormlet.sources.source import OffsetOutOfRange, Record, SourceError

log = logging.getLogger(__name__)

#: Settings the source's behaviour depends on; a user config may not change them.
FIXED_CONFIG: dict[str, Any] = cfg.KAFKA_FIXED_CONSUMER_CONFIG

#: librdkafka settings a user config may override.
DEFAULT_CONFIG: dict[str, Any] = {
    # confluent-kafka refuses a Consumer without a group.id, even one only ever assigned
    # partitions by hand; nothing is committed or joined under this name.
    "group.id": "stormlet-kafka-source",
    # When its local queue is full (queued.min.messages) librdkafka stops fetching for this long;
    # the default 1 s idles a spout that drains the queue in a fraction of that (measured: 120k
    # records/s with 1000 ms, 650k/s with 100 ms against the mock broker).
    "fetch.queue.backoff.ms": 100,
    "logger": log,
}

# An unknown or forbidden topic/partition: retrying cannot help and would read nothing forever.
_PERMANENT_ERRORS = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
})
_OUT_OF_RANGE_ERRORS = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})


class _Watermarks(NamedTuple):
    """A partition's low and high watermarks, and when they were read (``time.monotonic()``)."""

    low: int
    high: int
    read_at: float


class _LagEnd(NamedTuple):
    """The end ``lag_end`` last gave for a partition, and when it last changed or was asked
    (``time.monotonic()``)."""

    high: int
    at: float


class KafkaSource:
    """One Kafka topic read with manual partition assignment (see ``Source``).

    The confluent-kafka consumer is created on first use: the object is deep-copied (and may be
    pickled) before it runs, and a copy is always a fresh, unconnected source with the same
    settings and no assignment.

    ``timeout`` bounds every call that asks the broker (metadata, watermarks); watermarks are
    cached for ``watermark_ttl`` seconds. Lag metrics take a partition's end from its fetch
    responses while it is read, and ask the broker at most every ``lag_refresh`` seconds.
    """

    def __init__(self, bootstrap_servers: str, topic: str, config: dict[str, Any] | None = None,
                 *, timeout: float = 10.0, watermark_ttl: float = 1.0,
                 lag_refresh: float = 10.0) -> None:
        config = dict(config or {})
        wrong = cfg.kafka_consumer_config_problem(config)
        if wrong is not None:
            raise ValueError(f"KafkaSource({topic!r}): {wrong}")
        self.name = topic
        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        self.config = config
        self.timeout = timeout
        self.watermark_ttl = watermark_ttl
        self.lag_refresh = lag_refresh
        self._reset()

    def _reset(self) -> None:
        self._consumer: Consumer | None = None
        self._closed = False
        # The next offset fetch will return per assigned partition, kept here because
        # librdkafka cannot tell it for a partition that stopped on an error.
        self._positions: dict[int, int] = {}
        self._paused: set[int] = set()
        # Partitions librdkafka stopped on an out-of-range position: fetch raises until they are
        # moved (assign or seek), or skips them while they are paused.
        self._out_of_range: set[int] = set()
        self._watermarks: dict[int, _Watermarks] = {}
        self._lag_ends: dict[int, _LagEnd] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in
                ("name", "topic", "bootstrap_servers", "config", "timeout", "watermark_ttl",
                 "lag_refresh")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"KafkaSource({self.bootstrap_servers!r}, {self.topic!r})"

    def _client(self) -> Consumer:
        if self._consumer is None:
            if self._closed:
                raise SourceError(f"{self!r} is closed")
            conf = {**DEFAULT_CONFIG, **self.config, **FIXED_CONFIG,
                    "bootstrap.servers": self.bootstrap_servers}
            try:
                self._consumer = Consumer(conf)
            except (KafkaException, ValueError, TypeError) as e:
                raise SourceError(f"{self!r}: cannot create a Kafka consumer: {e}") from e
        return self._consumer

    def _tp(self, partition: int, offset: int | None = None) -> TopicPartition:
        return TopicPartition(self.topic, partition) if offset is None else \
            TopicPartition(self.topic, partition, offset)

    def partitions(self) -> list[int]:
        try:
            metadata = self._client().list_topics(self.topic, timeout=self.timeout)
        except KafkaException as e:
            raise SourceError(f"Kafka at {self.bootstrap_servers}: cannot read the metadata of "
                              f"topic {self.topic!r} within {self.timeout}s ({e.args[0].str()}); "
                              "is the broker running and reachable?") from e
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            why = topic.error.str() if topic is not None else "not in the metadata"
            raise SourceError(f"Kafka at {self.bootstrap_servers}: topic {self.topic!r} is not "
                              f"readable ({why}); create it or fix the topic name")
        return sorted(topic.partitions)

    def _watermarks_of(self, partition: int, fresh: bool = False) -> _Watermarks:
        now = time.monotonic()
        cached = self._watermarks.get(partition)
        if cached is not None and not fresh and now - cached.read_at < self.watermark_ttl:
            return cached
        try:
            low, high = self._client().get_watermark_offsets(self._tp(partition),
                                                             timeout=self.timeout)
        except KafkaException as e:
            raise SourceError(f"Kafka at {self.bootstrap_servers}: cannot read the offsets of "
                              f"topic {self.topic!r} partition {partition} within {self.timeout}s "
                              f"({e.args[0].str()})") from e
        read = self._watermarks[partition] = _Watermarks(low, high, now)
        return read

    def lost(self, partition: int) -> int:
        return 0   # a broker's losses are its own to report; what it serves is whole

    def lag_end(self, partition: int) -> int:
        """The partition's end for lag metrics. While the partition is read, the high watermark
        its last fetch response carried (librdkafka keeps it): asking the broker instead waits
        behind the fetches in flight, hundreds of milliseconds on a busy broker, on the spout's
        thread, and lag metrics on a dozen partitions stalled reading altogether. The broker is
        asked when that copy has not moved for ``lag_refresh`` seconds (the partition paused,
        or not fetched because the spout is not reading), and at most that often."""
        now = time.monotonic()
        seen = self._lag_ends.get(partition)
        if partition not in self._paused:
            try:
                _low, high = self._client().get_watermark_offsets(self._tp(partition),
                                                                  cached=True)
            except KafkaException:
                high = -1
            if high >= 0 and (seen is None or high != seen.high):
                self._lag_ends[partition] = _LagEnd(high, now)
                return high
        if seen is not None and now - seen.at < self.lag_refresh:
            return seen.high
        high = self._watermarks_of(partition, fresh=True).high
        self._lag_ends[partition] = _LagEnd(high, now)
        return high

    def earliest(self, partition: int) -> int:
        return self._watermarks_of(partition).low

    def latest(self, partition: int) -> int:
        return self._watermarks_of(partition).high

    def assign(self, positions: dict[int, int]) -> None:
        """Replace the assignment. Partitions that stay assigned stay paused if they were."""
        for partition, offset in positions.items():
            self._check_offset(partition, offset)
        consumer = self._client()
        try:
            consumer.assign([self._tp(p, o) for p, o in sorted(positions.items())])
            self._paused &= positions.keys()
            if self._paused:
                consumer.pause([self._tp(p) for p in sorted(self._paused)])
        except KafkaException as e:
            raise SourceError(f"{self!r}: cannot assign partitions {sorted(positions)}: {e}") from e
        self._positions = dict(positions)
        self._out_of_range.clear()

    def _check_offset(self, partition: int, offset: int) -> None:
        # Kafka's logical offsets (-1 end, -2 beginning) would leave our position unknown.
        if not isinstance(offset, int) or offset < 0:
            raise SourceError(f"{self!r} partition {partition}: offset must be an int >= 0, got "
                             f"{offset!r} (use earliest()/latest() for the ends)")

    def seek(self, partition: int, offset: int) -> None:
        self._check_assigned([partition], "seek")
        self._check_offset(partition, offset)
        consumer = self._client()
        try:
            consumer.seek(self._tp(partition, offset))
        except KafkaException as e:
            if e.args[0].code() != KafkaError._STATE:
                raise SourceError(
                    f"{self!r}: cannot seek partition {partition} to {offset}: {e}") from e
            # librdkafka seeks only a partition it is fetching; one stopped by an out-of-range
            # error (or whose assignment is not active yet) is started again at the new offset.
            tp = [self._tp(partition)]
            try:
                consumer.incremental_unassign(tp)
                consumer.incremental_assign([self._tp(partition, offset)])
                if partition in self._paused:
                    consumer.pause(tp)
            except KafkaException as e2:
                raise SourceError(f"{self!r}: cannot restart partition {partition} at {offset}: "
                                  f"{e2}") from e2
        self._positions[partition] = offset
        self._out_of_range.discard(partition)

    def _check_assigned(self, partitions: Iterable[int], action: str) -> None:
        unassigned = sorted(set(partitions) - self._positions.keys())
        if unassigned:
            raise SourceError(f"{self!r}: cannot {action} partitions {unassigned}: they are not "
                              f"assigned (assigned: {sorted(self._positions)})")

    def position(self, partition: int) -> int:
        """The offset the next fetch of an assigned partition starts at."""
        self._check_assigned([partition], "read the position of")
        return self._positions[partition]

    def pause(self, partitions: list[int]) -> None:
        self._check_assigned(partitions, "pause")
        if partitions:
            self._client().pause([self._tp(p) for p in partitions])
            self._paused.update(partitions)

    def resume(self, partitions: list[int]) -> None:
        self._check_assigned(partitions, "resume")
        if partitions:
            self._client().resume([self._tp(p) for p in partitions])
            self._paused.difference_update(partitions)

    def _raise_out_of_range(self) -> None:
        for partition in sorted(self._out_of_range - self._paused):
            # Asked now rather than when the error came, so a broker that cannot answer makes
            # this call fail without losing the fact that the partition is stuck.
            marks = self._watermarks_of(partition, fresh=True)
            raise OffsetOutOfRange(partition, self._positions[partition], marks.low, marks.high)

    def fetch(self, max_records: int, timeout: float = 0.0) -> list[Record]:
        self._raise_out_of_range()
        try:
            messages = self._client().consume(max_records, timeout)
        except KafkaException as e:
            raise SourceError(f"{self!r}: fetch failed: {e}") from e
        records: list[Record] = []
        positions = self._positions
        for m in messages:
            err = m.error()
            if err is not None:
                self._on_error(m.partition(), err)
                continue
            partition = m.partition()
            if partition not in positions:
                continue  # buffered before an assign() that dropped the partition
            offset = m.offset()
            assert partition is not None and offset is not None   # a record has both
            ts_type, ts = m.timestamp()
            records.append(Record(partition, offset, m.key(), m.value(),
                                  ts / 1000.0 if ts_type else None))
            positions[partition] = offset + 1
        if not records:
            # Records already taken from librdkafka are returned first; the error waits for the
            # next call, since the partition's position does not move until it is handled.
            self._raise_out_of_range()
        return records

    def _on_error(self, partition: int | None, err: KafkaError) -> None:
        """``partition`` is None for an error of the client, not of one partition."""
        code = err.code()
        if code in _OUT_OF_RANGE_ERRORS and partition in self._positions:
            log.warning("%r partition %d: position %d is out of range (%s)", self, partition,
                        self._positions[partition], err.str())
            self._out_of_range.add(partition)
        elif code == KafkaError._PARTITION_EOF:
            pass  # disabled in FIXED_CONFIG; harmless if a user's librdkafka still sends it
        elif err.fatal() or code in _PERMANENT_ERRORS:
            raise SourceError(f"Kafka at {self.bootstrap_servers}: topic {self.topic!r} partition "
                              f"{partition}: {err.str()}")
        else:
            # Transport failures, leader changes, throttling: librdkafka reports them as events but
            # keeps retrying by itself, so a blip must not fail the spout.
            log.warning("%r partition %s: %s (librdkafka retries)", self, partition, err.str())

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError) as e:
                log.warning("%r: error while closing: %s", self, e)
        self._reset()
        self._closed = True


def produce(bootstrap_servers: str, topic: str,
            messages: Iterable[tuple[Any, Any] | tuple[Any, Any, int]],
            config: dict[str, Any] | None = None, timeout: float = 30.0) -> int:
    """Append ``(key, value)`` or ``(key, value, partition)`` messages to ``topic``, in order per
    partition, and wait until the broker acknowledged all of them. Returns how many were written;
    raises ``SourceError`` if any was not (some others may have been written)."""
    # Idempotence keeps librdkafka's retries from duplicating or reordering messages.
    producer = Producer({"logger": log, "enable.idempotence": True, **(config or {}),
                         "bootstrap.servers": bootstrap_servers})
    errors: list[KafkaError] = []
    written = 0

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        nonlocal written
        if err is None:
            written += 1
        elif err.code() != KafkaError._PURGE_QUEUE:
            errors.append(err)

    count = 0
    for message in messages:
        key, value, *rest = message
        kwargs: dict[str, Any] = {"partition": rest[0]} if rest else {}
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=on_delivery, **kwargs)
                break
            except BufferError:  # the local queue is full: wait for deliveries to make room
                producer.poll(0.1)
        count += 1
    if producer.flush(timeout):
        # Drop what is still queued, or the producer would go on retrying it after we return.
        producer.purge()
        producer.flush(0)
    if written != count:
        why = errors[0].str() if errors else f"not acknowledged within {timeout}s"
        raise SourceError(f"Kafka at {bootstrap_servers}: {count - written} of {count} messages to "
                          f"topic {topic!r} were not written ({why})")
    return count
