"""Reading one partition, while other processes append to it and delete its old segments.

A reader returns only records of whole, valid frames: a torn frame at a segment's tail (a writer
died mid-append) stays invisible until the next writer truncates it, and a damaged span is
stepped over to the next valid frame (recovery.py), set aside and reported once (quarantine.py),
so its offsets are missing from what a read returns and the records after it are read. A reader
moves on to the next segment only once it exists, which is once a writer has finished the
current one. Not thread-safe: read a given partition
from one thread at a time.
"""

from __future__ import annotations

import os
import time
import zlib
from bisect import bisect_right
from collections import deque
from itertools import repeat
from pathlib import Path

import msgpack

from ..source import OffsetOutOfRange, Record
from .directory import segment_bases, segment_path
from .errors import LogError
from .frames import (
    BODY_HEAD,
    COUNT_MASK,
    GROUPED,
    OVERHEAD,
    PAYLOAD_START,
    PREFIX,
    READ_CHUNK,
    TRAILER,
    CorruptFrame,
    frame_at,
    payload_start,
)
from .index import SegmentIndex
from .quarantine import set_aside
from .recovery import Damage, Run, SegmentBytes, Step, past_damage

GAP_RELIST = 1.0    # seconds between listings by a reader waiting at the end of a segment


class PartitionReader:
    """Reads one partition sequentially: keeps the open segment, a read-ahead buffer and the
    last decoded frame, so a read that starts where the previous one stopped costs no seek and no
    syscall beyond one fstat (to notice a segment deleted under it)."""

    def __init__(self, directory: Path, partition: int):
        self.directory = directory
        self.partition = partition
        self.bases: list[int] = []
        self.indexes: dict[int, SegmentIndex] = {}
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
        self.torn_seen: tuple[int, int, int] | None = None   # (segment, pos, size) of a torn tail
        # The runs of a damaged frame's records that check out, not yet made the batch.
        self.salvaged: deque[Run] = deque()
        self.salvaged_time = 0.0
        self.listed = 0.0           # when _past_gap last listed the directory

    # -- positioning

    def refresh(self) -> list[int]:
        self.bases = segment_bases(self.directory)
        for gone in set(self.indexes) - set(self.bases):
            del self.indexes[gone]
        return self.bases

    def _index(self, base: int) -> SegmentIndex:
        index = self.indexes.get(base)
        if index is None:
            index = self.indexes[base] = SegmentIndex(base)
        return index

    def _open_segment(self, base: int) -> int:
        return os.open(segment_path(self.directory, base), os.O_RDONLY | os.O_CLOEXEC)

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
            index = self._index(last)
            end = index.end(fd)
            self._report(last, index.damage, fd)
            return end
        finally:
            os.close(fd)

    def _report(self, base: int, damage: list[Damage], fd: int) -> None:
        for span in damage:
            set_aside(self.directory, base, span, fd)

    def _following(self, base: int) -> int | None:
        """The base of the segment after ``base``, from a fresh listing; None if it is last."""
        later = [b for b in self.refresh() if b > base]
        return later[0] if later else None

    def check(self) -> None:
        """Scan every segment to its end, setting aside each damaged span found."""
        bases = self.refresh()
        for base, later in zip(bases, bases[1:] + [None]):
            try:
                fd = self._open_segment(base)
            except FileNotFoundError:
                continue    # deleted by retention meanwhile
            try:
                index = self._index(base)
                index.extend(fd, next_base=later)
                self._report(base, index.damage, fd)
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
                later = bases.index(base) + 1
                index.extend(fd, until=offset,
                             next_base=bases[later] if later < len(bases) else None)
                self._report(base, index.damage, fd)
            if offset >= index.scanned_end:
                if base != bases[-1]:
                    raise LogError(f"{segment_path(self.directory, base)} ends at offset "
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
                        raise LogError(f"{segment_path(self.directory, base)}: offset {offset}"
                                       f" vanished while seeking to it: the log is damaged")
                # The offset may have been in a damaged span: the batch then starts after it.
                self.batch_index = max(0, offset - self.batch_base) if self.batch_count else 0
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
        if self.salvaged and self._next_salvaged():
            return True
        # The common case inline (it is most of the cost of reading one-record frames): a whole,
        # valid frame in the buffer. frame_at, in the slow path, says what is wrong otherwise.
        buf, i = self.buf, self.pos - self.buf_start
        if len(buf) - i >= PREFIX.size:
            body_len, crc = PREFIX.unpack_from(buf, i)
            end = i + body_len + OVERHEAD
            if (body_len >= BODY_HEAD.size and end <= len(buf)
                    and zlib.crc32(self.view[i + PREFIX.size:end - TRAILER.size]) == crc
                    and TRAILER.unpack_from(buf, end - TRAILER.size)[0] == end - i):
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
                size = frame_at(self.buf, self.pos - self.buf_start).size
            except CorruptFrame:
                if attempt == 0:
                    continue    # the buffer may predate a truncation: read the bytes again
                return self._past_damage(skip_below)
            if size > 0:
                return self._take(self.pos - self.buf_start, size, skip_below)
            if attempt:
                if len(self.buf) == 0:
                    return self._next_segment()     # the end of the segment
                return self._past_damage(skip_below)    # it ends inside a frame
            needed = -size
        raise AssertionError("unreachable")

    def _past_damage(self, skip_below: int) -> bool:
        """Step over what lies at ``pos``, where no valid frame holding ``frame_offset``
        starts: a torn tail (wait for it: False), or a damaged span (set it aside, read on)."""
        st = os.fstat(self.fd)
        if self.torn_seen == (self.segment, self.pos, st.st_size):
            return False    # the same torn tail as at the last look: spare the listing and scan
        data = SegmentBytes(self.fd, st.st_size)
        found = data.frame(self.pos)
        if not isinstance(found, str) and found.base == self.frame_offset:
            # The frame a writer was appending when our buffer was read is whole now: read it
            # again, it is no damage (taking it for some lost the records a reader raced).
            self.buf, self.view, self.buf_start = b"", memoryview(b""), self.pos
            return True
        step_damage: Damage | None
        if not isinstance(found, str) and found.base > self.frame_offset:
            step_damage = Damage(self.pos, self.pos, self.frame_offset, found.base,
                                 "offsets missing between frames")
            pos, offset, torn = self.pos, found.base, False
        else:
            step = past_damage(data, self.pos, self.frame_offset, self._following(self.segment))
            if step.salvaged is not None:
                return self._take_salvaged(step, skip_below)
            step_damage, pos, offset, torn = step.damage, step.pos, step.offset, step.torn
        if step_damage is not None:
            self._report(self.segment, [step_damage], self.fd)
        self.pos, self.frame_offset = pos, offset
        self.buf, self.view, self.buf_start = b"", memoryview(b""), pos
        if torn:
            # A writer died mid-append (or is appending): invisible until the next append
            # truncates it or completes it.
            self.torn_seen = (self.segment, pos, st.st_size)
            return False
        if pos >= data.size:
            return self._next_segment()
        return True

    def _take_salvaged(self, step: Step, skip_below: int) -> bool:
        """Step over a damaged frame with groups, reading what it still holds: its runs of
        records that check out become batches in turn (``salvaged``), its lost groups are
        set aside."""
        assert step.salvaged is not None
        self._report(self.segment, step.salvaged.damage, self.fd)
        self.pos, self.frame_offset = step.pos, step.offset
        self.buf, self.view, self.buf_start = b"", memoryview(b""), step.pos
        self.salvaged = deque(run for run in step.salvaged.runs
                              if run.first + run.records > skip_below)
        self.salvaged_time = step.salvaged.timestamp
        return self._next_salvaged() or self._next_frame(skip_below)

    def _next_salvaged(self) -> bool:
        """Make the next run of a salvaged frame the current batch, if one is left."""
        if not self.salvaged:
            return False
        run = self.salvaged.popleft()
        self.batch, self.batch_base, self.batch_count = run.items, run.first, run.records
        self.batch_index, self.batch_time = 0, self.salvaged_time
        return True

    def _take(self, i: int, size: int, skip_below: int) -> bool:
        """Make the whole, valid frame at ``buf[i:i + size]`` the current batch."""
        base, count, timestamp = BODY_HEAD.unpack_from(self.buf, i + PREFIX.size)
        if base != self.frame_offset:
            return self._past_damage(skip_below)    # out of sequence: a gap, or a stray frame
        start = i + PAYLOAD_START
        if count & GROUPED:
            start = payload_start(self.buf, i + PREFIX.size, count)
            count &= COUNT_MASK
        if base + count > skip_below:
            items = msgpack.unpackb(self.view[start:i + size - TRAILER.size])
            if len(items) != 2 * count:
                raise LogError(f"{segment_path(self.directory, self.segment)}: the frame at "
                               f"byte {self.pos} does not hold the {count} records it claims")
            self.batch, self.batch_base, self.batch_count = items, base, count
            self.batch_index, self.batch_time = 0, timestamp
        self.pos += size
        self.frame_offset = base + count
        return True

    def _next_segment(self) -> bool:
        # A segment named after the offset we reached exists only once a writer finished ours
        # (and only a segment with records in it is ever finished).
        if self.frame_offset == self.segment:
            return False
        try:
            fd = self._open_segment(self.frame_offset)
        except FileNotFoundError:
            return self._past_gap()
        self._switch_to(fd, self.frame_offset, 0, self.frame_offset)
        return True

    def _past_gap(self) -> bool:
        """At the end of a segment, no segment starts at the offset reached: if a later one
        exists, ours is finished and the offsets up to it are missing (damage), else wait."""
        # A reader at the end of the log lands here at every poll: list the directory only when
        # the last listing shows a later segment, or is a second old (a gap is rare).
        now = time.monotonic()
        if not any(b > self.segment for b in self.bases) and now - self.listed < GAP_RELIST:
            return False
        self.listed = now
        later = self._following(self.segment)
        # Listed first, then sized: a later segment means ours was finished before the listing.
        if later is None or os.fstat(self.fd).st_size != self.pos:
            return False
        if later < self.frame_offset:
            raise LogError(f"{segment_path(self.directory, later)} starts at offset {later}, "
                           f"inside {segment_path(self.directory, self.segment)} (which reaches "
                           f"offset {self.frame_offset}): the log is damaged; move the segment "
                           f"that should not be there out of {self.directory}")
        self._report(self.segment, [Damage(self.pos, self.pos, self.frame_offset, later,
                                           "the segment ends before the next one begins")],
                     self.fd)
        fd = self._open_segment(later)
        self._switch_to(fd, later, 0, later)
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.segment, self.next_offset = -1, -1, -1
        self.buf, self.view, self.batch, self.batch_count, self.batch_index = (
            b"", memoryview(b""), [], 0, 0)
        self.salvaged.clear()
