"""What tuple sampling (``stormlet debug``) costs: the local word count (benchmarks/wordcount.py)
with sampling off, at 1 % and at 100 % of every component's emitted tuples.

    python benchmarks/sampling.py [--seconds 4] [--rounds 7] [--basic]

Each run samples as a worker does (runtime/live_settings.py): the samples go to the in-memory
buffers and to a samples.jsonl file, written by the settings thread. The settings alternate
within each round (off, 1 %, 100 %), runs of a few seconds each, so that a machine growing
busier or quieter weighs on all three alike. Each round's change is against its own run with
sampling off, and the figure is the median of the rounds' changes (and of their rates): on a
shared machine the rate with sampling off alone varies by a third from run to run. ``--basic``
runs the split as a BasicBolt (the README's idiom: its emits go through the basic collector),
else as a Bolt anchoring by hand. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stormlet import LocalCluster, build_mode
from stormlet.runtime.live_settings import LiveSettings
from stormlet.runtime.tuning import tune_for_streaming
from wordcount import WORDS_PER_SENTENCE, build

SETTINGS = (("off", None), ("1 %", 1.0), ("100 %", 100.0))


def run(seconds: float, percent: float | None, basic: bool, directory: Path) -> tuple[float, int]:
    """Words per second counted while every component's emits are sampled at ``percent``
    (None: off), and how many samples were written to the file."""
    conf = {"topology.max.spout.pending": 2000, "topology.acker.executors": 1}
    with LocalCluster() as cluster:
        cluster.submit("bench", conf, build(True, None, basic=basic))
        settings = LiveSettings(cluster.runtime("bench"), directory / "samples.jsonl").start()
        try:
            if percent is not None:
                settings.follow({"sampling": {"*": {"percent": percent, "until": None}}})
            time.sleep(1.0)   # warm up
            start_words = cluster.metrics("bench")["count"]["executed"]
            start = time.monotonic()
            time.sleep(seconds)
            words = cluster.metrics("bench")["count"]["executed"] - start_words
            elapsed = time.monotonic() - start
            settings.follow({"sampling": {}})
            cluster.kill("bench", wait_secs=5)
        finally:
            settings.close()
    path = directory / "samples.jsonl"
    samples = sum(1 for _ in path.open()) if path.exists() else 0
    path.unlink(missing_ok=True)
    return words / elapsed, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--basic", action="store_true", help="the split as a BasicBolt")
    args = parser.parse_args()
    tune_for_streaming()   # as `stormlet local` and workers do
    split = "a BasicBolt" if args.basic else "a Bolt anchoring by hand"
    print(f"tuple sampling's cost: word count, local mode, acking on, split as {split}, "
          f"{WORDS_PER_SENTENCE} words/sentence, {args.seconds:g} s per run, {args.rounds} "
          f"rounds, python {sys.version.split()[0]}, pid {os.getpid()}; {build_mode.describe()}",
          flush=True)
    rates: dict[str, list[float]] = {name: [] for name, _ in SETTINGS}
    changes: dict[str, list[float]] = {name: [] for name, _ in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="stormlet-sampling-") as directory:
        for round_ in range(args.rounds):
            line = []
            for name, percent in SETTINGS:
                rate, written = run(args.seconds, percent, args.basic, Path(directory))
                rates[name].append(rate)
                change = 100 * (rate - rates["off"][-1]) / rates["off"][-1]
                changes[name].append(change)
                line.append(f"{name} {rate:>10,.0f}" +
                            ("" if name == "off" else f" ({change:+.1f} %, {written:,} written)"))
            print(f"  round {round_ + 1}: " + "  ".join(line), flush=True)
    print("median of the rounds:")
    for name, _percent in SETTINGS:
        change = ("" if name == "off" else
                  f"  {statistics.median(changes[name]):+.1f} % against off (median of the "
                  f"rounds' changes)")
        print(f"  sampling {name:<6} {statistics.median(rates[name]):>10,.0f} words/s{change}")


if __name__ == "__main__":
    main()
