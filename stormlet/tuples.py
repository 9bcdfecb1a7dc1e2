"""The tuple a bolt receives."""

from __future__ import annotations

from typing import Any

import cython

from .protocol import TICK_STREAM


class StreamInfo:
    """What every tuple of one (component, stream) shares: its fields and where they are."""

    __slots__ = ("component", "stream", "fields", "index")

    def __init__(self, component: str, stream: str, fields: list[str]):
        self.component = component
        self.stream = stream
        self.fields = list(fields)
        self.index = {name: i for i, name in enumerate(fields)}


# Compiled: no subclasses, a free list for the hundreds of thousands made each second, and out of
# the cyclic collector, since a tuple never sits in a reference cycle (its values are msgpack-able
# data, never itself) and tracking it would make the collector run twice as often.
@cython.freelist(4096)
@cython.no_gc
@cython.final
@cython.cclass
class Tuple:
    """An immutable-by-convention list of values with named fields.

    ``roots`` is a flat ``(root, edge, root, edge, ...)`` tuple (a list when it came over the wire): for each spout tuple this one
    descends from, the XOR of this tuple's edge ids for it (``None`` when untracked). A flat tuple
    costs a fraction of a dict to build, and one root is by far the common case. ``ack_val``
    collects the edge ids of tuples anchored to this one. Both belong to the runtime.
    """

    __slots__ = ("values", "info", "source_task", "roots", "ack_val")

    def __init__(
        self,
        values: list[Any],
        info: StreamInfo,
        source_task: int,
        roots: tuple[int, ...] | None,
    ):
        self.values = values
        self.info = info
        self.source_task = source_task
        self.roots = roots
        self.ack_val = 0

    @property
    def fields(self) -> list[str]:
        return self.info.fields

    @property
    def stream(self) -> str:
        return self.info.stream

    @property
    def source_component(self) -> str:
        return self.info.component

    def is_tick(self) -> bool:
        return self.info.stream == TICK_STREAM

    def __getitem__(self, key: int | str) -> Any:
        if type(key) is str:
            try:
                return self.values[self.info.index[key]]
            except KeyError:
                raise KeyError(
                    f"tuple from {self.info.component!r} stream {self.info.stream!r} has no field "
                    f"{key!r}; its fields are {self.info.fields}"
                ) from None
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def get(self, field: str, default: Any = None) -> Any:
        i = self.info.index.get(field)
        return default if i is None else self.values[i]

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.info.fields, self.values))

    def __repr__(self) -> str:
        return (
            f"Tuple({self.values!r}, stream={self.info.stream!r}, "
            f"source={self.info.component!r}:{self.source_task})"
        )
