"""What the metrics cost: the local word count (benchmarks/wordcount.py) while a reporter takes
worker snapshots as a cluster worker does, at the default interval and far more often.

    python benchmarks/metrics_cost.py [--seconds 8]

Prints one snapshot's time and size (JSON and msgpack, as sent to nimbus), and acked words per
second with no extra snapshots, one every 5 s (the default report interval) and ten a second.
The per-tuple counting itself is always on; `python benchmarks/wordcount.py` at an older commit
gives the figure without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import figures
import msgpack
from wordcount import build

from stormlet import LocalCluster
from stormlet.runtime.tuning import tune_for_streaming


def run(seconds: float, every: float | None) -> tuple[float, list[float], dict]:
    conf = {"topology.max.spout.pending": 2000, "topology.acker.executors": 1}
    with LocalCluster() as cluster:
        cluster.submit("bench", conf, build(True, None))
        time.sleep(1.0)
        stop = threading.Event()
        costs: list[float] = []
        last: dict = {}

        def report() -> None:
            nonlocal last
            while not stop.wait(every):
                started = time.perf_counter()
                last = cluster.metrics_snapshot("bench")
                costs.append(time.perf_counter() - started)

        if every:
            threading.Thread(target=report, daemon=True).start()
        start_words = cluster.metrics("bench")["count"]["executed"]
        start = time.monotonic()
        time.sleep(seconds)
        words = cluster.metrics("bench")["count"]["executed"] - start_words
        elapsed = time.monotonic() - start
        stop.set()
        if not last:
            last = cluster.metrics_snapshot("bench")
        cluster.kill("bench", wait_secs=5)
    return words / elapsed, costs, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    figures.add_flag(parser)
    args = parser.parse_args()
    tune_for_streaming()
    print(f"metrics cost: local word count, {args.seconds:g}s per run")
    all_costs = []
    for label, every in (("no extra snapshots", None), ("a snapshot every 5 s", 5.0),
                         ("ten snapshots a second", 0.1)):
        rate, costs, snapshot = run(args.seconds, every)
        line = f"{label}: {rate:,.0f} acked words/s"
        if costs:
            line += f"; one snapshot takes {statistics.median(costs) * 1000:.1f} ms (median)"
            all_costs += costs
        print(line)
    json_bytes = len(json.dumps(snapshot))
    print(f"one snapshot of {len(snapshot['tasks'])} tasks: {json_bytes:,} bytes as JSON, "
          f"{len(msgpack.packb(snapshot, use_bin_type=True)):,} as msgpack")
    if all_costs:
        # LATEST.md's row (benchmarks/diary.py renders it from the records).
        figures.Recorder("metrics_cost", enabled=args.record).record(
            "one worker's metrics snapshot (4 tasks, sent every 5 s)",
            statistics.median(all_costs) * 1000, unit="ms",
            detail=f"median of {len(all_costs)}; {json_bytes / 1000:.1f} KB as JSON, "
                   f"{len(snapshot['tasks'])} tasks")


if __name__ == "__main__":
    main()
