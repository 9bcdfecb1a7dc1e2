"""What a stateful (persistent) window costs against a plain window, in local mode, alternating.

    python benchmarks/stateful_windows.py                # 2 rounds of 6 s runs
    python benchmarks/stateful_windows.py --quick        # 1 round of 3 s runs

The same spout and split as benchmarks/wordcount.py (acking on, split anchoring by hand); the
counting bolt ("count") counts the words of each tumbling Count(1000) window (reading it with
``get_iter``, into a Counter) and is, in turn: a plain ``WindowedBolt`` (its tuples acked as
they leave the window); a ``StatefulWindowedBolt`` with persistence (the window in the state,
acked at checkpoints every second) on the memory provider, on the embedded SQLite store, and on
Redis (a throwaway server from deploy/redis.sh; skipped with a line if redis-server is not
installed); and on the embedded store a Count(30000) window with at most 10,000 tuples in
memory, so that partitions are written to the store and read back. Every setting runs once a
round, in turn. Prints, per setting, the median over the rounds of acked words/s and of CPU µs
a word (the process's CPU time over the run / words acked), and their ratios to the plain
window's; each round's figures too.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))  # the tests' free_port, for the Redis server

import figures  # noqa: E402
from state_and_windows import topology, with_redis  # noqa: E402
from wordcount import measure  # noqa: E402

from stormlet.runtime import build_mode  # noqa: E402
from stormlet.runtime.tuning import tune_for_streaming  # noqa: E402
from stormlet.state import StatefulWindowedBolt  # noqa: E402
from stormlet.windowing import Count, WindowedBolt  # noqa: E402


def count_window(bolt, window):
    bolt.counts.update(t.values[0] for t in window.get_iter())


class PlainWindow(WindowedBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, window):
        count_window(self, window)


class StatefulWindow(StatefulWindowedBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: collections.Counter[str] = collections.Counter()

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        count_window(self, window)
        self.state.put("windows", self.state.get("windows", 0) + 1)


def settings(tmp: Path, redis_port: int | None) -> list[tuple[str, object, dict]]:
    # Acks wait for the checkpoint: pending must cover an interval's worth (as
    # state_and_windows.py measured); the plain window runs with the same.
    base = {"topology.max.spout.pending": 50_000, "topology.acker.executors": 1,
            "topology.state.checkpoint.interval.ms": 1000}
    embedded = {**base, "stormlet.state.dir": str(tmp / "state")}
    tumbling = Count(1000)
    runs: list[tuple[str, object, dict]] = [
        ("plain window", PlainWindow().with_tumbling_window(tumbling), base),
        ("stateful window, memory provider",
         StatefulWindow().with_tumbling_window(tumbling).with_persistence(),
         {**base, "topology.state.provider": "memory"}),
        ("stateful window, embedded store",
         StatefulWindow().with_tumbling_window(tumbling).with_persistence(), embedded),
    ]
    if redis_port is not None:
        runs.append(("stateful window, Redis",
                     StatefulWindow().with_tumbling_window(tumbling).with_persistence(),
                     {**base, "topology.state.provider": "redis",
                      "topology.state.provider.config": {"port": redis_port}}))
    runs.append(("stateful Count(30000), 10,000 in memory, embedded",
                 StatefulWindow().with_tumbling_window(Count(30_000)).with_persistence()
                 .with_max_events_in_memory(10_000), embedded))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of shorter runs")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    figures.add_flag(parser)
    args = parser.parse_args()
    seconds = args.seconds or (3.0 if args.quick else 6.0)
    rounds = args.rounds or (1 if args.quick else 2)
    tune_for_streaming()
    print(f"stateful against plain windows, local mode, {seconds:g}s per run, {rounds} rounds "
          f"in turn, python {sys.version.split()[0]}, pid {os.getpid()}; "
          f"{build_mode.describe()}")
    with tempfile.TemporaryDirectory(prefix="stormlet-bench-") as tmp:
        server, port = with_redis(Path(tmp) / "redis")
        try:
            runs = settings(Path(tmp), port)
            if server is None:
                print("stateful window, Redis: skipped (redis-server is not installed: "
                      "bash deploy/redis.sh install)")
            results: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in runs}
            for round_ in range(rounds):
                for label, bolt, conf in runs:
                    # Until windows are full and checkpoints steady.
                    result = measure(topology(bolt), conf, seconds, 3.0)
                    rate = result["acked_words_per_sec"]
                    us = result["cpu_cores"] / rate * 1e6 if rate else float("nan")
                    results[label].append((rate, us))
                    print(f"  round {round_ + 1}: {label:<50} {rate:>10,.0f} acked words/s "
                          f"{us:6.2f} CPU µs/word  (failed {result['failed']})")
        finally:
            if server is not None:
                server.kill()
                server.wait()
    plain_rate = statistics.median(r for r, _ in results[runs[0][0]])
    plain_us = statistics.median(u for _, u in results[runs[0][0]])
    print("medians:")
    median_us = {}
    for label, _, _ in runs:
        rate = statistics.median(r for r, _ in results[label])
        us = median_us[label] = statistics.median(u for _, u in results[label])
        print(f"{label:<52} {rate:>10,.0f} acked words/s {rate / plain_rate:5.2f}x plain  "
              f"{us:6.2f} CPU µs/word {us / plain_us:5.2f}x plain")
    # LATEST.md's row (benchmarks/diary.py renders it from the records): the persistent
    # windows' CPU a word against the plain window's, then the large window's.
    persistent = [label for label, _, _ in runs[1:] if label.startswith("stateful window, ")]
    large = runs[-1][0]
    figures.Recorder("stateful_windows", enabled=args.record).record(
        "a stateful window with persistence against a plain window, tumbling `Count(1000)`, "
        "local mode: CPU a word (medians of rounds, in turn)",
        " / ".join(f"{median_us[label]:.1f}" for label in persistent)
        + f" µs against {plain_us:.1f} µs ("
        + " / ".join(f"{median_us[label] / plain_us:.2f}" for label in persistent) + "×: "
        + ", ".join(label.removeprefix("stateful window, ") for label in persistent)
        + f"); a `Count(30000)` window with 10,000 in memory {median_us[large]:.1f} µs "
        f"({median_us[large] / plain_us:.2f}×)", detail=f"medians of {rounds} rounds")


if __name__ == "__main__":
    main()
