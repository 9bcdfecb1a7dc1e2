"""Lines of input as messages of a partitioned log: what ``stormlet log append`` writes.

Each line is one message; blank lines are skipped and CRLF line ends are taken. With
``key_field`` each line must be a JSON object, and its key is that field: a string as it is, any
other JSON value as its JSON text. ``append_lines`` checks the whole input before it writes any
of it, so a bad line leaves the log as it was:

    with open("users.jsonl", "rb") as stream:
        written = append_lines(log, stream, key_field="user")   # {partition: Appended}

The input must be seekable (it is read twice); it is parsed, and appended, a block of about
BLOCK_BYTES at a time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from .partitioned_log import LogError, PartialAppend, PartitionedLog

# Input is parsed this many bytes at a time (and appended a batch per block).
BLOCK_BYTES = 4 << 20

_decode_json = json.JSONDecoder().decode   # json.loads, without its per-call checks


class BadLine(ValueError):
    """A line that is not a message: not UTF-8, or (with a key field) not a JSON object with
    that field. Nothing was appended."""

    def __init__(self, number: int, problem: str):
        super().__init__(f"line {number} {problem}")


@dataclass
class Appended:
    """What one partition got: ``count`` messages at offsets ``first`` to ``last``."""
    count: int
    first: int
    last: int


class AppendFailed(Exception):
    """Writing failed part way (``cause`` says why); ``written`` is what had been appended."""

    def __init__(self, cause: Exception, written: dict[int, Appended]):
        super().__init__(str(cause))
        self.cause = cause
        self.written = written


def append_lines(target: PartitionedLog, stream: BinaryIO, key_field: str | None = None,
                 partition: int | None = None) -> dict[int, Appended]:
    """Append one message per line of ``stream`` to ``target``: to ``partition``, else by key,
    else round-robin; flushed at the end. Raises ``BadLine`` (having written nothing) or
    ``AppendFailed``."""
    for _ in blocks(stream, key_field):
        pass    # every line is checked before any is written
    stream.seek(0)
    written: dict[int, Appended] = {}

    def note(ranges: dict[int, range]) -> None:
        for p, offsets in ranges.items():
            if not offsets:
                continue
            entry = written.setdefault(p, Appended(0, offsets.start, offsets.stop - 1))
            entry.count += len(offsets)
            entry.last = offsets.stop - 1

    try:
        for keys, values in blocks(stream, key_field):
            note(target.append_many(values, keys, partition))
        target.flush()
    except (LogError, OSError) as exc:
        if isinstance(exc, PartialAppend):
            note(exc.written)
        raise AppendFailed(exc, written) from exc
    return written


def blocks(stream: BinaryIO, key_field: str | None) -> Iterator[tuple[list | None, list[str]]]:
    """(keys or None, values) per block of input lines; blank lines are skipped. Raises BadLine
    for a line that is not UTF-8, or (with ``key_field``) not a JSON object with that field."""
    seen = 0    # lines before this block
    while True:
        block = stream.read(BLOCK_BYTES)
        if not block:
            return
        if not block.endswith(b"\n"):
            block += stream.readline()   # end the block at the end of a line
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadLine(seen + block.count(b"\n", 0, exc.start) + 1,
                          "is not UTF-8 text") from None
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()     # the newline ends the last line, it does not begin another
        if key_field is None:
            yield None, [line for line in lines if line and not line.isspace()]
        else:
            yield _keyed(lines, key_field, seen)
        seen += len(lines)


def _keyed(lines: list[str], key_field: str, seen: int) -> tuple[list, list[str]]:
    keys: list[str] = []
    values: list[str] = []
    for number, line in enumerate(lines, seen + 1):
        if not line or line.isspace():
            continue
        try:
            obj = _decode_json(line)
        except ValueError as exc:
            raise BadLine(number, f"is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise BadLine(number, "is not a JSON object")
        try:
            key = obj[key_field]
        except KeyError:
            raise BadLine(number, f"has no field {key_field!r}") from None
        # A string field is the key as it is; any other JSON value is keyed by its JSON text.
        keys.append(key if isinstance(key, str)
                    else json.dumps(key, separators=(",", ":"), sort_keys=True))
        values.append(line)
    return keys, values
