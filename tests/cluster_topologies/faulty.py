"""The ledger topology (source -> relay -> sink, every id acked once) beside a broken path: spout
``numbers`` feeds bolt ``explode``, which raises on every tuple. For the cluster tests of error
reporting: the broken path is reported, the healthy one keeps acking, no worker dies.

With ``faulty.quit`` set, the first ``explode`` task to get a tuple raises SystemExit instead,
once per topology (a marker file in ``ledger.dir`` remembers it), which ends its executor's
thread and so its worker.
"""

from __future__ import annotations

import os
import time

from ledger import LedgerSpout, Relay, Sink

from stormlet import Bolt, Spout, TopologyBuilder


class Numbers(Spout):
    """Tracked numbers at ``faulty.rate`` per second."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.rate = float(conf.get("faulty.rate", 1000))
        self.n = 0
        self.started = time.monotonic()

    def next_tuple(self):
        if self.n < (time.monotonic() - self.started) * self.rate:
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1


class Explode(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.quit = conf.get("faulty.quit") and os.path.join(conf["ledger.dir"], "quit")

    def execute(self, tup):
        if self.quit:
            try:
                os.close(os.open(self.quit, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                self.quit = None
            else:
                raise SystemExit("explode quits")
        raise ValueError(f"cannot handle {tup['n']}")


builder = TopologyBuilder()
builder.set_spout("source", LedgerSpout(), parallelism=2)
builder.set_bolt("relay", Relay(), parallelism=2).shuffle_grouping("source")
builder.set_bolt("sink", Sink(), parallelism=2).fields_grouping("relay", ["id"])
builder.set_spout("numbers", Numbers())
builder.set_bolt("explode", Explode(), parallelism=2).shuffle_grouping("numbers")
topology = builder.build()

config = {"topology.message.timeout.secs": 4, "topology.max.spout.pending": 500}
