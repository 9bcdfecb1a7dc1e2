"""A topology that reads a blob of the cluster's blob store by its local name (issue 52): run
with ``topology.blobstore.map`` mapping a key to ``blobs.localname`` (default ``words.txt``).

The spout sends a number every 50 ms, for as long as it runs. The ``reader`` bolt opens the
local name again for every tuple, as a bolt that reloads a file does, and
``stormlet.blobs.watch`` tells it of each new version too. It writes what it saw to
``<blobs.dir>/<blobs.tag>-<task>.json``: every distinct content it read, in order, with the
version ``stormlet.blobs.version`` gave for it; what the watch's callback read; the file the
name resolves to and its inode; its working directory and process id.
"""

from __future__ import annotations

import json
import os
import time

import stormlet.blobs
from stormlet import Bolt, Spout, TopologyBuilder


class Ticks(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        self.last = 0.0

    def next_tuple(self):
        if time.monotonic() - self.last >= 0.05:
            self.last = time.monotonic()
            self.n += 1
            self.collector.emit([self.n])


class Reader(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.name = conf.get("blobs.localname", "words.txt")
        self.path = os.path.join(conf["blobs.dir"],
                                 f"{conf.get('blobs.tag', 'reader')}-{context.task_id}.json")
        self.record = {"read": [], "versions": [], "watched": [], "cwd": os.getcwd(),
                       "pid": os.getpid()}
        self.watch = stormlet.blobs.watch(self.name, self.changed, interval=0.1)
        self.read()

    def changed(self, path):
        with open(path) as f:
            self.record["watched"].append(f.read())

    def execute(self, tup):
        self.read()

    def read(self) -> None:
        with open(self.name) as f:   # by its local name, in the working directory
            text = f.read()
        if not self.record["read"] or self.record["read"][-1] != text:
            self.record["read"].append(text)
            self.record["versions"].append(stormlet.blobs.version(self.name))
        resolved = os.path.realpath(self.name)
        self.record.update(resolved=resolved, inode=os.stat(resolved).st_ino)
        with open(self.path + ".part", "w") as f:
            json.dump(self.record, f)
        os.replace(self.path + ".part", self.path)

    def cleanup(self):
        self.watch.stop()


builder = TopologyBuilder()
builder.set_spout("ticks", Ticks())
builder.set_bolt("reader", Reader()).shuffle_grouping("ticks")
topology = builder.build()
config = {"topology.workers": 1, "topology.acker.executors": 0}
