"""The Spark side of a replay, and the plan it writes: read the failed-message log, keep the
records that match the filters, one per message, tell apart the messages to replay from those an
earlier run replayed and those no target can hold, give each its target partition, and write the
plan (the messages to write, in order, as Parquet); then, on the driver, read the plan back a
batch at a time. The Spark tasks' own code (Arrow over batches) is ``plan_tasks``.

**One replay per message.** A message is identified by its source (kind, name, partition,
offset) when the record has one, else by (topology, component, message id). The same message may
sit in several records (it failed again after a restart); the latest ``last_failed_at`` wins, then
the latest ``written_at``. Message ids are compared as canonical JSON, so ``"42"`` and ``42``
differ. The copies of a message are records of one message, so they carry the same key: the
target partition is worked out per record, before de-duplicating, which lets one shuffle do both.

**Where each message goes** (``partition_by``): by default a message goes back to the partition it
came from, when the target is the very log or topic it was read from: the spout deals partitions
to its tasks by index, so this keeps a key's messages in the partition (and task) that held them,
in their original offset order. Otherwise, and always with ``partition_by="key"``, a keyed message
goes to CRC-32(key) mod partitions (what ``PartitionedLog.append(key=...)`` and librdkafka's
default partitioner do), and a message without a key to CRC-32 of its identity's text mod
partitions. Payloads keep their type: a str stays str and bytes stay bytes in the local log (Kafka
holds only bytes). A record whose value is neither str nor bytes (a custom spout's) cannot be
written to either target: it is counted as unreplayable and left alone.
"""

from __future__ import annotations

import binascii
import functools
import itertools
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .errors import ReplayError
from .plan_tasks import REPLAY, REPLAYED_BEFORE, UNREPLAYABLE, plan_partitions, scan_files
from .targets import Message, Messages, TargetSpec

__all__ = ["PlanCounts", "PlanTally", "REPLAY", "REPLAYED_BEFORE", "UNREPLAYABLE", "plan",
           "read_plan"]


@dataclass
class PlanCounts:
    """What planning found: the records that matched, the messages by status, and the messages
    counted by ``plan_tasks.COUNT_BY`` (``groups``: dicts with ``n``)."""

    matched: int = 0
    status: Counter[str] = field(default_factory=Counter)
    groups: list[dict[str, Any]] = field(default_factory=list)


class PlanTally:
    """What the planning job's finished tasks have done so far, for the progress line: Spark
    accumulators, so a task's counts arrive when it ends."""

    def __init__(self, spark: Any):
        sc = spark.sparkContext
        self.read = sc.accumulator(0)
        self.matched = sc.accumulator(0)
        self.planned = sc.accumulator(0)

    def so_far(self) -> str:
        """``"records read R, matched M; messages planned P"``, or "" before any task ended."""
        read, planned = self.read.value, self.planned.value
        if not read:
            return ""
        text = f"records read {read:,}, matched {self.matched.value:,}"
        return f"{text}; messages planned {planned:,}" if planned else text


def plan(spark: Any, files: list[Path], filters: dict[str, Any],
         earlier_plans: list[tuple[Path, bool]],
         spec: TargetSpec, partitions: int, partition_by: str, out: Path | None,
         tally: PlanTally | None = None) -> PlanCounts:
    """Plan a replay of ``files`` (see the module doc) in one Spark job: write each target
    partition's messages to replay to its file under ``out`` (None: a dry run, nothing written),
    and return the counts; ``tally`` counts as the job's tasks end. The driver gets only counts
    back. ``earlier_plans`` are the plans of earlier runs, each with whether it went to this
    target, partitioned alike (then a partition's messages can be only in its file there)."""
    sc = spark.sparkContext
    # One wave of reading tasks: each costs a pause of its own as its output enters the shuffle.
    groups = _file_groups(files, max(1, min(len(files), sc.defaultParallelism)))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    scan = functools.partial(scan_files, filters=filters, target=(spec.kind, spec.name),
                             partitions=partitions, partition_by=partition_by,
                             read=tally and tally.read, matched=tally and tally.matched)
    # Absolute paths: an executor does not run in the driver's working directory.
    plan_them = functools.partial(plan_partitions,
                                  earlier_plans=[(str(p.absolute()), alike)
                                                 for p, alike in earlier_plans],
                                  plan=None if out is None else str(out.absolute()),
                                  planned=tally and tally.planned)
    # Spark's shuffle brings each target partition's rows (as Arrow blobs) to one task; a task
    # plans several partitions, one after the other, when the target has many.
    tasks = max(1, min(partitions, 4 * sc.defaultParallelism))
    rows = (sc.parallelize(groups, len(groups)).flatMap(scan)
            .partitionBy(tasks, _same_partition).mapPartitions(plan_them).collect())
    counts = PlanCounts()
    for row in rows:
        if "n" in row:
            counts.status[row["status"]] += row["n"]
            counts.groups.append(row)
        else:
            counts.matched += row["matched"]
    return counts


def _same_partition(partition: int) -> int:
    return partition        # PySpark takes it modulo the task count


def _file_groups(files: list[Path], n: int) -> list[list[str]]:
    """``files`` dealt into ``n`` groups of about equal bytes, largest first."""
    groups: list[list[str]] = [[] for _ in range(n)]
    sizes = [0] * n
    for size, file in sorted(((f.stat().st_size, f) for f in files), reverse=True):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(str(file.absolute()))
        sizes[smallest] += size
    return [g for g in groups if g]


def read_plan(path: Path) -> Iterator[tuple[int, Messages]]:
    """The planned messages in the order to write them, as runs of one target partition's: the
    plan's files one after the other, a batch of rows at a time (the plan never sits in memory
    whole)."""
    files = sorted(p for p in path.iterdir() if p.name.startswith("part-"))
    for file in files:
        if file.name.endswith(".parquet"):
            yield from _parquet_runs(file)
        elif file.name.endswith(".json"):
            with open(file, "rb") as f:
                yield from _runs(_json_messages(f))


_BATCH_ROWS = 65_536
_COLUMNS = ["partition", "dedup_key", "key_s", "key_b", "value_s", "value_b"]


def _parquet_runs(file: Path) -> Iterator[tuple[int, Messages]]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(file).iter_batches(_BATCH_ROWS, columns=_COLUMNS):
        dedup, key_s, key_b, value_s, value_b = (
            batch.column(i).to_pylist() for i in range(1, len(_COLUMNS)))
        # A str, else the bytes (else None: no key).
        keys = [s if s is not None else b for s, b in zip(key_s, key_b)]
        values = [s if s is not None else b for s, b in zip(value_s, value_b)]
        # A file is sorted by partition: each partition's rows are one slice of the batch.
        runs = pc.run_end_encode(batch.column(0))
        start = 0
        for p, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
            yield p, Messages(dedup[start:end], keys[start:end], values[start:end])
            start = end


def _runs(rows: Iterator[tuple[int, Message]]) -> Iterator[tuple[int, Messages]]:
    for p, group in itertools.groupby(rows, key=lambda row: row[0]):
        yield p, Messages.of(m for _, m in group)


def _json_messages(lines: Iterator[bytes]) -> Iterator[tuple[int, Message]]:
    """The messages of a plan written as JSON Lines (by replays before the log was Parquet)."""
    # The decoder's scanner without json.loads's whitespace handling: a third faster, and Spark
    # writes one compact object per line.
    # (scan_once is set by JSONDecoder.__init__; its stubs leave it out.)
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
    unbase64 = binascii.a2b_base64
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
