"""What it costs a word to cross between workers, on one thread, without sockets or threads.

    python benchmarks/crossing.py [--batches 2000] [--runs 7] [--stages]

The word count's split and count bolts (benchmarks/wordcount.py, acking on) run by hand, a
batch at a time, as their executors run them: the split executes 100 sentences (1,000 words)
and flushes; the count executes the batch and flushes its acks. The batch goes either

- to a local inbox, as between two executors of one worker, or
- through everything a batch for another worker goes through but the sockets: the collector's
  buffer for a remote task, its packing (``wire.encode_data``) on the executor's thread, the
  sender's frame (``wire.encode_frame``), the receiver's decoding (``FrameDecoder.decode``)
  and the bolt's unpacking (``EncodedBatch.tuples``).

Prints CPU nanoseconds per word of each (the median of ``--runs`` alternating runs) and the
median difference of each crossing run from the local run just before it (this machine's speed
drifts within seconds, so runs are compared in pairs): what crossing adds to a word in the
threads that run the bolts, apart from the transport threads, the kernel and the scheduling,
which ``cluster_wordcount.py`` measures with them. On one thread and with no other process it
is steadier than the cluster benchmark, but a change of a few percent of the difference still
needs alternating runs to show. ``--stages`` then times one more run of each stage by stage
(the timing itself adds a little to each): where a crossing word's time goes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from collections import defaultdict
from typing import Any, cast

import figures
import zmq
from wordcount import WORDS, WORDS_PER_SENTENCE, CountBolt, SentenceSpout, SplitBolt

from stormlet import TopologyBuilder
from stormlet.cluster.transport import Sender
from stormlet.cluster.wire import FrameDecoder, encode_frame
from stormlet.runtime import build_mode
from stormlet.runtime.bolt_executor import BoltTask
from stormlet.runtime.inbox import Inbox
from stormlet.runtime.metrics import TaskMetrics
from stormlet.runtime.numbering import TopologyLayout
from stormlet.runtime.routing import StreamRoute
from stormlet.runtime.task_collectors import BoltCollector
from stormlet.runtime.transfer import Transfer
from stormlet.runtime.tuning import tune_for_streaming
from stormlet.tuples import StreamInfo, Tuple

TOPOLOGY = "crossing"
SENTENCES_PER_BATCH = 100   # 1,000 words: about a batch's size between the cluster's workers


def word_count_layout() -> TopologyLayout:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout())
    builder.set_bolt("split", SplitBolt()).shuffle_grouping("sentences")
    builder.set_bolt("count", CountBolt()).fields_grouping("split", ["word"])
    return TopologyLayout(TOPOLOGY, builder.build(), 1)


class Discard:
    """The acker's route: its messages are not what is measured."""

    def put(self, message: tuple) -> None:
        pass


class Pipeline:
    """A split task and a count task wired as in a worker, the count task local or remote."""

    def __init__(self, layout: TopologyLayout, crossing: bool):
        self.crossing = crossing
        (self.spout_task,) = layout.component_tasks["sentences"]
        (split_task,) = layout.component_tasks["split"]
        (count_task,) = layout.component_tasks["count"]
        routes: list = [None] * (layout.max_task + 1)
        for acker in layout.acker_tasks:
            routes[acker] = Discard()
        # A sender that is never started: its queue is where the executor hands a batch over.
        self.sender = Sender(zmq.Context.instance(), threading.Event(), TOPOLOGY)
        self.inbox = Inbox(capacity=1 << 30)
        routes[count_task] = self.sender.route("tcp://127.0.0.1:1") if crossing else self.inbox
        self.decoder = FrameDecoder(layout, TOPOLOGY)

        split_metrics = TaskMetrics("split", split_task, None, ["default"])
        self.split_transfer = Transfer(split_task, routes, [count_task], layout.acker_tasks,
                                       threading.Event(), split_metrics)
        to_count = StreamRoute(StreamInfo("split", "default", ["word"]), direct=False)
        to_count.choosers.append(lambda values: [count_task])
        to_count.seal()
        self.split = SplitBolt()
        # No context (the bolts read none); the runtime's collector, which mypy does not take
        # for an OutputCollector (its emit's anchors are annotated without None).
        self.split.prepare({}, cast(Any, None), cast(Any, BoltCollector(
            "split", split_task, {"default": to_count}, self.split_transfer, True, split_metrics)))

        count_metrics = TaskMetrics("count", count_task, None, ["default"])
        self.count_transfer = Transfer(count_task, routes, [], layout.acker_tasks,
                                       threading.Event(), count_metrics)
        collector = BoltCollector("count", count_task, {}, self.count_transfer, True,
                                  count_metrics)
        self.count = CountBolt()
        self.count.prepare({}, cast(Any, None), cast(Any, collector))
        self.count_task = BoltTask(count_task, "count", self.count, {}, None, self.count_transfer,
                                   count_metrics, collector=collector)

    def run(self, sentences: list[Tuple], stages: defaultdict[str, float] | None = None) -> None:
        """One batch: split the sentences, hand the words over, count them. With ``stages``,
        adds each stage's CPU seconds to it."""
        lap = Laps(stages)
        for sentence in sentences:
            self.split.execute(sentence)
        lap("split executes")
        self.split_transfer.flush()
        lap("split flushes (crossing: packs)")
        if self.crossing:
            _address, message = self.sender.queue.get_nowait()
            (message,) = self.decoder.decode(encode_frame([message], TOPOLOGY))
            lap("frame encoded and decoded")
            tuples = message[3].tuples()
            lap("count unpacks")
        else:
            tuples = self.inbox.get_nowait()[3]
            lap("inbox")
        self.count_task.run_batch(tuples, time.monotonic())
        del tuples   # as the executor drops a batch it ran: the tuples die here
        lap("count executes")
        self.count_transfer.flush()
        lap("count flushes (acks)")


class Laps:
    """Adds the CPU time since the last lap to ``stages[name]``; nothing without ``stages``."""

    def __init__(self, stages: defaultdict[str, float] | None):
        self.stages = stages
        self.last = time.process_time() if stages is not None else 0.0

    def __call__(self, name: str) -> None:
        if self.stages is not None:
            now = time.process_time()
            self.stages[name] += now - self.last
            self.last = now


def ns_per_word(layout: TopologyLayout, crossing: bool, batches: list[list[Tuple]],
                stages: defaultdict[str, float] | None = None) -> float:
    pipeline = Pipeline(layout, crossing)
    started = time.process_time()
    for batch in batches:
        pipeline.run(batch, stages)
    elapsed = time.process_time() - started
    words = sum(pipeline.count.counts.values())
    assert words == len(batches) * SENTENCES_PER_BATCH * WORDS_PER_SENTENCE
    if stages is not None:
        for name in stages:
            stages[name] *= 1e9 / words
    return elapsed / words * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--stages", action="store_true",
                        help="also time each stage of one more run of each (CPU ns a word)")
    figures.add_flag(parser)
    args = parser.parse_args()
    tune_for_streaming()
    layout = word_count_layout()
    rng = random.Random(42)
    info = StreamInfo("sentences", "default", ["sentence"])
    spout_task = layout.component_tasks["sentences"][0]
    # Each sentence a tracked tuple of its own tree, as the spout emits them.
    sentences = [Tuple([" ".join(rng.choice(WORDS) for _ in range(WORDS_PER_SENTENCE))], info,
                       spout_task, (rng.getrandbits(64) | 1, rng.getrandbits(64) | 1))
                 for _ in range(1000)]
    batches = [[sentences[(b * SENTENCES_PER_BATCH + i) % len(sentences)]
                for i in range(SENTENCES_PER_BATCH)] for b in range(args.batches)]
    local, crossing = [], []
    for _ in range(args.runs):
        local.append(ns_per_word(layout, False, batches))
        crossing.append(ns_per_word(layout, True, batches))
    print(f"crossing between workers, in one thread: {args.batches} batches of "
          f"{SENTENCES_PER_BATCH * WORDS_PER_SENTENCE} words, median of {args.runs} runs; "
          f"{build_mode.describe()}")
    added = [c - loc for loc, c in zip(local, crossing)]
    print(f"to a local inbox:       {statistics.median(local):7.1f} ns a word (runs: "
          f"{min(local):.0f}-{max(local):.0f})")
    print(f"through the wire path:  {statistics.median(crossing):7.1f} ns a word (runs: "
          f"{min(crossing):.0f}-{max(crossing):.0f})")
    print(f"what crossing adds:     {statistics.median(added):7.1f} ns a word (each run "
          f"against the local one before it: {min(added):.0f}-{max(added):.0f})")
    # LATEST.md's row (benchmarks/diary.py renders it from the records).
    figures.Recorder("crossing", enabled=args.record).record(
        "what crossing adds to a word in the bolts' threads (no sockets)",
        statistics.median(added), unit="ns",
        detail=f"more than its {statistics.median(local):,.0f} ns through a local inbox; "
               f"medians of {args.runs} runs")
    if args.stages:
        for through_wire in (False, True):
            stages: defaultdict[str, float] = defaultdict(float)
            ns_per_word(layout, through_wire, batches, stages)
            print(f"stages, {'through the wire path' if through_wire else 'to a local inbox'}: "
                  + ", ".join(f"{name} {ns:.0f}" for name, ns in stages.items()))


if __name__ == "__main__":
    main()
