"""Replaying the failed-message log into the log or topic a spout reads, as a PySpark job.

    from stormlet.spark.replay import replay

    preview = replay("data/events/_failed", "log:data/events", reason="error", dry_run=True)
    print(preview.planned, preview.by_reason(), preview.by_component())
    summary = replay("data/events/_failed", "log:data/events", reason="error")
    summary = replay("failed", "kafka://broker:9092/orders", topology="orders", master="local[4]")

The job reads the complete files of the failed-message log (``stormlet.failed``), keeps the
records that match the filters (topology, component, reason kind, ``since <= last_failed_at <
until``), keeps one record per message, drops the messages an earlier run replayed, then appends
the payloads to the target, each with its original key:

- ``log:PATH``: stormlet's local partitioned log (``PartitionedLog``), which must exist;
- ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``: a Kafka topic, which must exist.

**One replay per message.** A message is identified by its source (kind, name, partition,
offset) when the record has one, else by (topology, component, message id). The same message may
sit in several records (it failed again after a restart); the latest ``last_failed_at`` wins, then
the latest ``written_at``. Message ids are compared as JSON values, so ``"42"`` and ``42`` differ.

**Where each message goes** (``partition_by``): by default a message goes back to the partition it
came from, when the target is the very log or topic it was read from: the spout deals partitions
to its tasks by index, so this keeps a key's messages in the partition (and task) that held them,
in their original offset order. Otherwise, and always with ``partition_by="key"``, a keyed message
goes to CRC-32(key) mod partitions (what ``PartitionedLog.append(key=...)`` and librdkafka's
default partitioner do), and a message without a key to a partition chosen by a hash of its
identity. Payloads keep their type: a str stays str and bytes stay bytes in the local log (Kafka
holds only bytes). A record whose value is neither str nor bytes (a custom spout's) cannot be
written to either target: it is counted as unreplayable and left alone.

**The manifest** lives in ``<failed-dir>/.replays/`` (a leading ``.``: readers of the failed log,
and Spark, skip it, and no topology's directory can be called that). Each run has a directory::

    .replays/<run id>/plan/part-*.json   the messages to write (JSON Lines, written by Spark): per
                                         line partition, dedup_key, record_id, topology,
                                         component, reason, and key_s/value_s (a str) or
                                         key_b/value_b (bytes, base64); one file holds all of a
                                         target partition's messages, in the order written
    .replays/<run id>/run.json           written once the plan is complete and fsynced: run id,
                                         filters, target, chunk size, counts
    .replays/<run id>/journal.jsonl      one fsynced line per chunk: "start" (with the target's
                                         end offsets) before writing it, "done" (with the
                                         offsets written) after
    .replays/<run id>/summary.json       written when every chunk is done: the run is complete
    .replays/lock                        flock'ed by the replay running now

Every planned message (complete run or not) counts as replayed for later runs, so running the same
replay twice replays nothing the second time. A run directory without ``run.json`` is what a
replay that died while planning left; it wrote nothing, and the next replay removes it.

**Crash safety.** Chunks of the plan are written one after the other, from the driver. Before a
chunk the journal records the target's end offset of each partition the chunk writes to; after it
(and after the log's fsync, or Kafka's acknowledgements) it records "done". A run that died leaves
a run without a summary; the next ``replay`` on the same failed-message directory finishes it first,
before planning anything new: done chunks are skipped, and for the chunk that was being written it
reads the target from the recorded end offsets to find what already landed, and writes only the
rest. In the local log a chunk's messages for one partition are appended contiguously (under the
partition's lock), so what landed is the longest run of the planned messages found after the
recorded offset (only another writer appending the very same keys and values to the same
partition meanwhile could mislead it). In Kafka each message carries headers with the run id and
its dedup key, which identify it exactly.

**Why the driver writes.** The local log is a directory on the driver's machine, appended to
under per-partition file locks, and the journal must record, in order, what was written. Spark
does the heavy part (parse, filter, de-duplicate, exclude earlier runs, partition, sort) on the
executors and writes the plan; the driver then streams the plan's files a line at a time, so a
million messages never sit in memory at once, and finishing a crashed run needs no Spark at all.
"""

from __future__ import annotations

import binascii
import errno
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from ..durable import fsync_dir, replace_atomically
from ..failed import final_files
from .session import spark_session

log = logging.getLogger(__name__)

REPLAYS_DIR = ".replays"
LOCK_FILE = "lock"
PLAN_DIR = "plan"
RUN_FILE = "run.json"
JOURNAL_FILE = "journal.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FORMAT = "stormlet-replay-run"
RUN_VERSION = 1

#: Kafka message headers identifying a replayed message (what crash recovery reads back).
HEADER_RUN = "stormlet-replay-run"
HEADER_KEY = "stormlet-replay-key"

DEFAULT_CHUNK = 20_000
PARTITION_BY = ("source", "key")

# Plan statuses of a de-duplicated message.
REPLAY, REPLAYED_BEFORE, UNREPLAYABLE = "replay", "replayed before", "unreplayable"


class ReplayError(Exception):
    """The replay cannot run or finish; the message names the path, target or run and says what
    to do. Nothing was written unless the message says so."""


# ----- targets: what a spout reads


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
        return TargetSpec("log", os.path.abspath(path))
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


class _LogTarget:
    """A stormlet partitioned log."""

    def __init__(self, spec: TargetSpec):
        from ..sources.partitioned_log import LogError, PartitionedLog

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

    def write(self, partition: int, messages: list[Message], run_id: str) -> None:
        keys = [m.key for m in messages]
        try:
            written = self.log.append_many([m.value for m in messages],
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

    def unlanded(self, partition: int, start: int, messages: list[Message],
                 run_id: str) -> list[Message]:
        """The messages of a chunk not yet in the partition, whose end was ``start`` before the
        chunk was written. They were appended in one call, so what landed is one contiguous run
        of their first messages, possibly after other writers' records: the longest such run."""
        planned = [(m.key, m.value) for m in messages]
        found = []
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


class _KafkaTarget:
    """A Kafka topic. Each message carries the run id and its dedup key as headers."""

    def __init__(self, spec: TargetSpec, timeout: float):
        from ..sources.kafka import KafkaSource
        from ..sources.source import SourceError

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
        from ..sources.source import SourceError

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

    def write(self, partition: int, messages: list[Message], run_id: str) -> None:
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

    def unlanded(self, partition: int, start: int, messages: list[Message],
                 run_id: str) -> list[Message]:
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
                        if msg.error() is not None:
                            raise ReplayError(f"{self.spec} partition {partition}: reading back "
                                              f"what a crashed replay wrote: {msg.error().str()}")
                        headers = dict(msg.headers() or ())
                        if headers.get(HEADER_RUN) == run and HEADER_KEY in headers:
                            seen.add(headers[HEADER_KEY])
                        position = msg.offset() + 1
            except KafkaException as exc:
                raise ReplayError(f"{self.spec}: {exc}") from None
            finally:
                consumer.close()
        return [m for m in messages if m.dedup_key.encode() not in seen]

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
        self.source.close()


def open_target(spec: TargetSpec, timeout: float = 10.0) -> _LogTarget | _KafkaTarget:
    """Open the target and check it is there; raises ``ReplayError`` if not."""
    return _LogTarget(spec) if spec.kind == "log" else _KafkaTarget(spec, timeout)


# ----- the manifest: .replays/<run>/


def _write_json(path: Path, data: dict[str, Any]) -> None:
    replace_atomically(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def _fsync_tree(path: Path) -> None:
    """fsync the files Spark wrote (its local committer does not), then their directories: the
    plan must be durable before run.json makes it count."""
    for directory, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(directory)
    fsync_dir(path.parent)


class _Run:
    """One run's directory in the manifest (see the module doc)."""

    def __init__(self, path: Path):
        self.path = path
        self.id = path.name
        self.plan = path / PLAN_DIR
        self._journal: Any = None

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads((self.path / RUN_FILE).read_text())

    def planned(self) -> bool:
        return (self.path / RUN_FILE).exists()

    def finished(self) -> bool:
        return (self.path / SUMMARY_FILE).exists()

    def record(self, **entry: Any) -> None:
        """Append a journal line and make it durable before returning."""
        if self._journal is None:
            new = not (self.path / JOURNAL_FILE).exists()
            self._journal = open(self.path / JOURNAL_FILE, "ab")
            if new:
                fsync_dir(self.path)
        self._journal.write((json.dumps(entry, sort_keys=True) + "\n").encode())
        self._journal.flush()
        os.fsync(self._journal.fileno())

    def entries(self) -> Iterator[dict[str, Any]]:
        try:
            data = (self.path / JOURNAL_FILE).read_bytes()
        except FileNotFoundError:
            return
        for line in data.split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line torn by a crash: what it would have said was never durable
            if isinstance(entry, dict):
                yield entry

    def journal(self) -> tuple[set[int], dict[int, dict[int, int]]]:
        """(chunks done, {chunk started but not done: its target end offsets per partition})."""
        done: set[int] = set()
        started: dict[int, dict[int, int]] = {}
        for entry in self.entries():
            if entry.get("state") == "start":
                started[entry["chunk"]] = {int(p): o for p, o in entry["ends"].items()}
            elif entry.get("state") == "done":
                done.add(entry["chunk"])
        return done, {c: ends for c, ends in started.items() if c not in done}

    def written(self) -> dict[str, list[list[int]]]:
        """Per target partition, the offset ranges [first, end) the run's chunks wrote."""
        spans: dict[str, list[list[int]]] = {}
        for entry in self.entries():
            if entry.get("state") == "done":
                for p, span in entry["written"].items():
                    spans.setdefault(p, []).append(span)
        return spans

    def finish(self, summary: dict[str, Any]) -> None:
        self.close()
        _write_json(self.path / SUMMARY_FILE, summary)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


class _Manifest:
    def __init__(self, failed_dir: Path):
        self.path = failed_dir / REPLAYS_DIR
        self._lock_fd = -1

    def runs(self) -> list[_Run]:
        if not self.path.is_dir():
            return []
        return [_Run(p) for p in sorted(self.path.iterdir()) if p.is_dir()]

    def lock(self) -> None:
        """Exclude other replays on this failed-message log until ``unlock``."""
        self.path.mkdir(exist_ok=True)
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ReplayError(f"another replay is running on {self.path.parent} (it holds "
                                  f"{self.path / LOCK_FILE}); wait for it to finish") from None
            raise
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def new_run(self) -> _Run:
        run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)
        path = self.path / run_id
        path.mkdir()
        fsync_dir(self.path)
        return _Run(path)

    def drop_unplanned(self) -> None:
        """Remove the directories of runs that died while planning: they wrote nothing."""
        for run in self.runs():
            if not run.planned():
                log.info("replay: removing %s, left by a run that died before its plan was "
                         "complete (it wrote nothing)", run.path)
                shutil.rmtree(run.path, ignore_errors=True)


# ----- results


@dataclass
class RunResult:
    """What one run wrote in this call."""

    run_id: str
    planned: int
    written: int = 0
    #: Messages found already in the target when finishing a run that had crashed.
    already_landed: int = 0
    #: Seconds spent writing (reading the plan back included).
    seconds: float = 0.0


@dataclass
class ReplaySummary:
    target: str
    dry_run: bool
    #: Records of the failed-message log that match the filters.
    matched: int = 0
    #: Of those, older records of a message that has a later one.
    duplicates: int = 0
    #: Messages an earlier run replayed (skipped).
    replayed_before: int = 0
    #: Messages whose value is neither str nor bytes, or whose key is not str, bytes or None.
    unreplayable: int = 0
    #: Messages this call replays (or, in a dry run, would replay), not counting resumed runs.
    planned: int = 0
    #: Planned messages per (topology, component, reason kind).
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: Planned messages per target partition.
    by_partition: dict[int, int] = field(default_factory=dict)
    #: This call's new run (None in a dry run or when there was nothing to replay).
    run: RunResult | None = None
    #: Unfinished runs of earlier calls finished first (in a dry run: found, not finished).
    resumed: list[RunResult] = field(default_factory=list)
    #: Seconds spent reading, filtering and de-duplicating the log, and writing the plan.
    plan_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def written(self) -> int:
        """Messages written by this call, resumed runs included."""
        return sum(r.written for r in ([self.run] if self.run else []) + self.resumed)

    def by_reason(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for (_, _, reason), n in self.counts.items():
            out[reason] += n
        return out

    def by_component(self) -> Counter[tuple[str, str]]:
        out: Counter[tuple[str, str]] = Counter()
        for (topology, component, _), n in self.counts.items():
            out[topology, component] += n
        return out


@dataclass(frozen=True)
class ReplayProgress:
    """Reported after each chunk is written."""

    run_id: str
    chunk: int            # 1-based
    chunks: int
    written: int          # messages of the run in the target so far
    planned: int
    seconds: float        # since the run's writing started


# ----- the Spark side: read, filter, de-duplicate, plan


def _record_schema() -> Any:
    from pyspark.sql import types as T

    string, long, double, variant = T.StringType(), T.LongType(), T.DoubleType(), T.VariantType()

    def struct(**fields: Any) -> Any:
        return T.StructType([T.StructField(name, kind) for name, kind in fields.items()])

    # Values are variants: a message id may be a list in one record and a str in the next, and a
    # payload is a str or {"base64": ...}; a string column would make "42" and 42 (or a str that
    # reads like {"base64": ...} and real bytes) the same.
    return struct(record_id=string, topology=string, component=string, message_id=variant,
                  source=struct(kind=string, name=string, partition=long, offset=long),
                  payload=struct(key=variant, value=variant),
                  reason=struct(kind=string),
                  first_failed_at=double, last_failed_at=double, written_at=double)


def _payload_columns(value: Any, name: str) -> list[Any]:
    """``<name>_type`` (none, str, bytes or other), ``<name>_s`` (the str), ``<name>_b`` (the
    bytes) of a variant payload field."""
    from pyspark.sql import functions as F

    shape = F.schema_of_variant(value)
    kind = (F.when(value.isNull() | F.is_variant_null(value), F.lit("none"))
            .when(shape == "STRING", F.lit("str"))
            .when(shape == "OBJECT<base64: STRING>", F.lit("bytes"))
            .otherwise(F.lit("other")))
    return [kind.alias(f"{name}_type"),
            F.when(kind == "str", F.try_variant_get(value, "$", "string")).alias(f"{name}_s"),
            F.when(kind == "bytes", F.unbase64(F.try_variant_get(value, "$.base64", "string")))
            .alias(f"{name}_b")]


def _candidates(spark: Any, files: list[Path], filters: dict[str, Any],
                earlier_plans: list[Path]) -> Any:
    """One row per message that matches the filters (the winning record), with ``copies`` (its
    records) and ``status``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    df = spark.read.schema(_record_schema()).json([str(f) for f in files])
    df = df.where(F.col("record_id").isNotNull())  # a line that is no record (edited by hand)
    if filters.get("topology") is not None:
        df = df.where(F.col("topology") == filters["topology"])
    if filters.get("component") is not None:
        df = df.where(F.col("component") == filters["component"])
    if filters.get("reason") is not None:
        df = df.where(F.col("reason.kind") == filters["reason"])
    failed_at = F.coalesce(F.col("last_failed_at"), F.lit(0.0))
    if filters.get("since") is not None:
        df = df.where(failed_at >= F.lit(float(filters["since"])))
    if filters.get("until") is not None:
        df = df.where(failed_at < F.lit(float(filters["until"])))

    def v(name: str) -> Any:
        return F.col(name).cast(T.VariantType())

    identity = (F.when(F.col("source").isNotNull(), F.to_json(F.array(
                    F.lit("source").cast(T.VariantType()), v("source.kind"), v("source.name"),
                    v("source.partition"), v("source.offset"))))
                .otherwise(F.to_json(F.array(
                    F.lit("message").cast(T.VariantType()), v("topology"), v("component"),
                    F.coalesce(F.col("message_id"), F.parse_json(F.lit("null")))))))
    df = df.select(
        identity.alias("dedup_key"), "record_id", "topology", "component",
        F.coalesce(F.col("reason.kind"), F.lit("?")).alias("reason"),
        F.col("source.kind").alias("src_kind"), F.col("source.name").alias("src_name"),
        F.col("source.partition").alias("src_partition"),
        F.col("source.offset").alias("src_offset"),
        "first_failed_at", "last_failed_at", "written_at",
        *_payload_columns(F.col("payload.key"), "key"),
        *_payload_columns(F.col("payload.value"), "value"))

    # The latest attempt wins; record_id only makes a tie deterministic. Both columns use one
    # window spec (a whole-partition frame for the count), so Spark sorts once.
    latest = Window.partitionBy("dedup_key").orderBy(
        F.desc_nulls_last("last_failed_at"), F.desc_nulls_last("written_at"), F.desc("record_id"))
    every = latest.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    df = (df.withColumn("copies", F.count(F.lit(1)).over(every))
            .withColumn("rank", F.row_number().over(latest))
            .where(F.col("rank") == 1).drop("rank"))

    if earlier_plans:
        seen = (spark.read.schema("dedup_key STRING").json([str(p) for p in earlier_plans])
                .withColumn("seen", F.lit(True)))
        df = df.join(seen, "dedup_key", "left")
    else:
        df = df.withColumn("seen", F.lit(None).cast("boolean"))
    replayable = (F.col("value_type").isin("str", "bytes")
                  & F.col("key_type").isin("none", "str", "bytes"))
    status = (F.when(F.col("seen").isNotNull(), F.lit(REPLAYED_BEFORE))
              .when(~replayable, F.lit(UNREPLAYABLE)).otherwise(F.lit(REPLAY)))
    return df.withColumn("status", status).drop("seen")


def _with_partition(df: Any, spec: TargetSpec, partitions: int, partition_by: str) -> Any:
    """The target partition of each message (see "Where each message goes" in the module doc)."""
    from pyspark.sql import functions as F

    key_bytes = F.coalesce(F.col("key_b"), F.encode(F.col("key_s"), "UTF-8"))
    by_key = F.pmod(F.crc32(key_bytes), F.lit(partitions))
    spread = F.pmod(F.xxhash64("dedup_key"), F.lit(partitions))
    target = F.when(F.col("key_type") != "none", by_key).otherwise(spread)
    if partition_by == "source":
        same_source = ((F.col("src_kind") == spec.kind) & (F.col("src_name") == spec.name)
                       & (F.col("src_partition") >= 0) & (F.col("src_partition") < partitions))
        target = F.when(same_source, F.col("src_partition")).otherwise(target)
    return df.withColumn("partition", target.cast("int"))


# The plan: the columns stored, and the order messages are written in (per target partition, as
# they stood in their source).
_PLAN_COLUMNS = ("partition", "dedup_key", "record_id", "topology", "component", "reason",
                 "key_s", "key_b", "value_s", "value_b")
_PLAN_ORDER = ("partition", "src_name", "src_partition", "src_offset", "first_failed_at",
               "dedup_key")


def _write_plan(candidates: Any, path: Path) -> dict[str, int]:
    """Write the messages to replay to ``path`` as JSON Lines, each target partition's messages
    in one file, in the order they are to be written; returns the counts of every status."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    def count(status: str) -> Any:
        return F.sum(F.when(F.col("status") == status, 1).otherwise(0)).alias(status)

    observation = Observation(f"replay-{secrets.token_hex(4)}")
    observed = candidates.observe(observation, F.sum("copies").alias("matched"),
                                  count(REPLAY), count(REPLAYED_BEFORE), count(UNREPLAYABLE))
    # Hash-partitioned by target partition, so one file holds all of a partition's messages and
    # the driver reads them back in order, file by file, without asking Spark to sort again.
    plan = (observed.where(F.col("status") == REPLAY)
            .repartition("partition")
            .sortWithinPartitions(*[F.col(c).asc_nulls_first() for c in _PLAN_ORDER])
            .select(*_PLAN_COLUMNS))
    # With adaptive execution, a file write whose input turns out empty loses the observed
    # metrics (PySpark 4.3: Observation.get fails an assertion in toPyRow), and an empty plan is
    # the common case of a replay run twice.
    with _session_conf(candidates.sparkSession, "spark.sql.adaptive.enabled", "false"):
        plan.write.json(str(path))
    return {name: int(n or 0) for name, n in observation.get.items()}


@contextmanager
def _session_conf(spark: Any, key: str, value: str) -> Iterator[None]:
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _plan_files(run: _Run) -> list[Path]:
    return sorted(p for p in run.plan.iterdir() if p.name.startswith("part-"))


def _plan_messages(lines: Iterator[bytes]) -> Iterator[tuple[int, Message]]:
    # The decoder's scanner without json.loads's whitespace handling: a third faster, and Spark
    # writes one compact object per line.
    scan, unbase64 = json.JSONDecoder().scan_once, binascii.a2b_base64
    for line in lines:
        try:
            row = scan(line.decode(), 0)[0]
        except (StopIteration, ValueError):
            raise ReplayError(f"the replay plan holds a line that is not JSON ({line[:80]!r}): "
                              f"the manifest is damaged") from None
        # Spark leaves null fields out and writes binary as base64.
        key = row.get("key_s")
        if key is None and "key_b" in row:
            key = unbase64(row["key_b"])
        value = row.get("value_s")
        if value is None:
            value = unbase64(row["value_b"])
        yield row["partition"], Message(row["dedup_key"], key, value)


def _plan_lines(run: _Run) -> Iterator[bytes]:
    for path in _plan_files(run):
        with open(path, "rb") as f:
            yield from f


# ----- writing a run


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while True:
        chunk = list(islice(items, size))
        if not chunk:
            return
        yield chunk


def _by_partition(chunk: list[tuple[int, Message]]) -> dict[int, list[Message]]:
    groups: dict[int, list[Message]] = {}
    for partition, message in chunk:
        group = groups.get(partition)
        if group is None:
            group = groups[partition] = []
        group.append(message)
    return groups


def _write_run(run: _Run, target: _LogTarget | _KafkaTarget,
               progress: Callable[[ReplayProgress], None] | None) -> RunResult:
    """Write the run's plan to the target, chunk by chunk, journaling each; finish a run that
    crashed part-way without writing anything twice."""
    began = time.monotonic()
    meta = run.meta
    planned, size = meta["planned"], meta["chunk_size"]
    chunks = -(-planned // size)
    result = RunResult(run.id, planned)
    done, started = run.journal()
    # Chunks are written in order, so the done ones are the first ones.
    first = len(done)
    if done != set(range(first)):
        raise ReplayError(f"replay run {run.path}: its journal is inconsistent (done chunks "
                          f"{sorted(done)}); inspect {run.path / JOURNAL_FILE}")
    lines = _plan_lines(run)
    written = sum(1 for _ in islice(lines, first * size))
    for index, chunk in enumerate(_chunks(_plan_messages(lines), size), start=first):
        groups = _by_partition(chunk)
        if index in started:
            ends = started[index]
            remaining = {p: target.unlanded(p, ends[p], msgs, run.id) for p, msgs in groups.items()}
            landed = sum(len(groups[p]) - len(remaining[p]) for p in groups)
            result.already_landed += landed
            log.info("replay %s: chunk %d was being written when the last run stopped: %d of "
                     "its %d messages are in %s, writing the rest", run.id, index + 1, landed,
                     len(chunk), target.spec)
            groups = {p: msgs for p, msgs in remaining.items() if msgs}
        else:
            run.record(state="start", chunk=index, messages=len(chunk), at=time.time(),
                       ends={str(p): o for p, o in target.end_offsets(sorted(groups)).items()})
        for p, msgs in sorted(groups.items()):
            target.write(p, msgs, run.id)
        spans = target.flush()
        run.record(state="done", chunk=index, at=time.time(),
                   written={str(p): [s, e] for p, (s, e) in spans.items()})
        result.written += sum(len(msgs) for msgs in groups.values())
        written += len(chunk)
        if progress is not None:
            progress(ReplayProgress(run.id, index + 1, chunks, written, planned,
                                    time.monotonic() - began))
    if written != planned:
        raise ReplayError(f"replay run {run.path}: its plan holds {written} messages, its "
                          f"run.json says {planned}; the manifest is damaged")
    run.finish({"run_id": run.id, "finished_at": time.time(), "planned": planned,
                "target": meta["target"], "written_by_last_attempt": result.written,
                "already_landed": result.already_landed, "offsets": run.written()})
    result.seconds = time.monotonic() - began
    log.info("replay %s: done, %d messages in %s in %.1fs", run.id, planned, target.spec,
             result.seconds)
    return result


# ----- the job


def replay(failed_dir: str | os.PathLike, target: str | TargetSpec, *,
           topology: str | None = None, component: str | None = None, reason: str | None = None,
           since: float | None = None, until: float | None = None, dry_run: bool = False,
           master: str | None = None, partition_by: str = "source",
           chunk_size: int = DEFAULT_CHUNK, timeout: float = 10.0,
           progress: Callable[[ReplayProgress], None] | None = None) -> ReplaySummary:
    """Replay the failed messages of ``failed_dir`` that match the filters into ``target``
    (``log:PATH`` or ``kafka://HOST:PORT/TOPIC``, or a ``TargetSpec``); see the module doc.

    Unfinished runs of earlier calls on this directory are finished first. With ``dry_run``
    nothing is written: the summary says what would be. ``master`` is the Spark master (default
    ``local[*]``; an already active session is used as it is). ``timeout`` bounds each wait for a
    Kafka broker. ``progress`` is called after each chunk is written.

    Raises ``ReplayError`` (and ``SparkUnavailable``) with a message meant for the user.
    """
    started = time.monotonic()
    spec = parse_target(target) if isinstance(target, str) else target
    if partition_by not in PARTITION_BY:
        raise ValueError(f"partition_by must be one of {', '.join(PARTITION_BY)}, "
                         f"not {partition_by!r}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, not {chunk_size!r}")
    failed_dir = Path(failed_dir)
    files = _failed_files(failed_dir, topology, component)
    filters = {"topology": topology, "component": component, "reason": reason, "since": since,
               "until": until}
    summary = ReplaySummary(target=str(spec), dry_run=dry_run)
    manifest = _Manifest(failed_dir)
    opened = open_target(spec, timeout)
    try:
        if not dry_run:
            manifest.lock()
            manifest.drop_unplanned()
        pending = [r for r in manifest.runs() if r.planned() and not r.finished()]
        for run in pending:
            if run.meta["target"] != str(spec):
                raise ReplayError(
                    f"replay run {run.id} to {run.meta['target']} did not finish; finish it first "
                    f"by running the replay again with --to {run.meta['target']} (it writes only "
                    f"what is missing)")
        for run in pending:
            if dry_run:
                summary.resumed.append(RunResult(run.id, run.meta["planned"]))
            else:
                log.info("replay: finishing run %s, which did not complete", run.id)
                summary.resumed.append(_write_run(run, opened, progress))
        if not files:
            log.info("replay: no failed-message files in %s%s", failed_dir,
                     f" for topology {topology!r}" if topology else "")
        else:
            with spark_session("stormlet-replay", master) as spark:
                run = _plan(spark, manifest, files, filters, spec, opened.partitions,
                            partition_by, chunk_size, dry_run, summary)
            if run is not None:
                summary.run = _write_run(run, opened, progress)
    finally:
        opened.close()
        manifest.unlock()
    summary.seconds = time.monotonic() - started
    return summary


def _failed_files(failed_dir: Path, topology: str | None, component: str | None) -> list[Path]:
    if not failed_dir.exists():
        raise ReplayError(f"failed-message directory {failed_dir} does not exist; pass the "
                          f"directory the spouts write failed messages to")
    if not failed_dir.is_dir():
        raise ReplayError(f"failed-message directory {failed_dir} is not a directory")
    if not os.access(failed_dir, os.R_OK | os.X_OK):
        raise ReplayError(f"failed-message directory {failed_dir} is not readable")
    try:
        files = final_files(failed_dir, topology, component)
    except OSError as exc:
        raise ReplayError(f"cannot list the failed-message log in {failed_dir}: {exc}") from None
    unreadable = [f for f in files if not os.access(f, os.R_OK)]
    if unreadable:
        raise ReplayError(f"{len(unreadable)} files of the failed-message log are not readable, "
                          f"for one {unreadable[0]}")
    return files


def _plan(spark: Any, manifest: _Manifest, files: list[Path], filters: dict[str, Any],
          spec: TargetSpec, partitions: int, partition_by: str, chunk_size: int, dry_run: bool,
          summary: ReplaySummary) -> _Run | None:
    """Fill in the summary's counts and, unless ``dry_run``, write the plan of a new run; returns
    the run (None if there is nothing to replay)."""
    from pyspark.sql import functions as F

    began = time.monotonic()
    earlier = [r.plan for r in manifest.runs() if r.planned()]
    log.info("replay: planning from %d files of %s (%d earlier runs)", len(files),
             manifest.path.parent, len(earlier))
    candidates = _with_partition(_candidates(spark, files, filters, earlier), spec, partitions,
                                 partition_by)
    run = None
    if dry_run:
        rows = (candidates.groupBy("topology", "component", "reason", "status", "partition")
                .agg(F.count(F.lit(1)).alias("n"), F.sum("copies").alias("copies")).collect())
        status: Counter[str] = Counter()
        for row in rows:
            status[row["status"]] += row["n"]
            status["matched"] += row["copies"]
        _count_planned(summary, [row for row in rows if row["status"] == REPLAY])
    else:
        run = manifest.new_run()
        status = Counter(_write_plan(candidates, run.plan))
    summary.matched = status["matched"]
    summary.duplicates = status["matched"] - status[REPLAY] - status[REPLAYED_BEFORE] \
        - status[UNREPLAYABLE]
    summary.replayed_before = status[REPLAYED_BEFORE]
    summary.unreplayable = status[UNREPLAYABLE]
    summary.planned = status[REPLAY]
    if summary.unreplayable:
        log.warning("replay: %d messages have a payload the target cannot hold (a value that is "
                    "not str or bytes, or a key that is not str, bytes or None); they are not "
                    "replayed", summary.unreplayable)
    if run is not None and not summary.planned:
        shutil.rmtree(run.path)
        run = None
    if run is not None:
        _count_planned(summary, spark.read.schema(
            "topology STRING, component STRING, reason STRING, partition INT")
            .json(str(run.plan)).groupBy("topology", "component", "reason", "partition")
            .agg(F.count(F.lit(1)).alias("n")).collect())
        _fsync_tree(run.plan)
        # The plan is complete: from here on its messages count as replayed, and a crash leaves
        # a run that the next call finishes.
        _write_json(run.path / RUN_FILE, {
            "format": RUN_FORMAT, "version": RUN_VERSION, "run_id": run.id,
            "created_at": time.time(), "target": str(spec), "partition_by": partition_by,
            "filters": filters, "files": len(files), "chunk_size": chunk_size,
            "planned": summary.planned, "matched": summary.matched,
            "duplicates": summary.duplicates, "replayed_before": summary.replayed_before,
            "unreplayable": summary.unreplayable,
            "by_partition": {str(p): n for p, n in sorted(summary.by_partition.items())},
            "counts": [[t, c, r, n] for (t, c, r), n in sorted(summary.counts.items())],
        })
    summary.plan_seconds = time.monotonic() - began
    log.info("replay: %d messages to replay to %s%s, planned in %.1fs", summary.planned, spec,
             f" (run {run.id})" if run else "", summary.plan_seconds)
    return run


def _count_planned(summary: ReplaySummary, rows: list[Any]) -> None:
    for row in rows:
        summary.counts[row["topology"] or "?", row["component"] or "?", row["reason"]] += row["n"]
        summary.by_partition[row["partition"]] = (summary.by_partition.get(row["partition"], 0)
                                                  + row["n"])
