"""stormlet's word count over the shared sentences, in local mode (one process).

    python benchmarks/peers/run_stormlet.py --mode basic|anchored|unacked --sentences N

A spout emits the N sentences once, then nothing; a split bolt (shuffle grouping) emits each
word; a count bolt (fields grouping on "word") keeps a dict. One task each, as in
benchmarks/wordcount.py. Modes:

- ``basic``: acking on, the split as a ``BasicBolt`` (the README's idiom);
- ``anchored``: acking on, the split as a plain ``Bolt`` that anchors each word and acks by hand;
- ``unacked``: acking off (``topology.acker.executors`` 0), the spout emits without a msg id.

Timed from just before submit until the spout has had every sentence acked (tracked modes: the
spout notes that moment itself) or the count bolt has executed every word (``unacked``: seen
in its task's ``executed`` metric, which this thread reads every POLL_SECS, so the figure is
at most that late). Every mode runs benchmarks/wordcount.py's count bolt with nothing added.
The count bolt's dict is then read from the live instance. Prints one JSON line: seconds,
cpu_seconds (every thread of this process), gc_seconds (in cyclic garbage collections, from
submit to the end), words, counts (``[[word, count], ...]``), failed.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
import time
from pathlib import Path

from sentences import DEFAULT_N, WORDS_PER_SENTENCE, sentences

from stormlet import LocalCluster, Spout, TopologyBuilder
from stormlet.runtime.tuning import tune_for_streaming

# The split bolts are benchmarks/wordcount.py's, so both benchmarks measure the same code.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from wordcount import BasicSplitBolt, CountBolt, SplitBolt  # noqa: E402

MODES = ("basic", "anchored", "unacked")
MAX_SPOUT_PENDING = 2000  # benchmarks/wordcount.py's value, for the tracked modes
TIMEOUT_SECS = 600
# How often the unacked run reads the count bolt's executed metric (one read: ~0.1 ms of this
# thread, which takes the interpreter's lock from the executors).
POLL_SECS = 0.01


@functools.cache
def shared_sentences(n: int) -> list[str]:
    """Made before submit and handed to the spout's copy in ``open``, untimed."""
    return sentences(n)


class SentenceSpout(Spout):
    """Emits each sentence once; tracked, it notes when the last of them is acked."""

    outputs = ["sentence"]

    def __init__(self, n: int, tracked: bool):
        self.n, self.tracked = n, tracked

    def open(self, conf, context, collector):
        self.collector = collector
        self.items = shared_sentences(self.n)
        self.emitted = self.acked = self.failed = 0
        self.first_failure: str | None = None
        self.finished: float | None = None

    def next_tuple(self):
        if self.emitted < self.n:
            sentence = self.items[self.emitted]
            self.emitted += 1  # msg ids 1..n
            self.collector.emit([sentence], msg_id=self.emitted if self.tracked else None)

    def ack(self, msg_id):
        self.acked += 1
        if self.acked == self.n:
            self.finished = time.perf_counter()

    def fail(self, msg_id, reason):
        self.failed += 1
        self.first_failure = self.first_failure or str(reason)


def build(mode: str, n: int):
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout(n, tracked=mode != "unacked"))
    split = BasicSplitBolt() if mode == "basic" else SplitBolt()
    b.set_bolt("split", split).shuffle_grouping("sentences")
    b.set_bolt("count", CountBolt()).fields_grouping("split", ["word"])
    return b.build()


def config(mode: str) -> dict:
    tracked = mode != "unacked"
    return {"topology.max.spout.pending": MAX_SPOUT_PENDING if tracked else None,
            "topology.acker.executors": 1 if tracked else 0}


class CollectionTimer:
    """The seconds spent in the cyclic garbage collector while it is installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started: float | None = None

    def __call__(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:   # a collection under way when installed is not timed
            self.seconds += time.perf_counter() - self._started
            self._started = None


def run(mode: str, n: int) -> dict:
    shared_sentences(n)
    topology = build(mode, n)
    collections = CollectionTimer()
    with LocalCluster() as cluster:
        gc.callbacks.append(collections)
        start, cpu_start = time.perf_counter(), time.process_time()
        cluster.submit("peers", config(mode), topology)
        spout, = cluster.instances("peers", "sentences")
        count, = cluster.instances("peers", "count")
        words = n * WORDS_PER_SENTENCE

        ended: list[float] = []

        def done() -> bool:
            if mode != "unacked":
                end = spout.finished
            elif cluster.metrics("peers")["count"]["executed"] >= words:
                end = time.perf_counter()
            else:
                end = None
            if end is not None:
                ended.append(end)
            return end is not None or spout.failed > 0

        try:
            cluster.wait_for(done, timeout=TIMEOUT_SECS, interval=POLL_SECS)
        except TimeoutError:
            sys.exit(f"stormlet {mode}: not done after {TIMEOUT_SECS}s: emitted {spout.emitted}, "
                     f"acked {spout.acked}, words counted {sum(count.counts.values())}")
        cpu = time.process_time() - cpu_start
        gc.callbacks.remove(collections)
        if spout.failed:
            sys.exit(f"stormlet {mode}: a sentence failed: {spout.first_failure}")
        seconds = ended[0] - start
        counts = dict(count.counts)
        cluster.kill("peers", wait_secs=5)
    return {"seconds": seconds, "cpu_seconds": cpu, "gc_seconds": collections.seconds,
            "words": sum(counts.values()),
            "counts": sorted(counts.items()), "failed": spout.failed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--sentences", type=int, default=DEFAULT_N)
    args = parser.parse_args()
    tune_for_streaming()  # as `stormlet local` and workers do
    print(json.dumps(run(args.mode, args.sentences)))


if __name__ == "__main__":
    main()
