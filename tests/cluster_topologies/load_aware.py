"""Two spouts feeding two sinks by shuffle, for load-aware shuffle on a cluster.

With ``topology.workers = 2`` each worker runs one spout task and one sink task (the test
checks it). Each spout emits ``load.rate`` numbers a second, far below what a sink takes, so
the sinks' inboxes stay nearly empty. A sink sleeps ``load.slow.ms`` per tuple while the file
``<load.dir>/slow-<its task>`` exists (looked for five times a second), which fills its inbox.
"""

from __future__ import annotations

import os
import time

from stormlet import Bolt, Spout, TopologyBuilder


class Paced(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.rate = float(conf.get("load.rate", 2000))
        self.started = time.monotonic()
        self.sent = 0

    def next_tuple(self):
        # As many as the pace allows by now, at most a hundred a call.
        due = min(self.sent + 100, int((time.monotonic() - self.started) * self.rate))
        while self.sent < due:
            self.collector.emit([self.sent])
            self.sent += 1


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.flag = os.path.join(conf["load.dir"], f"slow-{context.task_id}")
        self.pause = float(conf.get("load.slow.ms", 2)) / 1000
        self.slow = False
        self.next_look = 0.0

    def execute(self, tup):
        now = time.monotonic()
        if now >= self.next_look:
            self.next_look = now + 0.2
            self.slow = os.path.exists(self.flag)
        if self.slow:
            time.sleep(self.pause)


builder = TopologyBuilder()
builder.set_spout("numbers", Paced(), parallelism=2)
builder.set_bolt("sink", Sink(), parallelism=2).shuffle_grouping("numbers")
topology = builder.build()
config = {"topology.workers": 2, "topology.acker.executors": 0}
