"""A running total per word that survives restarts: a stateful bolt over a partitioned log.

The spout reads a log of sentences with an offset-tracking ``LogSpout``; ``Totals`` keeps each
word's total in its checkpointed key-value state. A checkpoint is committed every second; a
sentence's offset is committed only after the totals it changed are, so stopping and starting
again (or a crash) resumes both where they were. After a crash some sentences can be counted
twice (at least once, as in Storm), never lost.

    stormlet log create /tmp/stormlet/totals --partitions 2
    stormlet log append /tmp/stormlet/totals --file my-sentences.txt
    stormlet local topologies/running_total.py        # totals kept in ./stormlet-state
    stormlet local topologies/running_total.py        # again: goes on from the same totals

Choose the backend with ``-c topology.state.provider=redis -c
'topology.state.provider.config={"host": "127.0.0.1", "port": 6379}'`` (the embedded SQLite
file is the default; ``-c stormlet.state.dir=DIR`` moves it).
"""

from __future__ import annotations

from stormlet import BasicBolt, Bolt, TopologyBuilder
from stormlet.sources import LogSpout
from stormlet.state import StatefulBolt


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup["value"].split():
            collector.emit([word.lower()])


class Totals(StatefulBolt):
    outputs = ["word", "total"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        word = tup["word"]
        total = self.state.get(word, 0) + 1
        self.state.put(word, total)
        self.collector.emit([word, total], anchors=[tup])
        self.collector.ack(tup)


class Milestones(Bolt):
    """Logs a word each time its total reaches a power of ten."""

    def execute(self, tup):
        total = tup["total"]
        if total >= 10 and str(total).strip("0") == "1":
            self.log.info("%s reached %d", tup["word"], total)
        self.collector.ack(tup)

    def prepare(self, conf, context, collector):
        import logging
        self.collector = collector
        self.log = logging.getLogger("running_total")


builder = TopologyBuilder()
builder.set_spout("sentences", LogSpout(path_config="sentences.log", spout_id="running-total"))
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("totals", Totals(), parallelism=2).fields_grouping("split", ["word"])
builder.set_bolt("milestones", Milestones()).shuffle_grouping("totals")
topology = builder.build()

config = {"sentences.log": "/tmp/stormlet/totals", "topology.max.spout.pending": 2000}
