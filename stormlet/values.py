"""What may travel in a tuple: the check of an emitted tuple's values (each one msgpack can
encode, with the topology's registered types, ``serializers.py``), and the error it raises.

The API's: the mock collector of the test kit and the state's ``put`` check with it. The
runtime's collectors call ``runtime/serialization.py``'s ``checked``, which passes a list of
plain scalars in one pass and hands anything else to ``check_values`` here. Both are compiled
(runtime/build_mode.py): an emit holding a registered type (a datetime) pays this check.
"""

from __future__ import annotations

from typing import Any

from .serializers import DEFAULT_REGISTRY, SerializerFailed, UnregisteredType, how_to_register

# Types that always encode. ints need a range check, and strs a look at their characters: an
# ASCII str always encodes, but a lone surrogate ("\ud800") does not.
PLAIN_TYPES = frozenset((float, bool, type(None), bytes))
INT_MIN = -(2**63)     # the ints msgpack encodes
INT_MAX = 2**64 - 1


class SerializationError(TypeError):
    """A value in an emitted tuple that cannot be sent between workers."""


def plainly_encodable(value: Any) -> bool:
    """True if msgpack surely encodes ``value`` (a scalar of a plain type, in range); False
    means "encode it to know"."""
    kind = type(value)
    if kind in PLAIN_TYPES or kind is str and value.isascii():
        return True
    return kind is int and INT_MIN <= value <= INT_MAX


def check_values(values: Any, component: str, stream: str, fields: list[str],
                 registry: Any = None) -> None:
    """The full check behind the runtime's ``checked``: each value is packed, unless surely
    encodable; ``SerializationError`` naming the component, the stream, the field and its type."""
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
