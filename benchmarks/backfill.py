"""Backfill throughput: the word-count topology's bolts over a text file in local Spark.

    python benchmarks/backfill.py [--lines 1000000] [--master local[2]] [--no-warmup]

Times the whole job (text read, the split bolt, a shuffle by word into the count bolt, the counts
written as JSON Lines) over ``--lines`` sentences of the example corpus, after a small warm-up job
that starts Spark's Python workers (``--no-warmup``: none, so the job runs in a new JVM and pays
for the workers' start, as one ``stormlet backfill`` call does); the session's own start is timed
apart. Prints messages
(lines) and words per second, and the CPU time the job's processes used (this process, Spark's
JVM and its Python workers, from /proc), which other work on the machine does not inflate.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import figures

from stormlet.loader import load_topology_file
from stormlet.spark.backfill import Backfill, InputOptions
from stormlet.spark.session import build_session

TOPOLOGY = Path(__file__).resolve().parent.parent / "topologies" / "word_count.py"


def write_lines(path: Path, n: int) -> None:
    import sys

    load_topology_file(TOPOLOGY)
    corpus = sys.modules["stormlet_topology_word_count"].CORPUS
    with open(path, "w") as f:
        for i in range(n):
            f.write(corpus[i % len(corpus)] + "\n")


def cpu_seconds(root: int) -> float:
    """User and system CPU of ``root`` and every process below it, and of this process."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue   # exited meanwhile
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = sum(int(x) for x in fields[11:15])   # utime stime cutime cstime
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0)
        todo += children.get(pid, [])
    own = os.times()
    return total / os.sysconf("SC_CLK_TCK") + own.user + own.system


@dataclass
class Bench:
    """A word-count benchmark's setting: its arguments, a directory holding ``warmup.txt``
    (1,000 lines) and ``lines.txt`` (``--lines``), and a Spark session on ``--master``."""

    args: argparse.Namespace
    directory: Path
    spark: Any
    session_secs: float    # the session's start
    jvm: int               # spark-submit's pid, which runs the JVM


@contextmanager
def word_count_bench(doc: str, name: str, recorded: bool = False) -> Iterator[Bench]:
    """The setting both backfill benchmarks run in, its files and session gone afterwards;
    ``recorded``: the benchmark records its figures, so it takes ``--record``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-warmup", action="store_true",
                        help="run the timed job first, in a new JVM")
    if recorded:
        figures.add_flag(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        directory = Path(tmp)
        write_lines(directory / "warmup.txt", 1000)
        write_lines(directory / "lines.txt", args.lines)
        started = time.perf_counter()
        spark = build_session(name, args.master, {"spark.ui.showConsoleProgress": "false"})
        session_secs = time.perf_counter() - started
        try:
            yield Bench(args, directory, spark, session_secs, spark.sparkContext._gateway.proc.pid)
        finally:
            spark.stop()


def main() -> None:
    with word_count_bench(__doc__, "stormlet-backfill-bench", recorded=True) as bench:
        args, directory = bench.args, bench.directory
        warmup = None
        if not args.no_warmup:
            started = time.perf_counter()
            Backfill(TOPOLOGY, InputOptions(str(directory / "warmup.txt"))).run(
                bench.spark, str(directory / "warmup-out"), progress=lambda line: None)
            warmup = time.perf_counter() - started
        job = Backfill(TOPOLOGY, InputOptions(str(directory / "lines.txt")))
        cpu_before = cpu_seconds(bench.jvm)
        result = job.run(bench.spark, str(directory / "out"), progress=lambda line: None)
        cpu = cpu_seconds(bench.jvm) - cpu_before
    session_secs = bench.session_secs
    words = result.components["count"]["executed"]
    when = "new JVM" if args.no_warmup else "after a warm-up job"
    print(f"backfill, word count, {args.master}, {when}: {result.messages:,} lines "
          f"({words:,} words) in {result.seconds:.1f} s: "
          f"{result.messages / result.seconds:,.0f} messages/s, "
          f"{words / result.seconds:,.0f} words/s; {cpu:.1f} CPU-seconds "
          f"({result.messages / cpu:,.0f} messages per CPU-second); Spark session start: "
          f"{session_secs:.1f} s" + ("" if warmup is None else
                                     f"; the warm-up job (1,000 lines): {warmup:.1f} s"))
    # LATEST.md's row (benchmarks/diary.py renders it from the records); a run in a new JVM is
    # a row of its own, after it.
    measure = (f"backfill of word count over {args.lines:,} lines "
               f"({figures.spark_label(args.master)})")
    figures.Recorder("backfill", enabled=args.record).record(
        "the same in a new JVM" if args.no_warmup else measure,
        result.messages / result.seconds, unit="lines/s" + ("" if args.no_warmup else " warm"),
        detail=f"{cpu:.1f} CPU-seconds; Spark session start {session_secs:.1f} s")


if __name__ == "__main__":
    main()
