"""Word-count benchmark for local mode (one process, so one core: the GIL).

    python benchmarks/wordcount.py            # all figures
    python benchmarks/wordcount.py --quick    # shorter runs

Prints words per second with acking on (split anchoring by hand, and as a BasicBolt) and off,
complete latency p50/p99 at full speed and with the spout throttled to half the acked rate, and the
acker ledger's memory per pending root with 1,000,000 roots pending.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
import tracemalloc

import figures

from stormlet import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet.runtime import build_mode
from stormlet.runtime.acker import Acker
from stormlet.runtime.protocol import AckInit
from stormlet.runtime.tuning import tune_for_streaming

WORDS = ("the cow jumped over the moon an apple a day keeps the doctor away four score and seven "
         "years ago snow white and the seven dwarfs i am at two with nature").split()
WORDS_PER_SENTENCE = 10


class SentenceSpout(Spout):
    outputs = ["sentence"]

    def __init__(self, tracked: bool = True, rate: float | None = None):
        self.tracked = tracked
        self.rate = rate  # sentences per second; None = as fast as possible

    def open(self, conf, context, collector):
        self.collector = collector
        rng = random.Random(42)
        self.sentences = [" ".join(rng.choice(WORDS) for _ in range(WORDS_PER_SENTENCE))
                          for _ in range(1000)]
        self.n = 0
        # The rate's clock starts at the first call, which comes once the topology is active:
        # started at open(), it would owe the spout a burst of everything due while the other
        # executors got ready, and that burst (not the steady rate) would make the latency tail.
        self.started: float | None = None

    def next_tuple(self):
        if self.started is None:
            self.started = time.monotonic()
        if self.rate is not None and self.n > (time.monotonic() - self.started) * self.rate:
            return
        self.n += 1
        sentence = self.sentences[self.n % 1000]
        self.collector.emit([sentence], msg_id=self.n if self.tracked else None)


class SplitBolt(Bolt):
    outputs = ["word"]

    def execute(self, tup):
        emit = self.collector.emit
        for word in tup.values[0].split():
            emit([word], tup)
        self.collector.ack(tup)


class BasicSplitBolt(BasicBolt):
    """The same split in the README's idiom: anchoring and the ack are the runtime's."""

    outputs = ["word"]

    def execute(self, tup, collector):
        emit = collector.emit
        for word in tup.values[0].split():
            emit([word])


class CountBolt(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts = {}

    def execute(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.ack(tup)


def build(tracked: bool, rate: float | None, basic: bool = False):
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout(tracked, rate))
    b.set_bolt("split", BasicSplitBolt() if basic else SplitBolt()).shuffle_grouping("sentences")
    b.set_bolt("count", CountBolt()).fields_grouping("split", ["word"])
    return b.build()


def run(tracked: bool, seconds: float, rate: float | None = None, pending: int = 2000,
        basic: bool = False) -> dict:
    conf = {"topology.max.spout.pending": pending if tracked else None,
            "topology.acker.executors": 1 if tracked else 0}
    return measure(build(tracked, rate, basic), conf, seconds)


def measure(topology, conf: dict, seconds: float, warmup: float | None = None) -> dict:
    """Run ``topology`` (a "sentences" spout; its words counted by the "count" bolt) for
    ``seconds`` after a warm-up: words/s executed by "count", words/s acked (sentences acked
    times their words), CPU cores used, complete latency and failures."""
    with LocalCluster() as cluster:
        cluster.submit("bench", conf, topology)
        time.sleep(min(1.0, seconds / 4) if warmup is None else warmup)

        def counters():
            metrics = cluster.metrics("bench")
            return metrics["count"]["executed"], metrics["sentences"]["acked"]

        start_words, start_acked = counters()
        start = time.monotonic()
        cpu_start = time.process_time()
        time.sleep(seconds)
        words, acked = counters()
        elapsed = time.monotonic() - start
        cpu = time.process_time() - cpu_start
        report = cluster.kill("bench", wait_secs=5)
    latency = report.metrics["sentences"]["complete_latency_ms"]
    return {"words_per_sec": (words - start_words) / elapsed,
            "acked_words_per_sec": (acked - start_acked) * WORDS_PER_SENTENCE / elapsed,
            "cpu_cores": cpu / elapsed, "p50_ms": latency["p50"], "p99_ms": latency["p99"],
            "failed": report.metrics["sentences"]["failed"]}


def acker_bytes_per_root(roots: int = 1_000_000) -> float:
    rng = random.Random(7)
    batch: list[int] = []
    for _ in range(roots):
        batch.extend(AckInit(rng.getrandbits(64) or 1, rng.getrandbits(64) or 1, 1))
    gc.collect()
    tracemalloc.start()
    acker = Acker()
    acker.inits(batch, 1, {}, {})
    size, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(acker) == roots
    return size / roots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--acked-only", action="store_true",
                        help="only the acking-on run, as one JSON line (cluster_wordcount.py)")
    figures.add_flag(parser)
    args = parser.parse_args()
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    tune_for_streaming()  # as `stormlet local` and workers do
    if args.acked_only:
        print(json.dumps(run(True, seconds)))
        return
    print(f"word count, local mode, 1 spout -> split -> count, {WORDS_PER_SENTENCE} words/sentence,"
          f" {seconds:g}s per run, python {sys.version.split()[0]}, pid {os.getpid()}; "
          f"{build_mode.describe()}")
    # The measures are LATEST.md's rows (benchmarks/diary.py renders them from the records).
    recorder = figures.Recorder("wordcount", enabled=args.record)
    on = run(True, seconds)
    print(f"acking on : {on['words_per_sec']:>10,.0f} words/s  "
          f"complete latency p50 {on['p50_ms']} ms  p99 {on['p99_ms']} ms  "
          f"(cpu {on['cpu_cores']:.2f} cores, failed {on['failed']})")
    recorder.record("local mode, one task per component: acked words/s, acking on, the split "
                    "anchoring by hand", on["words_per_sec"], unit="words/s")
    basic = run(True, seconds, basic=True)
    print(f"acking on, split as a BasicBolt: {basic['words_per_sec']:>10,.0f} words/s  "
          f"(cpu {basic['cpu_cores']:.2f} cores, failed {basic['failed']})")
    recorder.record("the same, the split as a `BasicBolt`", basic["words_per_sec"],
                    unit="words/s")
    off = run(False, seconds)
    print(f"acking off: {off['words_per_sec']:>10,.0f} words/s  (cpu {off['cpu_cores']:.2f} cores)")
    recorder.record("the same, acking off", off["words_per_sec"], unit="words/s")
    half = on["words_per_sec"] / 2 / WORDS_PER_SENTENCE
    throttled = run(True, seconds, rate=half)
    print(f"throttled to half ({half * WORDS_PER_SENTENCE:,.0f} words/s): "
          f"{throttled['words_per_sec']:>10,.0f} words/s  complete latency "
          f"p50 {throttled['p50_ms']} ms  p99 {throttled['p99_ms']} ms")
    recorder.record("complete latency with the spout throttled to half of peak: p50 / p99",
                    (throttled["p50_ms"], throttled["p99_ms"]), unit="ms")
    per_root = acker_bytes_per_root()
    print(f"acker memory: {per_root:.1f} bytes per pending root (1,000,000 roots pending)")
    recorder.record("acker memory per pending root, 1,000,000 pending", per_root, unit="bytes")


if __name__ == "__main__":
    main()
