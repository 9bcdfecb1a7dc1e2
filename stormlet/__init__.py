"""stormlet: Storm-style stream processing for Python."""

from .runtime import build_mode

build_mode.select()  # before any hot module loads: compiled, or all from source

from .collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from .components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
from .context import TopologyContext
from .fail_reason import FailReason
from .failed import DeadLetterBox
from .joins import JoinBolt, Selector
from .local import LocalCluster
from .runtime import extensions
from .serializers import Serializer, register_serialization
from .topology import Topology, TopologyBuilder, TopologyError
from .tuples import Tuple
from .values import SerializationError
from .version import __version__ as __version__

# The features built on the runtime, plugged in here: the runtime never imports them.
extensions.plug_dead_letters(DeadLetterBox)

__all__ = [
    "BasicBolt", "BasicOutputCollector", "Bolt", "FailReason", "JoinBolt", "LocalCluster",
    "OutputCollector", "OutputFieldsDeclarer", "SerializationError", "Selector", "Serializer",
    "Spout", "SpoutOutputCollector", "Topology", "TopologyBuilder", "TopologyContext",
    "TopologyError", "Tuple", "register_serialization",
]
