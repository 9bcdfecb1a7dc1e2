"""The plan of a backfill, made on the driver from the topology alone (no Spark, no data): which
bolts run and in what order, how each bolt's input is cut into its tasks, where every stage's
streams go, and which are written.

The dataset replaces one spout stream; from there the graph is walked. A bolt runs once, after the
bolts it reads (so bolts that feed each other in a cycle are refused), as one Spark partition per
task: partition ``i`` is task index ``i``. How a bolt's input reaches its partitions (its mode):

- ``ROUTE``: the grouping picks the task, with the runtime's own chooser (the same CRC-32 hash over
  the same task ids), so a key lands on the task index it would in streaming; Spark repartitions
  by the chosen index. Fields, all, global, direct, partial-key and custom groupings; a direct
  grouping from the replaced spout is refused (only that spout could choose the tasks).
- ``NARROW``: shuffle, none and local-or-shuffle, from as many partitions as the bolt has tasks:
  any task will do, so partition ``i`` feeds task ``i`` and nothing moves.
- ``MERGE``: the same groupings from the input, with more partitions than tasks: Spark merges
  partitions. Otherwise (fewer input partitions, or another bolt with a different task count)
  those groupings ``ROUTE`` too: their chooser deals the tuples round-robin.

``plan_backfill`` gives the ``Plan``; ``stage_specs`` turns it into the plain data each Spark
stage's runner gets (``StageSpec``, with a ``RouteSpec`` per subscription it feeds).

    plan = plan_backfill(topology, spout="sentences")
    stages, modes = stage_specs(plan, topology, input_partitions=4)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ... import groupings as g
from ...runtime.protocol import DEFAULT_STREAM
from ...state.checkpoint import CHECKPOINT_COMPONENT
from ...state.wrappers import StatefulBoltRunner, run_bolt
from ...topology import Topology
from ...windowing import WindowedBoltRunner
from .errors import BackfillError

# How a consumer's input is cut into its tasks' partitions (see the module doc).
ROUTE = "route"      # the grouping picks the task, as in streaming; Spark repartitions by it
NARROW = "narrow"    # shuffle-like, as many partitions as tasks: partition i feeds task i
MERGE = "merge"      # shuffle-like from the input, more partitions than tasks: Spark merges them
SHUFFLE_LIKE = (g.SHUFFLE, g.NONE, g.LOCAL_OR_SHUFFLE)   # any task will do
# How the job's log line describes each mode.
MODE_WORDS = {NARROW: "input kept in place", MERGE: "input partitions merged",
              ROUTE: "input repartitioned by its grouping"}


# ----- the plan: which bolts run, how their inputs are cut, what is written


@dataclass(frozen=True)
class Edge:
    source: str
    stream: str
    consumer: str
    sub: int                 # the subscription's index in the consumer's inputs
    grouping: str


@dataclass
class Plan:
    spout: str
    stream: str                          # the spout stream the dataset fills
    order: list[str]                     # the bolts that run, each after those it reads
    edges: list[Edge]
    outputs: list[tuple[str, str]]       # (component, stream) written
    notes: list[str] = field(default_factory=list)

    def consumers(self, emitter: str) -> list[str]:
        return list(dict.fromkeys(e.consumer for e in self.edges if e.source == emitter))

    def inputs(self, consumer: str) -> list[Edge]:
        return [e for e in self.edges if e.consumer == consumer]

    def uses(self, component: str) -> int:
        """How many Spark consumers a stage's records have: downstream bolts and outputs."""
        return len(self.consumers(component)) + sum(c == component for c, _ in self.outputs)

    def cached(self, component: str) -> bool:
        """Whether Spark keeps a stage's records: several consumers read them, and its bolts
        must run once."""
        return self.uses(component) > 1


def plan_backfill(topology: Topology, spout: str | None = None, stream: str | None = None,
                  components: tuple[str, ...] | list[str] = ()) -> Plan:
    """Walk the topology from the spout the dataset replaces; raise ``BackfillError`` for what a
    backfill cannot do."""
    spout_spec = _choose_spout(topology, spout)
    spout = spout_spec.id
    stream = _choose_stream(spout_spec, stream)

    reached: set[str] = set()
    grew = True
    while grew:
        grew = False
        for spec in topology.bolts:
            if spec.id not in reached and any(_feeds(sub, spout, stream, reached)
                                               for sub in spec.inputs):
                reached.add(spec.id)
                grew = True
    if not reached:
        raise BackfillError(f"no bolt subscribes to spout {spout!r} stream {stream!r}: there is "
                            f"nothing to backfill")

    if components:
        for cid in components:
            if cid not in topology.components:
                raise BackfillError(f"there is no component {cid!r} (bolts: "
                                    f"{', '.join(sorted(b.id for b in topology.bolts))})")
            if cid not in reached:
                what = "a spout" if topology.components[cid].is_spout else \
                    f"a bolt that gets no tuples from spout {spout!r} stream {stream!r}"
                raise BackfillError(f"--component {cid!r} is {what}; choose a bolt downstream "
                                    f"of the input")
        reached = _ancestors(topology, set(components), reached)

    for cid in sorted(reached):
        kept = _kept_across_tuples(topology.components[cid].obj)
        if kept:
            raise BackfillError(f"bolt {cid!r} keeps {kept} across tuples, which a backfill "
                                f"(each bolt run once over a batch, with no ticks or "
                                f"checkpoints) cannot keep; backfill the bolts before it "
                                f"with --component")
    edges = [Edge(sub.source, sub.stream, spec.id, i, sub.grouping.kind)
             for spec in topology.bolts if spec.id in reached
             for i, sub in enumerate(spec.inputs) if _feeds(sub, spout, stream, reached)]
    for edge in edges:
        if edge.source == spout and edge.grouping == g.DIRECT:
            raise BackfillError(
                f"bolt {edge.consumer!r} subscribes to spout {spout!r} stream {stream!r} with a "
                f"direct grouping: only the spout can say which task gets each message, and the "
                f"input replaces it; backfill from a spout whose subscribers use other groupings")

    notes = []
    for spec in topology.bolts:
        if spec.id in reached:
            for sub in spec.inputs:
                if not _feeds(sub, spout, stream, reached):
                    notes.append(f"bolt {spec.id!r} also reads {sub.source!r} stream "
                                 f"{sub.stream!r}, which gets no tuples in this backfill")
    order = _upstream_first(reached, edges, spout)
    if components:
        outputs = [(cid, s) for cid in order if cid in components
                   for s in topology.components[cid].streams]
    else:
        leaves = [cid for cid in order if not any(e.source == cid for e in edges)]
        outputs = [(cid, s) for cid in leaves for s in topology.components[cid].streams]
        sinks = [cid for cid in leaves if not topology.components[cid].streams]
        if sinks:
            notes.append(f"bolts {sinks} declare no output streams: they run, nothing of theirs "
                         f"is written")
    return Plan(spout, stream, order, edges, outputs, notes)


def _kept_across_tuples(bolt: Any) -> str | None:
    """What ``bolt`` (as the topology runs it) keeps that a backfill cannot: a window or
    checkpointed state."""
    bolt = run_bolt(bolt)
    if isinstance(bolt, StatefulBoltRunner):
        return "checkpointed state"
    if isinstance(bolt, WindowedBoltRunner):
        return "a window"
    return None


def _choose_spout(topology: Topology, spout: str | None) -> Any:
    # The checkpoint spout emits no data: there is nothing of its to replace.
    spouts = sorted(s.id for s in topology.spouts if s.id != CHECKPOINT_COMPONENT)
    if spout is None:
        if len(spouts) > 1:
            raise BackfillError(f"the topology has {len(spouts)} spouts ({', '.join(spouts)}): "
                                f"choose the one the input replaces with --spout")
        return topology.components[spouts[0]]
    spec = topology.components.get(spout)
    if spec is None or not spec.is_spout:
        what = "a bolt" if spec is not None else "no such component"
        raise BackfillError(f"--spout {spout!r}: {what}; the topology's spouts are "
                            f"{', '.join(spouts)}")
    return spec


def _choose_stream(spec: Any, stream: str | None) -> str:
    streams = sorted(spec.streams)
    if stream is None:
        if DEFAULT_STREAM in spec.streams:
            stream = DEFAULT_STREAM
        elif len(streams) == 1:
            stream = streams[0]
        else:
            raise BackfillError(f"spout {spec.id!r} declares streams {streams} and no default "
                                f"stream: choose the one the input fills with --spout-stream")
    if stream not in spec.streams:
        raise BackfillError(f"spout {spec.id!r} declares no stream {stream!r} (it declares "
                            f"{streams or 'none'})")
    return stream


def _feeds(sub: Any, spout: str, stream: str, reached: set[str]) -> bool:
    return (sub.source == spout and sub.stream == stream) or sub.source in reached


def _ancestors(topology: Topology, chosen: set[str], reached: set[str]) -> set[str]:
    keep = set(chosen)
    todo = list(chosen)
    while todo:
        for sub in topology.components[todo.pop()].inputs:
            if sub.source in reached and sub.source not in keep:
                keep.add(sub.source)
                todo.append(sub.source)
    return keep


def _upstream_first(bolts: set[str], edges: list[Edge], spout: str) -> list[str]:
    waiting = {cid: {e.source for e in edges if e.consumer == cid and e.source != spout}
               for cid in bolts}
    order: list[str] = []
    while waiting:
        ready = sorted(cid for cid, sources in waiting.items() if not sources - set(order))
        if not ready:
            cycle = sorted(waiting)
            raise BackfillError(f"bolts {cycle} feed each other in a cycle: a backfill runs "
                                f"each bolt once, after those it reads")
        for cid in ready:
            order.append(cid)
            del waiting[cid]
    return order


# ----- the plan of one stage, as plain data


@dataclass(frozen=True)
class RouteSpec:
    """One subscription of a downstream consumer to a stream the stage emits."""

    slot: int         # the consumer's number among this stage's consumers
    consumer: str
    sub: int          # the subscription's index in the consumer's inputs
    mode: str         # ROUTE, NARROW or MERGE


@dataclass(frozen=True)
class StageSpec:
    component: str
    routes: dict[str, tuple[RouteSpec, ...]] = field(default_factory=dict)   # per stream
    outputs: dict[str, int] = field(default_factory=dict)     # stream -> output number
    cached: bool = False      # read by several consumers: its records are kept by Spark


def stage_specs(plan: Plan, topology: Topology,
                input_partitions: int) -> tuple[dict[str, StageSpec], dict[str, str]]:
    """Each component's stage, and how each bolt's input is cut into its tasks (``modes``)."""
    def partitions(cid: str) -> int:
        return input_partitions if cid == plan.spout else topology.components[cid].tasks

    modes: dict[str, str] = {}
    for cid in plan.order:
        inputs = plan.inputs(cid)
        tasks = topology.components[cid].tasks
        mode = ROUTE
        if len(inputs) == 1 and inputs[0].grouping in SHUFFLE_LIKE:
            source = inputs[0].source
            if partitions(source) == tasks:
                mode = NARROW
            elif source == plan.spout and partitions(source) > tasks:
                mode = MERGE
        modes[cid] = mode

    stages = {}
    for cid in [plan.spout, *plan.order]:
        slots = {consumer: slot for slot, consumer in enumerate(plan.consumers(cid))}
        routes: dict[str, list[RouteSpec]] = {}
        for e in plan.edges:
            if e.source == cid:
                routes.setdefault(e.stream, []).append(
                    RouteSpec(slots[e.consumer], e.consumer, e.sub, modes[e.consumer]))
        outputs = {s: k for k, (c, s) in enumerate(plan.outputs) if c == cid}
        stages[cid] = StageSpec(cid, {s: tuple(r) for s, r in routes.items()}, outputs,
                                cached=plan.cached(cid))
    return stages, modes

