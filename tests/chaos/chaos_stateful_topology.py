"""The chaos suite's stateful topology: ``chaos_topology``'s pipeline with a stateful bolt in
the middle.

``Tally`` (fields grouping on the id) keeps, in its checkpointed state (Redis in the chaos run),
how many times it counted each message, and passes the id on anchored, with its count; its acks
wait for the checkpoint that holds the count. The harness checks both ends: every message reached
the sink, and every message's count is in the committed state. ``stateful_builder`` builds it,
for the variant with a sink of effectively-once (``chaos_stateful_sink_topology``).
"""

from __future__ import annotations

from chaos_topology import Relay, Sink, spout

from stormlet import TopologyBuilder
from stormlet.state import StatefulBolt


class Tally(StatefulBolt):
    outputs = ["id", "count"]
    field = "id"   # the input's field that holds the message

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        message = tup[self.field]
        count = self.state.get(message, 0) + 1
        self.state.put(message, count)
        self.collector.emit([message, count], anchors=[tup])
        self.collector.ack(tup)


def stateful_builder() -> TopologyBuilder:
    """The topology's builder: the spout, the relay, ``tally`` and the file sink."""
    builder = TopologyBuilder()
    builder.set_spout("source", spout, parallelism=2)
    builder.set_bolt("relay", Relay(), parallelism=2).shuffle_grouping("source")
    builder.set_bolt("tally", Tally(), parallelism=2).fields_grouping("relay", ["id"])
    builder.set_bolt("sink", Sink(), parallelism=2).fields_grouping("tally", ["id"])
    return builder


topology = stateful_builder().build()

config = {"topology.message.timeout.secs": 5, "topology.max.spout.pending": 500,
          "topology.state.checkpoint.interval.ms": 500}
