"""A topology that imports a package it declares (issue 52): ``stormlet_testdep``, which the
tests build as wheels in two versions (tests/local_wheels.py) and put in the project's
``wheels/``, with a ``requirements.txt`` pinning one of them. The import is at the top, so
nimbus's inspection needs the topology's environment too.

Each ``report`` task writes the version it imported, and the interpreter it runs in, to
``<versioned.dir>/<versioned.label>-<task>.json``, with how many numbers it has seen. The spout
sends ``versioned.count`` numbers, ``versioned.interval`` seconds apart.
"""

from __future__ import annotations

import json
import os
import sys
import time

import stormlet_testdep

from stormlet import Bolt, Spout, TopologyBuilder


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.left = int(conf.get("versioned.count", 20))
        self.interval = float(conf.get("versioned.interval", 0))

    def next_tuple(self):
        if self.left > 0:
            time.sleep(self.interval)
            self.left -= 1
            self.collector.emit([self.left], msg_id=self.left)


class Report(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.path = os.path.join(conf["versioned.dir"],
                                 f"{conf['versioned.label']}-{context.task_id}.json")
        self.seen = 0
        self.write()

    def execute(self, tup):
        self.seen += 1
        self.write()
        self.collector.ack(tup)

    def write(self) -> None:
        record = {"version": stormlet_testdep.VERSION, "python": sys.executable,
                  "prefix": sys.prefix, "seen": self.seen}
        with open(self.path + ".part", "w") as f:
            json.dump(record, f)
        os.replace(self.path + ".part", self.path)


builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_bolt("report", Report()).shuffle_grouping("numbers")
topology = builder.build()
config = {"topology.workers": 1}
