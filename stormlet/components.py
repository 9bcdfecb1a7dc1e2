"""What a user subclasses: Spout, Bolt and BasicBolt, and how they declare their outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from .errors import TopologyError
from .fail_reason import FailReason
from .streams import DEFAULT_STREAM
from .tuples import Tuple

if TYPE_CHECKING:
    from .context import TopologyContext


@dataclass(frozen=True)
class StreamDeclaration:
    fields: tuple[str, ...]
    direct: bool = False


class OutputFieldsDeclarer:
    """Collects the streams a component declares in ``declare_output_fields``."""

    def __init__(self, component_id: str = "?"):
        self.component_id = component_id
        self.streams: dict[str, StreamDeclaration] = {}

    def declare(self, fields: list[str] | tuple[str, ...], stream: str = DEFAULT_STREAM,
                direct: bool = False) -> None:
        if not isinstance(stream, str) or not stream:
            raise TopologyError(
                f"component {self.component_id!r}: stream id must be a non-empty string")
        if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
            raise TopologyError(
                f"component {self.component_id!r} stream {stream!r}: fields must be a list of "
                f"non-empty strings, got {fields!r}"
            )
        if len(set(fields)) != len(fields):
            raise TopologyError(
                f"component {self.component_id!r} stream {stream!r}: "
                f"duplicate field in {list(fields)}"
            )
        if stream in self.streams:
            raise TopologyError(f"component {self.component_id!r} declares stream {stream!r} twice")
        self.streams[stream] = StreamDeclaration(tuple(fields), direct)


class Component:
    """Shared by spouts and bolts: output declaration and per-component config.

    Set ``outputs`` to a list of field names (the default stream) or a dict of stream id to fields,
    or override ``declare_output_fields`` for direct streams.
    """

    outputs: list[str] | dict[str, list[str]] | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        outputs = self.outputs
        if outputs is None:
            return
        if isinstance(outputs, dict):
            for stream, fields in outputs.items():
                declarer.declare(fields, stream=stream)
        else:
            declarer.declare(outputs)

    def get_component_configuration(self) -> dict[str, Any] | None:
        return None

    def config_problems(self, conf: dict[str, Any]) -> list[str]:
        """What keeps this component from running under ``conf`` (the topology's config as
        submitted, with the component's own over it; not what a worker adds at its start), each
        said for an operator: checked at submit, which refuses the topology naming the
        component, rather than each task failing in ``open`` or ``prepare``. None here."""
        return []


class Spout(Component):
    """A source of tuples. ``next_tuple`` is called on the spout's own thread, as are ``ack``
    and ``fail``, so a spout needs no locks."""

    collector: SpoutOutputCollector

    def open(self, conf: dict[str, Any], context: TopologyContext,
             collector: SpoutOutputCollector) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        pass

    def ack(self, msg_id: Any) -> None:
        pass

    def fail(self, msg_id: Any, reason: FailReason) -> None:
        """The tuple tree of ``msg_id`` failed (``reason.kind``: ``"timeout"``, ``"fail"`` or
        ``"error"``; ``reason.component``: where); replay it or give it up."""

    def dead_lettered(self, msg_id: Any, reason: FailReason) -> None:
        """The message failed ``topology.spout.dead.letter.attempts`` times and went to the
        failed-message log instead of to ``fail``: forget it (do not replay it)."""

    def activate(self) -> None:
        pass

    def deactivate(self) -> None:
        pass

    def close(self) -> None:
        pass


class Bolt(Component):
    """A processor. It must ``ack`` or ``fail`` every tuple it receives (ticks excepted)."""

    collector: OutputCollector

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        pass


class BasicBolt(Component):
    """A bolt whose emits are anchored to the input and whose input is acked after ``execute``
    returns, or failed with reason ``error`` if it raises."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        pass

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        pass


def declared_streams(component: Component, component_id: str) -> dict[str, StreamDeclaration]:
    declarer = OutputFieldsDeclarer(component_id)
    component.declare_output_fields(declarer)
    return declarer.streams
