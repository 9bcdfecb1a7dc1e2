"""What may travel in a tuple: values msgpack can encode, with the topology's registered types
(``serializers.py``), checked when they are emitted.

Checking at emit, not at send, puts the error in the component that made the bad value, with the
field and type named, and keeps local mode as strict as a cluster.

This is the runtime's compiled pass over a tuple of plain scalars; anything else goes to the
API's full check, ``values.check_values``.
"""

from __future__ import annotations

from typing import Any

import cython

from ..tuples import StreamInfo

# The full check is the API's (values.py), with the bounds of a plain scalar.
from ..values import INT_MAX, INT_MIN, PLAIN_TYPES, check_values


def is_ascii(text: str) -> bool:
    """``text.isascii()``; compiled, the flag CPython keeps in every str, without a method call."""
    return (PyUnicode_IS_ASCII(text)  # type: ignore[name-defined]  # noqa: F821
            if cython.compiled else text.isascii())


def checked(values: Any, info: StreamInfo, component: str) -> list:
    """``values`` as a list, if they fit the fields of ``info``'s stream and msgpack can carry
    them with ``info.registry``'s types (the topology's; None: the default types); else
    ``SerializationError`` naming the field and its type. A list of plain scalars, the usual
    case, costs one pass over it and (compiled) is left out of cyclic garbage collection;
    anything else gets the full check."""
    if info is None:   # compiled, a typed argument may be None, and its fields are read in C
        raise TypeError("checked needs the stream's StreamInfo, not None")
    if type(values) is not list and isinstance(values, tuple):
        values = list(values)
    plain = cython.cast(list, values) if type(values) is list else None
    if plain is not None and len(plain) == len(info.fields):
        for v in plain:
            t = type(v)
            if t is str:
                if not is_ascii(v):
                    break
            elif t is int:
                if not INT_MIN <= v <= INT_MAX:
                    break
            elif t not in PLAIN_TYPES:
                break
        else:
            if cython.compiled:
                # A list of scalars cannot be in a reference cycle, and tuples' value lists are
                # most of what is alive in a busy process: tracked, the collections walked them
                # (with acking off, a tenth of a word count's time). CPython untracks tuples and
                # dicts of scalars itself, but not lists. A list filled with containers after
                # its emit (values are immutable by Storm's convention) could leak a cycle
                # through it; nothing worse. The same list and the same answer either way:
                # only whether the collector walks the list differs (Python code cannot untrack).
                PyObject_GC_UnTrack(values)  # type: ignore[name-defined]  # noqa: F821
            return values
    check_values(values, component, info.stream, info.fields, info.registry)
    return values
