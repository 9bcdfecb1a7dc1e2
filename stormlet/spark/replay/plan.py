"""The Spark side of a replay, and the plan it writes: read the failed-message log, keep the
records that match the filters, one per message, tell apart the messages to replay from those an
earlier run replayed and those no target can hold, give each its target partition, and write the
plan (the messages to write, in order, as Parquet); then, on the driver, read the plan back a
batch at a time.

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
default partitioner do), and a message without a key to a partition chosen by a hash of its
identity. Payloads keep their type: a str stays str and bytes stay bytes in the local log (Kafka
holds only bytes). A record whose value is neither str nor bytes (a custom spout's) cannot be
written to either target: it is counted as unreplayable and left alone.
"""

from __future__ import annotations

import binascii
import itertools
import json
import secrets
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ...failed.columnar import spark_ddl
from ..uri import spark_uri
from .errors import ReplayError
from .targets import Message, Messages, TargetSpec

# Plan statuses of a de-duplicated message.
REPLAY, REPLAYED_BEFORE, UNREPLAYABLE = "replay", "replayed before", "unreplayable"


@dataclass(frozen=True)
class Candidates:
    """The messages (``rows``), and the records that matched (``matched``, observed as the job
    that uses the rows runs)."""

    rows: Any
    matched: Any

    def matched_count(self) -> int:
        """The records that matched, once a job over ``rows`` has run."""
        return int(self.matched.get["matched"] or 0)


def find_candidates(spark: Any, files: list[Path], filters: dict[str, Any],
                    earlier_plans: list[Path], spec: TargetSpec, partitions: int,
                    partition_by: str) -> Candidates:
    """One row per message that matches the filters (the winning record), with ``status`` and
    ``partition``; hash-partitioned by target partition and, within a Spark partition, in the
    order to write them (``_PLAN_ORDER``).

    One shuffle does it all: records go to their target partition (a function of the message,
    the same for all its copies), and a window over the message's identity within it, sorted in
    the plan's order, keeps the latest copy; the plan's sort is then the window's own."""
    from pyspark.sql import Observation, Window
    from pyspark.sql import functions as F

    # The files are listed already: Spark need not list them again in a job of its own (it does
    # for more than 32 paths), nor infer their schema.
    with _session_conf(spark, "spark.sql.sources.parallelPartitionDiscovery.threshold",
                       str(len(files) + 1)):
        df = spark.read.schema(spark_ddl()).parquet(*[spark_uri(f) for f in files])
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

    # Only what the plan, the order and the de-duplication need goes through the shuffle.
    df = df.select(
        "record_id", "topology", "component",
        F.coalesce(F.col("reason.kind"), F.lit("?")).alias("reason"),
        F.col("source.kind").alias("src_kind"), F.col("source.name").alias("src_name"),
        F.col("source.partition").alias("src_partition"),
        F.col("source.offset").alias("src_offset"),
        F.when(F.col("source").isNull(), F.struct("topology", "component", "message_id"))
        .alias("message"),
        "last_failed_at", "written_at", _replayable(),
        F.col("key.str").alias("key_s"), F.col("key.bytes").alias("key_b"),
        F.col("value.str").alias("value_s"), F.col("value.bytes").alias("value_b"))
    matched = Observation(f"replay-matched-{secrets.token_hex(4)}")
    df = df.observe(matched, F.count(F.lit(1)).alias("matched"))
    if earlier_plans:
        # Every copy of a message has its key, so each is marked; small sets are broadcast.
        seen = _earlier_keys(spark, earlier_plans).withColumn("seen", F.lit(True))
        df = df.withColumn("dedup_key", dedup_key()).join(seen, "dedup_key", "left")
    else:
        df = df.withColumn("seen", F.lit(None).cast("boolean"))
    df = with_partition(df, spec, partitions, partition_by)

    # The latest attempt wins; record_id only makes a tie deterministic. (A row number alone lets
    # Spark drop the other copies as it sorts.)
    latest = Window.partitionBy(*_PLAN_ORDER).orderBy(
        F.desc_nulls_last("last_failed_at"), F.desc_nulls_last("written_at"), F.desc("record_id"))
    df = (df.repartition("partition")
            .withColumn("rank", F.row_number().over(latest))
            .where(F.col("rank") == 1).drop("rank"))
    if not earlier_plans:  # made for the winners only: building the text is not free
        df = df.withColumn("dedup_key", dedup_key())
    status = (F.when(F.col("seen").isNotNull(), F.lit(REPLAYED_BEFORE))
              .when(~F.col("replayable"), F.lit(UNREPLAYABLE)).otherwise(F.lit(REPLAY)))
    return Candidates(df.withColumn("status", status).drop("seen", "replayable"), matched)


def dedup_key() -> Any:
    """A message's identity as the JSON text plans and Kafka headers hold:
    ``["source", kind, name, partition, offset]``, or ``["message", topology, component, id]``
    for a record without a source."""
    from pyspark.sql import functions as F

    def json_array(*head: Any, tail: list[Any]) -> Any:
        # to_json quotes and escapes the strings; the numbers, and the id (already JSON), are
        # appended before its closing bracket.
        strings = F.to_json(F.array(*head))
        return F.concat(F.left(strings, F.length(strings) - 1), *tail, F.lit("]"))

    return F.when(F.col("src_kind").isNotNull(), json_array(
        F.lit("source"), "src_kind", "src_name",
        tail=[F.lit(","), F.col("src_partition").cast("string"), F.lit(","),
              F.col("src_offset").cast("string")])) \
        .otherwise(json_array(F.lit("message"), "message.topology", "message.component",
                              tail=[F.lit(","), F.coalesce("message.message_id", F.lit("null"))])) \
        .alias("dedup_key")


def _replayable() -> Any:
    """Whether a target can hold the record's payload: a str or bytes value, and a str, bytes or
    no key (what ``columnar`` keeps as JSON, neither)."""
    from pyspark.sql import functions as F

    def str_or_bytes(name: str) -> Any:
        return F.col(f"{name}.str").isNotNull() | F.col(f"{name}.bytes").isNotNull()

    return (str_or_bytes("value") & (F.col("key").isNull() | str_or_bytes("key"))) \
        .alias("replayable")


def _earlier_keys(spark: Any, plans: list[Path]) -> Any:
    """The messages of earlier runs' plans (Parquet, or JSON Lines from before the log was
    Parquet)."""
    parquet = [spark_uri(p) for p in plans if any(p.glob("part-*.parquet"))]
    legacy = [spark_uri(p) for p in plans if any(p.glob("part-*.json"))]
    frames = ([spark.read.parquet(*parquet).select("dedup_key")] if parquet else []) + \
        ([spark.read.schema("dedup_key STRING").json(legacy)] if legacy else [])
    if not frames:
        return spark.createDataFrame([], "dedup_key STRING")
    # Each message is in one plan at most (a later run skips it), so no key repeats.
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])


def with_partition(df: Any, spec: TargetSpec, partitions: int, partition_by: str) -> Any:
    """The target partition of each message (see "Where each message goes" in the module doc)."""
    from pyspark.sql import functions as F

    key_bytes = F.coalesce(F.col("key_b"), F.encode(F.col("key_s"), "UTF-8"))
    by_key = F.pmod(F.crc32(key_bytes), F.lit(partitions))
    spread = F.pmod(F.xxhash64(*_IDENTITY), F.lit(partitions))
    target = F.when(key_bytes.isNotNull(), by_key).otherwise(spread)
    if partition_by == "source":
        same_source = ((F.col("src_kind") == spec.kind) & (F.col("src_name") == spec.name)
                       & (F.col("src_partition") >= 0) & (F.col("src_partition") < partitions))
        target = F.when(same_source, F.col("src_partition")).otherwise(target)
    return df.withColumn("partition", target.cast("int"))


# The plan: the columns stored, and the order messages are written in (per target partition, as
# they stood in their source).
_PLAN_COLUMNS = ("partition", "dedup_key", "topology", "component", "reason",
                 "key_s", "key_b", "value_s", "value_b")
# A message's identity: its source, or (for a record without one) topology, component and id.
_IDENTITY = ("src_kind", "src_name", "src_partition", "src_offset", "message")
_PLAN_ORDER = ("partition", *_IDENTITY)


def write_plan(candidates: Candidates, path: Path) -> dict[str, int]:
    """Write the messages to replay to ``path`` as Parquet, each target partition's messages in
    one file, in the order they are to be written; returns the records matched and the counts
    of every status."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    def count(status: str) -> Any:
        return F.sum(F.when(F.col("status") == status, 1).otherwise(0)).alias(status)

    observation = Observation(f"replay-{secrets.token_hex(4)}")
    observed = candidates.rows.observe(observation, count(REPLAY), count(REPLAYED_BEFORE),
                                       count(UNREPLAYABLE))
    # Hash-partitioned by target partition, so one file holds all of a partition's messages and
    # the driver reads them back in order, file by file. The candidates are sorted so already:
    # this sort costs nothing.
    plan = (observed.where(F.col("status") == REPLAY)
            .sortWithinPartitions(*[F.col(c).asc_nulls_first() for c in _PLAN_ORDER])
            .select(*_PLAN_COLUMNS))
    with without_adaptive(candidates.rows.sparkSession):
        plan.write.parquet(spark_uri(path))
    return {"matched": candidates.matched_count(),
            **{name: int(n or 0) for name, n in observation.get.items()}}


def count_candidates(candidates: Candidates) -> tuple[int, list[Any]]:
    """For a dry run: the records matched, and the messages counted by topology, component,
    reason, status and partition (``n``)."""
    from pyspark.sql import functions as F

    with without_adaptive(candidates.rows.sparkSession):
        rows = (candidates.rows.groupBy("topology", "component", "reason", "status", "partition")
                .agg(F.count(F.lit(1)).alias("n")).collect())
    return candidates.matched_count(), rows


def without_adaptive(spark: Any) -> Any:
    """Adaptive execution off: with it, a job whose input turns out empty loses its observed
    metrics (PySpark 4.3: Observation.get fails an assertion in toPyRow), and an empty plan is
    the common case of a replay run twice. The plan's one shuffle needs no adapting anyway."""
    return _session_conf(spark, "spark.sql.adaptive.enabled", "false")


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


def plan_counts(path: Path) -> list[dict[str, Any]]:
    """The plan's messages counted by topology, component, reason and partition (``n``), read
    on the driver: four small columns, no Spark job."""
    import pyarrow.parquet as pq

    groups = ["topology", "component", "reason", "partition"]
    files = sorted(str(p) for p in path.glob("part-*.parquet"))
    if not files:
        return []
    table = pq.ParquetDataset(files).read(columns=groups)
    counted = table.group_by(groups).aggregate([("partition", "count")])
    return [{**row, "n": row.pop("partition_count")} for row in counted.to_pylist()]


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
