"""Per task, for each stream it declares: the stream's shared info and the functions that pick
destination tasks (one per subscribing component)."""

from __future__ import annotations

import random
from typing import Any

from .. import groupings as g
from .layout import TopologyLayout
from ..tuples import StreamInfo


class StreamRoute:
    __slots__ = ("info", "nfields", "choosers", "choose", "direct", "direct_tasks")

    def __init__(self, info: StreamInfo, direct: bool):
        self.info = info
        self.nfields = len(info.fields)
        self.choosers: list[g.Chooser] = []
        self.direct = direct
        self.direct_tasks: set[int] = set()
        self.choose: g.Chooser = _nobody

    def seal(self) -> None:
        """Fix ``choose``: one function over every subscriber's chooser."""
        choosers = self.choosers
        if len(choosers) == 1:
            self.choose = choosers[0]
        elif choosers:
            self.choose = lambda values: [t for choose in choosers for t in choose(values)]


def _nobody(values: Any) -> list[int]:
    return []



def build_routes(layout: TopologyLayout, component_id: str, task: int, local_tasks: set[int],
                 context: Any, rng: random.Random) -> tuple[dict[str, StreamRoute], list[int]]:
    """Routes for each stream ``task`` may emit on, and every task it may send tuples to."""
    topology = layout.topology
    spec = topology.components[component_id]
    routes: dict[str, StreamRoute] = {}
    reachable: set[int] = set()
    for stream, declaration in spec.streams.items():
        route = StreamRoute(StreamInfo(component_id, stream, list(declaration.fields)),
                            declaration.direct)
        for subscriber, grouping in topology.subscribers(component_id, stream):
            tasks = layout.component_tasks[subscriber.id]
            reachable.update(tasks)
            if grouping.kind == g.DIRECT:
                route.direct_tasks.update(tasks)
                continue
            route.choosers.append(g.make_chooser(
                grouping, list(declaration.fields), tasks, source_task=task,
                local_tasks=local_tasks, context=context, stream=stream, rng=rng))
        route.seal()
        routes[stream] = route
    return routes, sorted(reachable)
