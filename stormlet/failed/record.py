"""A failed-message record: its fields, and the JSON it is written as (with reversible encodings
for what JSON cannot hold: see the package docstring)."""

from __future__ import annotations

import base64
import binascii
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, TypedDict

from ..fail_reason import FailReason
from ..serializers import DEFAULT_REGISTRY, Registry

FORMAT_VERSION = 1


# ----- records


class SourceRef(TypedDict):
    """Where a message came from: ``kind`` (``"kafka"``, ``"log"``, ...), ``name`` (the topic or
    log path), ``partition`` and ``offset``."""

    kind: str
    name: str
    partition: int
    offset: int


def new_record_id() -> str:
    return uuid.uuid4().hex


@dataclass(slots=True)
class FailedRecord:
    """What a spout knows about a message that finally failed. The writer adds the topology,
    component, task and ``written_at``.

    ``message_id``, ``key`` and ``value`` may be any value a tuple may hold (str, bytes, int,
    float, bool, None, lists and dicts of them, values of the topology's registered types).
    ``source`` is None for spouts that read no partitioned source. ``reason`` is the last
    ``FailReason`` (or a mapping with ``kind``, ``component``, ``message``). Times are epoch
    seconds.
    """

    message_id: Any
    reason: FailReason | Mapping[str, Any]
    attempts: int
    first_failed_at: float
    last_failed_at: float
    key: Any = None
    value: Any = None
    source: SourceRef | None = None
    record_id: str = field(default_factory=new_record_id)


# ----- values: JSON with reversible encodings for what JSON lacks

_TAGS = frozenset(("base64", "float", "pairs", "dict", "ext"))
#: How deep lists and dicts may nest in a value as stored (encoded): a writer refuses a deeper
#: one, a reader names it as damage. Well within the recursion that encoding, decoding and
#: JSON's parser do per level.
MAX_DEPTH = 100


def depth_exceeds(data: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and dicts nest in ``data`` more than ``limit`` deep (walked without
    recursion, so any depth is safe to ask about)."""
    stack: list[tuple[Any, int]] = []
    if isinstance(data, (list, dict)):
        stack.append((data, 1))
    while stack:
        items, depth = stack.pop()
        if depth > limit:
            return True
        for item in items.values() if isinstance(items, dict) else items:
            if isinstance(item, (list, dict)):
                stack.append((item, depth + 1))
    return False


def encode_value(value: Any, _depth: int = 0, registry: Registry | None = None) -> Any:
    """``value`` as JSON-able data; ``decode_value`` gives it back. A value of a type
    ``registry`` holds (None: the default types: datetime, Decimal, UUID, tuple, set...) is
    ``{"ext": {"type": <class path>, "data": <its serializer's data, encoded>}}``; a subclass of
    tuple comes back as a list. Raises ``TypeError`` for a value of another type, or nested
    deeper than ``MAX_DEPTH``."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    registry = registry if registry is not None else DEFAULT_REGISTRY
    named = registry.named(value)    # SerializerFailed, a TypeError, if its serializer fails
    if named is not None:
        if _depth >= MAX_DEPTH:
            raise TypeError(f"nested deeper than {MAX_DEPTH} levels")
        return {"ext": {"type": named[0], "data": encode_value(named[1], _depth + 1, registry)}}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": binascii.b2a_base64(value, newline=False).decode("ascii")}
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple, dict)) and _depth >= MAX_DEPTH:
        # Checked as it recurses, so a value deep enough to exhaust the stack is refused first.
        raise TypeError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, (list, tuple)):
        return [encode_value(v, _depth + 1, registry) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return {"pairs": [[encode_value(k, _depth + 1, registry),
                               encode_value(v, _depth + 1, registry)]
                              for k, v in value.items()]}
        items = {k: encode_value(v, _depth + 1, registry) for k, v in value.items()}
        if len(items) == 1 and next(iter(items)) in _TAGS:
            return {"dict": items}
        return items
    raise TypeError(f"a {type(value).__name__} cannot be written to the failed-message log; "
                    f"use str, bytes, int, float, bool, None, lists and dicts of those, or a "
                    f"registered type")


def decode_value(value: Any, registry: Registry | None = None) -> Any:
    """The inverse of ``encode_value`` (``registry``: the topology's types; None: the default
    types, which leave a value of another registered type as its ``{"ext": ...}``, its data
    decoded). Raises ``ValueError`` (or ``TypeError``) for what ``encode_value`` never makes: a
    value nested deeper than ``MAX_DEPTH``, a tag whose content does not decode (bad base64, a
    ``pairs`` entry that is not a pair or has a dict for key, data a serializer refuses)."""
    if depth_exceeds(value):
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return _decode(value, registry if registry is not None else DEFAULT_REGISTRY)


def _decode(value: Any, registry: Registry) -> Any:
    if isinstance(value, list):
        return [_decode(v, registry) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "base64" and isinstance(inner, str):
            return base64.b64decode(inner, validate=True)
        if tag == "float" and isinstance(inner, str):
            return float(inner)
        if tag == "pairs" and isinstance(inner, list):
            return {_hashable(_decode(k, registry)): _decode(v, registry) for k, v in inner}
        if tag == "dict" and isinstance(inner, dict):
            return {k: _decode(v, registry) for k, v in inner.items()}
        if tag == "ext" and isinstance(inner, dict) and inner.keys() == {"type", "data"} \
                and isinstance(inner["type"], str):
            return _registered(inner["type"], _decode(inner["data"], registry), registry)
    return {k: _decode(v, registry) for k, v in value.items()}


def _registered(name: str, data: Any, registry: Registry) -> Any:
    """The value of registered type ``name`` whose serializer made ``data``; ``{"ext": ...}``
    if ``registry`` does not hold ``name``; ``ValueError`` if its serializer refuses it."""
    if name not in registry.by_name:
        return {"ext": {"type": name, "data": data}}
    try:
        return registry.from_named(name, data)
    except Exception as exc:
        raise ValueError(f"{name}'s serializer cannot decode {str(data)[:80]!r}: "
                         f"{type(exc).__name__}: {exc}") from None


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def _reason_dict(reason: FailReason | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(reason, FailReason):
        return {"kind": reason.kind, "component": reason.component, "message": reason.message}
    if not isinstance(reason, Mapping) or not isinstance(reason.get("kind"), str):
        raise TypeError(f"reason must be a FailReason or a mapping with a str 'kind', "
                        f"got {reason!r}")
    return {"kind": reason["kind"], "component": reason.get("component"),
            "message": reason.get("message")}


def _source_dict(source: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if source is None:
        return None
    missing = [k for k in ("kind", "name", "partition", "offset") if k not in source]
    if missing:
        raise ValueError(f"source {dict(source)!r} lacks {', '.join(missing)}")
    return {"kind": str(source["kind"]), "name": str(source["name"]),
            "partition": int(source["partition"]), "offset": int(source["offset"])}


def record_to_dict(record: FailedRecord, topology: str, component: str, task: int,
                   written_at: float, registry: Registry | None = None) -> dict[str, Any]:
    """The record as written: a JSON-able dict holding every field (values of registered types
    with ``registry``'s serializers; None: the default types)."""
    encoded = []
    for name, label in (("message_id", "message id"), ("key", "payload key"),
                        ("value", "payload value")):
        try:
            encoded.append(encode_value(getattr(record, name), registry=registry))
        except TypeError as exc:
            raise TypeError(f"failed message {record.message_id!r} of {component!r}, "
                            f"{label}: {exc}") from None
    message_id, key, value = encoded
    for label, data in (("message id", message_id), ("payload key", key),
                        ("payload value", value)):
        # Encoding can add levels (a dict with other keys than str becomes pairs).
        if depth_exceeds(data):
            raise TypeError(f"failed message {record.message_id!r} of {component!r}, {label}: "
                            f"nested deeper than {MAX_DEPTH} levels once encoded")
    return {
        "format": FORMAT_VERSION,
        "record_id": record.record_id,
        "topology": topology,
        "component": component,
        "task": task,
        "message_id": message_id,
        "source": _source_dict(record.source),
        "payload": {"key": key, "value": value},
        "reason": _reason_dict(record.reason),
        "attempts": int(record.attempts),
        "first_failed_at": float(record.first_failed_at),
        "last_failed_at": float(record.last_failed_at),
        "written_at": written_at,
    }


def decode_record(data: dict[str, Any], registry: Registry | None = None) -> dict[str, Any]:
    """A record as read from a file, with its message id, key and value decoded (registered
    types with ``registry``; None: the default types)."""
    out = dict(data)
    out["message_id"] = decode_value(data.get("message_id"), registry)
    payload = data.get("payload") or {}
    out["payload"] = {"key": decode_value(payload.get("key"), registry),
                      "value": decode_value(payload.get("value"), registry)}
    return out
