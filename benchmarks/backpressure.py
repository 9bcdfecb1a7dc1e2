"""Backpressure on a real cluster: a fast spout in one worker, a slow bolt in the other.

    python benchmarks/backpressure.py [--seconds 60] [--bolt-ms 2]

Runs the slow-bolt topology (tests/cluster_topologies/slow_bolt.py) on ZooKeeper, nimbus and one
supervisor with two slots, once without and once with ``topology.max.spout.pending``, and prints
for each: the acked rate beside the bolt's own rate, messages in flight, timeouts, and the
resident memory of both workers at the start of the measurement, at its end, and at most.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import figures

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from cluster_support import LoopbackCluster, wait_until  # noqa: E402

TOPOLOGY = REPO / "tests" / "cluster_topologies" / "slow_bolt.py"


def status(directory: Path, name: str) -> dict:
    try:
        return json.loads((directory / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def scenario(seconds: float, bolt_ms: float, max_pending: int | None) -> dict:
    base = Path(tempfile.mkdtemp(prefix="stormlet-backpressure-"))
    out = base / "status"
    out.mkdir()
    conf = [f"slow.dir={out}", f"slow.ms={bolt_ms}"]
    if max_pending:
        conf.append(f"topology.max.spout.pending={max_pending}")
    with LoopbackCluster(base) as cluster:
        cluster.add_nimbus()
        cluster.add_supervisor("s1", 2)
        time.sleep(2)
        submitted = cluster.cli("submit", str(TOPOLOGY), "--name", "slow",
                                *[a for pair in conf for a in ("-c", pair)])
        if submitted.returncode:
            raise SystemExit(submitted.stderr)
        wait_until(lambda: status(out, "bolt").get("executed", 0) > 0, 90, "the bolt to start")
        time.sleep(5)   # warm-up: queues fill to their steady state
        first_spout, first_bolt = status(out, "spout"), status(out, "bolt")
        time.sleep(seconds)
        spout, bolt = status(out, "spout"), status(out, "bolt")
    shutil.rmtree(base, ignore_errors=True)
    elapsed = spout["time"] - first_spout["time"]
    return {
        "max_pending": max_pending,
        "acked_per_sec": (spout["acked"] - first_spout["acked"]) / elapsed,
        "bolt_rate": 1000 / bolt_ms,
        "in_flight_end": spout["in_flight"], "max_in_flight": spout["max_in_flight"],
        "failed": spout["failed"], "timeouts": spout["timeouts"], "acked": spout["acked"],
        "spout_rss_mb": (first_spout["rss"] / 2**20, spout["rss"] / 2**20,
                         spout["max_rss"] / 2**20),
        "bolt_rss_mb": (first_bolt["rss"] / 2**20, bolt["rss"] / 2**20, bolt["max_rss"] / 2**20),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--bolt-ms", type=float, default=2.0)
    parser.add_argument("--max-pending", type=int, default=1000)
    figures.add_flag(parser)
    args = parser.parse_args()
    recorder = figures.Recorder("backpressure", enabled=args.record)
    print(f"backpressure: spout -> bolt sleeping {args.bolt_ms:g} ms a tuple, in another worker; "
          f"{args.seconds:g}s measured after a 5 s warm-up")
    for max_pending in (None, args.max_pending):
        r = scenario(args.seconds, args.bolt_ms, max_pending)
        label = f"max.spout.pending={max_pending}" if max_pending else "no max.spout.pending"
        mb = "start {:.0f} / end {:.0f} / max {:.0f} MB"
        print(f"{label}: acked {r['acked_per_sec']:,.0f}/s "
              f"(bolt's own rate {r['bolt_rate']:,.0f}/s);"
              f" in flight {r['in_flight_end']:,} at the end, {r['max_in_flight']:,} at most; "
              f"{r['acked']:,} acked, {r['failed']:,} failed ({r['timeouts']:,} timeouts)")
        print(f"  spout worker memory {mb.format(*r['spout_rss_mb'])}; "
              f"bolt worker memory {mb.format(*r['bolt_rss_mb'])}")
        if max_pending is None:
            # LATEST.md's row (benchmarks/diary.py renders it from the records): backpressure
            # alone, with no max.spout.pending to bound what is in flight.
            recorder.record(
                f"backpressure: spout in one worker, a bolt taking {args.bolt_ms:g} ms a tuple in "
                f"the other (its own rate {r['bolt_rate']:,.0f}/s)",
                f"{r['acked_per_sec']:,.0f} acked/s, {r['timeouts']:,} timeouts, at most "
                f"{r['max_in_flight']:,} in flight, "
                f"{max(r['spout_rss_mb'][2], r['bolt_rss_mb'][2]):.0f} MB",
                detail=f"no max.spout.pending; the larger worker's peak memory; {args.seconds:g} s")


if __name__ == "__main__":
    main()
