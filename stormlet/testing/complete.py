"""Run a topology on mock spout data to completion (Storm's ``Testing.completeTopology``).

    sources = MockedSources().add_mock_data("sentences", ["a b"], ["b c"])
    result = complete_topology(topology, CompleteTopologyParam(mocked_sources=sources))
    assert multiset_eq(result.read_tuples("split"), [["a"], ["b"], ["b"], ["c"]])

Each mocked spout is replaced by one that emits its mock tuples, each once with a message id
(none replayed: a failed one stays failed, as Storm's ``FixedTupleSpout``), its tasks sharing
them (task ``i`` of ``n`` emits every ``n``-th, from the ``i``-th). A capturing bolt subscribes
to every stream of every component (global grouping; direct streams are not captured) and acks
what it gets. The run is complete when every mock tuple was acked or failed and the topology is
idle; then it is killed and ``CompletedTopology`` holds what each component emitted, by stream,
in arrival order at the capturing bolt (``multiset_eq`` compares regardless of order).

It runs on a ``SimulatedCluster`` (simulated time, see cluster.py): every mock tuple is emitted
at one simulated instant, and while tuples are unfinished and the topology idle, the clock moves
to the next tick's time, so window and tick-driven bolts complete too, the same on every run.
Local mode only: the capture is in this process.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from .. import groupings as g
from ..components import Bolt, OutputFieldsDeclarer, Spout, StreamDeclaration
from ..fail_reason import FailReason
from ..runtime.protocol import DEFAULT_STREAM
from ..topology import ComponentSpec, Subscription, Topology, TopologyError
from ..tuples import Tuple
from .cluster import SimulatedCluster

CAPTURE_COMPONENT = "__capture"
DEFAULT_TIMEOUT_SECS = 15.0   # Storm's CompleteTopologyParam default (15,000 ms)

_runs: dict[str, _Run] = {}          # run id -> what it captured; tasks find theirs by id
_runs_lock = threading.Lock()
_run_ids = itertools.count(1)


class MockedSources:
    """The tuples each mocked spout emits: Storm's ``MockedSources``. ``add_mock_data``
    returns this object, so calls chain."""

    def __init__(self) -> None:
        self.data: dict[str, list[tuple[str, list[Any]]]] = {}

    def add_mock_data(self, spout_id: str, *values: Sequence[Any],
                      stream: str = DEFAULT_STREAM) -> MockedSources:
        """``spout_id`` emits ``values`` (each a list of field values) on ``stream``."""
        self.data.setdefault(spout_id, []).extend((stream, list(v)) for v in values)
        return self


@dataclass
class CompleteTopologyParam:
    """How to run ``complete_topology``: Storm's ``CompleteTopologyParam``. ``timeout_secs`` is
    real time; ``storm_conf`` the topology's config (Storm's name kept, stormlet's keys)."""

    mocked_sources: MockedSources = field(default_factory=MockedSources)
    storm_conf: dict[str, Any] = field(default_factory=dict)
    topology_name: str = "complete-topology"
    timeout_secs: float = DEFAULT_TIMEOUT_SECS


@dataclass
class _Run:
    expected: dict[str, int]                        # mocked spout -> mock tuples
    captured: dict[tuple[str, str], list[list[Any]]] = field(default_factory=dict)
    acked: dict[str, list[int]] = field(default_factory=dict)
    failed: dict[str, list[tuple[int, FailReason]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def done(self) -> bool:
        with self.lock:
            return all(len(self.acked.get(s, ())) + len(self.failed.get(s, ())) == n
                       for s, n in self.expected.items())


def _run(run_id: str) -> _Run:
    with _runs_lock:
        return _runs[run_id]


class MockSpout(Spout):
    """Emits the mock tuples of one spout, each once, with its index as message id."""

    def __init__(self, run_id: str, component: str, items: list[tuple[str, list[Any]]],
                 streams: dict[str, StreamDeclaration]):
        self.run_id = run_id
        self.component = component
        self.items = items
        self.streams = streams

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for stream, declaration in self.streams.items():
            declarer.declare(list(declaration.fields), stream, declaration.direct)

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        tasks = context.get_this_component_tasks()
        mine = range(tasks.index(context.task_id), len(self.items), len(tasks))
        self._next = iter(mine)
        self._record = _run(self.run_id)

    def next_tuple(self) -> None:
        index = next(self._next, None)
        if index is not None:
            stream, values = self.items[index]
            self.collector.emit(values, msg_id=index, stream=stream)

    def ack(self, msg_id: Any) -> None:
        with self._record.lock:
            self._record.acked.setdefault(self.component, []).append(msg_id)

    def fail(self, msg_id: Any, reason: FailReason) -> None:
        with self._record.lock:
            self._record.failed.setdefault(self.component, []).append((msg_id, reason))


class CaptureBolt(Bolt):
    """Records every tuple it gets under (source component, stream), and acks it."""

    def __init__(self, run_id: str):
        self.run_id = run_id

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self._record = _run(self.run_id)

    def execute(self, tup: Tuple) -> None:
        with self._record.lock:
            key = (tup.source_component, tup.stream)
            self._record.captured.setdefault(key, []).append(list(tup.values))
        self.collector.ack(tup)


@dataclass
class CompletedTopology:
    """What a ``complete_topology`` run emitted, and what became of each mock tuple."""

    captured: dict[tuple[str, str], list[list[Any]]]
    acked: dict[str, list[int]]                         # spout -> indexes of its acked mock tuples
    failed: dict[str, list[tuple[int, FailReason]]]     # spout -> (index, why) of its failed ones
    metrics: dict[str, dict]

    def read_tuples(self, component: str, stream: str = DEFAULT_STREAM) -> list[list[Any]]:
        """The values of each tuple ``component`` emitted on ``stream`` (Storm's
        ``Testing.readTuples``); ``[]`` if it emitted none there."""
        return [list(v) for v in self.captured.get((component, stream), [])]


def multiset_eq(a: Iterable[Any], b: Iterable[Any]) -> bool:
    """Whether ``a`` and ``b`` hold the same items as many times each, in any order (Storm's
    ``Testing.multiseteq``); items may be lists."""
    def key(item: Any) -> bytes:
        return msgpack.packb(item, use_bin_type=True)
    return Counter(map(key, a)) == Counter(map(key, b))


def _mocked(topology: Topology, sources: MockedSources, run_id: str) -> Topology:
    """``topology`` with its mocked spouts replaced and the capturing bolt added."""
    unknown = sorted(set(sources.data) - {s.id for s in topology.spouts})
    if unknown:
        raise TopologyError(f"mock data for {unknown}, which are not spouts of this topology "
                            f"(its spouts: {sorted(s.id for s in topology.spouts)})")
    specs: dict[str, ComponentSpec] = {}
    for cid, spec in topology.components.items():
        items = sources.data.get(cid)
        if items is not None:
            for stream, values in items:
                declared = spec.streams.get(stream)
                if declared is None or len(declared.fields) != len(values):
                    raise TopologyError(
                        f"mock data {values!r} for spout {cid!r} stream {stream!r}: the spout "
                        f"declares {list(declared.fields) if declared else 'no such stream'}")
            spec = replace(spec, obj=MockSpout(run_id, cid, items, spec.streams))
        specs[cid] = spec
    inputs = [Subscription(cid, stream, g.Grouping(g.GLOBAL))
              for cid, spec in specs.items() for stream, declared in spec.streams.items()
              if not declared.direct and not stream.startswith("__")]
    specs[CAPTURE_COMPONENT] = ComponentSpec(CAPTURE_COMPONENT, CaptureBolt(run_id), False, 1,
                                             inputs=inputs)
    return Topology(specs)


def complete_topology(topology: Topology, param: CompleteTopologyParam | None = None,
                      cluster: SimulatedCluster | None = None) -> CompletedTopology:
    """Run ``topology`` on ``param.mocked_sources`` until every mock tuple is acked or failed
    and the topology is idle, then kill it and return what each component emitted (see the
    module doc). Runs on ``cluster`` if given (its clock moves on), else on a new
    ``SimulatedCluster``. ``TimeoutError`` after ``param.timeout_secs`` of real time, naming
    the spouts whose tuples are unfinished."""
    param = param or CompleteTopologyParam()
    run_id = f"run-{next(_run_ids)}"
    record = _Run({s: len(items) for s, items in param.mocked_sources.data.items()})
    with _runs_lock:
        _runs[run_id] = record
    own = cluster is None
    cluster = cluster or SimulatedCluster()
    name = param.topology_name
    try:
        cluster.submit(name, param.storm_conf, _mocked(topology, param.mocked_sources, run_id))
        deadline = time.monotonic() + param.timeout_secs
        while (left := deadline - time.monotonic()) > 0:
            try:
                cluster.wait_idle(name, left)
                if record.done():
                    break
                due = cluster.next_tick()
                if due is None:   # nothing moves by itself but message timeouts (real time)
                    cluster.wait_for(lambda: record.done() or time.monotonic() >= deadline,
                                     timeout=left + 1)
                else:
                    cluster.advance_time(due - cluster.clock.time(), left)
            except TimeoutError:
                break
        if not record.done():
            with record.lock:   # before the kill, which fails what is in flight
                unfinished = {s: n - len(record.acked.get(s, ())) - len(record.failed.get(s, ()))
                              for s, n in record.expected.items()}
            cluster.kill(name, 0)
            raise TimeoutError(
                f"complete_topology {name!r}: mock tuples unfinished after "
                f"{param.timeout_secs:g} s: " + ", ".join(
                    f"{s} {n}" for s, n in sorted(unfinished.items()) if n))
        report = cluster.kill(name)
        with record.lock:
            return CompletedTopology(dict(record.captured), dict(record.acked),
                                     dict(record.failed), report.metrics)
    finally:
        with _runs_lock:
            _runs.pop(run_id, None)
        if own:
            cluster.shutdown()
