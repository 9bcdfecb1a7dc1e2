"""How one running topology's tasks and components are numbered, shared by its tasks."""

from __future__ import annotations

from ..streams import CHECKPOINT_STREAM
from ..topology import Topology
from .protocol import ACKER_COMPONENT


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

    def component_ids(self) -> list[str]:
        """The user's components (spouts and bolts), without system components."""
        return list(self.topology.components)

    def output_fields(self, component: str, stream: str) -> list[str]:
        return list(self.topology.components[component].streams[stream].fields)

    def sources(self, component: str) -> list[str]:
        """The components ``component`` subscribes to for data (the checkpoint stream is not
        data: a window's watermark must not wait for the checkpoint spout)."""
        spec = self.topology.components.get(component)
        if spec is None:
            return []
        return sorted({sub.source for sub in spec.inputs if sub.stream != CHECKPOINT_STREAM})
