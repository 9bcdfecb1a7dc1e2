"""Appending to one partition: its lock, recovery from a torn tail, segment rolls and fsync.

Processes append to a partition one at a time, under the flock of its ``writer.lock``; threads of
one process also take the writer's mutex, since flock does not exclude threads sharing a
descriptor. On taking the lock a writer brings its view of the last segment up to date with what
other writers appended, and truncates a torn frame that a writer killed mid-append left at the
tail, so every append follows a whole frame. Damaged bytes are never truncated: they are set
aside (quarantine.py) and the append goes after them, at an offset after every one they may have
held (recovery.py), so no offset is handed out twice. A segment is rolled (a new one started, named
after the next offset) once it holds ``segment_bytes`` bytes or ``segment_records`` records, and a
frame never crosses a segment's record limit. ``flush`` fsyncs what was written since the last
flush: the segments rolled away from, the current one, then the partition directory.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from bisect import bisect_right
from contextlib import contextmanager
from itertools import accumulate
from pathlib import Path
from typing import Iterator

from ...durable import fsync_dir
from .directory import lock_path, segment_bases, segment_path
from .frames import encode_frame, tail_frame
from .quarantine import set_aside
from .recovery import scan

log = logging.getLogger(__name__)

FRAME_RECORDS = 1000          # records per frame at most: bounds what a seek into a frame decodes
FRAME_BYTES = 1 << 20         # and about this many bytes of values per frame


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class WriteFailed(Exception):
    """An append failed with ``cause``; ``written`` holds the offsets that did reach the log."""

    def __init__(self, written: range, cause: OSError):
        self.written = written
        self.cause = cause


class PartitionWriter:
    """Appends to one partition. Between ``locked()`` and its end this process holds the
    partition's flock, and ``fd``/``size``/``next_offset`` describe the last segment as it is on
    disk (brought up to date with other writers, a torn tail truncated)."""

    def __init__(self, directory: Path, partition: int, segment_bytes: int,
                 segment_records: int | None, grouped: bool = True):
        """``grouped``: write frames that check their records in groups too (a log of format
        version 2: see frames.py)."""
        self.directory = directory
        self.partition = partition
        self.segment_bytes = segment_bytes
        self.segment_records = segment_records
        self.grouped = grouped
        self.mutex = threading.Lock()   # flock does not exclude threads sharing our descriptor
        self.lock_fd = os.open(lock_path(directory), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.fd = -1
        self.base = -1
        self.size = 0
        self.next_offset = 0
        self.dirty = False
        self.rolled: list[int] = []   # descriptors of finished segments, fsynced at flush
        self.dir_dirty = False

    @contextmanager
    def locked(self) -> Iterator[PartitionWriter]:
        with self.mutex:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            try:
                self._sync()
                yield self
            finally:
                fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def _sync(self) -> None:
        if self.fd >= 0:
            st = os.fstat(self.fd)
            # Unchanged since our last write: nobody appended, and nobody rolled (a writer rolls
            # only a full segment, which we would roll too, or one that delete_before unlinks).
            if st.st_nlink and st.st_size == self.size:
                return
        self._recover()

    def _recover(self) -> None:
        bases = segment_bases(self.directory)
        base = bases[-1]
        path = segment_path(self.directory, base)
        if self.fd >= 0 and self.base == base and os.fstat(self.fd).st_nlink:
            known_pos, known_offset = self.size, self.next_offset
        else:
            self._retire_fd()
            self.fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
            self.base = base
            known_pos, known_offset = 0, base
        size = os.fstat(self.fd).st_size
        if size < known_pos:
            known_pos, known_offset = 0, base
        if size == known_pos:
            end_pos, end_offset = known_pos, known_offset
        else:
            tail = tail_frame(self.fd, size)
            if tail is not None and tail.pos >= known_pos and tail.base >= known_offset:
                end_pos, end_offset = size, tail.end
            else:
                scanned = scan(self.fd, known_pos, known_offset)
                for damage in scanned.damage:
                    set_aside(self.directory, base, damage, self.fd)
                end_pos, end_offset = scanned.pos, scanned.offset
                if scanned.torn:
                    log.warning("%s: dropping %d bytes after offset %d: an incomplete record "
                                "batch left by a writer that died mid-append (never "
                                "acknowledged; nothing to do)", path, size - end_pos, end_offset)
                    os.ftruncate(self.fd, end_pos)
                    self.dirty = True
        self.size, self.next_offset = end_pos, end_offset

    def _retire_fd(self) -> None:
        if self.fd >= 0:
            if self.dirty:
                self.rolled.append(self.fd)
            else:
                os.close(self.fd)
        self.fd, self.dirty = -1, False

    def _full(self) -> bool:
        if not self.size:
            return False
        return self.size >= self.segment_bytes or (
            self.segment_records is not None
            and self.next_offset - self.base >= self.segment_records)

    def roll(self) -> None:
        """Start a new segment at ``next_offset`` (under the lock)."""
        path = segment_path(self.directory, self.next_offset)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         0o644)
        except FileExistsError:
            # Another writer rolled while our view was current (the segment was full for it as
            # for us): take up the real last segment.
            self._retire_fd()
            self._recover()
            return
        self._retire_fd()
        self.fd, self.base, self.size, self.dir_dirty = fd, self.next_offset, 0, True

    def append(self, keys: list | None, values: list, timestamp: float) -> range:
        """Append under the lock, in frames that never cross a segment's record limit."""
        first = self.next_offset
        n = len(values)
        ends: list[int] | None = None
        i = 0
        try:
            while i < n:
                if self._full():
                    self.roll()
                    if self._full():
                        continue
                room = FRAME_RECORDS
                if self.segment_records is not None:
                    room = min(room, self.segment_records - (self.next_offset - self.base))
                j = min(n, i + room)
                if j - i > 1:
                    if ends is None:
                        ends = list(accumulate(map(len, values)))
                    before = ends[i - 1] if i else 0
                    j = max(i + 1, bisect_right(ends, before + FRAME_BYTES, i, j))
                flat: list = [None] * (2 * (j - i))
                flat[1::2] = values[i:j]
                if keys is not None:
                    flat[0::2] = keys[i:j]
                frame = encode_frame(self.next_offset, j - i, timestamp, flat, self.grouped)
                self.dirty = True
                try:
                    _write_all(self.fd, frame)
                except BaseException:
                    # Part of the frame may be on disk: forget our view, so the next append
                    # recovers from the file (truncating the torn frame).
                    self._retire_fd()
                    raise
                self.size += len(frame)
                self.next_offset += j - i
                i = j
        except OSError as exc:
            raise WriteFailed(range(first, self.next_offset), exc) from exc
        return range(first, self.next_offset)

    def flush(self) -> None:
        with self.mutex:
            for fd in self.rolled:
                os.fsync(fd)
                os.close(fd)
            self.rolled.clear()
            if self.dirty and self.fd >= 0:
                os.fsync(self.fd)
                self.dirty = False
            if self.dir_dirty:
                fsync_dir(self.directory)
                self.dir_dirty = False

    def close(self) -> None:
        self.flush()
        with self.mutex:
            self._retire_fd()
            os.close(self.lock_fd)
            self.lock_fd = -1
