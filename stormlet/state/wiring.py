"""Which bolts of a topology carry the checkpoint stream, and from whom (Storm's
``TopologyBuilder`` wiring for stateful topologies).

Every stateful bolt needs the checkpoint actions from every task that sends it data, so every
bolt upstream of a stateful bolt passes them on: a bolt gets the checkpoint stream (all
grouping) from each of its sources, the checkpoint spout standing in for every spout. Bolts
upstream of no stateful bolt are left as they are.
"""

from __future__ import annotations

from collections.abc import Mapping

from .checkpoint import CHECKPOINT_COMPONENT


def checkpoint_sources(inputs: Mapping[str, set[str]], spouts: set[str],
                       stateful: set[str]) -> dict[str, tuple[str, ...]]:
    """For each bolt that must carry checkpoints, the components it gets them from.

    ``inputs`` maps each bolt to the components it subscribes to."""
    carrying: set[str] = set()
    todo = list(stateful)
    while todo:
        bolt = todo.pop()
        if bolt in carrying:
            continue
        carrying.add(bolt)
        todo += [source for source in inputs.get(bolt, ()) if source not in spouts]
    return {bolt: tuple(sorted({CHECKPOINT_COMPONENT if source in spouts else source
                                for source in inputs.get(bolt, ())}))
            for bolt in sorted(carrying)}
