"""What a task knows about the topology around it."""

from __future__ import annotations

from typing import Any

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
    """Passed to ``open`` and ``prepare``: who this task is and what the topology looks like."""

    def __init__(self, layout: TopologyLayout, task_id: int, conf: dict[str, Any]):
        self._layout = layout
        self.task_id = task_id
        self.component_id = layout.task_component.get(task_id, SYSTEM_COMPONENT)
        self.topology_name = layout.name
        self.conf = conf

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
