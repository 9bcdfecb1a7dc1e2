"""Windowed and stateful word counts against the plain one, in local mode, in one run.

    python benchmarks/state_and_windows.py            # all figures
    python benchmarks/state_and_windows.py --quick    # shorter runs

The same spout and split as benchmarks/wordcount.py (acking on, split anchoring by hand); the
counting bolt ("count") is, in turn: a plain dict count; a windowed count over a tumbling
Count(1000) window; a windowed count over a sliding Duration window (2 s, sliding 500 ms,
counting what enters and leaves); a stateful count checkpointed every second to the embedded
SQLite store; the same on a Redis server (started from deploy/redis.sh on loopback; skipped with
a line if redis-server is not installed). Prints acked words/s (sentences acked times their
words) and each figure's ratio to the plain count.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the tests' free_port: below the ephemeral range

import figures  # noqa: E402
from wordcount import WORDS_PER_SENTENCE, CountBolt, SentenceSpout, SplitBolt, measure  # noqa: E402
from zookeeper_server import free_port  # noqa: E402

from stormlet import TopologyBuilder  # noqa: E402
from stormlet.runtime import build_mode  # noqa: E402
from stormlet.runtime.tuning import tune_for_streaming  # noqa: E402
from stormlet.state import StatefulBolt  # noqa: E402
from stormlet.windowing import Count, Duration, WindowedBolt  # noqa: E402


class WindowCount(WindowedBolt):
    """Counts the words in each window, as they enter and leave it."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, window):
        self.counts.update(t.values[0] for t in window.get_new())
        self.counts.subtract(t.values[0] for t in window.get_expired())


class StateCount(StatefulBolt):
    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        word = tup.values[0]
        self.state.put(word, self.state.get(word, 0) + 1)
        self.collector.ack(tup)


def topology(count_bolt):
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout(True, None))
    b.set_bolt("split", SplitBolt()).shuffle_grouping("sentences")
    b.set_bolt("count", count_bolt).fields_grouping("split", ["word"])
    return b.build()


def with_redis(directory: Path):
    """A Redis server on loopback for the run (``None`` if it is not installed)."""
    if shutil.which("redis-server") is None:
        return None, None
    port = free_port()
    server = subprocess.Popen(["bash", str(REPO / "deploy" / "redis.sh"), "start", "--port",
                               str(port), "--data-dir", str(directory), "--foreground"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                          text=True).stdout.strip() == "PONG":
            return server, port
        time.sleep(0.1)
    server.kill()
    return None, None


def record(enabled: bool, rates: dict[str, float], seconds: float) -> None:
    """LATEST.md's row (benchmarks/diary.py renders it from the records): each setting's acked
    words/s against the plain count's, in the order they ran."""
    plain_label, *others = rates
    plain = rates[plain_label]
    figures.Recorder("state_and_windows", enabled=enabled).record(
        "windows and state against a plain count, local mode, acking on: acked words/s of each "
        "against the plain count's",
        " / ".join(f"{rates[label] / plain:.2f}" for label in others) + "× ("
        + "; ".join(others) + f") of the plain count's {plain:,.0f} words/s",
        detail=f"one run of {seconds:g} s each")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    figures.add_flag(parser)
    args = parser.parse_args()
    seconds = 3.0 if args.quick else 8.0
    tune_for_streaming()
    print(f"windowed and stateful word count, local mode, {WORDS_PER_SENTENCE} words/sentence, "
          f"{seconds:g}s per run, python {sys.version.split()[0]}, pid {os.getpid()}; "
          f"{build_mode.describe()}")
    base: dict[str, Any] = {"topology.max.spout.pending": 2000, "topology.acker.executors": 1}
    runs = [
        ("plain count (no window, no state)", CountBolt(), base),
        ("tumbling Count(1000) window", WindowCount().with_tumbling_window(Count(1000)), base),
        # A 2.5 s span holds far more than 2000 sentences: pending must cover it.
        ("sliding Duration(2 s, 500 ms) window",
         WindowCount().with_window(Duration(seconds=2), Duration(ms=500)),
         {**base, "topology.max.spout.pending": 200_000}),
    ]
    with tempfile.TemporaryDirectory(prefix="stormlet-bench-") as tmp:
        # Acks wait for the checkpoint, so at most max.spout.pending sentences are acked per
        # interval: pending must cover an interval's worth (and the queues the checkpoint
        # crosses). Measured here: 5,000 caps the rate at 50k words/s, 50,000 does not.
        state = {**base, "topology.state.checkpoint.interval.ms": 1000,
                 "topology.max.spout.pending": 50_000}
        runs.append(("stateful, embedded store, checkpoint every 1 s", StateCount(),
                     {**state, "stormlet.state.dir": str(Path(tmp) / "state")}))
        server, port = with_redis(Path(tmp) / "redis")
        if server is not None:
            runs.append(("stateful, Redis, checkpoint every 1 s", StateCount(),
                         {**state, "topology.state.provider": "redis",
                          "topology.state.provider.config": {"port": port}}))
        try:
            plain = None
            rates = {}
            for label, bolt, conf in runs:
                # Until windows are full and checkpoints steady.
                warmup = 3.0 if "sliding" in label or "stateful" in label else None
                result = measure(topology(bolt), conf, seconds, warmup)
                rate = rates[label] = result["acked_words_per_sec"]
                plain = plain or rate
                print(f"{label:<50} {rate:>10,.0f} acked words/s  {rate / plain:5.2f}x plain  "
                      f"(cpu {result['cpu_cores']:.2f} cores, failed {result['failed']})")
            if server is None:
                print("stateful, Redis: skipped (redis-server is not installed: "
                      "bash deploy/redis.sh install)")
            record(args.record, rates, seconds)
        finally:
            if server is not None:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()
