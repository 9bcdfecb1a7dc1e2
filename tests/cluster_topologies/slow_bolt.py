"""A fast reliable spout in front of a slow bolt in another worker, for backpressure tests.

With ``topology.workers = 2`` the even scheduler puts the spout in one worker and the bolt in the
other, so every tuple crosses between workers. The spout emits as fast as it is let; the bolt
sleeps ``slow.ms`` per tuple. Both write what they see to ``<slow.dir>/<component>.json`` twice a
second: counts, in-flight messages, timeouts, and their worker's resident memory.
"""

from __future__ import annotations

import json
import os
import threading
import time

from stormlet import Bolt, Spout, TopologyBuilder


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class StatusFile:
    """Writes ``status()`` to a JSON file every half second, with the worker's memory."""

    def __init__(self, path: str, status):
        self.path = path
        self.status = status
        self.max_rss = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            rss = resident_bytes()
            self.max_rss = max(self.max_rss, rss)
            record = {**self.status(), "rss": rss, "max_rss": self.max_rss, "time": time.time()}
            with open(self.path + ".part", "w") as f:
                json.dump(record, f)
            os.replace(self.path + ".part", self.path)
            time.sleep(0.5)


class Firehose(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.next_id = 0
        self.acked = self.failed = self.timeouts = self.max_in_flight = 0
        StatusFile(os.path.join(conf["slow.dir"], "spout.json"), self.status)

    def status(self) -> dict:
        return {"emitted": self.next_id, "acked": self.acked, "failed": self.failed,
                "timeouts": self.timeouts, "in_flight": self.in_flight(),
                "max_in_flight": self.max_in_flight}

    def in_flight(self) -> int:
        return self.next_id - self.acked - self.failed

    def next_tuple(self):
        self.collector.emit([self.next_id], msg_id=self.next_id)
        self.next_id += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight())

    def ack(self, msg_id):
        self.acked += 1

    def fail(self, msg_id, reason):
        self.failed += 1
        if reason == "timeout":
            self.timeouts += 1


class Slow(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.pause = float(conf.get("slow.ms", 2)) / 1000
        self.executed = 0
        StatusFile(os.path.join(conf["slow.dir"], "bolt.json"), lambda: {"executed": self.executed})

    def execute(self, tup):
        time.sleep(self.pause)
        self.executed += 1
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("firehose", Firehose())
builder.set_bolt("slow", Slow()).shuffle_grouping("firehose")
topology = builder.build()
config = {"topology.workers": 2}
