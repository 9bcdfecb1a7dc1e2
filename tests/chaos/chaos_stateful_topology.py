"""The chaos suite's stateful topology: ``chaos_topology``'s pipeline with a stateful bolt in
the middle.

``Tally`` (fields grouping on the id) keeps, in its checkpointed state (Redis in the chaos run),
how many times it counted each message, and passes the id on anchored; its acks wait for the
checkpoint that holds the count. The harness checks both ends: every message reached the sink,
and every message's count is in the committed state.
"""

from __future__ import annotations

from chaos_topology import Relay, Sink, spout

from stormlet import TopologyBuilder
from stormlet.state import StatefulBolt


class Tally(StatefulBolt):
    outputs = ["id"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        message = tup["id"]
        self.state.put(message, self.state.get(message, 0) + 1)
        self.collector.emit([message], anchors=[tup])
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("source", spout, parallelism=2)
builder.set_bolt("relay", Relay(), parallelism=2).shuffle_grouping("source")
builder.set_bolt("tally", Tally(), parallelism=2).fields_grouping("relay", ["id"])
builder.set_bolt("sink", Sink(), parallelism=2).fields_grouping("tally", ["id"])
topology = builder.build()

config = {"topology.message.timeout.secs": 5, "topology.max.spout.pending": 500,
          "topology.state.checkpoint.interval.ms": 500}
