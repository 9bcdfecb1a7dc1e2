"""Per task, for each stream it declares: the stream's shared info and the functions that pick
destination tasks (one per subscribing component)."""

from __future__ import annotations

import random
from typing import Any

from .. import groupings as g
from ..tuples import StreamInfo
from . import choosers as ch
from .numbering import TopologyLayout


class StreamRoute:
    """Where one task's emits on one stream go, and how many there were (``emitted``, which
    the task's metrics read)."""

    __slots__ = ("info", "choosers", "choose", "direct", "direct_tasks", "emitted",
                 "_fixed", "_per_tuple")

    def __init__(self, info: StreamInfo, direct: bool):
        self.info = info
        self.choosers: list[ch.Chooser] = []
        self.direct = direct
        self.direct_tasks: set[int] = set()
        self.choose: ch.Chooser = _nobody
        self.emitted = 0
        self._fixed: list[int] | None = []
        self._per_tuple: ch.PerTupleChooser | None = None

    def seal(self) -> None:
        """Fix ``choose``: one function over every subscriber's chooser. Called once the
        choosers are all added, and again if they change: ``tasks_for`` answers from what it
        fixes."""
        choosers = self.choosers
        if len(choosers) == 1:
            self.choose = choosers[0]
        elif choosers:
            calls = [ch.as_function(chooser) for chooser in choosers]
            self.choose = lambda values: [t for choose in calls for t in choose(values)]
        only = self.choose
        self._per_tuple = only if isinstance(only, ch.PerTupleChooser) else None
        if not choosers:
            self._fixed = []
        elif type(only) is ch.Always:
            self._fixed = only.tasks
        else:
            self._fixed = None

    def tasks_for(self, values: Any) -> list[int]:
        """The tasks an emit of ``values`` goes to. The usual routes take no call: one that
        always names the same tasks (one subscriber of one task, say) answers from a field, and
        a fields, shuffle or partial-key grouping is a C call when compiled."""
        fixed = self._fixed
        if fixed is not None:
            return fixed
        per_tuple = self._per_tuple
        if per_tuple is not None:
            return per_tuple.choose(values)
        return self.choose(values)


def _nobody(values: Any) -> list[int]:
    return []


def check_stream(component_id: str, stream: str, route: Any, declared: Any, direct: bool) -> None:
    """Refuse an emit on an undeclared stream, or with ``emit``/``emit_direct`` not matching how
    the stream was declared; ``route`` is the stream's (None if undeclared), ``declared`` every
    declared stream id. Shared by every collector (backfill's too), so all say it the same way."""
    if route is None:
        names = sorted(declared) or "none"
        raise ValueError(f"{component_id!r} emitted on stream {stream!r}, which it does not "
                         f"declare (it declares {names})")
    if route.direct != direct:
        if direct:
            raise ValueError(f"{component_id!r} called emit_direct on stream {stream!r}, "
                             f"which is not declared direct")
        raise ValueError(f"{component_id!r} emitted on direct stream {stream!r}: "
                         f"use emit_direct(task, ...)")


def check_direct_task(component_id: str, route: Any, task: int) -> list[int]:
    """``[task]`` if ``task`` subscribes to ``route``'s direct stream; else the error saying
    which tasks do."""
    if task not in route.direct_tasks:
        raise ValueError(
            f"{component_id!r} emitted directly to task {task} on stream {route.info.stream!r}, "
            f"but that task does not subscribe to it with a direct grouping (tasks that do: "
            f"{sorted(route.direct_tasks)})")
    return [task]


def build_routes(layout: TopologyLayout, component_id: str, task: int, local_tasks: set[int],
                 context: Any, rng: random.Random, registry: Any = None,
                 load_aware: bool = False,
                 ) -> tuple[dict[str, StreamRoute], list[int]]:
    """Routes for each stream ``task`` may emit on, and every task it may send tuples to;
    ``registry``: the topology's types (serializers.py), which the check at emit allows and
    fields groupings hash; ``load_aware``: shuffle groupings are load-aware
    (``choosers.make_chooser``)."""
    topology = layout.topology
    spec = topology.components[component_id]
    routes: dict[str, StreamRoute] = {}
    reachable: set[int] = set()
    for stream, declaration in spec.streams.items():
        route = StreamRoute(StreamInfo(component_id, stream, list(declaration.fields),
                                       registry), declaration.direct)
        for subscriber, grouping in topology.subscribers(component_id, stream):
            tasks = layout.component_tasks[subscriber.id]
            reachable.update(tasks)
            if grouping.kind == g.DIRECT:
                route.direct_tasks.update(tasks)
                continue
            chooser = ch.make_chooser(
                grouping, list(declaration.fields), tasks, source_task=task,
                local_tasks=local_tasks, context=context, stream=stream, rng=rng,
                registry=registry, load_aware=load_aware)
            assert chooser is not None   # None only for DIRECT, handled above
            route.choosers.append(chooser)
        route.seal()
        routes[stream] = route
    return routes, sorted(reachable)
