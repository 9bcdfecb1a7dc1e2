"""``streamparse.storm``: where streamparse 3 keeps its component classes (the same ones)."""

from .bolt import BatchingBolt, Bolt, JavaBolt, ShellBolt, TicklessBatchingBolt
from .component import Component, Tuple
from .spout import JavaSpout, ReliableSpout, ShellSpout, Spout

__all__ = ["BatchingBolt", "Bolt", "Component", "JavaBolt", "JavaSpout", "ReliableSpout",
           "ShellBolt", "ShellSpout", "Spout", "TicklessBatchingBolt", "Tuple"]
