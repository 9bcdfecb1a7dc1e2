"""Which part of a chunk of a log a reader gets: whole records, and of those the ones it asked
for (a pattern, a component, a task, a time).

A record is a line that begins one (``logging_setup.parse_head``: a time, a level, who logged
it) and the lines that continue it (a traceback, a message's next lines). Readers get whole
records, so that a filter judges a traceback with the line it belongs to and pages join up:

- a chunk that begins inside a line starts at the next one; one read from the end also skips
  the lines that continue a record begun before it;
- a line without its newline is still being written, and is left for the next read, unless
  the file has not changed for ``SETTLED_SECS`` (a crash's last words need no newline);
- a chunk that stops before the end of the file (or before such a line) stops before its last
  record, which may go on after it (unless that is its only one: a record larger than a read
  comes in pieces);
- ``next`` is where the following read begins.

Patterns are the reader's and the file is the node's: they run under a time limit (the
``regex`` library's timeout), so that a pattern that backtracks without end costs its reader an
error, not the node service a thread.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

from ..redaction import redact_text
from .log_files import Chunk
from .logging_setup import Head, component_token, parse_head, task_in

if TYPE_CHECKING:
    import regex

# A file unchanged this long is complete as it is: its last line is returned without a newline.
SETTLED_SECS = 2.0
# The longest pattern a reader may send, and how long one may take on one record.
MAX_PATTERN_CHARS = 1000
PATTERN_TIMEOUT_SECS = 1.0


class Record(NamedTuple):
    offset: int          # where it begins in the file
    data: bytes          # its lines
    head: Head | None    # None: a line without one (raw output, or continuing a record begun
                         # before the chunk)


def split_records(data: bytes, offset: int = 0) -> list[Record]:
    """``data`` (whole lines, from ``offset`` in its file) as records: each line that begins
    one with the lines after it that continue it. A line that continues nothing here (raw
    output, the end of a traceback whose head came before) is a record of its own."""
    starts: list[tuple[int, Head | None]] = []
    lines: list[list[bytes]] = []
    for line in data.splitlines(keepends=True):
        head = parse_head(line.decode("utf-8", "replace"))
        if head is None and starts and starts[-1][1] is not None:
            lines[-1].append(line)
        else:
            starts.append((offset, head))
            lines.append([line])
        offset += len(line)
    return [Record(start, b"".join(parts), head) for (start, head), parts in zip(starts, lines)]


def whole_records(chunk: Chunk, from_end: bool = False,
                  now: float | None = None) -> tuple[list[Record], int]:
    """The whole records of ``chunk`` and where the next read begins (see the module doc)."""
    data, start = chunk.data, chunk.start
    pos = 0
    if not chunk.line_start:
        newline = data.find(b"\n")
        if newline < 0:
            return [], chunk.end   # all of it inside one line begun before
        pos = newline + 1
    at_eof = chunk.end >= chunk.size
    settled = at_eof and ((now if now is not None else time.time()) - chunk.mtime
                          >= SETTLED_SECS)
    end = len(data)
    if not settled:
        last = data.rfind(b"\n", pos)
        if last >= 0:
            end = last + 1
        elif at_eof:
            end = pos   # a line still being written
    records = split_records(data[pos:end], start + pos)
    next_offset = start + end
    if from_end:
        # Lines before the first head continue a record begun before the chunk; in a file
        # with no heads (raw output) every line is one.
        if not (chunk.start == 0 and pos == 0) and any(r.head for r in records):
            while records[0].head is None:
                records.pop(0)
    elif start + end < chunk.size and len(records) > 1:
        next_offset = records.pop().offset   # it may go on in the next chunk
    return records, next_offset


class RecordFilter:
    """What a reader wants: records matching ``grep`` (a regular expression, searched in the
    whole record, or with ``redacted`` in the record as a reader without admin access sees it:
    a pattern matched against hidden text would let such a reader find a password one
    character at a time), logged by ``component`` (and ``task``), at or after ``since`` (epoch
    seconds). Continuation lines without their record's head say nothing of who or when: they
    pass only a filter that asks neither."""

    def __init__(self, grep: str | None = None, component: str | None = None,
                 task: int | None = None, since: float | None = None, redacted: bool = False):
        self.pattern = _compile(grep) if grep else None
        self.redacted = bool(redacted)
        self.component = component_token(component) if component else None
        if task is not None and (isinstance(task, bool) or not isinstance(task, int)):
            raise ValueError(f"task must be a whole number, not {task!r}")
        self.task = task
        if since is not None and (isinstance(since, bool)
                                  or not isinstance(since, (int, float))):
            raise ValueError(f"since must be a time in seconds since the epoch, not {since!r}")
        self.since = since

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.pattern, self.component, self.task, self.since))

    def wants(self, record: Record) -> bool:
        head = record.head
        if self.component is not None or self.task is not None or self.since is not None:
            if head is None:
                return False
            if self.component is not None and component_token(head.component) != self.component:
                return False
            if self.task is not None and not task_in(head.task, self.task):
                return False
            if self.since is not None and head.time < self.since:
                return False
        if self.pattern is not None:
            text = record.data.decode("utf-8", "replace")
            if self.redacted:
                text = redact_text(text)
            try:
                return self.pattern.search(text, timeout=PATTERN_TIMEOUT_SECS) is not None
            except TimeoutError:
                raise ValueError(f"the pattern {self.pattern.pattern!r} took over "
                                 f"{PATTERN_TIMEOUT_SECS:g} s on one record of "
                                 f"{len(text)} characters: simplify it") from None
        return True


def _compile(pattern: object) -> regex.Pattern:
    import regex  # here: what only imports this module (the CLI) starts quicker

    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"a pattern is a regular expression of at most {MAX_PATTERN_CHARS} "
                         f"characters")
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None


def select(records: list[Record], wanted: RecordFilter, max_bytes: int,
           deadline: float) -> tuple[list[Record], int | None]:
    """The records ``wanted``, at most ``max_bytes`` of them (at least one), looked at until
    ``deadline`` (monotonic); and the offset of the first record not looked at, if any was
    left (the reader's next read begins there), else None."""
    kept: list[Record] = []
    size = 0
    for index, record in enumerate(records):
        if index and (size >= max_bytes or time.monotonic() >= deadline):
            return kept, record.offset
        if wanted.wants(record):
            kept.append(record)
            size += len(record.data)
    return kept, None
