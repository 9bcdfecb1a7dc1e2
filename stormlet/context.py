"""What a task knows about the topology around it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .metrics.user import Counter, Gauge, Histogram, UserMetrics
from .protocol import ACKER_COMPONENT, SYSTEM_COMPONENT
from .topology import Topology


class TopologyLayout:
    """Task numbering and component numbering for one running topology, shared by its tasks.

    Components are numbered from 1 (0 means "unknown") so the acker can store them in 16 bits.
    """

    def __init__(self, name: str, topology: Topology, n_ackers: int):
        self.name = name
        self.topology = topology
        extra = {ACKER_COMPONENT: n_ackers} if n_ackers else {}
        self.component_tasks: dict[str, list[int]] = topology.task_ids(extra)
        self.task_component: dict[int, str] = {
            task: cid for cid, tasks in self.component_tasks.items() for task in tasks
        }
        names = sorted(self.component_tasks)
        self.component_names: list[str | None] = [None, *names]
        self.component_number: dict[str, int] = {name: i for i, name in enumerate(names, start=1)}
        self.acker_tasks: list[int] = self.component_tasks.get(ACKER_COMPONENT, [])
        self.max_task = max(self.task_component, default=0)

    def component_name(self, number: int) -> str | None:
        if 0 < number < len(self.component_names):
            return self.component_names[number]
        return None


class TopologyContext:
    """Passed to ``open`` and ``prepare``: who this task is and what the topology looks like,
    and where the task registers its own metrics.

    User metrics (Storm 2's ``registerCounter`` etc.) are per task, shown with the task's
    built-in metrics (``stormlet ui``, the REST API, ``/metrics``), and registered once, usually
    in ``open`` or ``prepare``; registering a name again returns the same metric::

        self.parsed = context.register_counter("parsed")      # self.parsed.inc()
        self.sizes = context.register_histogram("size_bytes") # self.sizes.update(len(raw))
        context.register_gauge("cache_entries", lambda: len(self.cache))

    A gauge's function is called when metrics are read, on another thread: let it read a
    value, not change one.
    """

    def __init__(self, layout: TopologyLayout, task_id: int, conf: dict[str, Any],
                 user_metrics: UserMetrics | None = None):
        self._layout = layout
        self.task_id = task_id
        self.component_id = layout.task_component.get(task_id, SYSTEM_COMPONENT)
        self.topology_name = layout.name
        self.conf = conf
        self._user_metrics = user_metrics or UserMetrics(
            f"component {self.component_id!r} task {task_id}")

    def register_counter(self, name: str) -> Counter:
        """A count that only goes up: ``counter.inc()`` or ``counter.inc(n)``."""
        return self._user_metrics.counter(name)

    def register_gauge(self, name: str, fn: Callable[[], Any]) -> Gauge:
        """A value read by calling ``fn()`` whenever metrics are read."""
        return self._user_metrics.gauge(name, fn)

    def register_histogram(self, name: str) -> Histogram:
        """A distribution: ``histogram.update(value)``; shown as count, mean, median and 99th
        percentile (the percentiles over the last 1024 values)."""
        return self._user_metrics.histogram(name)

    def get_component_tasks(self, component: str) -> list[int]:
        return list(self._layout.component_tasks.get(component, []))

    def get_this_component_tasks(self) -> list[int]:
        return self.get_component_tasks(self.component_id)

    @property
    def this_task_index(self) -> int:
        """This task's position among its component's tasks, from 0."""
        return self._layout.component_tasks[self.component_id].index(self.task_id)

    def get_component_id(self, task_id: int) -> str | None:
        return self._layout.task_component.get(task_id)

    def get_component_ids(self) -> list[str]:
        return list(self._layout.topology.components)

    def get_component_output_fields(self, component: str, stream: str = "default") -> list[str]:
        spec = self._layout.topology.components[component]
        return list(spec.streams[stream].fields)
