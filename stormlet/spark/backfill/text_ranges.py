"""Reading a local text or JSON Lines input in the Python workers, by byte ranges, instead of
through Spark's ``textFile``: the JVM then sends no line at all (with ``textFile`` it reads each
line and frames it to the worker, which unframes it: about a tenth of a word-count backfill, and
more in a new JVM, whose line reader is not compiled yet).

The lines are Hadoop's: ended by ``\\n``, ``\\r\\n`` or ``\\r``, the last one with or without an
ending, a UTF-8 byte order mark at a file's start skipped, an invalid UTF-8 sequence read as
U+FFFD (as Hadoop's ``Text`` decodes it). A range owns the lines that begin inside it, so every
line is read once whatever the ranges are: a range that does not begin a file skips the line it
begins in the middle of, and reads its own last line to the end, past the range. A range is read
a block at a time: it holds a block and the line not yet ended.
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterable, Iterator

#: A partition's pieces: (file, start, end) byte ranges, read in order.
Pieces = list

#: Hadoop decompresses these by their suffix, and a compressed file cannot be read by ranges.
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".zstd", ".br")
_BLOCK = 1 << 20
_ENDINGS = re.compile(rb"\r\n|\r|\n")


def split_ranges(files: list[tuple[str, int]], n: int) -> list[Pieces]:
    """``files`` ((path, size), in order) dealt into ``n`` partitions of about equal bytes, each
    a list of pieces; no partition is empty unless there are fewer bytes than partitions."""
    total = sum(size for _, size in files)
    bounds = [total * i // n for i in range(n + 1)]
    partitions: list[Pieces] = []
    for lo, hi in zip(bounds, bounds[1:]):
        pieces, offset = [], 0
        for path, size in files:
            start, end = max(lo - offset, 0), min(hi - offset, size)
            if start < end:
                pieces.append((path, start, end))
            offset += size
        if pieces:
            partitions.append(pieces)
    return partitions


def read_lines(pieces: Iterable[tuple[str, int, int]]) -> Iterator[str]:
    """The lines that begin in each piece, decoded, without their endings."""
    for path, start, end in pieces:
        with open(path, "rb") as f:
            yield from _lines(f, start, end)


def _lines(f: BinaryIO, start: int, end: int) -> Iterator[str]:
    # A block at a time, keeping only the line not yet ended: memory is a block and a line.
    base = max(start - 1, 0)    # a line begins at start if byte start - 1 ends one
    f.seek(base)
    pos, buffer = base, b""     # buffer[0] is byte pos of the file
    skip = start > 0            # the line holding byte start - 1 is the range before's
    pending: list[bytes] = []   # blocks inside one long line: joined once, when it ends
    waiting = 0
    while True:
        block = f.read(_BLOCK)
        eof = not block
        if not eof and b"\n" not in block and b"\r" not in block:
            pending.append(block)
            waiting += len(block)
            if skip and not buffer.endswith(b"\r") and pos + len(buffer) + waiting >= end:
                return          # the line holding start - 1 runs past the range
            continue
        buffer = b"".join([buffer, *pending, block])
        pending.clear()
        waiting = 0
        cut = _whole_lines(buffer, eof)
        if skip and cut == 0 and pos + len(buffer) >= end:
            return              # the line holding start - 1 runs past the range: none begins in it
        chunk, buffer = buffer[:cut], buffer[cut:]
        chunk_pos, pos = pos, pos + cut
        if chunk:
            lone_cr = _lone_cr(chunk)
            lines = _decoded(chunk, lone_cr)
            if chunk_pos == 0 and chunk.startswith(_BOM):   # Hadoop skips it, at a file's start
                lines[0] = lines[0][1:]
            own = min(_starts_before(chunk, end - chunk_pos, lone_cr), len(lines))
            if skip:
                lines, own, skip = lines[1:], own - 1, False
            yield from lines[:own] if own < len(lines) else lines
            if own < len(lines):
                return          # a line begins at or past the range's end
        if eof or (not skip and pos >= end):
            return


_BOM = b"\xef\xbb\xbf"


def _whole_lines(buffer: bytes, eof: bool) -> int:
    """How many bytes of ``buffer`` are whole lines, each with its ending (at the end of the
    file, the last one may have none). A final "\r" waits: a "\n" may follow it."""
    if eof:
        return len(buffer)
    last = max(buffer.rfind(b"\n"), buffer.rfind(b"\r"))
    if last == len(buffer) - 1 and buffer.endswith(b"\r"):
        last = max(buffer.rfind(b"\n", 0, last), buffer.rfind(b"\r", 0, last))
    return last + 1


def _lone_cr(chunk: bytes) -> bool:
    """Whether ``chunk`` holds a "\r" that ends a line by itself."""
    return chunk.count(b"\r") != chunk.count(b"\r\n")


def _decoded(chunk: bytes, lone_cr: bool) -> list[str]:
    """The lines of ``chunk`` (whole lines), decoded as Hadoop's ``Text`` does: an invalid
    UTF-8 sequence becomes U+FFFD."""
    if lone_cr:
        return [line.decode("utf-8", "replace") for line in chunk.splitlines()]
    # The usual case, one decode and one split in C for the whole chunk. An invalid sequence
    # never spans a "\n", so this is the line-by-line decoding.
    text = chunk.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _starts_before(chunk: bytes, limit: int, lone_cr: bool) -> int:
    """How many lines of ``chunk`` begin before its byte ``limit``."""
    if limit <= 0:
        return 0
    if not lone_cr:             # a line begins after each "\n"
        return 1 + chunk.count(b"\n", 0, limit - 1)
    return 1 + sum(1 for m in _ENDINGS.finditer(chunk, 0, limit) if m.end() < limit)
