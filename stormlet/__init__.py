"""stormlet: Storm-style stream processing for Python."""

from .runtime import build_mode

build_mode.select()  # before any hot module loads: compiled, or all from source

from .collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from .components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
from .context import TopologyContext
from .fail_reason import FailReason
from .joins import JoinBolt, Selector
from .local import LocalCluster
from .runtime.serialization import SerializationError
from .topology import Topology, TopologyBuilder, TopologyError
from .tuples import Tuple

__all__ = [
    "BasicBolt", "BasicOutputCollector", "Bolt", "FailReason", "JoinBolt", "LocalCluster",
    "OutputCollector", "OutputFieldsDeclarer", "SerializationError", "Selector", "Spout",
    "SpoutOutputCollector", "Topology", "TopologyBuilder", "TopologyContext", "TopologyError",
    "Tuple",
]
__version__ = "0.1.0"
