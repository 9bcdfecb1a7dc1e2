"""The stateful topology with its whole checkpoint path in one worker: for the multi-host run in
which that worker is the orphan (tests/cluster/test_multi_host.py).

``chaos_stateful_topology`` spreads every component over both workers, so each checkpoint
action reaches every tally task through both relays: a worker cut off from ZooKeeper, whose
frames the other workers refuse once its tasks moved (stormlet/cluster/tenure.py), never again
completes a checkpoint, and never gets as far as writing its state. Here the spouts feed the
stateful bolt directly, one task of it, so the checkpoint spout alone sends it the checkpoint
stream, and nothing downstream of it carries checkpoints: with two workers, the scheduler deals
``__checkpointspout``, a ``source`` task and ``tally`` to the first worker (even_schedule:
spouts first, then bolts by name), which completes checkpoints on its own. Cut off, that worker
keeps checkpointing, and only the state store can stop its writes.
"""

from __future__ import annotations

from chaos_stateful_topology import Tally, config  # noqa: F401
from chaos_topology import Sink, spout

from stormlet import TopologyBuilder


class SourceTally(Tally):
    """``Tally`` fed by the spout (its field is ``value``, the relay's ``id``)."""

    field = "value"


builder = TopologyBuilder()
builder.set_spout("source", spout, parallelism=2)
builder.set_bolt("tally", SourceTally(), parallelism=1).fields_grouping("source", ["value"])
builder.set_bolt("sink", Sink(), parallelism=1).fields_grouping("tally", ["id"])
topology = builder.build()
