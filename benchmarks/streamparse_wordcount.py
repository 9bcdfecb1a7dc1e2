"""streamparse's quickstart word count on stormlet: tuples per second through the project as it is
(tests/streamparse_projects/wordcount: a spout cycling four words, untracked, into a counting
bolt with par=2 under a fields grouping), the same shape with every spout tuple tracked by the
acker, and the same tracked shape written as stormlet components, in one run.

streamparse itself publishes about 1,000-10,000 tuples/s for this kind of topology (JSON over
stdin/stdout to a JVM per component).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import cycle
from pathlib import Path

from stormlet import Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet.loader import load_topology_file
from stormlet.runtime import build_mode
from stormlet.runtime.tuning import tune_for_streaming
from stormlet.streamparse import Bolt as StreamparseBolt
from stormlet.streamparse import Grouping, Topology
from stormlet.streamparse import Spout as StreamparseSpout
from stormlet.streamparse.build import build

QUICKSTART = (Path(__file__).resolve().parent.parent / "tests" / "streamparse_projects"
              / "wordcount" / "topologies" / "wordcount.py")
WORDS = ["dog", "cat", "zebra", "elephant"]
PENDING = 2000


class TrackedWordSpout(StreamparseSpout):
    outputs = ["word"]

    def initialize(self, stormconf, context):
        self.words = cycle(WORDS)
        self.next_id = 0

    def next_tuple(self):
        self.next_id += 1
        self.emit([next(self.words)], tup_id=self.next_id)


class CountBolt(StreamparseBolt):
    outputs = ["word", "count"]

    def initialize(self, conf, ctx):
        self.counts = {}

    def process(self, tup):
        word = tup.values.word
        count = self.counts[word] = self.counts.get(word, 0) + 1
        self.emit([word, count])


class TrackedWordCount(Topology):
    word_spout = TrackedWordSpout.spec()
    count_bolt = CountBolt.spec(inputs={word_spout: Grouping.fields("word")}, par=2)


class NativeWordSpout(Spout):
    outputs = ["word"]

    def open(self, conf, context, collector):
        self.collector, self.words, self.next_id = collector, cycle(WORDS), 0

    def next_tuple(self):
        self.next_id += 1
        self.collector.emit([next(self.words)], msg_id=self.next_id)


class NativeCountBolt(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tup):
        word = tup.values[0]
        count = self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, count], anchors=tup)
        self.collector.ack(tup)


def native_topology():
    builder = TopologyBuilder()
    builder.set_spout("word_spout", NativeWordSpout())
    builder.set_bolt("count_bolt", NativeCountBolt(), parallelism=2).fields_grouping(
        "word_spout", ["word"])
    return builder.build()


def measure(topology, conf: dict, seconds: float) -> dict:
    """Tuples/s executed by count_bolt and acked at word_spout, after a one-second warm-up."""
    with LocalCluster() as cluster:
        cluster.submit("bench", conf, topology)
        time.sleep(1.0)

        def counters():
            metrics = cluster.metrics("bench")
            return metrics["count_bolt"]["executed"], metrics["word_spout"]["acked"]

        executed0, acked0 = counters()
        start, cpu0 = time.monotonic(), time.process_time()
        time.sleep(seconds)
        executed, acked = counters()
        elapsed = time.monotonic() - start
        cpu = time.process_time() - cpu0
        cluster.kill("bench", wait_secs=5)
    return {"executed": (executed - executed0) / elapsed, "acked": (acked - acked0) / elapsed,
            "cores": cpu / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    tune_for_streaming()
    print(f"streamparse quickstart word count, local mode, {args.seconds:g}s per run, python "
          f"{sys.version.split()[0]}, pid {os.getpid()}; {build_mode.describe()}")
    quickstart, quickstart_conf = load_topology_file(QUICKSTART)
    tracked_conf = {"topology.max.spout.pending": PENDING}
    runs = [
        ("the quickstart project as it is (untracked)", quickstart, quickstart_conf, "executed"),
        ("streamparse components, every tuple tracked", build(TrackedWordCount)[0],
         tracked_conf, "acked"),
        ("the same written as stormlet components", native_topology(), tracked_conf, "acked"),
    ]
    for label, topology, conf, figure in runs:
        result = measure(topology, conf, args.seconds)
        print(f"{label:<48} {result[figure]:>10,.0f} tuples/s {figure:<8} "
              f"({result[figure] / 10_000:,.0f}x streamparse's 10k; cpu {result['cores']:.2f} "
              f"cores)")


if __name__ == "__main__":
    main()
