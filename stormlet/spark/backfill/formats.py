"""The record formats of a backfill: what one record of the dataset is, how it becomes the values
of the tuple the spout it replaces would emit, and how the tuples written come out.

Input, per format (``FORMATS``; ``auto`` is settled on the driver, see ``inputs``):

- ``log``, a stormlet partitioned log: each record becomes the tuple the spout's own ``translate``
  makes when it is an offset spout (``LogSpout``, ``KafkaSpout``), else the record's
  ``LOG_FIELDS``. A partition reads the offsets the driver's snapshot gave it, whatever is
  appended meanwhile;
- ``text``: one message per line, into the spout stream's single field;
- ``jsonl``: one JSON object (by field name) or array (by position) per line.

Blank lines are skipped, as ``stormlet log append`` skips them. A record that cannot become values
is reported to the caller (counted as bad input) and skipped, never fatal.

Output: JSON Lines, one object per tuple with the stream's field names; bytes become text when
they are UTF-8, else ``{"base64": ...}``.
"""

from __future__ import annotations

import json
from itertools import chain
from typing import Any, Callable, Iterable, Iterator

from ...serializers import DEFAULT_REGISTRY, Registry
from ...sources.offset_spout import DEFAULT_FIELDS, OffsetSpout, default_translate
from ...topology import ComponentSpec
from .chunks import decoded
from .errors import BackfillWorkerError

# Input formats: what one record of the dataset is.
LOG = "log"          # a stormlet partitioned log: each record as a LogSpout emits it
TEXT = "text"        # one message per line, into the spout stream's single field
JSONL = "jsonl"      # one JSON object (by field name) or array (by position) per line
FORMATS = ("auto", LOG, TEXT, JSONL)
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
# What a log record gives a spout that is not an offset spout (and has no translate): what an
# offset spout emits by default.
LOG_FIELDS = DEFAULT_FIELDS


def log_translate(spec: ComponentSpec) -> Callable[[Any], list]:
    """How a log record becomes the tuple of the spout ``spec``: an offset spout's own
    ``translate``, so each record is the tuple that spout emits; else ``default_translate``."""
    return spec.obj.translate if isinstance(spec.obj, OffsetSpout) else default_translate


def read_values(kind: str, path: str, items: Iterable, fields: list[str],
                translate: Callable[[Any], list],
                bad: Callable[[str], None]) -> Iterator[list]:
    """The values of each record in one partition of the dataset at ``path``: ``items`` are its
    lines (``text``, ``jsonl``) or ``(partition, start, end)`` ranges (``log``). A record that does
    not give values is passed to ``bad``, as a message naming ``path``, and skipped."""
    if kind == LOG:
        for record in read_log(path, items):
            try:
                yield translate(record)
            except Exception as exc:
                bad(f"{path}: partition {record.partition} offset {record.offset}: translate "
                    f"raised {type(exc).__name__}: {exc}")
        return
    decode = decode_text if kind == TEXT else json_decoder(fields)
    for line in items:
        if not line or line.isspace():
            continue   # as `stormlet log append` skips blank lines
        try:
            yield decode(line)
        except BadInput as exc:
            bad(f"{path}: {exc}")


class BadInput(ValueError):
    """A line that does not give the spout's values; the message says why and quotes it."""


def decode_text(line: str) -> list:
    """A text line's values: the line, into the stream's single field."""
    return [line]


def json_decoder(fields: list[str]) -> Callable[[str], list]:
    """A JSON line's values: an object's ``fields``, or an array of as many values."""
    decode = json.JSONDecoder().decode
    n = len(fields)

    def decode_line(line: str) -> list:
        try:
            obj = decode(line)
        except ValueError as exc:
            raise BadInput(f"a line is not JSON ({exc}): {line[:120]!r}") from None
        if type(obj) is dict:
            try:
                return [obj[f] for f in fields]
            except KeyError as exc:
                raise BadInput(f"a line has no field {exc.args[0]!r} (the spout's fields are "
                               f"{fields}): {line[:120]!r}") from None
        if type(obj) is list and len(obj) == n:
            return obj
        raise BadInput(f"a line is neither an object with the fields {fields} nor an array of "
                       f"{n} values: {line[:120]!r}")
    return decode_line


READ_BATCH = 2000


def read_log(path: str, items: Iterable[tuple[int, int, int]]) -> Iterator[Any]:
    """The records of a partitioned log for each ``(partition, start, end)`` item, in offset
    order: the snapshot the driver took, whatever is appended meanwhile."""
    from ...sources.partitioned_log import LogError, PartitionedLog
    from ...sources.source import SourceError

    try:
        plog = PartitionedLog(path)
    except LogError as exc:
        raise BackfillWorkerError(f"cannot read the input on a Spark worker: {exc}") from None
    try:
        for partition, start, end in items:
            offset = start
            while offset < end:
                try:
                    records = plog.read(partition, offset, min(READ_BATCH, end - offset))
                except SourceError as exc:
                    raise BackfillWorkerError(f"cannot read the input log: {exc}") from None
                if not records:
                    break
                for record in records:
                    if record.offset >= end:
                        break
                    yield record
                offset = records[-1].offset + 1
    finally:
        plog.close()


# ----- the output


class JsonLines:
    """``mapPartitions`` function writing an output's records as JSON Lines: one object per
    tuple with the stream's field names. Bytes become text when they are UTF-8, else
    ``{"base64": ...}``; a value of a registered type (``stormlet.serializers``) becomes
    ``{"ext": {"type": <class path>, "data": <its serializer's data>}}``, as in the
    failed-message log. Each run of tuples becomes one Spark record of several lines (JSON text
    never holds a raw newline), so text output moves one record per chunk, not per tuple.
    ``code``: the topology's (``shipping.TopologyCode``), loaded before its values are unpickled
    (a user's class comes from it) and for its registered types."""

    def __init__(self, fields: list[str], code: Any = None):
        self.fields = list(fields)
        self.code = code

    def __call__(self, records: Iterable) -> Iterator[str]:
        registry = self.code.load().registry if self.code is not None else DEFAULT_REGISTRY
        lines = json_lines(self.fields, registry)
        for _index, runs in records:
            for _head, chunk in decoded(runs):
                if chunk:
                    yield lines(chunk)


def json_lines(fields: list[str], registry: Registry = DEFAULT_REGISTRY,
               ) -> Callable[[list[list]], str]:
    """The function writing a chunk of tuples (values lists of ``fields``' length) as JSON
    Lines, one object per tuple, as ``json_encoder()`` writes ``dict(zip(fields, values))``.

    Written a column at a time, into one template of as many lines as the chunk has tuples
    (one %-format for the chunk): a column of only strs is quoted and one of only ints written as
    the encoder writes them (``%s`` of an int is its ``int.__repr__``), each in one C loop; any
    other column goes value by value through the encoder."""
    encode = json_encoder(registry)
    quote = json.encoder.encode_basestring    # the encoder's own, for ensure_ascii=False
    if not fields:
        return lambda chunk: "\n".join(["{}"] * len(chunk))
    line = "{" + ",".join(quote(f).replace("%", "%%") + ":%s" for f in fields) + "}\n"
    template = line          # as many lines as the longest chunk so far: sliced to each
    flat = chain.from_iterable

    def encode_value(value: Any) -> str:
        try:
            return encode(value)
        except TypeError:   # bytes as a dict key: convert everything
            return encode(_plain(value))

    def column(values: tuple) -> Iterable:
        kinds = set(map(type, values))
        if kinds == _STR:
            return map(quote, values)
        if kinds == _INT:
            return values
        return map(encode_value, values)

    def lines(chunk: list[list]) -> str:
        nonlocal template
        size = len(chunk) * len(line)
        if len(template) < size:
            template = line * len(chunk)
        values = tuple(flat(zip(*[column(c) for c in zip(*chunk)])))
        return template[:size - 1] % values      # without the last newline
    return lines


_STR, _INT = {str}, {int}


def json_encoder(registry: Registry = DEFAULT_REGISTRY) -> Callable[[Any], str]:
    """Compact JSON, UTF-8 text left as it is, ``registry``'s types as ``{"ext": ...}``.
    ``JSONEncoder.encode`` builds its C encoder on every call, half the cost of a small object:
    build it once where the C encoder exists."""

    def default(value: Any) -> Any:
        if isinstance(value, bytes):
            return _bytes(value)
        named = registry.named(value)
        if named is None:
            raise TypeError(f"{type(value).__name__} is not JSON serializable")
        return {"ext": {"type": named[0], "data": named[1]}}
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=default)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    try:
        # Values were checked to be msgpack-encodable, so they hold no cycles: no markers.
        c_encode = make(None, encoder.default, json.encoder.encode_basestring, None,
                        encoder.key_separator, encoder.item_separator, False, False, True)
        join = "".join

        def encode(obj: Any) -> str:
            return join(c_encode(obj, 0))
        sample = {"a": [1, 2.5, None, True, "é"], "b": {"1": "x"}}
        if encode(sample) != encoder.encode(sample):
            return encoder.encode
        return encode
    except TypeError:     # another Python's C encoder signature
        return encoder.encode


def _bytes(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            import base64
            return {"base64": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {(k.decode("utf-8", "backslashreplace") if isinstance(k, bytes) else k): _plain(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return _bytes(value)
    return value
