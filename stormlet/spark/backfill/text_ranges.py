"""Reading a local text or JSON Lines input in the Python workers, by byte ranges, instead of
through Spark's ``textFile``: the JVM then sends no line at all (with ``textFile`` it reads each
line and frames it to the worker, which unframes it: about a tenth of a word-count backfill, and
more in a new JVM, whose line reader is not compiled yet).

The lines are Hadoop's: ended by ``\\n``, ``\\r\\n`` or ``\\r``, the last one with or without an
ending. A range owns the lines that begin inside it, so every line is read once whatever the
ranges are: a range that does not begin a file skips the line it begins in the middle of, and
reads its own last line to the end, past the range. Text is UTF-8 (a line that is not fails the
task, as in ``textFile``).
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator

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


def _lines(f, start: int, end: int) -> Iterator[str]:
    # From just before ``start`` (to see whether a line begins there) to the ending of the line
    # holding byte end - 1: data[i] is byte base + i.
    base = max(start - 1, 0)
    f.seek(base)
    data = f.read(end - base)
    while True:
        last = _ENDINGS.search(data, end - 1 - base)
        # A final "\r" may be the first half of a "\r\n": read on until something follows it.
        if last is not None and last.end() < len(data):
            break
        more = f.read(_BLOCK)
        if not more:
            break
        data += more
    first = 0
    if start > 0:    # the line holding byte start - 1 is the previous range's
        ending = _ENDINGS.search(data)
        first = len(data) if ending is None else ending.end()
    if first >= end - base:
        return       # no line begins in this range
    text = data[first:len(data) if last is None else last.end()]
    if b"\r" in text:
        yield from (line.decode() for line in text.splitlines())
        return
    lines = text.decode().split("\n")   # the usual case: one split in C for the whole range
    if text.endswith(b"\n"):
        lines.pop()
    yield from lines
