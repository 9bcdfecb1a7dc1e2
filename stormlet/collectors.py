"""What spouts and bolts emit, ack and fail through: the collector types of the public API.

``SpoutOutputCollector`` and ``OutputCollector`` are protocols: the runtime implements them
(``stormlet.runtime.task_collectors``, in local mode and on a cluster alike) and so does backfill's
Spark bolt runner, so a component runs unchanged on either. ``BasicOutputCollector``, what a
``BasicBolt`` gets, is a small class over any ``OutputCollector``: its emits are anchored to the
tuple being executed, through the same emit as an explicitly anchoring bolt's.

Values must be msgpack-encodable (str, bytes, int, float, bool, None, and lists and dicts of
them): anything else raises ``SerializationError`` at emit, naming the field and its type. An
emit returns the task ids the tuple was sent to.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from .fail_reason import FailReason
from .streams import DEFAULT_STREAM
from .tuples import Tuple


class SpoutOutputCollector(Protocol):
    """Passed to ``Spout.open``."""

    def emit(self, values: Sequence[Any], msg_id: Any = None,
             stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a tuple. With a ``msg_id`` it is tracked: the spout's ``ack(msg_id)`` or
        ``fail(msg_id, reason)`` is called once, when its tree completes or fails."""
        ...

    def emit_direct(self, task: int, values: Sequence[Any], msg_id: Any = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit to one task of a component subscribed with a direct grouping to ``stream``
        (declared ``direct=True``)."""
        ...

    def dead_letter(self, values: Sequence[Any], msg_id: Any = None,
                    reason: FailReason | str | None = None, attempts: int = 1) -> None:
        """Put a message in the failed-message log (``stormlet.failed.dir``) instead of emitting
        it, durably: for a message the spout gives up on (``reason``: a ``FailReason`` or the
        spout's own words)."""
        ...


class OutputCollector(Protocol):
    """Passed to ``Bolt.prepare``. Every input tuple must be acked or failed, or its tree times
    out. Call it on the bolt's own thread (from ``prepare``, ``execute`` or ``cleanup``): it takes
    no locks, so a bolt that works on other threads hands their results back to ``execute``."""

    def emit(self, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = (),
             stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a tuple anchored to ``anchors`` (one input tuple, or several): the spout
        tuples they descend from complete only once this one is acked too."""
        ...

    def emit_direct(self, task: int, values: Sequence[Any],
                    anchors: Tuple | Iterable[Tuple] | None = (),
                    stream: str = DEFAULT_STREAM) -> list[int]:
        """``emit`` to one task of a component subscribed with a direct grouping."""
        ...

    def ack(self, tup: Tuple) -> None:
        """``tup`` is fully processed by this bolt."""
        ...

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        """Fail ``tup``'s spout tuples now (``FailReason`` kind ``"fail"``, with ``reason``)."""
        ...

    def reset_timeout(self, tup: Tuple) -> None:
        """``tup``'s trees are alive: restart their message timeout."""
        ...

    def report_error(self, error: BaseException | str) -> None:
        """Report an error without failing anything: counted, logged (throttled) and shown by
        ``stormlet errors``."""
        ...


class BasicOutputCollector:
    """What a ``BasicBolt``'s ``execute`` gets: its emits are anchored to the input tuple, which
    the runtime acks after ``execute`` returns (or fails, kind ``"error"``, if it raises)."""

    __slots__ = ("_collector", "_emit", "input")

    def __init__(self, collector: OutputCollector):
        self._collector = collector
        self._emit = collector.emit   # bound once: a basic bolt's emit costs one call more, not two
        self.input: Tuple | None = None   # set by the runner before each execute

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        return self._emit(values, self.input, stream)

    def emit_direct(self, task: int, values: Sequence[Any],
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self._collector.emit_direct(task, values, self.input, stream)

    def reset_timeout(self, tup: Tuple) -> None:
        self._collector.reset_timeout(tup)

    def report_error(self, error: BaseException | str) -> None:
        self._collector.report_error(error)


class AnchoringCollector:
    """An ``OutputCollector`` over ``collector`` that chooses the anchors of every emit
    (``anchored``, given what the bolt passed, ``None`` if nothing) and passes the rest on.
    Windowed and stateful bolts get one of these, with their own anchoring and acking."""

    def __init__(self, collector: OutputCollector):
        self._collector = collector

    def emit(self, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = None,
             stream: str = DEFAULT_STREAM) -> list[int]:
        return self._collector.emit(values, self.anchored(anchors), stream)

    def emit_direct(self, task: int, values: Sequence[Any],
                    anchors: Tuple | Iterable[Tuple] | None = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self._collector.emit_direct(task, values, self.anchored(anchors), stream)

    def anchored(self, anchors: Tuple | Iterable[Tuple] | None) -> Tuple | Iterable[Tuple]:
        return () if anchors is None else anchors

    def ack(self, tup: Tuple) -> None:
        self._collector.ack(tup)

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        self._collector.fail(tup, reason)

    def reset_timeout(self, tup: Tuple) -> None:
        self._collector.reset_timeout(tup)

    def report_error(self, error: BaseException | str) -> None:
        self._collector.report_error(error)
