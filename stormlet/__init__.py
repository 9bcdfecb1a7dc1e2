"""stormlet: Storm-style stream processing for Python."""

from . import build_mode

build_mode.select()  # before any hot module loads: compiled, or all from source

from .collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from .components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
from .context import TopologyContext
from .fail_reason import FailReason
from .local import LocalCluster
from .serialization import SerializationError
from .serializers import Serializer, register_serialization
from .topology import Topology, TopologyBuilder, TopologyError
from .tuples import Tuple

__all__ = [
    "BasicBolt", "BasicOutputCollector", "Bolt", "FailReason", "LocalCluster", "OutputCollector",
    "OutputFieldsDeclarer", "SerializationError", "Serializer", "Spout", "SpoutOutputCollector",
    "Topology", "TopologyBuilder", "TopologyContext", "TopologyError", "Tuple",
    "register_serialization",
]
__version__ = "0.1.0"
