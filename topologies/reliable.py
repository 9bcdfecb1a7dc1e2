"""Reliable processing: a flaky bolt fails some tuples and silently drops others, and the spout
replays every failed or timed-out message until each one is acked. None is lost.

    stormlet local topologies/reliable.py --duration 20

The spout's close() logs how many messages were acked, replayed, and still outstanding (0 when
the run was long enough). Tune with -c reliable.messages=N, -c reliable.fail.rate=0.1,
-c reliable.drop.rate=0.02.
"""

from __future__ import annotations

import collections
import logging
import random

from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder

log = logging.getLogger("reliable")


class ReplayingSpout(Spout):
    """Emits message ids 0..N-1 once, then replays whatever fails, until everything is acked."""

    outputs = ["msg_id", "payload"]

    def open(self, conf, context, collector):
        self.collector = collector
        tasks = context.get_this_component_tasks()
        total = int(conf.get("reliable.messages", 20_000))
        # Each spout task owns every n-th message id.
        self.todo = collections.deque(range(context.this_task_index, total, len(tasks)))
        self.owned = len(self.todo)
        self.acked: set[int] = set()
        self.replays = 0
        self.reasons: collections.Counter[str] = collections.Counter()

    def next_tuple(self):
        if self.todo:
            msg_id = self.todo.popleft()
            self.collector.emit([msg_id, f"payload-{msg_id}"], msg_id=msg_id)

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id, reason):
        self.replays += 1
        self.reasons[reason.kind] += 1
        self.todo.append(msg_id)

    def close(self):
        outstanding = self.owned - len(self.acked)
        log.info("spout: %d/%d messages acked, %d replays (%s), %d outstanding", len(self.acked),
                 self.owned, self.replays, dict(self.reasons), outstanding)


class FlakyBolt(Bolt):
    """Fails some tuples, drops (never acks) others, passes the rest on, anchored."""

    outputs = ["msg_id", "payload"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.rng = random.Random(context.task_id)
        self.fail_rate = float(conf.get("reliable.fail.rate", 0.1))
        self.drop_rate = float(conf.get("reliable.drop.rate", 0.02))

    def execute(self, tup):
        roll = self.rng.random()
        if roll < self.fail_rate:
            self.collector.fail(tup, "flaky bolt said no")
        elif roll < self.fail_rate + self.drop_rate:
            pass  # dropped: neither acked nor failed, so its tree times out and is replayed
        else:
            self.collector.emit(tup.values, anchors=[tup])
            self.collector.ack(tup)


class Sink(BasicBolt):
    """Records which message ids made it through (at-least-once: replays may repeat some)."""

    def prepare(self, conf, context):
        self.seen: collections.Counter[int] = collections.Counter()

    def execute(self, tup, collector):
        self.seen[tup["msg_id"]] += 1

    def cleanup(self):
        repeats = sum(n - 1 for n in self.seen.values())
        log.info("sink: %d distinct messages processed, %d processed more than once",
                 len(self.seen), repeats)


builder = TopologyBuilder()
builder.set_spout("source", ReplayingSpout(), parallelism=2)
builder.set_bolt("flaky", FlakyBolt(), parallelism=2).shuffle_grouping("source")
builder.set_bolt("sink", Sink(), parallelism=2).fields_grouping("flaky", ["msg_id"])
topology = builder.build()

config = {
    "topology.message.timeout.secs": 3,
    "topology.max.spout.pending": 2000,
}
