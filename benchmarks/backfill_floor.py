"""The floor under the backfill benchmark: the same word count as bare PySpark, no stormlet.

    python benchmarks/backfill_floor.py [--lines 1000000] [--master local[2]]

The same input and Spark session as ``benchmarks/backfill.py``, and the same work done as plainly
as Python allows: ``mapPartitions`` splits each line and buckets every word by the CRC-32 the
fields grouping uses (one pickled record per bucket per 256 lines, as the backfill's chunks),
Spark shuffles the buckets into 2 partitions, and a second ``mapPartitions`` counts each word
and writes ``{"word":...,"count":n}`` per word as JSON Lines from a template. No bolts, tuples,
collectors, checks or counts: what is left is Spark and the bare per-word Python work, so the
backfill's figure over this one is what stormlet's semantics cost.
"""

from __future__ import annotations

import json
import pickle
import time
import zlib

import figures
from backfill import cpu_seconds, word_count_bench

TASKS = 2


def split_words(lines):
    crc32 = zlib.crc32
    buckets: list[list[str]] = [[] for _ in range(TASKS)]
    for n, line in enumerate(lines, 1):
        for word in line.split():
            buckets[crc32(word.encode()) % TASKS].append(word)
        if n % 256 == 0:
            yield from flush(buckets)
    yield from flush(buckets)


def flush(buckets):
    # Pickled here, in one C call per bucket: Spark's cloudpickle would make a Python call per
    # list.
    for task, words in enumerate(buckets):
        if words:
            yield task, pickle.dumps(words, pickle.HIGHEST_PROTOCOL)
            words.clear()


def count_words(records):
    counts: dict[str, int] = {}
    quote = json.encoder.encode_basestring
    for _task, data in records:
        lines = []
        for word in pickle.loads(data):
            n = counts[word] = counts.get(word, 0) + 1
            lines.append('{"word":%s,"count":%d}' % (quote(word), n))
        yield "\n".join(lines)


def identity(key: int) -> int:
    return key


def main() -> None:
    with word_count_bench(__doc__, "stormlet-backfill-floor", recorded=True) as bench:
        args, directory, sc = bench.args, bench.directory, bench.spark.sparkContext

        def run(name: str) -> None:
            (sc.textFile(str(directory / f"{name}.txt"), minPartitions=TASKS)
             .mapPartitions(split_words).partitionBy(TASKS, identity)
             .mapPartitions(count_words).saveAsTextFile(str(directory / f"{name}-out")))

        if not args.no_warmup:
            run("warmup")
        cpu_before, started = cpu_seconds(bench.jvm), time.perf_counter()
        run("lines")
        seconds, cpu = time.perf_counter() - started, cpu_seconds(bench.jvm) - cpu_before
    print(f"bare PySpark word count (the backfill's floor), {args.master}: {args.lines:,} lines "
          f"in {seconds:.1f} s: {args.lines / seconds:,.0f} lines/s; {cpu:.1f} CPU-seconds "
          f"({args.lines / cpu:,.0f} lines per CPU-second)")
    # LATEST.md's row, beside the backfill's (benchmarks/diary.py renders it from the records).
    figures.Recorder("backfill_floor", enabled=args.record).record(
        f"the same word count as bare PySpark, no stormlet (the backfill's floor, "
        f"{figures.spark_label(args.master)})" + (", in a new JVM" if args.no_warmup else ""),
        args.lines / seconds, unit="lines/s" + ("" if args.no_warmup else " warm"),
        detail=f"{args.lines:,} lines; {cpu:.1f} CPU-seconds")


if __name__ == "__main__":
    main()
