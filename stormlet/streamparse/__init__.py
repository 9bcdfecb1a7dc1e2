"""streamparse's public API, so a streamparse project runs on stormlet as it is.

A topology file that imports ``streamparse`` gets this package under that name (see
``imports.py``; the real streamparse need not be installed, and is not used if it is), and
``stormlet local`` or ``stormlet submit`` runs the ``Topology`` class the file defines (see
``build.py``). Spouts and bolts keep streamparse's semantics: auto-anchoring, auto-acking and
auto-failing bolts, batching bolts, ``ReliableSpout``'s replays, tick tuples, named and direct
streams, and tracked spout tuples acked or failed by stormlet's acker.
"""

from . import bolt, component, dsl, spout
from .bolt import BatchingBolt, Bolt, JavaBolt, ShellBolt, TicklessBatchingBolt
from .component import Tuple
from .dsl import Grouping, Stream, Topology
from .spout import JavaSpout, ReliableSpout, ShellSpout, Spout

__all__ = ["BatchingBolt", "Bolt", "Grouping", "JavaBolt", "JavaSpout", "ReliableSpout",
           "ShellBolt", "ShellSpout", "Spout", "Stream", "TicklessBatchingBolt", "Topology",
           "Tuple", "bolt", "component", "dsl", "spout"]
