"""What may travel in a tuple: values msgpack can encode, with the topology's registered types
(``serializers.py``), checked when they are emitted.

Checking at emit, not at send, puts the error in the component that made the bad value, with the
field and type named, and keeps local mode as strict as a cluster.
"""

from __future__ import annotations

from typing import Any

import cython

from ..serializers import DEFAULT_REGISTRY, SerializerFailed, UnregisteredType, how_to_register
from ..tuples import StreamInfo

# Types that always encode. ints need a range check, and strs a look at their characters: an
# ASCII str always encodes, but a lone surrogate ("\ud800") does not.
PLAIN_TYPES = frozenset((float, bool, type(None), bytes))
INT_MIN = -(2**63)     # the ints msgpack encodes
INT_MAX = 2**64 - 1


class SerializationError(TypeError):
    """A value in an emitted tuple that cannot be sent between workers."""


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
                # through it; nothing worse.
                PyObject_GC_UnTrack(values)  # type: ignore[name-defined]  # noqa: F821
            return values
    check_values(values, component, info.stream, info.fields, info.registry)
    return values


def plainly_encodable(value: Any) -> bool:
    """True if msgpack surely encodes ``value`` (a scalar of a plain type, in range); False
    means "encode it to know"."""
    kind = type(value)
    if kind in PLAIN_TYPES or kind is str and is_ascii(value):
        return True
    return kind is int and INT_MIN <= value <= INT_MAX


def check_values(values: Any, component: str, stream: str, fields: list[str],
                 registry: Any = None) -> None:
    """The full check behind ``checked``: each value is packed, unless surely encodable."""
    if registry is None:
        registry = DEFAULT_REGISTRY
    if type(values) is not list:
        if isinstance(values, (tuple, list)):
            return check_values(list(values), component, stream, fields, registry)
        raise SerializationError(
            f"{component!r} emitted {type(values).__name__} on stream {stream!r}; "
            f"emit takes a list of values for the fields {fields}"
        )
    if len(values) != len(fields):
        raise SerializationError(
            f"{component!r} emitted {len(values)} values on stream {stream!r}, "
            f"which declares {len(fields)} fields {fields}"
        )
    for i, value in enumerate(values):
        kind = type(value)
        if plainly_encodable(value) or kind in registry.trusted:
            continue
        where = f"{component!r} emitted a value of type {kind.__name__} in field {fields[i]!r} " \
                f"of stream {stream!r}"
        try:
            registry.packb(value)
        except UnregisteredType as exc:
            inner = "" if exc.kind is kind else f" (it holds a {exc.kind.__qualname__})"
            raise SerializationError(
                f"{where}{inner}, and {exc.kind.__qualname__} is not a type a tuple may hold: "
                f"{how_to_register(exc.kind)}; or emit str, bytes, int, float, bool, None, "
                f"lists and dicts of those, or a type registered by default (datetime, date, "
                f"time, timedelta, Decimal, UUID, tuple, set, frozenset)") from None
        except SerializerFailed as exc:
            raise SerializationError(f"{where}, which cannot be serialized: {exc}") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(
                f"{where}, which cannot be serialized ({exc}); emit str, bytes, int, float, "
                f"bool, None, lists and dicts of those, or registered types"
            ) from None
