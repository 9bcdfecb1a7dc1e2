"""The tuple a bolt receives."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from typing import Any

import cython

from .streams import TICK_STREAM

MAX_ID = (1 << 64) - 1


class StreamInfo:
    """What every tuple of one (component, stream) shares: its fields and where they are, and
    the types its values may hold beyond msgpack's own (``registry``: the topology's
    ``serializers.Registry``; None: the default types), which the check at emit reads only for
    a value that is not a plain scalar."""

    __slots__ = ("component", "stream", "fields", "index", "registry")

    def __init__(self, component: str, stream: str, fields: list[str], registry: Any = None):
        self.component = component
        self.stream = stream
        self.fields = list(fields)
        self.index = {name: i for i, name in enumerate(fields)}
        self.registry = registry


# Compiled: no subclasses, a free list for the hundreds of thousands made each second, and out of
# the cyclic collector, since a tuple never sits in a reference cycle (its values are msgpack-able
# data, never itself) and tracking it would make the collector run twice as often. The free list
# holds as many tuples as an inbox takes from other workers before they pause (64 batches of
# topology.transfer.batch.size: cluster/backpressure.py): a bolt frees an inbox's worth at a
# time, and with 4,096 most of them went back to the allocator and the next emits came from it
# (~150 instructions a tuple more, in some runs three emits in four: callgrind, when local
# inboxes held 64 batches too).
@cython.freelist(32768)
@cython.no_gc
@cython.final
@cython.cclass
class Tuple:
    """An immutable list of values with named fields: assigning or deleting ``values`` raises
    ``AttributeError``, compiled or interpreted (``values_read_only``), as a Storm tuple is
    immutable to the bolt that receives it.

    Its place in the tuple trees belongs to the runtime. A tuple that descends from one spout
    tuple (by far the common case) holds that ``root`` and its ``edge``, the XOR of its edge ids
    for it, as two 64-bit numbers (C fields when compiled: no object per tuple); one from several
    holds them in ``many``, a flat ``(root, edge, root, edge, ...)`` tuple; an untracked one holds
    neither (``root`` 0: ids are never 0). ``roots`` gives either form flat. ``ack_val``
    collects the edge ids of the tuples anchored to this one.
    """

    __slots__ = ("values", "info", "source_task", "root", "edge", "many", "ack_val")
    values: list[Any]   # for type checkers (no code compiled)

    def __init__(
        self,
        values: list[Any],
        info: StreamInfo,
        source_task: int,
        roots: Sequence[int] | None = None,
    ):
        if cython.compiled:   # the C field; interpreted, the slot under its writable name
            self.values = values
        else:
            self._values_slot = values  # type: ignore[misc]  # set on the class below
        self.info = info
        self.source_task = source_task
        self.ack_val = 0
        # Checked here, since roots may come from a peer's frame: compiled, the fields would
        # refuse some bad ids and truncate others; interpreted, keep them to fail later.
        if roots and (len(roots) % 2 or not all(type(i) is int and 0 <= i <= MAX_ID
                                                for i in roots) or not all(roots[::2])):
            raise ValueError(f"tuple roots must be (root, edge) pairs of 64-bit ints, no root "
                             f"0: {roots!r}")
        if roots is not None and len(roots) == 2:
            self.root, self.edge = roots
            self.many = None
        else:
            self.root, self.edge = 0, 0
            self.many = tuple(roots) if roots else None

    @property
    def roots(self) -> tuple[int, ...] | None:
        """The flat ``(root, edge, ...)`` tuple, or None when untracked."""
        if self.root:
            return (self.root, self.edge)
        return self.many

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
        return self.values[key]  # type: ignore[index]  # not a str: an int or a slice

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
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

    def __reduce__(self) -> tuple:
        # Rebuilt through its writer: interpreted, unpickling a slotted object assigns each
        # slot, which the read-only ``values`` refuses.
        return (_unpickled, (self.values, self.info, self.source_task, self.root, self.edge,
                             self.many, self.ack_val))


def tracked(values: list[Any], info: StreamInfo, source_task: int, root: int, edge: int) -> Tuple:
    """A tuple of one spout tuple's tree: the emit path's constructor (compiled, a C call that
    fills the slots of a tuple from the free list)."""
    tup = Tuple.__new__(Tuple)
    if cython.compiled:   # the C field; interpreted, the slot under its writable name
        tup.values = values
    else:
        tup._values_slot = values  # type: ignore[misc]  # set on the class below
    tup.info = info
    tup.source_task = source_task
    tup.root = root
    tup.edge = edge
    tup.many = None
    tup.ack_val = 0
    return tup


def untracked(values: list[Any], info: StreamInfo, source_task: int) -> Tuple:
    """A tuple of no tree (acking off, or an untracked parent)."""
    return tracked(values, info, source_task, 0, 0)


def _unpickled(values: Any, info: StreamInfo, source_task: Any, root: int, edge: int,
               many: Any, ack_val: int) -> Tuple:
    """A pickled tuple, rebuilt (``Tuple.__reduce__``)."""
    tup = tracked(values, info, source_task, root, edge)
    tup.many = many
    tup.ack_val = ack_val
    return tup


class _PyMemberDef(ctypes.Structure):
    """CPython's ``PyMemberDef`` (structmember.h): what a member descriptor reads."""

    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int),
                ("offset", ctypes.c_ssize_t), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


_T_OBJECT_EX, _READONLY = 16, 1   # structmember.h
# The definition of the interpreted build's read-only ``values``, which must live as long as the
# descriptor made from it does.
_READ_ONLY_VALUES = _PyMemberDef(b"values", _T_OBJECT_EX, 0, _READONLY,
                                 b"The tuple's values, one per field (read-only, as in Storm).")


def values_read_only() -> bool:
    """Make ``Tuple.values`` a read-only slot (a member descriptor); whether it now is one.

    Cython gives a public attribute a property, whose every read from Python is a generic lookup
    and two C calls: ~40 ns on this project's machine for the ``tup.values`` a bolt's ``execute``
    reads on every tuple. CPython's specializing interpreter reads a slot straight from the
    object (``LOAD_ATTR_SLOT``) in ~12, whether the slot may be written or not. So, compiled,
    the property is replaced by a read-only member descriptor over the C field (tuples.pxd's
    C helper); interpreted, ``__slots__``'s writable descriptor by a read-only one at the same
    offset (made through ctypes, as the C helper makes it), the writable one kept as
    ``Tuple._values_slot``, which ``__init__`` and ``tracked`` write (as fast as the plain slot:
    the interpreter specializes the store to ``STORE_ATTR_SLOT`` whatever its name). Either
    way assigning or deleting ``values`` raises ``AttributeError`` ("readonly attribute"), and
    reads cost what a slot's do.
    """
    values: list = []
    probe = untracked(values, StreamInfo("", "", []), 0)
    if cython.compiled:
        return stormlet_values_as_slot(  # type: ignore[name-defined]  # noqa: F821
            Tuple, probe, values) == 1
    if Tuple.__dict__["values"] is not Tuple.__dict__["_values_slot"]:
        return True   # made read-only already
    # The slot's offset: the word of the probe that holds ``values`` (CPython lays slots out
    # after the object's header, in an order of its own).
    base = id(probe)
    offsets = [offset for offset in range(ctypes.sizeof(ctypes.c_void_p) * 2,
                                          Tuple.__basicsize__, ctypes.sizeof(ctypes.c_void_p))
               if ctypes.c_void_p.from_address(base + offset).value == id(values)]
    if len(offsets) != 1:
        return False
    _READ_ONLY_VALUES.offset = offsets[0]
    new_member = ctypes.pythonapi.PyDescr_NewMember
    new_member.restype = ctypes.py_object
    new_member.argtypes = [ctypes.py_object, ctypes.POINTER(_PyMemberDef)]
    type.__setattr__(Tuple, "values", new_member(Tuple, ctypes.byref(_READ_ONLY_VALUES)))
    return True


if not cython.compiled:
    type.__setattr__(Tuple, "_values_slot", Tuple.__dict__["values"])
VALUES_READ_ONLY = values_read_only()
