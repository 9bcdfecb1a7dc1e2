"""What a worker's process was given, for the cluster tests of worker settings
(tests/cluster/test_cluster_worker_settings.py).

Spout ``ticks`` emits a number five times a second. Bolt ``probe`` writes, at every tuple, what
its process sees to ``<probe.dir>/<topology id>.<pid>.json``: the variable PROBE_GREETING
(which this file's config sets through ``topology.environment``), Python's ``-X`` options, where
stormlet was imported from, its resident memory and how many tuples it got. With
``probe.hold.mb``, it first takes that many MB and holds them.
"""

from __future__ import annotations

import json
import os
import sys
import time

import stormlet
from stormlet import Bolt, Spout, TopologyBuilder

GREETING = "hello from topology.environment"


class Ticks(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        self.started = time.monotonic()

    def next_tuple(self):
        if self.n < (time.monotonic() - self.started) * 5:
            self.collector.emit([self.n])
            self.n += 1


class Probe(Bolt):
    def prepare(self, conf, context, collector):
        name = f"{conf['stormlet.topology.id']}.{os.getpid()}.json"
        self.path = os.path.join(conf["probe.dir"], name)
        self.hold_mb = int(conf.get("probe.hold.mb") or 0)
        self.held = b""
        self.tuples = 0

    def execute(self, tup):
        if self.hold_mb and not self.held:
            self.held = b"x" * (self.hold_mb * 1024 * 1024)   # written, so in RAM
        self.tuples += 1
        with open("/proc/self/statm") as f:
            rss_mb = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        record = {"pid": os.getpid(), "greeting": os.environ.get("PROBE_GREETING"),
                  "xoptions": dict(sys._xoptions), "stormlet": stormlet.__file__,
                  "rss_mb": rss_mb, "tuples": self.tuples}
        with open(self.path + ".part", "w") as f:
            json.dump(record, f)
        os.replace(self.path + ".part", self.path)


builder = TopologyBuilder()
builder.set_spout("ticks", Ticks())
builder.set_bolt("probe", Probe()).shuffle_grouping("ticks")
topology = builder.build()
config = {"topology.environment": {"PROBE_GREETING": GREETING}}
