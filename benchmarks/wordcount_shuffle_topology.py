"""The cluster word count with the splitters fed by shuffle (see wordcount_topology.py): load-aware
by default, plain with ``-c topology.disable.loadaware.messaging=true``. Run by
``cluster_wordcount.py --topology benchmarks/wordcount_shuffle_topology.py``."""

from wordcount_topology import build, config  # noqa: F401  (the config is this topology's too)

topology = build(shuffle=True)
