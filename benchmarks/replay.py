"""Replay throughput: failed-message records per second through the replay job on local Spark,
from the failed-message log back into a local partitioned log.

    python benchmarks/replay.py [--records 1000000] [--master local[2]] [--profile] [--floor]

Writes two logs of ``--records`` failed records (four spout tasks' files, 100-byte random str
values with str keys, each from its own offset of a 4-partition log) and prints the log's bytes
per record against the payload's; then the Spark session's start-up; for each log, the replay's
planning (read, filter, de-duplicate, write the plan) and writing (plan back to the driver,
appended to the log, journaled) times and messages/s end to end, the first in a new JVM, the
second in the warm one; and what a second, no-op replay of a log costs. ``--profile`` also prints
the driver's cProfile of the writing phase.

``--floor`` instead times the least any plan must do, three times in one session (the first in a
new JVM): read the log's partition, offset, key and value, shuffle by partition, sort by offset,
write Parquet. No filter, no de-duplication, no plan bookkeeping: what Spark alone costs here.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import pstats
import random
import tempfile
import time
from pathlib import Path

import figures

from stormlet.fail_reason import FailReason
from stormlet.failed import FailedMessageWriter, FailedRecord, SourceRef, read_failed
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.spark.replay import job as replay_job
from stormlet.spark.replay import replay
from stormlet.spark.session import build_session

PARTITIONS = 4


def failed_log(base: Path, records: int) -> tuple[Path, Path]:
    log_path = base / "log"
    log = PartitionedLog.create(log_path, PARTITIONS)
    name = str(log.path.resolve())
    log.close()
    failed_dir = base / "failed"
    reason = FailReason("error", "parse", "ValueError: cannot parse the record")
    # Random text (base64 of random bytes): the log's size is not flattered by a payload that
    # compresses to nothing.
    rng = random.Random(0)
    writers = [FailedMessageWriter(failed_dir, "bench", "events", task) for task in range(4)]
    now = time.time()
    for i in range(records):
        p = i % PARTITIONS
        writers[p].write(FailedRecord(
            message_id=[p, i], reason=reason, attempts=3, first_failed_at=now - 10,
            last_failed_at=now, key=f"user-{i % 10_000}",
            value=base64.b64encode(rng.randbytes(75)).decode(),
            source=SourceRef(kind="log", name=name, partition=p, offset=i // PARTITIONS)))
    for writer in writers:
        writer.close()
    return failed_dir, log_path


def floor(spark, failed_dir: Path, out: Path, records: int) -> None:
    from pyspark.sql import functions as F

    from stormlet.failed.columnar import spark_ddl

    files = [str(f) for f in failed_dir.rglob("*.parquet")]
    for i, label in enumerate(("new JVM", "warm JVM", "warm JVM")):
        started = time.perf_counter()
        df = spark.read.schema(spark_ddl()).parquet(*files).select(
            F.col("source.partition").alias("partition"), F.col("source.offset").alias("offset"),
            F.col("key.str").alias("key"), F.col("value.str").alias("value"))
        df.repartition("partition").sortWithinPartitions("partition", "offset") \
            .write.parquet(str(out / str(i)))
        seconds = time.perf_counter() - started
        print(f"floor job ({label}): {seconds:.1f}s, {records / seconds:,.0f} records/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--chunk-size", type=int, default=replay_job.DEFAULT_CHUNK)
    parser.add_argument("--profile", action="store_true",
                        help="print the driver's cProfile of the writing phase")
    parser.add_argument("--floor", action="store_true",
                        help="time only the least a plan must do (see the module doc)")
    figures.add_flag(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        # Two logs alike: the first replay runs in a new JVM (what one `stormlet replay` costs),
        # the second in the same session, its code compiled by then (a session that replays
        # again, or a long-lived driver).
        logs = [failed_log(Path(tmp) / name, args.records) for name in ("first", "second")]
        failed_dir = logs[0][0]
        size = sum(f.stat().st_size for f in failed_dir.rglob("*.parquet"))
        payload = sum(len(r["payload"]["key"]) + len(r["payload"]["value"])
                      for r in read_failed(failed_dir, decode=False))
        print(f"2 x {args.records:,} failed records written in "
              f"{time.perf_counter() - started:.1f}s: {size / 1e6:,.1f} MB of Parquet each, "
              f"{size / args.records:.0f} bytes a record, {size / payload:.2f}x the payload "
              f"bytes (key and value)")

        started = time.perf_counter()
        spark = build_session("stormlet-replay-bench", args.master)
        print(f"Spark session ({args.master}) started in {time.perf_counter() - started:.1f}s")
        if args.floor:
            floor(spark, failed_dir, Path(tmp) / "floor", args.records)
            spark.stop()
            return

        profiler = cProfile.Profile() if args.profile else None
        write_run = replay_job.write_run
        if profiler is not None:
            def profiled(*a, **kw):
                return profiler.runcall(write_run, *a, **kw)
            replay_job.write_run = profiled
        rates = []
        for label, (failed_dir, log_path) in zip(("new JVM", "warm JVM"), logs):
            summary = replay(failed_dir, f"log:{log_path}", chunk_size=args.chunk_size)
            assert summary.run is not None and summary.written == args.records, summary
            writing = summary.run.seconds
            print(f"replay ({label}): planning {summary.plan_seconds:.1f}s, writing "
                  f"{writing:.1f}s, total {summary.seconds:.1f}s: "
                  f"{args.records / summary.seconds:,.0f} msgs/s end to end "
                  f"(planning {args.records / summary.plan_seconds:,.0f}/s, "
                  f"writing {args.records / writing:,.0f}/s)")
            rates.append(args.records / summary.seconds)
        replay_job.write_run = write_run
        again = replay(failed_dir, f"log:{log_path}")
        assert again.written == 0 and again.files == 0, again
        print(f"second replay of the same log (nothing to do): {again.seconds:.2f}s")
        # LATEST.md's row (benchmarks/diary.py renders it from the records).
        figures.Recorder("replay", enabled=args.record).record(
            f"replay of {args.records:,} failed messages into a local log "
            f"({figures.spark_label(args.master)})",
            f"{rates[0]:,.0f} msgs/s in a new JVM, {rates[1]:,.0f} in a warm one")
        spark.stop()
        if profiler is not None:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)

if __name__ == "__main__":
    main()
