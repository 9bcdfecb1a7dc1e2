"""A streamparse topology that imports a package its ``virtualenvs/versioned.txt`` declares
(issue 52): ``stormlet_testdep``, whose wheels the test puts in the project's ``wheels/``
(tests/local_wheels.py). The report bolt writes the version it imported and its interpreter
to ``<versioned.dir>/<versioned.label>-<task>.json``."""

import json
import os
import sys
import time

import stormlet_testdep
from streamparse import Bolt, Spout, Topology


class NumberSpout(Spout):
    outputs = ["n"]

    def initialize(self, storm_conf, context):
        self.left = int(storm_conf.get("versioned.count", 20))

    def next_tuple(self):
        if self.left <= 0:
            time.sleep(0.01)
            return
        self.left -= 1
        self.emit([self.left], tup_id=self.left)


class ReportBolt(Bolt):
    def initialize(self, storm_conf, context):
        self.path = os.path.join(storm_conf["versioned.dir"],
                                 f"{storm_conf['versioned.label']}-{self.task_id}.json")
        self.seen = 0

    def process(self, tup):
        self.seen += 1
        record = {"version": stormlet_testdep.VERSION, "python": sys.executable,
                  "prefix": sys.prefix, "seen": self.seen}
        with open(self.path + ".part", "w") as f:
            json.dump(record, f)
        os.replace(self.path + ".part", self.path)


class Versioned(Topology):
    numbers = NumberSpout.spec()
    report = ReportBolt.spec(inputs=[numbers])
