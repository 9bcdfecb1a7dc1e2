"""The cluster word count with nothing crossing between workers: each word is counted in its
splitter's worker (see wordcount_topology.py). Run by ``cluster_wordcount.py --no-crossing``."""

from wordcount_topology import build, config  # noqa: F401  (the config is this topology's too)

topology = build(crossing=False)
