"""A stateful word count over a durable source, for cluster tests of checkpointed state.

The source is message ids 0..N-1 (``ledger.messages``); spout task i owns the ids congruent to
i, appends every emit to ``emitted-<index>.log`` and every ack to ``acked-<index>.log`` in
``ledger.dir``, and skips acked ids when it (re)starts, as a spout over Kafka resumes from its
committed offsets. Message m carries the word ``w<m % 13>``. ``Totals`` (a stateful bolt, fields
grouping on the word) keeps each word's total and, for the test's accounting, how many times it
counted each message: after a failure a message can be counted twice, but only if it was
emitted twice, and every word's total is the sum of its messages' counts.
"""

from __future__ import annotations

import collections
import os
import time

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.state import StatefulBolt

WORDS = 13


def word_of(msg_id: int) -> str:
    return f"w{msg_id % WORDS}"


class LedgerSpout(Spout):
    outputs = ["id", "word"]

    def open(self, conf, context, collector):
        self.collector = collector
        directory = conf["ledger.dir"]
        index = context.this_task_index
        n = len(context.get_this_component_tasks())
        total = int(conf["ledger.messages"])
        self.rate = float(conf.get("ledger.rate", 0) or 0)
        acked_path = os.path.join(directory, f"acked-{index}.log")
        done = set()
        if os.path.exists(acked_path):
            with open(acked_path) as f:
                done = {int(line) for line in f if line.strip()}
        self.todo = collections.deque(i for i in range(index, total, n) if i not in done)
        self.acked = open(acked_path, "a")
        self.emitted = open(os.path.join(directory, f"emitted-{index}.log"), "a")
        self.sent = 0
        self.started = None

    def next_tuple(self):
        if not self.todo:
            return
        if self.rate:
            now = time.monotonic()
            if self.started is None:
                self.started = now
            if self.sent >= (now - self.started) * self.rate:
                return
        msg_id = self.todo.popleft()
        self.sent += 1
        self.emitted.write(f"{msg_id}\n")
        self.emitted.flush()
        self.collector.emit([msg_id, word_of(msg_id)], msg_id=msg_id)

    def ack(self, msg_id):
        self.acked.write(f"{msg_id}\n")
        self.acked.flush()

    def fail(self, msg_id, reason):
        self.todo.append(msg_id)

    def close(self):
        self.acked.close()
        self.emitted.close()


class Relay(Bolt):
    outputs = ["id", "word"]

    def execute(self, tup):
        self.collector.emit(tup.values, anchors=[tup])
        self.collector.ack(tup)


class Totals(StatefulBolt):
    outputs = ["word", "total"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        # Every read before any write: a read that fails (Redis down) fails the tuple before
        # it changed anything, so each count stays the sum of its messages' counts.
        word, key = tup["word"], ("seen", tup["id"])
        total, seen = self.state.get(word, 0) + 1, self.state.get(key, 0) + 1
        self.state.put(word, total)
        self.state.put(key, seen)
        self.collector.emit([word, total], anchors=[tup])
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("source", LedgerSpout(), parallelism=2)
builder.set_bolt("relay", Relay(), parallelism=2).shuffle_grouping("source")
builder.set_bolt("totals", Totals(), parallelism=2).fields_grouping("relay", ["word"])
topology = builder.build()

config = {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 200,
          "topology.state.checkpoint.interval.ms": 500}
