"""A stateful word count over a durable source, for cluster tests of checkpointed state.

The source is ``ledger.py``'s (ids 0..N-1, ``ledger.messages``, resumed after acked ones on a
restart), which here also appends every emit to ``emitted-<index>.log`` in ``ledger.dir``. Message m
carries the word ``w<m % 13>``. ``Totals`` (a stateful bolt, fields grouping on the word) keeps each
word's total and, for the test's accounting, how many times it counted each message: after a failure
a message can be counted twice, but only if it was emitted twice, and every word's total is the sum
of its messages' counts.
"""

from __future__ import annotations

import os

from ledger import LedgerSpout

from stormlet import Bolt, TopologyBuilder
from stormlet.state import StatefulBolt

WORDS = 13


def word_of(msg_id: int) -> str:
    return f"w{msg_id % WORDS}"


class WordLedgerSpout(LedgerSpout):
    """The ledger's spout, sending each id with its word and logging every emit."""

    outputs = ["id", "word"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        index = context.this_task_index
        self.emitted = open(os.path.join(conf["ledger.dir"], f"emitted-{index}.log"), "a")

    def send(self, msg_id):
        self.emitted.write(f"{msg_id}\n")
        self.emitted.flush()
        self.collector.emit([msg_id, word_of(msg_id)], msg_id=msg_id)

    def close(self):
        super().close()
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
builder.set_spout("source", WordLedgerSpout(), parallelism=2)
builder.set_bolt("relay", Relay(), parallelism=2).shuffle_grouping("source")
builder.set_bolt("totals", Totals(), parallelism=2).fields_grouping("relay", ["word"])
topology = builder.build()

config = {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 200,
          "topology.state.checkpoint.interval.ms": 500}
