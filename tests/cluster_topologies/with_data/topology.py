"""A topology that reads a data file beside it: ``data/words.txt``, by a path relative to its
project directory, as a bolt that opens a stop-word list does (issue 52).

Each ``lookup`` task reads the file in ``prepare`` and writes what it read, with its working
directory, to ``<files.dir>/lookup-<task>.json``; then it maps each number the spout sends to a
word and counts what it saw into the same file.
"""

from __future__ import annotations

import json
import os

from stormlet import Bolt, Spout, TopologyBuilder

WORDS_FILE = "data/words.txt"


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.left = int(conf.get("files.count", 30))

    def next_tuple(self):
        if self.left > 0:
            self.left -= 1
            self.collector.emit([self.left], msg_id=self.left)


class Lookup(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        with open(WORDS_FILE) as f:   # relative: resolved against the project directory
            self.words = f.read().split()
        self.path = os.path.join(conf["files.dir"], f"lookup-{context.task_id}.json")
        self.seen: dict[str, int] = {}
        self.write()

    def execute(self, tup):
        word = self.words[tup.values[0] % len(self.words)]
        self.seen[word] = self.seen.get(word, 0) + 1
        self.write()
        self.collector.ack(tup)

    def write(self) -> None:
        record = {"words": self.words, "cwd": os.getcwd(), "seen": self.seen}
        with open(self.path + ".part", "w") as f:
            json.dump(record, f)
        os.replace(self.path + ".part", self.path)


builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_bolt("lookup", Lookup(), parallelism=2).shuffle_grouping("numbers")
topology = builder.build()
config = {"topology.workers": 2}
