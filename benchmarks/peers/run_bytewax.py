"""Bytewax's word count over the shared sentences, in one worker (``run_main``, this thread).

    benchmarks/peers/.venv-bytewax/bin/python benchmarks/peers/run_bytewax.py --sentences N

A batched ``TestingSource`` (1,000 sentences per batch), ``flat_map`` for the split and
``count_final`` for the count, into a ``TestingSink``. Timed here, around ``run_main`` only, so
the interpreter's start and the input's generation are left out. Prints one JSON line: seconds,
cpu_seconds, words, counts (``[[word, count], ...]``), and the Bytewax and Python versions.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource, run_main
from sentences import DEFAULT_N, sentences

BATCH_SIZE = 1000


def build(items: list[str], out: list) -> Dataflow:
    flow = Dataflow("word_count")
    lines = op.input("sentences", flow, TestingSource(items, batch_size=BATCH_SIZE))
    words = op.flat_map("split", lines, str.split)
    counts = op.count_final("count", words, key=lambda word: word)
    op.output("out", counts, TestingSink(out))
    return flow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=DEFAULT_N)
    args = parser.parse_args()
    out: list[tuple[str, int]] = []
    flow = build(sentences(args.sentences), out)
    start, cpu_start = time.perf_counter(), time.process_time()
    run_main(flow)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu,
                      "words": sum(count for _word, count in out), "counts": sorted(out),
                      "version": importlib.metadata.version("bytewax"),
                      "python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
