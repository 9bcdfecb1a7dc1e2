"""The scaling benchmark's topology with nothing crossing between workers: each event is
summed in its enricher's worker (see scaling_topology.py). Run by ``scaling.py
--no-crossing``."""

from scaling_topology import build, config  # noqa: F401  (the config is this topology's too)

topology = build(crossing=False)
