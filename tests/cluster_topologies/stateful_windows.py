"""A persistent stateful window over a durable source, for the cluster test of a worker killed
mid-window.

The source is ``stateful_ledger.py``'s (ids 0..N-1, each emit logged, resumed after acked ids on
a restart). ``Fifties`` keeps a tumbling window of 50 ids in the state store
(``with_persistence``) and, in its state, each window it fires (``("window", k)``: the ids,
sorted) and how often it counted each id (``("seen", id)``), for the test's accounting.
"""

from __future__ import annotations

from stateful_ledger import WordLedgerSpout

from stormlet import TopologyBuilder
from stormlet.state import StatefulWindowedBolt
from stormlet.windowing import Count

WINDOW = 50


class Fifties(StatefulWindowedBolt):
    outputs = ["window", "ids"]

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        ids = sorted(t["id"] for t in window.get_iter())
        k = self.state.get("windows", 0)
        self.state.put("windows", k + 1)
        self.state.put(("window", k), ids)
        for i in ids:
            self.state.put(("seen", i), self.state.get(("seen", i), 0) + 1)
        self.collector.emit([k, ids])


builder = TopologyBuilder()
builder.set_spout("source", WordLedgerSpout(), parallelism=2)
builder.set_bolt("windows", Fifties().with_tumbling_window(Count(WINDOW)).with_persistence()
                 ).shuffle_grouping("source")
topology = builder.build()

config = {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 200,
          "topology.state.checkpoint.interval.ms": 500}
