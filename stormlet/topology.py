"""Building a topology and refusing a bad one with a message that names the problem.

    b = TopologyBuilder()
    b.set_spout("sentences", Sentences(), parallelism=2)
    b.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
    topology = b.build()
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field, replace
from typing import Any

from . import config as cfg
from . import groupings as g
from .components import BasicBolt, Bolt, Component, Spout, StreamDeclaration, declared_streams
from .errors import TopologyError
from .state import providers as state_providers
from .state.bolt import StatefulBolt
from .state.checkpoint import (
    CHECKPOINT_COMPONENT,
    CHECKPOINT_FIELDS,
    CHECKPOINT_STREAM,
    CheckpointSpout,
)
from .state.exactly import problems as effectively_once_problems
from .state.exactly import rewindable
from .state.windowed import StatefulWindowedBolt, StatefulWindowedBoltRunner
from .state.wiring import checkpoint_sources
from .state.wrappers import CheckpointForwarder, StatefulBoltRunner, run_bolt
from .streams import DEFAULT_STREAM
from .windowing import Count, WindowedBolt, WindowedBoltRunner


@dataclass
class Subscription:
    source: str
    stream: str
    grouping: g.Grouping


@dataclass
class ComponentSpec:
    id: str
    obj: Component
    is_spout: bool
    parallelism: int
    num_tasks: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    inputs: list[Subscription] = field(default_factory=list)
    streams: dict[str, StreamDeclaration] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """"spout" or "bolt", as messages name the component."""
        return "spout" if self.is_spout else "bolt"

    @property
    def tasks(self) -> int:
        return self.num_tasks if self.num_tasks is not None else self.parallelism

    @property
    def executors(self) -> int:
        return min(self.parallelism, self.tasks)

    def new_instance(self) -> Component:
        """A private copy of the user's object for one task, as Storm deserializes one per task."""
        return copy.deepcopy(self.obj)

    def component_conf(self, conf: dict[str, Any]) -> dict[str, Any]:
        """The config this component's tasks see: the topology's ``conf``, then the component's
        own (``own_conf``)."""
        return cfg.merged(conf, self.own_conf())

    def own_conf(self) -> dict[str, Any]:
        """The component's own configuration, then what was set on its declarer."""
        return {**(self.obj.get_component_configuration() or {}), **self.config}


@dataclass
class Topology:
    """A validated topology: components in a stable order, spouts first."""

    components: dict[str, ComponentSpec]

    @property
    def spouts(self) -> list[ComponentSpec]:
        return [c for c in self.components.values() if c.is_spout]

    def config_problems(self, conf: dict[str, Any] | None) -> list[str]:
        """What cannot run under the topology config ``conf``: a value stormlet cannot use
        (a component's own config was checked by ``build``), windows longer than the message
        timeout their bolts will see, state settings that cannot work, and what a component
        says it cannot run with (``Component.config_problems``)."""
        problems = cfg.problems(conf)
        if problems:   # the checks below read these values
            return problems
        problems = _window_problems(self.components.values(), conf or {})
        if CHECKPOINT_COMPONENT in self.components:
            problems += state_providers.config_problems(cfg.merged(conf))
        problems += effectively_once_problems(self.components, cfg.merged(conf))
        for spec in self.components.values():
            problems += _said_config_problems(spec, conf or {})
        return problems

    def config_warnings(self, conf: dict[str, Any] | None) -> list[str]:
        """What the topology under ``conf`` may do that the user did not mean: settings that
        change nothing, in ``conf`` or in a component's own config (keys under Storm's or
        stormlet's prefixes that stormlet does not read, ``config.unread``, a misspelt one
        named with the key it is spelt like); and bolts in a cycle spread over workers with
        nothing to bound what circulates (see ``feeding_back``)."""
        lines = cfg.unread(conf)
        for spec in self.components.values():
            lines += [f"component {spec.id!r}: {line}" for line in cfg.unread(spec.own_conf())]
        in_cycles = sorted(cid for cid in self.components if self.cycle_of(cid))
        merged = cfg.merged(conf)
        if in_cycles and int(merged[cfg.TOPOLOGY_WORKERS] or 1) > 1 and (
                merged[cfg.TOPOLOGY_ACKER_EXECUTORS] == 0
                or not merged[cfg.TOPOLOGY_MAX_SPOUT_PENDING]):
            lines.append(f"bolts {', '.join(in_cycles)} feed each other in a cycle: data "
                         f"entering it from another worker is not held back while the cycle's "
                         f"inboxes there are full, so on several workers only "
                         f"{cfg.TOPOLOGY_MAX_SPOUT_PENDING} with acking on bounds what "
                         f"circulates")
        return lines

    @property
    def bolts(self) -> list[ComponentSpec]:
        return [c for c in self.components.values() if not c.is_spout]

    def subscribers(self, source: str, stream: str) -> list[tuple[ComponentSpec, g.Grouping]]:
        """Who reads ``source``'s ``stream``, with the grouping each uses."""
        found = []
        for spec in self.components.values():
            for sub in spec.inputs:
                if sub.source == source and sub.stream == stream:
                    found.append((spec, sub.grouping))
        return found

    def feeding_back(self, source: str) -> set[str]:
        """The components reading ``source`` (on any stream) that feed data back to it,
        directly or through others; ``source`` itself if it reads its own streams.

        Storm runs such cycles, and its backpressure can deadlock them (STORM-3637): a bolt
        waiting for room in a full inbox of the cycle waits, in the end, on itself. The runtime
        never holds back data on these edges (see ``runtime.transfer``); data entering the
        cycle waits instead while any inbox of the cycle in its process is full
        (``runtime.inbox.CycleGate``)."""
        return self._readers[source] & self.cycle_of(source)

    def cycle_of(self, component: str) -> frozenset[str]:
        """The components on a cycle with ``component``, itself included (each reaches the
        others through subscriptions); empty if it is on none."""
        return self._cycles[component]

    @functools.cached_property
    def _readers(self) -> dict[str, set[str]]:
        """Each component's readers (on any stream)."""
        readers: dict[str, set[str]] = {cid: set() for cid in self.components}
        for spec in self.components.values():
            for sub in spec.inputs:
                readers[sub.source].add(spec.id)
        return readers

    @functools.cached_property
    def _cycles(self) -> dict[str, frozenset[str]]:
        """Each component's cycle (``cycle_of``): worked out once, as the runtime asks for every
        task."""
        def reach(start: str, neighbours: Any) -> set[str]:
            found: set[str] = set()
            todo = [start]
            while todo:
                for cid in neighbours(todo.pop()):
                    if cid not in found:
                        found.add(cid)
                        todo.append(cid)
            return found

        def sources(cid: str) -> list[str]:
            return [sub.source for sub in self.components[cid].inputs]

        return {cid: frozenset(reach(cid, sources) & reach(cid, self._readers.__getitem__))
                for cid in self.components}

    def task_ids(self, extra: dict[str, int] | None = None) -> dict[str, list[int]]:
        """Task ids per component, numbered from 1 in component-id order as Storm does.

        ``extra`` adds system components (the ackers) with their task counts.
        """
        counts = {cid: spec.tasks for cid, spec in self.components.items()}
        counts.update(extra or {})
        return number_tasks(counts)


def number_tasks(counts: dict[str, int]) -> dict[str, list[int]]:
    """Task ids per component from task counts: numbered from 1 in component-id order, as Storm
    does, so every process that knows the counts agrees on the numbers."""
    tasks: dict[str, list[int]] = {}
    next_id = 1
    for cid in sorted(counts):
        tasks[cid] = list(range(next_id, next_id + counts[cid]))
        next_id += counts[cid]
    return tasks


class ComponentDeclarer:
    """Returned by ``set_spout`` and ``set_bolt``; every call returns the declarer so calls
    chain."""

    def __init__(self, spec: ComponentSpec):
        self._spec = spec

    def set_num_tasks(self, n: int) -> ComponentDeclarer:
        self._spec.num_tasks = n
        return self

    def add_config(self, key: str, value: Any) -> ComponentDeclarer:
        self._spec.config[key] = value
        return self

    def add_configurations(self, conf: dict[str, Any]) -> ComponentDeclarer:
        self._spec.config.update(conf)
        return self

    def _subscribe(self, source: str, stream: str, grouping: g.Grouping) -> ComponentDeclarer:
        self._spec.inputs.append(Subscription(source, stream, grouping))
        return self

    def shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.SHUFFLE))

    def fields_grouping(self, component: str, fields: list[str],
                        stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.FIELDS, _field_tuple(fields)))

    def all_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.ALL))

    def global_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.GLOBAL))

    def direct_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.DIRECT))

    def local_or_shuffle_grouping(self, component: str,
                                  stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.LOCAL_OR_SHUFFLE))

    def none_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.NONE))

    def partial_key_grouping(self, component: str, fields: list[str],
                             stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.PARTIAL_KEY, _field_tuple(fields)))

    def custom_grouping(self, component: str, grouping: g.CustomStreamGrouping,
                        stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        return self._subscribe(component, stream, g.Grouping(g.CUSTOM, custom=grouping))


def _field_tuple(fields: Any) -> tuple[str, ...]:
    # A bare string is a common slip ("word" for ["word"]); keep it whole so the error names it.
    if isinstance(fields, str):
        return (fields,)
    return tuple(fields)


class TopologyBuilder:
    def __init__(self) -> None:
        self._specs: dict[str, ComponentSpec] = {}
        self._problems: list[str] = []

    def set_spout(self, component_id: str, spout: Spout, parallelism: int = 1) -> ComponentDeclarer:
        return self._add(component_id, spout, True, parallelism)

    def set_bolt(self, component_id: str, bolt: Bolt | BasicBolt,
                 parallelism: int = 1) -> ComponentDeclarer:
        if isinstance(bolt, StatefulWindowedBolt):   # the window is checkpointed with the state
            bolt = StatefulWindowedBoltRunner(bolt)
        elif isinstance(bolt, WindowedBolt):   # the runner keeps its window and calls it
            bolt = WindowedBoltRunner(bolt)
        elif isinstance(bolt, StatefulBolt):   # the runner keeps its state and checkpoints it
            bolt = StatefulBoltRunner(bolt)
        return self._add(component_id, bolt, False, parallelism)

    def _add(self, component_id: str, obj: Component, is_spout: bool,
             parallelism: int) -> ComponentDeclarer:
        spec = ComponentSpec(component_id, obj, is_spout, parallelism)
        if component_id in self._specs:
            self._problems.append(f"component id {component_id!r} is used twice")
        else:
            self._specs[component_id] = spec
        return ComponentDeclarer(spec)

    def build(self) -> Topology:
        """Validate and return the topology; raise ``TopologyError`` listing every problem found."""
        problems = list(self._problems)
        for spec in self._specs.values():
            problems += _component_problems(spec)
        problems += _window_problems(self._specs.values(), {})
        if not any(spec.is_spout for spec in self._specs.values()):
            problems.append("a topology needs at least one spout")
        for spec in self._specs.values():
            problems += _subscription_problems(spec, self._specs)
            problems += _input_problems(spec, self._specs)
        if problems:
            raise TopologyError("invalid topology: " + "; ".join(problems))
        specs = _with_checkpointing(self._specs)
        problems = [p for spec in specs.values() for p in _subscription_problems(spec, specs)]
        if problems:   # the checkpoint stream's wiring is stormlet's own: a bug if wrong
            raise TopologyError("invalid checkpoint wiring: " + "; ".join(problems))
        ordered = sorted(specs.values(), key=lambda s: (not s.is_spout, s.id))
        return Topology({spec.id: spec for spec in ordered})


def _with_checkpointing(specs: dict[str, ComponentSpec]) -> dict[str, ComponentSpec]:
    """``specs``, with the checkpoint spout and stream added if any bolt is stateful: bolts
    upstream of a stateful bolt are run by a ``CheckpointForwarder`` (see state/wiring.py)."""
    stateful = {cid for cid, spec in specs.items() if isinstance(spec.obj, StatefulBoltRunner)}
    if not stateful:
        return dict(specs)
    spouts = {cid for cid, spec in specs.items() if spec.is_spout}
    inputs = {cid: {sub.source for sub in spec.inputs} for cid, spec in specs.items()}
    wired = dict(specs)
    checkpoint_stream = StreamDeclaration(CHECKPOINT_FIELDS)
    # Offset spouts send their epoch markers (effectively-once) on the checkpoint stream too.
    positioned = sorted(cid for cid in spouts if rewindable(specs[cid].obj))
    for cid in positioned:
        spec = specs[cid]
        wired[cid] = replace(spec, streams={**spec.streams, CHECKPOINT_STREAM: checkpoint_stream})
    for cid, sources in checkpoint_sources(inputs, spouts, stateful).items():
        spec = specs[cid]
        # (Only bolts are fed checkpoints: spouts start them.)
        obj: Any = (copy.copy(spec.obj) if cid in stateful
                    else CheckpointForwarder(spec.obj))  # type: ignore[arg-type]
        obj.checkpoint_sources = sources
        obj.epoch_sources = tuple(sorted(inputs.get(cid, ())))
        markers = sorted(inputs.get(cid, set()) & set(positioned))
        subscriptions = [Subscription(source, CHECKPOINT_STREAM, g.Grouping(g.ALL))
                         for source in sources + tuple(markers)]
        wired[cid] = replace(spec, obj=obj, inputs=spec.inputs + subscriptions,
                             streams={**spec.streams, CHECKPOINT_STREAM: checkpoint_stream})
    wired[CHECKPOINT_COMPONENT] = ComponentSpec(
        CHECKPOINT_COMPONENT, CheckpointSpout(position_sources=tuple(positioned)), True, 1,
        streams={CHECKPOINT_STREAM: checkpoint_stream})
    return wired


def _window_problems(specs: Any, conf: dict[str, Any]) -> list[str]:
    problems = []
    for spec in specs:
        runner = run_bolt(spec.obj)
        if isinstance(runner, (WindowedBoltRunner, StatefulWindowedBoltRunner)):
            timeout = spec.component_conf(conf)[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
            if cfg.problem(cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS, timeout) is None:  # else reported
                problems += runner.problems(spec.id, float(timeout))
        if isinstance(runner, WindowedBoltRunner):   # a persistent window acks at checkpoints
            problems += _window_count_problems(spec, runner.bolt, conf)
    return problems


def _window_count_problems(spec: ComponentSpec, bolt: Any, conf: dict[str, Any]) -> list[str]:
    """As Storm's WindowedBoltExecutor: a count window's length plus sliding count must fit in
    topology.max.spout.pending (read with the bolt's own config, as Storm does), else the
    spouts stop before the window fills and nothing is ever acked."""
    pending = spec.component_conf(conf).get(cfg.TOPOLOGY_MAX_SPOUT_PENDING)
    counts = [x.n for x in (bolt.window_length, bolt.window_sliding) if isinstance(x, Count)]
    if not pending or not counts or cfg.problem(cfg.TOPOLOGY_MAX_SPOUT_PENDING, pending):
        return []
    if sum(counts) > pending:
        return [f"windowed bolt {spec.id!r}: its window count (length plus sliding interval, "
                f"{sum(counts)}) is more than {cfg.TOPOLOGY_MAX_SPOUT_PENDING} ({pending:g}): "
                f"its spouts would stop before the window fills"]
    return []


def _own_conf_problems(spec: ComponentSpec) -> list[str]:
    """What is wrong with the component's own config: a value stormlet cannot use, or a
    ``get_component_configuration`` that fails."""
    try:
        own = spec.own_conf()
    except Exception as exc:  # a user's get_component_configuration that raises or returns junk
        return [f"get_component_configuration failed ({type(exc).__name__}: {exc})"]
    return cfg.problems(own)


def _said_config_problems(spec: ComponentSpec, conf: dict[str, Any]) -> list[str]:
    """What the component says it cannot run with under the topology config ``conf``
    (``Component.config_problems``), each naming it; a check that raises, or answers other than
    a list of strings, is a problem too."""
    kind = spec.kind
    try:
        said = spec.obj.config_problems(spec.component_conf(conf))
    except Exception as exc:   # a user's check that raises
        return [f"{kind} {spec.id!r}: config_problems raised {exc!r}"]
    if not isinstance(said, list) or not all(isinstance(problem, str) for problem in said):
        return [f"{kind} {spec.id!r}: config_problems must return a list of strings, got "
                f"{said!r:.80}"]
    return [f"{kind} {spec.id!r}: {problem}" for problem in said]


def _component_problems(spec: ComponentSpec) -> list[str]:
    name = spec.id
    if not isinstance(name, str) or not name:
        return [f"component id {name!r} must be a non-empty string"]
    problems = []
    if name.startswith("__"):
        problems.append(
            f"component id {name!r} is reserved (ids starting with '__' are stormlet's)")
    kind = spec.kind
    expected = (Spout,) if spec.is_spout else (Bolt, BasicBolt)
    if not isinstance(spec.obj, expected):
        wanted = " or ".join(cls.__name__ for cls in expected)
        problems.append(
            f"{kind} {name!r} must be an instance of {wanted}, got {type(spec.obj).__name__}")
        return problems
    if not isinstance(spec.parallelism, int) or spec.parallelism < 1:
        problems.append(
            f"{kind} {name!r}: parallelism must be an integer >= 1, got {spec.parallelism!r}")
    if spec.num_tasks is not None and (not isinstance(spec.num_tasks, int) or spec.num_tasks < 1):
        problems.append(
            f"{kind} {name!r}: number of tasks must be an integer >= 1, got {spec.num_tasks!r}")
    if spec.is_spout and spec.inputs:
        sources = ", ".join(repr(s.source) for s in spec.inputs)
        problems.append(f"spout {name!r} cannot subscribe to streams (it subscribes to {sources})")
    problems += [f"{kind} {name!r}: {problem}" for problem in _own_conf_problems(spec)]
    try:
        spec.streams = declared_streams(spec.obj, name)
    except TopologyError as exc:
        problems.append(str(exc))
    except Exception as exc:  # a user's declare_output_fields that raises
        problems.append(f"{kind} {name!r}: declare_output_fields raised {exc!r}")
    try:
        copy.deepcopy(spec.obj)
    except Exception as exc:
        problems.append(
            f"{kind} {name!r} cannot be copied for its tasks ({exc!r}); create resources such as "
            f"connections in open/prepare, not in __init__"
        )
    return problems


def _input_problems(spec: ComponentSpec, specs: dict[str, ComponentSpec]) -> list[str]:
    """A bolt's own view of its inputs (``input_problems``, as ``JoinBolt``'s: which streams
    it joins on which fields), given each subscription's declared fields."""
    obj = spec.obj.bolt if isinstance(spec.obj, WindowedBoltRunner) else spec.obj
    check = getattr(obj, "input_problems", None)
    if spec.is_spout or check is None:
        return []
    inputs = []
    for sub in spec.inputs:
        declared = specs[sub.source].streams.get(sub.stream) if sub.source in specs else None
        if declared is None:
            return []   # reported as a subscription problem
        inputs.append((sub.source, sub.stream, declared.fields))
    return check(spec.id, inputs)


def _subscription_problems(spec: ComponentSpec, specs: dict[str, ComponentSpec]) -> list[str]:
    if spec.is_spout:
        return []
    problems = []
    for sub in spec.inputs:
        where = f"bolt {spec.id!r} subscribes to {sub.source!r} stream {sub.stream!r}"
        source = specs.get(sub.source)
        if source is None:
            problems.append(f"{where}, but there is no component {sub.source!r}")
            continue
        declared = source.streams.get(sub.stream)
        if declared is None:
            streams = sorted(source.streams) or "none"
            problems.append(
                f"{where}, but {sub.source!r} declares no such stream (it declares {streams})")
            continue
        grouping = sub.grouping
        if grouping.kind == g.DIRECT and not declared.direct:
            problems.append(
                f"{where} with a direct grouping, but that stream is not declared direct")
        if grouping.kind != g.DIRECT and declared.direct:
            problems.append(f"{where} with a {grouping.kind} grouping, but that stream is direct: "
                            f"use direct_grouping")
        if grouping.kind in (g.FIELDS, g.PARTIAL_KEY):
            if not grouping.fields:
                problems.append(f"{where} with a {grouping.kind} grouping on no fields")
            for f in grouping.fields:
                if f not in declared.fields:
                    problems.append(f"{where} grouped on field {f!r}, which that stream does not "
                                    f"declare (its fields are {list(declared.fields)})")
        if (grouping.kind == g.CUSTOM
                and not callable(getattr(grouping.custom, "choose_tasks", None))):
            problems.append(f"{where} with a custom grouping that has no choose_tasks method")
    return problems
