"""The failed-message log's files: Parquet, one row per record, typed columns that Spark reads as
they are (no parsing of values, no Python per record).

The columns (``schema()``)::

    record_id        string
    topology         string
    component        string
    task             int32
    message_id       string     the id as canonical JSON (encode_value, compact, sorted keys)
    source           struct<kind: string, name: string, partition: int32, offset: int64>, or null
    key, value       struct<str: string, bytes: binary, json: string>, or null for None: a str
                     in ``str``, bytes in ``bytes``, anything else as canonical JSON in ``json``
    reason           struct<kind: string, component: string, message: string>
    attempts         int32
    first_failed_at, last_failed_at, written_at     double (epoch seconds)

The file's key-value metadata holds ``stormlet.failed.format``. Records arrive as the dicts
``record_to_dict`` makes (what the in-progress journal holds, one JSON line each), are gathered
column by column (``ColumnBuilder``), and go back to that dict shape when read (``table_records``),
so a reader sees the same records from either format.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from ..fail_reason import is_utf8, utf8_text
from .record import decode_value, encode_value

FORMAT_VERSION = 2
FORMAT_KEY = b"stormlet.failed.format"
# Dictionary-encoded and compressed, the repeated names and reasons cost next to nothing.
COMPRESSION = "zstd"
_CANONICAL = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False)


def _pa() -> Any:
    import pyarrow as pa
    return pa


def _value_type(pa: Any) -> Any:
    return pa.struct([("str", pa.string()), ("bytes", pa.binary()), ("json", pa.string())])


def schema() -> Any:
    """The Arrow schema of a failed-message file."""
    pa = _pa()
    return pa.schema([
        ("record_id", pa.string()),
        ("topology", pa.string()),
        ("component", pa.string()),
        ("task", pa.int32()),
        ("message_id", pa.string()),
        ("source", pa.struct([("kind", pa.string()), ("name", pa.string()),
                              ("partition", pa.int32()), ("offset", pa.int64())])),
        ("key", _value_type(pa)),
        ("value", _value_type(pa)),
        ("reason", pa.struct([("kind", pa.string()), ("component", pa.string()),
                              ("message", pa.string())])),
        ("attempts", pa.int32()),
        ("first_failed_at", pa.float64()),
        ("last_failed_at", pa.float64()),
        ("written_at", pa.float64()),
    ], metadata={FORMAT_KEY: str(FORMAT_VERSION).encode()})


def spark_ddl() -> str:
    """``schema()`` as a Spark DDL string: Spark given it needs no job to infer one."""
    pa = _pa()
    names = {pa.string(): "STRING", pa.binary(): "BINARY", pa.int32(): "INT",
             pa.int64(): "BIGINT", pa.float64(): "DOUBLE"}

    def ddl(kind: Any) -> str:
        if pa.types.is_struct(kind):
            return "STRUCT<" + ", ".join(f"`{f.name}`: {ddl(f.type)}" for f in kind) + ">"
        return names[kind]

    return ", ".join(f"`{f.name}` {ddl(f.type)}" for f in schema())


def canonical_json(encoded: Any) -> str:
    """An encoded value (``encode_value``'s output) as the JSON text stored and compared."""
    return _CANONICAL.encode(encoded)


def _text(text: Any) -> Any:
    """A name or message for a string column: lone surrogates escaped (as ``\\udXXX``)."""
    return utf8_text(text) if isinstance(text, str) else text


def _typed(encoded: Any) -> dict[str, Any] | None:
    """An encoded payload value as the ``key``/``value`` struct."""
    if encoded is None:
        return None
    if isinstance(encoded, str):
        # A lone surrogate is a str Python holds but UTF-8 (and Arrow) cannot: JSON escapes it.
        return {"str": encoded} if is_utf8(encoded) else {"json": canonical_json(encoded)}
    if isinstance(encoded, dict) and len(encoded) == 1 and isinstance(encoded.get("base64"), str):
        return {"bytes": decode_value(encoded)}
    return {"json": canonical_json(encoded)}


def _encoded(typed: dict[str, Any] | None) -> Any:
    """The inverse of ``_typed``: back to ``encode_value``'s form."""
    if typed is None:
        return None
    if typed.get("str") is not None:
        return typed["str"]
    if typed.get("bytes") is not None:
        return encode_value(typed["bytes"])
    return json.loads(typed["json"]) if typed.get("json") is not None else None


class ColumnBuilder:
    """Gathers record dicts column by column, in ``schema()``'s order, then makes one Parquet
    file of them."""

    def __init__(self) -> None:
        self._schema = schema()
        self._lists: list[list[Any]] = [[] for _ in self._schema]

    def __len__(self) -> int:
        return len(self._lists[0])

    def add(self, record: dict[str, Any]) -> None:
        """Add one record as ``record_to_dict`` makes it (or as a journal line holds it); raises
        ``ValueError`` for a dict that is not one, adding nothing."""
        if not isinstance(record, dict) or not all(
                isinstance(record.get(name), str)
                for name in ("record_id", "topology", "component")):
            raise ValueError("not a failed-message record")
        payload = record.get("payload") or {}
        reason, source = record.get("reason"), record.get("source")
        if isinstance(reason, dict):
            reason = {k: _text(v) for k, v in reason.items()}
        if isinstance(source, dict):
            source = {**source, "name": _text(source.get("name"))}
        row = (record["record_id"], _text(record["topology"]), _text(record["component"]),
               record.get("task"), canonical_json(record.get("message_id")), source,
               _typed(payload.get("key")), _typed(payload.get("value")), reason,
               record.get("attempts"), record.get("first_failed_at"), record.get("last_failed_at"),
               record.get("written_at"))
        for column, value in zip(self._lists, row):
            column.append(value)

    def to_parquet(self) -> bytes:
        """The records added so far as the bytes of one Parquet file."""
        pa = _pa()
        import pyarrow.parquet as pq

        table = pa.Table.from_arrays(self._lists, schema=self._schema)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression=COMPRESSION,
                       use_dictionary=["topology", "component", "source.kind", "source.name",
                                       "reason.kind", "reason.component", "reason.message"])
        return sink.getvalue().to_pybytes()


def read_table(path: Any, columns: list[str] | None = None) -> Any:
    """A failed-message file as an Arrow table (``columns``: only those)."""
    import pyarrow.parquet as pq
    return pq.read_table(path, columns=columns)


def table_records(table: Any) -> Iterator[dict[str, Any]]:
    """The rows of a failed-message table as the dicts ``record_to_dict`` makes (values still
    encoded), fields the table lacks left out."""
    names = set(table.column_names)
    for row in table.to_pylist():
        record: dict[str, Any] = {"format": FORMAT_VERSION, **row}
        if "message_id" in names:
            record["message_id"] = json.loads(row["message_id"])
        if "key" in names or "value" in names:
            record["payload"] = {"key": _encoded(record.pop("key", None)),
                                 "value": _encoded(record.pop("value", None))}
        yield record
