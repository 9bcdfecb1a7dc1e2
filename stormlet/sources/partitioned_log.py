"""An append-only log with N partitions in a local directory: stormlet's embedded source.

Like a small Kafka topic on disk. Each partition is an ordered sequence of records numbered by
offset. Any number of processes may append (the CLI while a replay job writes) and read, and a
reader sees what other processes append after it opened.

    log = PartitionedLog.create("data/events", partitions=3)
    log.append("hello", key="user-1")               # -> (partition, offset), by CRC-32 of the key
    log.append_many(["a", "b", "c"])                  # round-robin -> {partition: range(offsets)}
    log.flush()                                       # fsync
    for record in log.read(0, offset=0, max_records=100):
        print(record.offset, record.key, record.value)
    log.close()

Layout of the directory:

    log.json                   {"format": "stormlet-partitioned-log", "version": 1,
                                "partitions": N, "segment_bytes": ..., "segment_records": ...}
    partition-<p>/writer.lock  flock'ed by whoever appends to partition p
    partition-<p>/<base>.seg   segments; <base> (20 digits) is the offset of the segment's first
                               record, so a segment's records end where the next segment begins

Anything else in the directory (a spout's ``_offsets/``, ``_failed/``) is not the log's and is
ignored. A segment is a sequence of frames, each a batch of consecutive records:

    u32 body length | u32 CRC-32 of body | body | u32 frame length (trailer)
    body = i64 base offset | u32 record count | f64 append time | msgpack [k0, v0, k1, v1, ...]

A frame is whole or it is not there: a reader returns no record of a frame that is incomplete or
fails its CRC (a writer killed mid-append leaves one at the tail), and the next writer truncates
it under the partition lock before appending. The trailer lets a writer or reader find the last
frame's end offset from the end of the file, without scanning the segment.

Appends are thread-safe. Reads are not: read a given partition from one thread at a time.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import random
import shutil
import struct
import threading
import time
import uuid
import zlib
from bisect import bisect_right
from contextlib import contextmanager
from itertools import accumulate, repeat
from pathlib import Path
from typing import Any, Iterable, Iterator

import msgpack

from ..durable import fsync_dir
from .source import OffsetOutOfRange, Record, SourceError

log = logging.getLogger(__name__)

FORMAT = "stormlet-partitioned-log"
VERSION = 1
METADATA = "log.json"
LOCK_FILE = "writer.lock"
SEGMENT_SUFFIX = ".seg"
# Kept beside the partitions for the log's readers: a LogSpout's commits in local mode, and its
# dead letters (the failed-message log).
OFFSETS_DIR = "_offsets"
FAILED_DIR = "_failed"

DEFAULT_SEGMENT_BYTES = 64 << 20
FRAME_RECORDS = 1000          # records per frame at most: bounds what a seek into a frame decodes
FRAME_BYTES = 1 << 20         # and about this many bytes of values per frame
MAX_BODY = 1 << 30
READ_CHUNK = 1 << 20          # bytes a reader asks the kernel for at once
INDEX_EVERY = 64 << 10        # bytes of segment between two entries of a reader's sparse index

_PREFIX = struct.Struct("<II")        # body length, CRC-32 of the body
_BODY_HEAD = struct.Struct("<qId")    # base offset, record count, append time
_TRAILER = struct.Struct("<I")        # length of the whole frame
_OVERHEAD = _PREFIX.size + _TRAILER.size
_PAYLOAD_START = _PREFIX.size + _BODY_HEAD.size


class LogError(SourceError):
    """The log refuses a request or cannot be opened, written or read; the message names the
    path (and the partition) and says why."""


class PartialAppend(LogError):
    """An ``append_many`` failed part-way: ``written`` holds what did reach the log."""

    def __init__(self, message: str, written: dict[int, range]):
        super().__init__(message)
        self.written = written


def partition_for_key(key: str | bytes, partitions: int) -> int:
    """The partition of a keyed message: CRC-32 of the key (UTF-8 for str) mod the partition
    count. Unlike ``hash()`` this is the same in every process and every Python."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    return zlib.crc32(data) % partitions


# ----- frames


class _Corrupt(Exception):
    """The bytes at a frame position are not a valid frame."""


def _encode_frame(base: int, count: int, timestamp: float, flat: list) -> bytes:
    head = _BODY_HEAD.pack(base, count, timestamp)
    payload = msgpack.packb(flat, use_bin_type=True)
    body_len = len(head) + len(payload)
    if body_len > MAX_BODY:
        raise LogError(f"a batch of {count} messages is {body_len} bytes: more than a frame "
                       f"holds ({MAX_BODY}); append smaller messages")
    crc = zlib.crc32(payload, zlib.crc32(head))
    return b"".join((_PREFIX.pack(body_len, crc), head, payload,
                     _TRAILER.pack(body_len + _OVERHEAD)))


def _frame_at(buf: bytes, i: int) -> tuple[int, int, int, float]:
    """The frame starting at ``buf[i]``: (size, base offset, count, time) if it is whole and
    valid; (-bytes needed from i, 0, 0, 0.0) if ``buf`` ends first; raises _Corrupt."""
    avail = len(buf) - i
    if avail < _PREFIX.size:
        return -_PREFIX.size, 0, 0, 0.0
    body_len, crc = _PREFIX.unpack_from(buf, i)
    if not _BODY_HEAD.size <= body_len <= MAX_BODY:
        raise _Corrupt(f"impossible frame length {body_len}")
    size = body_len + _OVERHEAD
    if avail < size:
        return -size, 0, 0, 0.0
    start = i + _PREFIX.size
    if zlib.crc32(memoryview(buf)[start:start + body_len]) != crc:
        raise _Corrupt("CRC mismatch")
    if _TRAILER.unpack_from(buf, i + size - _TRAILER.size)[0] != size:
        raise _Corrupt("frame trailer does not match its length")
    base, count, timestamp = _BODY_HEAD.unpack_from(buf, start)
    return size, base, count, timestamp


def _tail_frame(fd: int, size: int) -> tuple[int, int, int] | None:
    """(position, base offset, count) of the frame that ends the file, found through its trailer;
    None if the file does not end with a whole, valid frame (it is empty or has a torn tail)."""
    if size < _OVERHEAD + _BODY_HEAD.size:
        return None
    (length,) = _TRAILER.unpack(os.pread(fd, _TRAILER.size, size - _TRAILER.size))
    if not _OVERHEAD + _BODY_HEAD.size <= length <= size:
        return None
    try:
        frame_size, base, count, _ = _frame_at(os.pread(fd, length, size - length), 0)
    except _Corrupt:
        return None
    if frame_size != length:
        return None
    return size - length, base, count


def _scan(fd: int, pos: int, offset: int, until: int | None = None,
          on_frame: Any = None) -> tuple[int, int]:
    """Walk the whole, valid frames of a segment from byte ``pos`` (where a frame holding record
    ``offset`` starts) to the first torn or corrupt frame or the end of the file, or until the
    frame holding record ``until`` has been walked. Returns the (position, offset) reached;
    calls ``on_frame(position, base offset)`` for each frame."""
    buf, start = b"", pos
    while until is None or offset <= until:
        try:
            size, base, count, _ = _frame_at(buf, pos - start)
        except _Corrupt:
            break
        if size < 0:
            data = os.pread(fd, max(-size, READ_CHUNK), pos)
            if len(data) < -size:
                break
            buf, start = data, pos
            continue
        if base != offset:
            break
        if on_frame is not None:
            on_frame(pos, base)
        pos += size
        offset += count
    return pos, offset


# ----- layout


def _partition_dir(root: Path, partition: int) -> Path:
    return root / f"partition-{partition}"


def _segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


def _segment_bases(directory: Path) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        raise LogError(f"partition directory {directory} is missing: the log is damaged") from None
    bases = sorted(int(n[:-len(SEGMENT_SUFFIX)]) for n in names
                   if n.endswith(SEGMENT_SUFFIX) and n[:-len(SEGMENT_SUFFIX)].isdigit())
    if not bases:
        raise LogError(f"partition directory {directory} holds no segment: the log is damaged")
    return bases


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ----- writing


class _WriteFailed(Exception):
    def __init__(self, written: range, cause: OSError):
        self.written = written
        self.cause = cause


class _PartitionWriter:
    """Appends to one partition. Between ``locked()`` and its end this process holds the
    partition's flock, and ``fd``/``size``/``next_offset`` describe the last segment as it is on
    disk (brought up to date with other writers, a torn tail truncated)."""

    def __init__(self, directory: Path, partition: int, segment_bytes: int,
                 segment_records: int | None):
        self.directory = directory
        self.partition = partition
        self.segment_bytes = segment_bytes
        self.segment_records = segment_records
        self.mutex = threading.Lock()   # flock does not exclude threads sharing our descriptor
        self.lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.fd = -1
        self.base = -1
        self.size = 0
        self.next_offset = 0
        self.dirty = False
        self.rolled: list[int] = []   # descriptors of finished segments, fsynced at flush
        self.dir_dirty = False

    @contextmanager
    def locked(self) -> Iterator[_PartitionWriter]:
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
        bases = _segment_bases(self.directory)
        base = bases[-1]
        path = self.directory / _segment_name(base)
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
            tail = _tail_frame(self.fd, size)
            if tail is not None and tail[0] >= known_pos and tail[1] >= known_offset:
                end_pos, end_offset = size, tail[1] + tail[2]
            else:
                end_pos, end_offset = _scan(self.fd, known_pos, known_offset)
                if end_pos < size:
                    log.warning("%s: dropping %d bytes after offset %d: an incomplete record "
                                "batch left by a writer that died mid-append", path,
                                size - end_pos, end_offset)
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
        path = self.directory / _segment_name(self.next_offset)
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
                frame = _encode_frame(self.next_offset, j - i, timestamp, flat)
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
            raise _WriteFailed(range(first, self.next_offset), exc) from exc
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


# ----- reading


class _SegmentIndex:
    """Where the frames of one segment start: a sparse list of (first offset, byte position),
    an entry every INDEX_EVERY bytes, built by one scan and extended as the segment grows."""

    def __init__(self, base: int):
        self.offsets = [base]
        self.positions = [0]
        self.scanned_pos = 0        # the whole, valid frames scanned end here ...
        self.scanned_end = base     # ... and this is the offset after their last record

    def extend(self, fd: int, until: int | None = None) -> None:
        def note(pos: int, base: int) -> None:
            if pos - self.positions[-1] >= INDEX_EVERY:
                self.offsets.append(base)
                self.positions.append(pos)

        self.scanned_pos, self.scanned_end = _scan(fd, self.scanned_pos, self.scanned_end,
                                                   until, note)

    def floor(self, offset: int) -> tuple[int, int]:
        """(position, base offset) of an indexed frame at or before the one holding ``offset``."""
        i = bisect_right(self.offsets, offset) - 1
        return self.positions[i], self.offsets[i]

    def end(self, fd: int) -> int:
        """The offset after the segment's last whole record."""
        size = os.fstat(fd).st_size
        if size != self.scanned_pos:
            tail = _tail_frame(fd, size)
            if tail is not None and tail[0] >= self.scanned_pos and tail[1] >= self.scanned_end:
                return tail[1] + tail[2]
            self.extend(fd)
        return self.scanned_end


class _PartitionReader:
    """Reads one partition sequentially: keeps the open segment, a read-ahead buffer and the
    last decoded frame, so a read that starts where the previous one stopped costs no seek and no
    syscall beyond one fstat (to notice a segment deleted under it)."""

    def __init__(self, directory: Path, partition: int):
        self.directory = directory
        self.partition = partition
        self.bases: list[int] = []
        self.indexes: dict[int, _SegmentIndex] = {}
        self.fd = -1
        self.segment = -1
        self.next_offset = -1       # the offset the next read returns first, once positioned
        self.pos = 0                # byte position of the next frame not yet decoded ...
        self.frame_offset = 0       # ... and the offset of its first record
        self.buf = b""              # bytes of the segment from buf_start on
        self.view = memoryview(self.buf)
        self.buf_start = 0
        self.batch: list = []       # flat [k0, v0, k1, v1, ...] of the last decoded frame
        self.batch_base = 0
        self.batch_count = 0
        self.batch_index = 0        # the next record of it to return
        self.batch_time = 0.0

    # -- positioning

    def refresh(self) -> list[int]:
        self.bases = _segment_bases(self.directory)
        for gone in set(self.indexes) - set(self.bases):
            del self.indexes[gone]
        return self.bases

    def _index(self, base: int) -> _SegmentIndex:
        index = self.indexes.get(base)
        if index is None:
            index = self.indexes[base] = _SegmentIndex(base)
        return index

    def _open_segment(self, base: int) -> int:
        return os.open(self.directory / _segment_name(base), os.O_RDONLY | os.O_CLOEXEC)

    def _switch_to(self, fd: int, base: int, pos: int, frame_offset: int) -> None:
        self.close()
        self.fd, self.segment, self.pos, self.frame_offset = fd, base, pos, frame_offset
        self.buf, self.view, self.buf_start = b"", memoryview(b""), pos

    def end(self) -> int:
        return self._end(self.refresh())

    def bounds(self) -> tuple[int, int]:
        """(start offset, end offset), from one listing of the directory."""
        bases = self.refresh()
        return bases[0], self._end(bases)

    def _end(self, bases: list[int]) -> int:
        last = bases[-1]
        fd = self._open_segment(last)
        try:
            return self._index(last).end(fd)
        finally:
            os.close(fd)

    def seek(self, offset: int) -> None:
        for _attempt in range(5):
            bases = self.refresh()
            if offset < bases[0]:
                raise OffsetOutOfRange(self.partition, offset, bases[0], self.end())
            base = bases[bisect_right(bases, offset) - 1]
            try:
                fd = self._open_segment(base)
            except FileNotFoundError:
                continue    # deleted since we listed: list again
            self._switch_to(fd, base, 0, base)     # ours to close from here on
            index = self._index(base)
            if offset >= index.scanned_end:
                index.extend(fd, until=offset)
            if offset >= index.scanned_end:
                if base != bases[-1]:
                    raise LogError(f"{self.directory / _segment_name(base)} ends at offset "
                                   f"{index.scanned_end} but the next segment starts at "
                                   f"{bases[bases.index(base) + 1]}: the log is damaged")
                if offset > index.scanned_end:
                    raise OffsetOutOfRange(self.partition, offset, bases[0], index.scanned_end)
                self.pos = self.buf_start = index.scanned_pos
                self.frame_offset = index.scanned_end
            else:
                self.pos, self.frame_offset = index.floor(offset)
                self.buf_start = self.pos
                while self.frame_offset <= offset:
                    if not self._next_frame(skip_below=offset):
                        raise LogError(f"{self.directory / _segment_name(base)}: offset {offset}"
                                       f" vanished while seeking to it: the log is damaged")
                self.batch_index = offset - self.batch_base
            self.next_offset = offset
            return
        raise LogError(f"cannot position partition {self.partition} of {self.directory.parent} "
                       f"at offset {offset}: its segments keep being deleted")

    # -- reading

    def read(self, offset: int, max_records: int) -> list[Record]:
        if offset != self.next_offset or self.fd < 0 or not os.fstat(self.fd).st_nlink:
            self.seek(offset)
        out: list[Record] = []
        partition = self.partition
        while len(out) < max_records:
            a = self.batch_index
            if a < self.batch_count:
                b = min(self.batch_count, a + max_records - len(out))
                items, base = self.batch, self.batch_base
                if b - a == 1:    # frames of one record (from append()) are common
                    out.append(Record(partition, base + a, items[2 * a], items[2 * a + 1],
                                      self.batch_time))
                else:
                    out += map(Record, repeat(partition), range(base + a, base + b),
                               items[2 * a:2 * b:2], items[2 * a + 1:2 * b:2],
                               repeat(self.batch_time))
                self.batch_index = b
                self.next_offset = base + b
            elif not self._next_frame():
                break
        return out

    def _next_frame(self, skip_below: int = -1) -> bool:
        """Decode the next frame into ``batch`` (or step over it if all its records are below
        ``skip_below``); False if there is none yet."""
        # The common case inline (it is most of the cost of reading one-record frames): a whole,
        # valid frame in the buffer. _frame_at, in the slow path, says what is wrong otherwise.
        buf, i = self.buf, self.pos - self.buf_start
        if len(buf) - i >= _PREFIX.size:
            body_len, crc = _PREFIX.unpack_from(buf, i)
            end = i + body_len + _OVERHEAD
            if (body_len >= _BODY_HEAD.size and end <= len(buf)
                    and zlib.crc32(self.view[i + _PREFIX.size:end - _TRAILER.size]) == crc
                    and _TRAILER.unpack_from(buf, end - _TRAILER.size)[0] == end - i):
                return self._take(i, end - i, skip_below)
        return self._next_frame_slow(skip_below)

    def _next_frame_slow(self, skip_below: int) -> bool:
        needed = 0
        for attempt in range(3):
            if attempt:
                # Only bytes read now count: the buffer may end mid-frame or predate a truncation.
                self.buf = os.pread(self.fd, max(needed, READ_CHUNK), self.pos)
                self.view = memoryview(self.buf)
                self.buf_start = self.pos
            try:
                size = _frame_at(self.buf, self.pos - self.buf_start)[0]
            except _Corrupt as exc:
                if attempt == 0:
                    continue
                if self._ends_torn():
                    # A writer died mid-append: invisible until the next append truncates it.
                    return self._next_segment()
                if attempt == 1:
                    continue    # whole frames follow; unless a writer replaced the bytes just now
                raise LogError(f"{self.directory / _segment_name(self.segment)}: corrupt frame "
                               f"at byte {self.pos} ({exc}): the records from offset "
                               f"{self.frame_offset} on cannot be read") from None
            if size > 0:
                return self._take(self.pos - self.buf_start, size, skip_below)
            if attempt:
                return self._next_segment()
            needed = -size
        raise AssertionError("unreachable")

    def _take(self, i: int, size: int, skip_below: int) -> bool:
        """Make the whole, valid frame at ``buf[i:i + size]`` the current batch."""
        base, count, timestamp = _BODY_HEAD.unpack_from(self.buf, i + _PREFIX.size)
        if base != self.frame_offset:
            raise LogError(f"{self.directory / _segment_name(self.segment)}: the frame at byte "
                           f"{self.pos} starts at offset {base}, expected {self.frame_offset}: "
                           f"the log is damaged")
        if base + count > skip_below:
            items = msgpack.unpackb(self.view[i + _PAYLOAD_START:i + size - _TRAILER.size])
            if len(items) != 2 * count:
                raise LogError(f"{self.directory / _segment_name(self.segment)}: the frame at "
                               f"byte {self.pos} does not hold the {count} records it claims")
            self.batch, self.batch_base, self.batch_count = items, base, count
            self.batch_index, self.batch_time = 0, timestamp
        self.pos += size
        self.frame_offset = base + count
        return True

    def _ends_torn(self) -> bool:
        """Whether the bytes from ``pos`` on are a torn tail, not followed by a whole frame."""
        tail = _tail_frame(self.fd, os.fstat(self.fd).st_size)
        return tail is None or tail[0] <= self.pos

    def _next_segment(self) -> bool:
        # A segment named after the offset we reached exists only once a writer finished ours
        # (and only a segment with records in it is ever finished).
        if self.frame_offset == self.segment:
            return False
        try:
            fd = self._open_segment(self.frame_offset)
        except FileNotFoundError:
            return False
        self._switch_to(fd, self.frame_offset, 0, self.frame_offset)
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.segment, self.next_offset = -1, -1, -1
        self.buf, self.view, self.batch, self.batch_count, self.batch_index = (
            b"", memoryview(b""), [], 0, 0)


# ----- the log


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class PartitionedLog:
    """A partitioned log in the directory ``path`` (see the module doc). ``partitions`` is the
    partition count; partitions are numbered 0 to ``partitions - 1``."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        meta = self.path / METADATA
        try:
            text = meta.read_text()
        except FileNotFoundError:
            if not self.path.exists():
                raise LogError(f"no log at {self.path}: the directory does not exist (create one"
                               f" with `stormlet log create {self.path} --partitions N`)") from None
            if not self.path.is_dir():
                raise LogError(f"{self.path} is not a log: it is not a directory") from None
            raise LogError(f"{self.path} is not a stormlet log: it has no {METADATA}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise LogError(f"cannot read {meta}: {exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LogError(f"{meta} is corrupt: not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise LogError(f"{meta} is not the metadata of a stormlet partitioned log")
        if data.get("version") != VERSION:
            raise LogError(f"{self.path} is in log format version {data.get('version')!r}; this "
                           f"stormlet reads version {VERSION}")
        partitions = data.get("partitions")
        segment_bytes = data.get("segment_bytes")
        segment_records = data.get("segment_records")
        if not (_positive_int(partitions) and _positive_int(segment_bytes)
                and (segment_records is None or _positive_int(segment_records))):
            raise LogError(f"{meta} is corrupt: partitions, segment_bytes or segment_records "
                           f"is not a positive integer")
        for p in range(partitions):
            if not _partition_dir(self.path, p).is_dir():
                raise LogError(f"log {self.path} is damaged: partition directory "
                               f"{_partition_dir(self.path, p)} is missing")
        self.partitions: int = partitions
        self.segment_bytes: int = segment_bytes
        self.segment_records: int | None = segment_records
        self._writers: dict[int, _PartitionWriter] = {}
        self._readers: dict[int, _PartitionReader] = {}
        self._setup = threading.Lock()
        self._round_robin = random.randrange(partitions)  # so short-lived writers spread out

    @classmethod
    def create(cls, path: str | os.PathLike, partitions: int, *,
               segment_bytes: int = DEFAULT_SEGMENT_BYTES,
               segment_records: int | None = None) -> PartitionedLog:
        """Create a log with ``partitions`` partitions at ``path`` (which must not exist, or be
        an empty directory). A segment is closed, and a new one started, once it holds
        ``segment_bytes`` bytes or ``segment_records`` records."""
        path = Path(path)
        if not _positive_int(partitions):
            raise LogError(f"cannot create a log at {path}: the partition count must be a "
                           f"positive integer, not {partitions!r}")
        if not _positive_int(segment_bytes) or not (segment_records is None
                                                    or _positive_int(segment_records)):
            raise LogError(f"cannot create a log at {path}: segment_bytes and segment_records "
                           f"must be positive integers")
        if (path / METADATA).exists():
            raise LogError(f"cannot create a log at {path}: there is one already")
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise LogError(f"cannot create a log at {path}: it exists and is not an empty "
                           f"directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        # Built aside and renamed into place, so nobody ever opens half a log.
        staging = path.parent / f".{path.name}.creating-{uuid.uuid4().hex[:12]}"
        try:
            staging.mkdir()
            for p in range(partitions):
                directory = _partition_dir(staging, p)
                directory.mkdir()
                (directory / _segment_name(0)).touch()
                fsync_dir(directory)
            meta = {"format": FORMAT, "version": VERSION, "partitions": partitions,
                    "segment_bytes": segment_bytes, "segment_records": segment_records,
                    "created": time.time()}
            with open(staging / METADATA, "w") as f:
                json.dump(meta, f, indent=1)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(staging)
            os.rename(staging, path)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise LogError(f"cannot create a log at {path}: it was created meanwhile") from None
            raise LogError(f"cannot create a log at {path}: {exc}") from None
        fsync_dir(path.parent)
        log.debug("created log %s with %d partitions", path, partitions)
        return cls(path)

    # Opened files do not survive a copy: a copy (a spout deep-copied per task) opens its own.
    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def __enter__(self) -> PartitionedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PartitionedLog({str(self.path)!r}, partitions={self.partitions})"

    def check_partition(self, partition: int) -> None:
        """Raise ``LogError`` unless ``partition`` is one of this log's."""
        if not (isinstance(partition, int) and 0 <= partition < self.partitions):
            raise LogError(f"log {self.path} has no partition {partition!r} (it has "
                           f"{self.partitions}: 0 to {self.partitions - 1})")

    def _writer(self, partition: int) -> _PartitionWriter:
        writer = self._writers.get(partition)
        if writer is None:
            with self._setup:
                writer = self._writers.get(partition)
                if writer is None:
                    writer = _PartitionWriter(_partition_dir(self.path, partition), partition,
                                              self.segment_bytes, self.segment_records)
                    self._writers[partition] = writer
        return writer

    def _reader(self, partition: int) -> _PartitionReader:
        reader = self._readers.get(partition)
        if reader is None:
            self.check_partition(partition)
            reader = self._readers[partition] = _PartitionReader(
                _partition_dir(self.path, partition), partition)
        return reader

    # -- writing

    def append(self, value: str | bytes, key: str | bytes | None = None,
               partition: int | None = None) -> tuple[int, int]:
        """Append one message; returns its (partition, offset). It goes to ``partition`` if
        given, else to ``partition_for_key(key)``, else to the next partition round-robin."""
        written = self.append_many([value], None if key is None else [key], partition)
        ((p, offsets),) = written.items()
        return p, offsets.start

    def append_many(self, values: Iterable[str | bytes],
                    keys: Iterable[str | bytes | None] | None = None,
                    partition: int | None = None) -> dict[int, range]:
        """Append messages (with ``keys`` beside ``values``, if given), each routed as by
        ``append``. Returns, per partition written, the range of offsets its messages got:
        contiguous, since a partition's lock is held while its share is written."""
        values = values if isinstance(values, list) else list(values)
        _check_types(values, (str, bytes), "value")
        key_list: list | None = None
        if keys is not None:
            key_list = keys if isinstance(keys, list) else list(keys)
            if len(key_list) != len(values):
                raise ValueError(f"{len(key_list)} keys for {len(values)} values")
            _check_types(key_list, (str, bytes, type(None)), "key")
            if all(k is None for k in key_list):
                key_list = None
        if not values:
            return {}
        groups = self._route(values, key_list, partition)
        timestamp = time.time()
        written: dict[int, range] = {}
        for p in sorted(groups):
            group_keys, group_values = groups[p]
            try:
                with self._writer(p).locked() as writer:
                    written[p] = writer.append(group_keys, group_values, timestamp)
            except (_WriteFailed, OSError) as exc:
                if isinstance(exc, _WriteFailed):
                    if exc.written:
                        written[p] = exc.written
                    exc = exc.cause
                done = ", ".join(f"partition {q}: {len(r)} (offsets {r.start}-{r.stop - 1})"
                                 for q, r in written.items()) or "nothing"
                raise PartialAppend(f"appending to partition {p} of {self.path} failed: {exc}; "
                                    f"appended before the failure: {done}", written) from exc
        return written

    def _route(self, values: list, keys: list | None,
               partition: int | None) -> dict[int, tuple[list | None, list]]:
        n = self.partitions
        if partition is not None:
            self.check_partition(partition)
            return {partition: (keys, values)}
        if keys is None:
            start = self._round_robin
            self._round_robin = (start + len(values)) % n
            return {(start + k) % n: (None, values[k::n]) for k in range(min(n, len(values)))}
        groups: dict[int, tuple[list, list]] = {}
        for key, value in zip(keys, values):
            if key is None:
                p = self._round_robin
                self._round_robin = (p + 1) % n
            else:
                p = partition_for_key(key, n)
            group = groups.get(p)
            if group is None:
                group = groups[p] = ([], [])
            group[0].append(key)
            group[1].append(value)
        return groups

    def delete_before(self, partition: int, offset: int) -> int:
        """Retention: delete the partition's segments whose records all lie below ``offset``
        (never the records at or above it, so the new start may stay below ``offset``). Reading
        a deleted offset then raises ``OffsetOutOfRange``. Returns the partition's new start."""
        self.check_partition(partition)
        directory = _partition_dir(self.path, partition)
        writer = self._writer(partition)
        with writer.locked():
            end = writer.next_offset
            if offset > end:
                raise LogError(f"cannot delete before offset {offset} in partition {partition} "
                               f"of {self.path}: it ends at {end}")
            bases = _segment_bases(directory)
            doomed = [b for b, nxt in zip(bases, bases[1:] + [end]) if nxt <= offset]
            if doomed and doomed[-1] == bases[-1]:
                if bases[-1] == end:
                    doomed.pop()        # the last segment is empty: keep it, it marks the end
                else:
                    writer.roll()       # a partition always keeps a last segment
            for base in doomed:
                try:
                    os.unlink(directory / _segment_name(base))
                except FileNotFoundError:
                    pass
            if doomed:
                fsync_dir(directory)
                log.info("%s partition %d: deleted %d segments below offset %d", self.path,
                         partition, len(doomed), offset)
        return self.start_offset(partition)

    def flush(self) -> None:
        """Make everything appended through this object durable (fsync)."""
        for writer in list(self._writers.values()):
            writer.flush()

    # -- reading

    def read(self, partition: int, offset: int, max_records: int = 1000) -> list[Record]:
        """Up to ``max_records`` records of ``partition`` from ``offset`` on; empty at the end.
        Raises ``OffsetOutOfRange`` for an offset below the start or beyond the end. Reading on
        from where the last read stopped is the fast path."""
        reader = self._reader(partition)
        if not isinstance(offset, int) or offset < 0:
            raise LogError(f"partition {partition} of {self.path}: bad offset {offset!r}")
        try:
            return reader.read(offset, max_records)
        except OSError as exc:
            reader.close()
            raise LogError(f"cannot read partition {partition} of {self.path}: {exc}") from None

    def start_offset(self, partition: int) -> int:
        """The lowest offset the partition holds (its end, if it is empty)."""
        return self._reader(partition).refresh()[0]

    def end_offset(self, partition: int) -> int:
        """The offset the next record appended to the partition will get."""
        return self._reader(partition).end()

    def describe(self) -> dict[int, tuple[int, int]]:
        """Per partition, (start offset, end offset)."""
        return {p: self._reader(p).bounds() for p in range(self.partitions)}

    def close(self) -> None:
        """Flush, then close every file (the object can be used again: it reopens them)."""
        with self._setup:
            writers, self._writers = self._writers, {}
            readers, self._readers = self._readers, {}
        for writer in writers.values():
            writer.close()
        for reader in readers.values():
            reader.close()


def _check_types(items: list, types: tuple[type, ...], what: str) -> None:
    # One pass over the distinct types (fast for a million messages); the index only on failure.
    if all(issubclass(t, types) for t in set(map(type, items))):
        return
    for i, item in enumerate(items):
        if not isinstance(item, types):
            allowed = " or ".join("None" if t is type(None) else t.__name__ for t in types)
            raise TypeError(f"message {i}: a {what} must be {allowed}, not "
                            f"{type(item).__name__}")
