"""The targets a replay writes to, which are what a spout reads: ``log:PATH``, stormlet's local
partitioned log (``PartitionedLog``), and ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``, a Kafka
topic; both must exist. A target appends a chunk's messages to a partition, makes them durable,
and reads back what a replay that crashed had written.

**Reading back.** Finishing a crashed run, the target is read from the end offsets the journal
recorded before the chunk was written, to find what already landed. In the local log a chunk's
messages for one partition are appended contiguously (under the partition's lock), so what landed
is the longest run of the planned messages found after the recorded offset (only another writer
appending the very same keys and values to the same partition meanwhile could mislead it). In
Kafka each message carries headers with the run id and its dedup key, which identify it exactly.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

from .errors import ReplayError

log = logging.getLogger(__name__)

#: Kafka message headers identifying a replayed message (what crash recovery reads back).
HEADER_RUN = "stormlet-replay-run"
HEADER_KEY = "stormlet-replay-key"


@dataclass(frozen=True)
class TargetSpec:
    """A parsed ``--to``: ``kind`` ``"log"`` (``location`` is the log's absolute path) or
    ``"kafka"`` (``location`` the bootstrap servers, ``topic`` the topic)."""

    kind: str
    location: str
    topic: str | None = None

    @property
    def name(self) -> str:
        """What a failed record's ``source.name`` says when it came from this target."""
        return self.location if self.kind == "log" else str(self.topic)

    def __str__(self) -> str:
        return f"log:{self.location}" if self.kind == "log" else f"kafka://{self.location}/{self.topic}"


_KAFKA = re.compile(r"kafka://(?P<servers>[^/\s]+)/(?P<topic>[A-Za-z0-9._-]+)")
_HOST_PORT = re.compile(r"[^:,\s]+:\d{1,5}")


def parse_target(text: str) -> TargetSpec:
    """``log:PATH`` or ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``; raises ``ValueError`` saying
    what is wrong."""
    if text.startswith("log:"):
        path = text[len("log:"):].removeprefix("//")  # log:///abs/path, for URL writers
        if not path:
            raise ValueError(f"{text!r}: log: needs a path, as in log:/data/events")
        return TargetSpec("log", str(Path(path).resolve()))  # as LogSource names it
    if text.startswith("kafka:"):
        m = _KAFKA.fullmatch(text)
        if not m or not all(_HOST_PORT.fullmatch(s) for s in m["servers"].split(",")):
            raise ValueError(f"{text!r}: expected kafka://HOST:PORT[,HOST:PORT...]/TOPIC")
        return TargetSpec("kafka", m["servers"], m["topic"])
    raise ValueError(f"{text!r} is not a target: use log:PATH (a stormlet partitioned log) or "
                     f"kafka://HOST:PORT/TOPIC")


class Message(NamedTuple):
    dedup_key: str
    key: str | bytes | None
    value: str | bytes


class Messages:
    """Messages for one partition, as three columns (no object per message on the hot path)."""

    __slots__ = ("dedup_keys", "keys", "values")

    def __init__(self, dedup_keys: list[str], keys: list[str | bytes | None],
                 values: list[str | bytes]):
        self.dedup_keys, self.keys, self.values = dedup_keys, keys, values

    @classmethod
    def of(cls, messages: Iterable[Message]) -> Messages:
        columns = tuple(zip(*messages))
        return cls(*(list(c) for c in columns)) if columns else cls([], [], [])

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Message]:
        return map(Message, self.dedup_keys, self.keys, self.values)

    def __getitem__(self, index: slice) -> Messages:
        return Messages(self.dedup_keys[index], self.keys[index], self.values[index])

    def extend(self, other: Messages) -> None:
        self.dedup_keys += other.dedup_keys
        self.keys += other.keys
        self.values += other.values


class LogTarget:
    """A stormlet partitioned log."""

    def __init__(self, spec: TargetSpec):
        from ...sources.partitioned_log import LogError, PartitionedLog

        self._error = LogError
        try:
            self.log = PartitionedLog(spec.location)
        except LogError as exc:
            raise ReplayError(f"target {spec}: {exc}") from None
        self.spec = spec
        self.partitions: int = self.log.partitions
        self._spans: dict[int, tuple[int, int]] = {}

    def end_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        return {p: self.log.end_offset(p) for p in partitions}

    def write(self, partition: int, messages: Messages, run_id: str) -> None:
        keys = messages.keys
        try:
            written = self.log.append_many(messages.values,
                                           None if all(k is None for k in keys) else keys,
                                           partition=partition)
        except (self._error, OSError) as exc:
            raise ReplayError(f"writing to {self.spec} partition {partition} failed: {exc}; "
                              f"run the replay again to write the rest") from None
        offsets = written[partition]
        self._spans[partition] = (offsets.start, offsets.stop)

    def flush(self) -> dict[int, tuple[int, int]]:
        """Make what was written durable; returns per partition the offsets written since the
        last flush, as (first, end)."""
        try:
            self.log.flush()
        except OSError as exc:
            raise ReplayError(f"cannot fsync {self.spec}: {exc}") from None
        spans, self._spans = self._spans, {}
        return spans

    def unlanded(self, partition: int, start: int, messages: Messages,
                 run_id: str) -> Messages:
        """The messages of a chunk not yet in the partition, whose end was ``start`` before the
        chunk was written. They were appended in one call, so what landed is one contiguous run
        of their first messages, possibly after other writers' records: the longest such run."""
        planned = list(zip(messages.keys, messages.values))
        found: list[tuple[Any, Any]] = []
        end = self.log.end_offset(partition)
        offset = start
        while offset < end:
            batch = self.log.read(partition, offset, 10_000)
            if not batch:
                break
            found.extend((r.key, r.value) for r in batch)
            offset = batch[-1].offset + 1
        landed = 0
        for i in range(len(found)):
            n = 0
            while n < len(planned) and i + n < len(found) and found[i + n] == planned[n]:
                n += 1
            landed = max(landed, n)
            if landed == len(planned):
                break
        return messages[landed:]

    def close(self) -> None:
        self.log.close()


class KafkaTarget:
    """A Kafka topic. Each message carries the run id and its dedup key as headers."""

    def __init__(self, spec: TargetSpec, timeout: float):
        from ...sources.kafka import KafkaSource
        from ...sources.source import SourceError

        self.spec = spec
        self.timeout = timeout
        # librdkafka logs every refused connection; an unreachable broker is reported once, by
        # the error below, so only its critical messages are let through.
        self.source = KafkaSource(spec.location, str(spec.topic), {"log_level": 2},
                                  timeout=timeout, watermark_ttl=0.0)
        try:
            self.partitions: int = len(self.source.partitions())
        except SourceError as exc:
            self.source.close()
            raise ReplayError(f"target {spec}: {exc}") from None
        self._producer: Any = None
        self._errors: list[Any] = []
        self._acked = 0
        self._sent = 0
        self._spans: dict[int, tuple[int, int]] = {}

    def end_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        from ...sources.source import SourceError

        try:
            return {p: self.source.latest(p) for p in partitions}
        except SourceError as exc:
            raise ReplayError(str(exc)) from None

    def _client(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            # Idempotence keeps librdkafka's own retries from duplicating or reordering; a
            # message not delivered within message.timeout.ms is reported failed, which bounds
            # flush().
            self._producer = Producer({"bootstrap.servers": self.spec.location, "logger": log,
                                       "enable.idempotence": True, "linger.ms": 20,
                                       "queue.buffering.max.messages": 1_000_000,
                                       "message.timeout.ms": int(self.timeout * 6000)})
        return self._producer

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)
            return
        self._acked += 1
        offset = msg.offset()
        span = self._spans.get(msg.partition())
        self._spans[msg.partition()] = ((offset, offset + 1) if span is None else
                                        (min(span[0], offset), max(span[1], offset + 1)))

    def write(self, partition: int, messages: Messages, run_id: str) -> None:
        producer = self._client()
        topic, run = str(self.spec.topic), run_id.encode()
        for m in messages:
            headers = [(HEADER_RUN, run), (HEADER_KEY, m.dedup_key.encode())]
            while True:
                try:
                    producer.produce(topic, m.value, m.key, partition=partition, headers=headers,
                                     on_delivery=self._on_delivery)
                    break
                except BufferError:  # the local queue is full: let deliveries make room
                    producer.poll(0.05)
            self._sent += 1
        producer.poll(0)

    def flush(self) -> dict[int, tuple[int, int]]:
        """Wait until the broker acknowledged every message; returns per partition the offsets
        written since the last flush, as [first, end)."""
        producer = self._client()
        if producer.flush(self.timeout * 6 + 5):
            producer.purge()  # not delivered by now: stop librdkafka retrying behind our back
            producer.flush(0)
        missing = self._sent - self._acked
        errors, self._errors = self._errors, []
        spans, self._spans = self._spans, {}
        self._sent = self._acked = 0
        if missing:
            why = errors[0].str() if errors else f"not acknowledged within {self.timeout * 6:g}s"
            raise ReplayError(f"{missing} messages to {self.spec} were not acknowledged ({why}); "
                              f"run the replay again to write what is missing")
        return spans

    def unlanded(self, partition: int, start: int, messages: Messages,
                 run_id: str) -> Messages:
        """The messages of a chunk whose headers are not found in the partition from ``start``."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        end = self.end_offsets([partition])[partition]
        seen: set[bytes] = set()
        if end > start:
            consumer = Consumer({"bootstrap.servers": self.spec.location, "logger": log,
                                 "group.id": "stormlet-replay-check", "enable.auto.commit": False,
                                 "enable.partition.eof": False, "auto.offset.reset": "error"})
            try:
                consumer.assign([TopicPartition(str(self.spec.topic), partition, start)])
                position, deadline = start, time.monotonic() + self.timeout * 3
                run = run_id.encode()
                while position < end:
                    if time.monotonic() > deadline:
                        raise ReplayError(f"{self.spec} partition {partition}: could not read "
                                          f"back offsets {start}-{end - 1} to check what a "
                                          f"crashed replay wrote; try again")
                    for msg in consumer.consume(1000, 0.5):
                        error = msg.error()
                        if error is not None:
                            raise ReplayError(f"{self.spec} partition {partition}: reading back "
                                              f"what a crashed replay wrote: {error.str()}")
                        headers = dict(msg.headers() or ())
                        key = headers.get(HEADER_KEY)
                        if headers.get(HEADER_RUN) == run and isinstance(key, bytes):
                            seen.add(key)
                        offset = msg.offset()
                        assert offset is not None   # a message read has one
                        position = offset + 1
            except KafkaException as exc:
                raise ReplayError(f"{self.spec}: {exc}") from None
            finally:
                consumer.close()
        return Messages.of(m for m in messages if m.dedup_key.encode() not in seen)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
        self.source.close()


def open_target(spec: TargetSpec, timeout: float = 10.0) -> LogTarget | KafkaTarget:
    """Open the target and check it is there; raises ``ReplayError`` if not."""
    return LogTarget(spec) if spec.kind == "log" else KafkaTarget(spec, timeout)
