"""The stormlet components that run a streamparse spout or bolt class.

Each task gets its own instance of the streamparse class, made in ``open``/``prepare`` (the
adapter itself is what stormlet copies per task and pickles to workers, so it holds only the
class and its declared streams). The adapters translate stormlet's calls into streamparse's:
``fail(msg_id, reason)`` becomes ``fail(tup_id)``, ``execute`` becomes ``process`` or
``process_tick``.
"""

from __future__ import annotations

from typing import Any

from ..collectors import OutputCollector, SpoutOutputCollector
from ..components import Bolt, OutputFieldsDeclarer, Spout
from ..context import TopologyContext
from ..fail_reason import FailReason
from ..tuples import Tuple
from .dsl import Stream


class _DeclaresStreams:
    """Declares the streams streamparse's ``outputs`` named, direct ones included."""

    streams: dict[str, Stream]

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for name, stream in self.streams.items():
            declarer.declare(stream.fields, stream=name, direct=stream.direct)


class StreamparseSpout(_DeclaresStreams, Spout):
    """Runs one task of a streamparse ``Spout`` subclass."""

    def __init__(self, spout_class: type, streams: dict[str, Stream]):
        self.spout_class = spout_class
        self.streams = streams

    def open(self, conf: dict[str, Any], context: TopologyContext,
             collector: SpoutOutputCollector) -> None:
        self.spout = self.spout_class()
        self.spout._stormlet_open(conf, context, collector)

    def next_tuple(self) -> None:
        self.spout.next_tuple()

    def ack(self, msg_id: Any) -> None:
        self.spout.ack(msg_id)

    def fail(self, msg_id: Any, reason: FailReason) -> None:
        self.spout.logger.debug("tuple %r failed: %s", msg_id, reason)
        self.spout.fail(msg_id)

    def dead_lettered(self, msg_id: Any, reason: FailReason) -> None:
        self.spout._stormlet_forget(msg_id)

    def activate(self) -> None:
        self.spout.activate()

    def deactivate(self) -> None:
        self.spout.deactivate()

    def __repr__(self) -> str:
        return f"StreamparseSpout({self.spout_class.__module__}.{self.spout_class.__name__})"


class StreamparseBolt(_DeclaresStreams, Bolt):
    """Runs one task of a streamparse ``Bolt`` subclass (batching ones included)."""

    def __init__(self, bolt_class: type, streams: dict[str, Stream]):
        self.bolt_class = bolt_class
        self.streams = streams

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        self.bolt = self.bolt_class()
        self.bolt._stormlet_prepare(conf, context, collector)

    def execute(self, tup: Tuple) -> None:
        self.bolt._stormlet_execute(tup)

    def __repr__(self) -> str:
        return f"StreamparseBolt({self.bolt_class.__module__}.{self.bolt_class.__name__})"
