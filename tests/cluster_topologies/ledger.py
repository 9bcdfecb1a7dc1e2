"""A reliable topology over a durable source, for cluster tests.

The source is message ids 0..N-1; spout task i owns the ids congruent to i. A spout appends each
acked id to ``acked-<task index>.log`` in ``ledger.dir`` and skips those ids when it (re)starts, so
a restarted worker resumes where its spout left off, as a spout over Kafka resumes from its
committed offsets. Failed or timed-out ids are replayed. The sink appends every id it processes
to ``seen-<task>.log`` (duplicates allowed: at-least-once).
"""

from __future__ import annotations

import collections
import os
import time

from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder


class LedgerSpout(Spout):
    outputs = ["id"]

    def open(self, conf, context, collector):
        self.collector = collector
        directory = conf["ledger.dir"]
        index = context.this_task_index
        n = len(context.get_this_component_tasks())
        total = int(conf.get("ledger.messages", 5000))
        self.rate = float(conf.get("ledger.rate", 0) or 0)  # messages per second, 0 = unlimited
        path = os.path.join(directory, f"acked-{index}.log")
        done = set()
        if os.path.exists(path):
            with open(path) as f:
                done = {int(line) for line in f if line.strip()}
        self.todo = collections.deque(i for i in range(index, total, n) if i not in done)
        self.log = open(path, "a")
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
        self.send(msg_id)

    def send(self, msg_id):
        self.collector.emit([msg_id], msg_id=msg_id)

    def ack(self, msg_id):
        self.log.write(f"{msg_id}\n")
        self.log.flush()

    def fail(self, msg_id, reason):
        self.todo.append(msg_id)

    def close(self):
        self.log.close()


class Relay(Bolt):
    """Passes each id on. With ``ledger.hold.id``, the first relay to get that id holds it (for
    ``ledger.hold.secs``) after writing its pid to ``held.pid`` in ``ledger.dir``: a test that
    kills that process knows a tuple was lost in it."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        hold = conf.get("ledger.hold.id")
        self.hold_id = None if hold is None else int(hold)
        self.hold_secs = float(conf.get("ledger.hold.secs", 60))
        self.marker = os.path.join(conf["ledger.dir"], "held.pid")

    def execute(self, tup):
        if tup.values[0] == self.hold_id and self.first_to_hold():
            time.sleep(self.hold_secs)
        self.collector.emit(tup.values, anchors=[tup])
        self.collector.ack(tup)

    def first_to_hold(self) -> bool:
        try:
            open(self.marker + ".once", "x").close()   # one relay, once, even after a restart
        except FileExistsError:
            return False
        with open(self.marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(self.marker + ".tmp", self.marker)   # the pid is whole when the test reads it
        return True


class Sink(BasicBolt):
    def prepare(self, conf, context):
        self.log = open(os.path.join(conf["ledger.dir"], f"seen-{context.task_id}.log"), "a")

    def execute(self, tup, collector):
        self.log.write(f"{tup['id']}\n")
        self.log.flush()

    def cleanup(self):
        self.log.close()


builder = TopologyBuilder()
builder.set_spout("source", LedgerSpout(), parallelism=2)
builder.set_bolt("relay", Relay(), parallelism=2).shuffle_grouping("source")
builder.set_bolt("sink", Sink(), parallelism=2).fields_grouping("relay", ["id"])
topology = builder.build()

config = {"topology.message.timeout.secs": 4, "topology.max.spout.pending": 500}
