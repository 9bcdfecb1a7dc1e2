"""The Spark side of a replay, and the plan it writes: read the failed-message log, keep the
records that match the filters, one per message, tell apart the messages to replay from those an
earlier run replayed and those no target can hold, give each its target partition, and write the
plan (the messages to write, in order); then, on the driver, read the plan back a line at a time.

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
"""

from __future__ import annotations

import binascii
import json
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .errors import ReplayError
from .targets import Message, TargetSpec

# Plan statuses of a de-duplicated message.
REPLAY, REPLAYED_BEFORE, UNREPLAYABLE = "replay", "replayed before", "unreplayable"


def local_uri(path: Path | str) -> str:
    """What Spark is given for a path of the failed-message directory: a local path, also where
    Spark's default file system is another (a cluster's Hadoop config naming HDFS). Not
    percent-encoded: Hadoop parses the path itself."""
    return f"file://{Path(path).absolute()}"


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


def find_candidates(spark: Any, files: list[Path], filters: dict[str, Any],
                earlier_plans: list[Path]) -> Any:
    """One row per message that matches the filters (the winning record), with ``copies`` (its
    records) and ``status``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    df = spark.read.schema(_record_schema()).json([local_uri(f) for f in files])
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
        seen = (spark.read.schema("dedup_key STRING").json([local_uri(p) for p in earlier_plans])
                .withColumn("seen", F.lit(True)))
        df = df.join(seen, "dedup_key", "left")
    else:
        df = df.withColumn("seen", F.lit(None).cast("boolean"))
    replayable = (F.col("value_type").isin("str", "bytes")
                  & F.col("key_type").isin("none", "str", "bytes"))
    status = (F.when(F.col("seen").isNotNull(), F.lit(REPLAYED_BEFORE))
              .when(~replayable, F.lit(UNREPLAYABLE)).otherwise(F.lit(REPLAY)))
    return df.withColumn("status", status).drop("seen")


def with_partition(df: Any, spec: TargetSpec, partitions: int, partition_by: str) -> Any:
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


def write_plan(candidates: Any, path: Path) -> dict[str, int]:
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
        plan.write.json(local_uri(path))
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


def plan_messages(lines: Iterator[bytes]) -> Iterator[tuple[int, Message]]:
    """The target partition and message of each line of a plan."""
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
