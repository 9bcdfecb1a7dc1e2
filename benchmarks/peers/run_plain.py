"""The floor: a plain Python loop (split, then count in a dict) over the shared sentences.

    python benchmarks/peers/run_plain.py --sentences N

Prints one JSON line: seconds, cpu_seconds, words and counts (``[[word, count], ...]``).
"""

from __future__ import annotations

import argparse
import json
import time

from sentences import DEFAULT_N, sentences


def count(items: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for sentence in items:
        for word in sentence.split():
            counts[word] = counts.get(word, 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=DEFAULT_N)
    args = parser.parse_args()
    items = sentences(args.sentences)
    start, cpu_start = time.perf_counter(), time.process_time()
    counts = count(items)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "words": sum(counts.values()),
                      "counts": sorted(counts.items())}))


if __name__ == "__main__":
    main()
