"""Stream groupings: how a stream's tuples are split among the subscribing component's tasks.

A ``Grouping`` is the declaration stored in the topology (``TopologyBuilder``'s
``shuffle_grouping``, ``fields_grouping``, ... make them); the runtime turns it into the function
an emitting executor calls for every tuple (``runtime/choosers.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

SHUFFLE = "shuffle"
FIELDS = "fields"
ALL = "all"
GLOBAL = "global"
DIRECT = "direct"
LOCAL_OR_SHUFFLE = "local_or_shuffle"
NONE = "none"
PARTIAL_KEY = "partial_key"
CUSTOM = "custom"

KINDS = (SHUFFLE, FIELDS, ALL, GLOBAL, DIRECT, LOCAL_OR_SHUFFLE, NONE, PARTIAL_KEY, CUSTOM)


class CustomStreamGrouping(Protocol):
    """What ``custom_grouping`` accepts: Storm's CustomStreamGrouping, in Python."""

    def prepare(self, context: Any, stream: str, target_tasks: list[int]) -> None: ...

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]: ...


@dataclass
class Grouping:
    """A subscription's grouping as declared: its ``kind`` (one of ``KINDS``), the ``fields`` a
    fields or partial-key grouping hashes, and a custom grouping's object."""

    kind: str
    fields: tuple[str, ...] = ()
    custom: Any = field(default=None, compare=False)
