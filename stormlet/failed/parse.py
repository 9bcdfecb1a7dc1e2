"""Reading records back: the one JSON parse and the one check that every reader of the
failed-message log passes its input through (``stormlet failed ls|show``, ``read_failed``, a
crashed writer's recovery, ``convert``), so that a damaged file or line is named, counted and
skipped, never a crash that stops the reading of every other file.

What counts as damage: text that is not JSON (truncated, bit-flipped, not UTF-8), JSON nested
deeper than ``MAX_DEPTH`` (JSON's parser would recurse until ``RecursionError``), JSON that is
not a record, a field of the wrong type or out of the range its Parquet column holds, a value
whose encoding (``encode_value``) cannot be undone. Each is a ``RecordError``; readers report
it as a ``BadInput`` (file, line or row, what is wrong).
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..fail_reason import utf8_text
from .record import MAX_DEPTH, decode_value, depth_exceeds

#: Every field of a record, as ``record_to_dict`` writes it.
FIELDS = ("format", "record_id", "topology", "component", "task", "message_id", "source",
          "payload", "reason", "attempts", "first_failed_at", "last_failed_at", "written_at")
_TEXT = ("record_id", "topology", "component")
_WHOLE = ("task", "attempts")
_SOURCE_WHOLE = ("partition", "offset")
_TIMES = ("first_failed_at", "last_failed_at", "written_at")
# Where a record puts its values: a record line is this much deeper than its deepest value.
_VALUE_NESTING = 2   # {"payload": {"key": <value>}}


class RecordError(ValueError):
    """Input that is not a failed-message record; the text says what is wrong with it."""


@dataclass(frozen=True)
class BadInput:
    """A file, or a line or row of one, that a reader skipped, and why. ``where`` is ``"line
    N"`` (JSON Lines), ``"row N"`` (Parquet), or None for the whole file."""

    path: Path
    where: str | None
    problem: str

    def __str__(self) -> str:
        # A file name may hold bytes that are not UTF-8 (surrogate-escaped): printable either way.
        name = utf8_text(os.fspath(self.path))
        return f"{name}{' ' + self.where if self.where else ''}: {self.problem}"


#: What readers call with each ``BadInput``.
OnBad = Callable[[BadInput], None]


def parse_json(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` as JSON, nested at most ``max_depth`` deep; raises ``RecordError`` saying why
    not. Deep nesting is caught here, at the one parse: ``json.loads`` recurses once per level
    and raises ``RecursionError`` somewhere near a thousand, depending on the caller's stack."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise RecordError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:   # JSONDecodeError, UnicodeDecodeError, an int of 4,300+ digits
        raise RecordError(f"not JSON ({_short(exc)})") from None
    if depth_exceeds(data, max_depth):
        # Said as the values' limit: a record line's own levels are not the reader's concern.
        raise RecordError(f"nested deeper than {MAX_DEPTH} levels")
    return data


def parse_line(line: bytes, decode: bool = False, registry: Any = None) -> dict[str, Any]:
    """One line of a journal or of a JSON Lines file, as a checked record (values still
    encoded, or with ``decode`` decoded, registered types with ``registry``'s serializers);
    raises ``RecordError``."""
    return check_record(parse_json(line, MAX_DEPTH + _VALUE_NESTING), decode=decode,
                        registry=registry)


def check_record(data: Any, fields: Iterable[str] = FIELDS, decode: bool = False,
                 registry: Any = None) -> Any:
    """``data`` if it is a record (of those ``fields`` it holds; a reader of some columns gets
    only those), else ``RecordError`` naming the field and what is wrong. With ``decode``, the
    record with its message id, key and value decoded (``decode_value``); either way they are
    checked to decode (``registry``: the topology's types, ``serializers.Registry``; None: the
    default types, a value of another registered type left as its ``{"ext": ...}``)."""
    if not isinstance(data, dict):
        raise RecordError(f"not a record: a JSON {_json_kind(data)}")
    fields = tuple(fields)
    missing = [name for name in fields if name != "format" and name not in data]
    if missing:
        raise RecordError(f"not a record: no {', '.join(missing)}")
    for name in _TEXT:
        if name in data:
            _text(name, data[name])
    bits = _column_bits()
    for name in _WHOLE:
        if name in data:
            _whole(name, data[name], bits[name])
    for name in _TIMES:
        if name in data:
            _time(name, data[name])
    if "reason" in data:
        reason = _object("reason", data["reason"])
        _text("reason.kind", reason.get("kind"))
        for name in ("component", "message"):
            _text(f"reason.{name}", reason.get(name), optional=True)
    if data.get("source") is not None:
        source = _object("source", data["source"], "an object or null")
        for name in ("kind", "name"):
            _text(f"source.{name}", source.get(name))
        for name in _SOURCE_WHOLE:
            _whole(f"source.{name}", source.get(name), bits[f"source.{name}"])
    out = dict(data) if decode else data
    if "message_id" in data:
        message_id = _decoded("message_id", data["message_id"], registry)
        if decode:
            out["message_id"] = message_id
    if "payload" in data:
        payload = _object("payload", data["payload"])
        decoded = {name: _decoded(f"payload.{name}", payload.get(name), registry)
                   for name in ("key", "value")}
        if decode:
            out["payload"] = decoded
    return out


@functools.cache
def _column_bits() -> dict[str, int]:
    """The bits of the signed integer column each whole number is stored in, from the Parquet
    schema (imported here: ``columnar`` parses with this module)."""
    from .columnar import schema
    columns = schema()
    source = columns.field("source").type
    bits = {name: columns.field(name).type.bit_width for name in _WHOLE}
    bits.update({f"source.{name}": source.field(name).type.bit_width for name in _SOURCE_WHOLE})
    return bits


def _decoded(name: str, value: Any, registry: Any) -> Any:
    try:
        return decode_value(value, registry)
    except (ValueError, TypeError) as exc:   # bad base64 or float text, pairs that are not
        raise RecordError(f"{name} cannot be decoded: {_short(exc)}") from None


def _text(name: str, value: Any, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise RecordError(f"{name} is a {type(value).__name__}, not text")


def _whole(name: str, value: Any, bits: int) -> None:
    if type(value) is not int:
        raise RecordError(f"{name} is a {type(value).__name__}, not a whole number")
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise RecordError(f"{name} is out of range ({_short(value)}: not a {bits}-bit number)")


def _time(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"{name} is a {type(value).__name__}, not a number")
    try:
        finite = math.isfinite(value)
    except OverflowError:   # an int too large for a float
        raise RecordError(f"{name} is out of range ({_short(value)})") from None
    if not finite:
        raise RecordError(f"{name} is not finite ({value})")


def _object(name: str, value: Any, expected: str = "an object") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecordError(f"{name} is a {type(value).__name__}, not {expected}")
    return value


def _json_kind(data: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(data), "number")


def _short(what: Any, width: int = 120) -> str:
    try:
        text = str(what)
    except ValueError:   # str() of an int of more digits than Python converts
        return f"a {type(what).__name__} too long to show"
    return text if len(text) <= width else text[:width] + "..."
