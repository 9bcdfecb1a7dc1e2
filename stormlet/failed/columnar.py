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
so a reader sees the same records from either format; the JSON columns are parsed by ``parse``,
like a JSON Lines file.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator

from ..fail_reason import is_utf8, utf8_text
from .parse import RecordError, parse_json
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


def _encoded(name: str, typed: dict[str, Any] | None) -> Any:
    """The inverse of ``_typed``: back to ``encode_value``'s form (``name``: the column, for
    the error a damaged one raises)."""
    if typed is None:
        return None
    if typed.get("str") is not None:
        return typed["str"]
    if typed.get("bytes") is not None:
        return encode_value(typed["bytes"])
    json_text = typed.get("json")
    return None if json_text is None else _json_column(f"payload.{name}", json_text)


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
    """A failed-message file as an Arrow table (``columns``: only those). Raises
    ``RecordError`` for a Parquet file whose columns are not the log's, and pyarrow's errors
    (``OSError``, ``ValueError``, ``ArrowException``) for one that is not readable."""
    import pyarrow.parquet as pq
    with pq.ParquetFile(path) as file:
        _check_columns(file.schema_arrow, columns)
        return file.read(columns=columns)


def _check_columns(found: Any, columns: list[str] | None) -> None:
    expected = schema()
    for name in columns or expected.names:
        if name not in found.names:
            raise RecordError(f"not a failed-message file: no column {name!r}")
        have, want = found.field(name).type, expected.field(name).type
        if not have.equals(want):
            raise RecordError(f"not a failed-message file: column {name!r} is {have}, not {want}")


def table_records(table: Any, on_bad: Callable[[int, str], None]
                  ) -> Iterator[tuple[int, dict[str, Any]]]:
    """The rows of a failed-message table, each as its number (from 1) and the dict
    ``record_to_dict`` makes (values still encoded), fields the table lacks left out. A row that
    cannot be one (a string column that is not UTF-8, a JSON column that does not parse) is passed
    to ``on_bad`` as its number (from 1) and what is wrong, and skipped."""
    names = set(table.column_names)
    for number, row in enumerate(_rows(table), 1):
        try:
            if isinstance(row, RecordError):
                raise row
            yield number, _record(row, names)
        except RecordError as exc:
            on_bad(number, str(exc))


def _rows(table: Any) -> list[dict[str, Any] | RecordError]:
    try:
        return table.to_pylist()
    except UnicodeDecodeError:
        pass
    # Arrow does not check a string column's UTF-8 when it reads a file, Python's str does:
    # converted one row at a time, only the rows holding such bytes are lost.
    rows: list[dict[str, Any] | RecordError] = []
    for i in range(table.num_rows):
        try:
            rows.extend(table.slice(i, 1).to_pylist())
        except UnicodeDecodeError as exc:
            rows.append(RecordError(f"text that is not UTF-8 ({exc.reason} at byte {exc.start})"))
    return rows


def _record(row: dict[str, Any], names: set[str]) -> dict[str, Any]:
    record: dict[str, Any] = {"format": FORMAT_VERSION, **row}
    if "message_id" in names:
        record["message_id"] = _json_column("message_id", row["message_id"])
    if "key" in names or "value" in names:
        record["payload"] = {name: _encoded(name, record.pop(name, None))
                             for name in ("key", "value")}
    return record


def _json_column(name: str, text: Any) -> Any:
    if not isinstance(text, str):
        raise RecordError(f"{name} is null")
    try:
        return parse_json(text)
    except RecordError as exc:
        raise RecordError(f"{name}: {exc}") from None
