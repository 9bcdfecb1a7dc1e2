"""What a task knows about the topology around it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .metrics.user import Counter, Gauge, Histogram, UserMetrics
from .streams import DEFAULT_STREAM, SYSTEM_COMPONENT

if TYPE_CHECKING:
    from .hooks import TaskHook


class RunningTopology(Protocol):
    """What a context reads of the topology around its task (the runtime's ``TopologyLayout``
    provides it, in local mode, on a cluster and in backfill)."""

    name: str
    component_tasks: dict[str, list[int]]   # every component's task ids, system ones included
    task_component: dict[int, str]

    def component_ids(self) -> list[str]:
        """The user's components (spouts and bolts), without system components."""
        ...

    def output_fields(self, component: str, stream: str) -> list[str]:
        ...

    def sources(self, component: str) -> list[str]:
        """The components ``component`` subscribes to for data (not for checkpoints)."""
        ...


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

    def __init__(self, layout: RunningTopology, task_id: int, conf: dict[str, Any],
                 user_metrics: UserMetrics | None = None):
        self._layout = layout
        self.task_id = task_id
        self.component_id = layout.task_component.get(task_id, SYSTEM_COMPONENT)
        self.topology_name = layout.name
        self.conf = conf
        self._user_metrics = user_metrics or UserMetrics(
            f"component {self.component_id!r} task {task_id}")
        self.hooks: list[TaskHook] = []
        # Set by the runtime running this task: called when the first hook is added, to swap in
        # the hooked paths (until then hooks cost nothing).
        self.on_first_hook: Callable[[], None] | None = None

    def add_task_hook(self, hook: TaskHook) -> None:
        """Run ``hook`` (a ``stormlet.hooks.TaskHook``) on this task's events, from now on;
        its ``prepare(conf, context)`` is called first, as in Storm's ``addTaskHook``."""
        hook.prepare(self.conf, self)
        self.hooks.append(hook)
        if len(self.hooks) == 1 and self.on_first_hook is not None:
            self.on_first_hook()

    def get_hooks(self) -> list[TaskHook]:
        return list(self.hooks)

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
        return self._layout.component_ids()

    def get_this_sources(self) -> list[str]:
        """The components this task's component subscribes to for data."""
        return self._layout.sources(self.component_id)

    def get_component_output_fields(self, component: str,
                                    stream: str = DEFAULT_STREAM) -> list[str]:
        return self._layout.output_fields(component, stream)
