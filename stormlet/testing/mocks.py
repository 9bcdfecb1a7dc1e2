"""Unit-testing one component: tuples made by hand, collectors that record, a bolt harness.

    from stormlet.testing import BoltHarness, make_tuple

    harness = BoltHarness(SplitSentence())          # prepared, with a recording collector
    harness.execute(make_tuple(["a b"], fields=["sentence"]))
    assert harness.collector.emitted_values() == [["a"], ["b"]]
    assert len(harness.collector.acked) == 1

``make_tuple`` is Storm's ``Testing.testTuple``; the collectors record what a component emits,
acks and fails, checking each emit against the streams it declares (field count, and values the
runtime could serialize) as the runtime does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import config as cfg
from ..collectors import BasicOutputCollector
from ..components import BasicBolt, Bolt, Spout, StreamDeclaration, declared_streams
from ..context import TopologyContext
from ..fail_reason import FailReason
from ..runtime.protocol import DEFAULT_STREAM, SYSTEM_COMPONENT, SYSTEM_TASK, TICK_STREAM
from ..streamparse.adapters import StreamparseBolt
from ..streamparse.bolt import Bolt as StreamparseBoltClass
from ..tuples import StreamInfo, Tuple
from ..values import check_values
from ..windowing import WindowedBolt, WindowedBoltRunner
from .clock import SimulatedClock, current_clock

TICK_FIELDS = ["rate_secs"]   # a tick tuple's one field, as the runtime sends it


def make_tuple(values: Sequence[Any], fields: Sequence[str] | None = None,
               component: str = "component", stream: str = DEFAULT_STREAM,
               task: int = 1) -> Tuple:
    """A tuple as a bolt receives it from ``component``'s task ``task`` on ``stream``: Storm's
    ``Testing.testTuple``. Without ``fields`` they are named ``field1``, ``field2``, ..."""
    values = list(values)
    names = [f"field{i}" for i in range(1, len(values) + 1)] if fields is None else list(fields)
    if len(names) != len(values):
        raise ValueError(f"make_tuple: {len(values)} values for {len(names)} fields {names}")
    return Tuple(values, StreamInfo(component, stream, names), task)


def tick_tuple(rate_secs: float = 1.0) -> Tuple:
    """A tick tuple (``tup.is_tick()`` is true), as the runtime sends every ``rate_secs``."""
    return Tuple([rate_secs], StreamInfo(SYSTEM_COMPONENT, TICK_STREAM, TICK_FIELDS), SYSTEM_TASK)


@dataclass(frozen=True)
class Emitted:
    """One emit a mock collector recorded."""

    stream: str
    values: list[Any]
    anchors: tuple[Tuple, ...] = ()   # a bolt's anchors (empty for a spout)
    msg_id: Any = None                # a spout's message id
    task: int | None = None           # the task of an ``emit_direct``


class _Recorder:
    """What both mock collectors share: the emits, checked against the declared streams."""

    def __init__(self, streams: dict[str, StreamDeclaration] | None, component: str):
        self.streams = streams
        self.component = component
        self.emitted: list[Emitted] = []
        self.errors: list[BaseException | str] = []

    def _record(self, emit: Emitted) -> list[int]:
        if self.streams is not None:
            declared = self.streams.get(emit.stream)
            if declared is None:
                raise ValueError(f"{self.component!r} emitted on stream {emit.stream!r}, which it "
                                 f"does not declare (it declares {sorted(self.streams)})")
            check_values(emit.values, self.component, emit.stream, list(declared.fields))
        self.emitted.append(emit)
        return [] if emit.task is None else [emit.task]

    def emitted_values(self, stream: str = DEFAULT_STREAM) -> list[list[Any]]:
        """The values of each emit on ``stream``, in order."""
        return [e.values for e in self.emitted if e.stream == stream]

    def report_error(self, error: BaseException | str) -> None:
        self.errors.append(error)


def _anchor_tuple(anchors: Tuple | Iterable[Tuple] | None) -> tuple[Tuple, ...]:
    if anchors is None:
        return ()
    return (anchors,) if isinstance(anchors, Tuple) else tuple(anchors)


class MockOutputCollector(_Recorder):
    """An ``OutputCollector`` that records: ``emitted`` (``Emitted``), ``acked`` (tuples),
    ``failed`` (``(tuple, reason)``), ``timeouts_reset`` and ``errors``. Given the component's
    ``streams`` (``declared_streams``), an emit on an undeclared stream or of the wrong number
    of values raises, as at run time."""

    def __init__(self, streams: dict[str, StreamDeclaration] | None = None,
                 component: str = "bolt"):
        super().__init__(streams, component)
        self.acked: list[Tuple] = []
        self.failed: list[tuple[Tuple, str | None]] = []
        self.timeouts_reset: list[Tuple] = []

    def emit(self, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = (),
             stream: str = DEFAULT_STREAM) -> list[int]:
        return self._record(Emitted(stream, list(values), _anchor_tuple(anchors)))

    def emit_direct(self, task: int, values: Sequence[Any],
                    anchors: Tuple | Iterable[Tuple] | None = (),
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self._record(Emitted(stream, list(values), _anchor_tuple(anchors), task=task))

    def ack(self, tup: Tuple) -> None:
        self.acked.append(tup)

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        self.failed.append((tup, reason))

    def reset_timeout(self, tup: Tuple) -> None:
        self.timeouts_reset.append(tup)


class MockSpoutOutputCollector(_Recorder):
    """A ``SpoutOutputCollector`` that records ``emitted`` (with their ``msg_id``) and
    ``dead_lettered`` (``(values, msg_id, reason)``)."""

    def __init__(self, streams: dict[str, StreamDeclaration] | None = None,
                 component: str = "spout"):
        super().__init__(streams, component)
        self.dead_lettered: list[tuple[list[Any], Any, FailReason | str | None]] = []

    def emit(self, values: Sequence[Any], msg_id: Any = None,
             stream: str = DEFAULT_STREAM) -> list[int]:
        return self._record(Emitted(stream, list(values), msg_id=msg_id))

    def emit_direct(self, task: int, values: Sequence[Any], msg_id: Any = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self._record(Emitted(stream, list(values), msg_id=msg_id, task=task))

    def dead_letter(self, values: Sequence[Any], msg_id: Any = None,
                    reason: FailReason | str | None = None, attempts: int = 1) -> None:
        self.dead_lettered.append((list(values), msg_id, reason))


class _MockLayout:
    """The topology a mock context describes: the component under test, task 1, and its
    sources (one task each, from 2 on), each with its default stream's fields."""

    def __init__(self, component: str, task: int, sources: dict[str, list[str]],
                 streams: dict[str, StreamDeclaration], name: str):
        self.name = name
        self._component = component
        self._sources = dict(sources)
        self._fields = {(src, DEFAULT_STREAM): list(f) for src, f in sources.items()}
        self._fields.update({(component, s): list(d.fields) for s, d in streams.items()})
        self.component_tasks = {component: [task]}
        others = (t for t in range(1, len(sources) + 2) if t != task)
        for source, source_task in zip(sources, others):
            self.component_tasks[source] = [source_task]
        self.task_component = {t: c for c, tasks in self.component_tasks.items() for t in tasks}

    def component_ids(self) -> list[str]:
        return list(self.component_tasks)

    def output_fields(self, component: str, stream: str) -> list[str]:
        return self._fields[(component, stream)]

    def sources(self, component: str) -> list[str]:
        return list(self._sources) if component == self._component else []


def mock_context(component_id: str = "bolt", task_id: int = 1,
                 sources: dict[str, list[str]] | None = None,
                 conf: dict[str, Any] | None = None,
                 streams: dict[str, StreamDeclaration] | None = None,
                 topology_name: str = "test") -> TopologyContext:
    """A ``TopologyContext`` for ``component_id``'s task ``task_id`` in a topology where it
    reads ``sources`` (component id -> its default stream's fields, one task each). User metrics
    registered through it work as at run time."""
    layout = _MockLayout(component_id, task_id, sources or {}, streams or {}, topology_name)
    return TopologyContext(layout, task_id, cfg.merged(conf))


class BoltHarness:
    """One bolt, prepared with a ``MockOutputCollector`` and a ``mock_context``, for unit tests:
    a stormlet bolt, or a streamparse ``Bolt`` subclass (the class: each task makes its own).
    ``instance`` is the bolt object itself (the streamparse bolt, the windowed bolt).

    ``execute(tup)`` runs it as the runtime does: a ``BasicBolt``'s input is acked after
    ``execute`` returns; an exception from any bolt fails the input (reason: the error) and is
    recorded in ``collector.errors``, not raised. A ``WindowedBolt`` runs inside its window
    runner on ``clock`` (default: the ``simulated_time()`` clock, else a new simulated one):
    ``advance(secs)`` moves the clock and sends a tick, firing the windows due by then.
    """

    def __init__(self, bolt: Bolt | BasicBolt | WindowedBolt | type,
                 conf: dict[str, Any] | None = None, component_id: str = "bolt",
                 sources: dict[str, list[str]] | None = None,
                 clock: SimulatedClock | None = None):
        self.clock = clock or current_clock() or SimulatedClock()
        if isinstance(bolt, type):
            if not issubclass(bolt, StreamparseBoltClass):
                raise TypeError(f"BoltHarness takes a bolt, or a streamparse Bolt class; got "
                                f"the class {bolt.__name__} (make one: {bolt.__name__}())")
            bolt = StreamparseBolt(bolt, bolt.spec(name=component_id).outputs)
        if isinstance(bolt, WindowedBolt):
            runner = WindowedBoltRunner(bolt)
            runner.clock = self.clock.time
            bolt = runner
        self.bolt = bolt
        self.conf = cfg.merged(conf, bolt.get_component_configuration() or {})
        streams = declared_streams(bolt, component_id)
        self.collector = MockOutputCollector(streams, component_id)
        self.context = mock_context(component_id, sources=sources, conf=self.conf,
                                    streams=streams)
        if isinstance(bolt, BasicBolt):
            bolt.prepare(self.conf, self.context)
            self._basic = BasicOutputCollector(self.collector)
        else:
            bolt.prepare(self.conf, self.context, self.collector)
        # What the test reads the bolt's own state from: the user's object, not its runner.
        self.instance: Any = (bolt.bolt if isinstance(bolt, (StreamparseBolt, WindowedBoltRunner))
                              else bolt)

    def execute(self, tup: Tuple) -> None:
        """Run the bolt's ``execute`` on ``tup`` (see the class doc for acks and errors)."""
        try:
            if isinstance(self.bolt, BasicBolt):
                self._basic.input = tup
                self.bolt.execute(tup, self._basic)
                self.collector.ack(tup)
            else:
                self.bolt.execute(tup)
        except Exception as exc:
            self.collector.fail(tup, f"{type(exc).__name__}: {exc}")
            self.collector.report_error(exc)

    def tick(self) -> None:
        """Send the bolt a tick tuple."""
        rate = self.conf.get(cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS) or 1.0
        self.execute(tick_tuple(float(rate)))

    def advance(self, secs: float) -> None:
        """Move the clock ``secs`` on, then send a tick (a window fires on the tick after its
        time has come)."""
        self.clock.advance(secs)
        self.tick()

    def cleanup(self) -> None:
        self.bolt.cleanup()


def spout_harness(spout: Spout, conf: dict[str, Any] | None = None,
                  component_id: str = "spout") -> MockSpoutOutputCollector:
    """Open ``spout`` with a ``MockSpoutOutputCollector`` and a ``mock_context``; returns the
    collector (call ``spout.next_tuple()``, ``ack`` and ``fail`` yourself)."""
    streams = declared_streams(spout, component_id)
    collector = MockSpoutOutputCollector(streams, component_id)
    merged = cfg.merged(conf, spout.get_component_configuration() or {})
    spout.open(merged, mock_context(component_id, conf=merged, streams=streams), collector)
    return collector
