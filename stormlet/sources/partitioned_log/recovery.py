"""Walking a segment's frames past damage, and telling a torn tail from corruption.

From a frame position on, a segment's bytes are one of:

- a whole, valid frame holding the next offsets in sequence: read it;
- a **torn tail**: the file ends inside the frame a writer was appending when it died (or is
  appending now). Only the last segment has one. It holds no record anyone was told of, so the
  next writer truncates it and a reader waits;
- a **damaged span**: bytes that are not a valid frame in sequence, up to the next valid frame
  or to the end of the segment. Its records are lost, but never the frames after it: the next
  valid frame is looked for at every byte position, since a flipped length must not hide what
  follows. Its offsets are those between its neighbours (the offset expected, and the next
  valid frame's base or the next segment's); at the end of the last segment, where nothing
  bounds it, they are read from its frames' heads if those are in sequence, else bounded by how
  many records its bytes could hold, so an offset that may have been handed out is never
  handed out again. A damaged span is kept in place and set aside (see quarantine.py);
- a **damaged frame with groups** (frames.py) whose length, trailer and checked head hold: only
  its groups that fail their CRC are lost (each a damaged span of its own); the records of the
  others are read (``salvage``), and it is looked for, as a valid frame is, past other damage.

Only bytes that hold no valid frame are ever truncated, and only at the end of the last segment,
when they look like the start of the frame the writer would have written next: a frame whose
length fits in the file but fails its CRC is damage, never a torn tail.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from typing import Callable, Iterator, NamedTuple

import msgpack

from .directory import MAX_OFFSET
from .frames import (
    BODY_HEAD,
    COUNT_MASK,
    GROUP_ENTRY,
    GROUP_HEAD,
    GROUP_RECORDS,
    GROUPED,
    MAX_BODY,
    OVERHEAD,
    PREFIX,
    READ_CHUNK,
    TRAILER,
    CorruptFrame,
    Frame,
    Placed,
    array_header_size,
    frame_at,
    groups_of,
)

U32 = struct.Struct("<I")
I64 = struct.Struct("<q")
# No frame holds more records than this allows: a record is a key and a value, at least one
# msgpack byte each, after the frame's overhead, its head and the payload's array header.
MIN_RECORD_BYTES = 2
MIN_FRAME = OVERHEAD + BODY_HEAD.size + 1


class Damage(NamedTuple):
    """A damaged span: bytes ``start`` to ``end`` of a segment hold no valid frame in sequence,
    and offsets ``first`` to ``stop - 1`` were in it (none if ``stop == first``)."""

    start: int
    end: int
    first: int
    stop: int
    reason: str


class Run(NamedTuple):
    """Consecutive records salvaged from a damaged frame: the first one's offset, how many, and
    their keys and values, flat (``[k0, v0, k1, v1, ...]``)."""

    first: int
    records: int
    items: list


class Salvaged(NamedTuple):
    """What a damaged frame with groups still holds: its groups that check out, as runs of
    consecutive records, and its groups that do not, as damaged spans of their bytes."""

    runs: list[Run]
    damage: list[Damage]
    timestamp: float


class Step(NamedTuple):
    """Where a walk goes on after a position holding no valid frame in sequence."""

    damage: Damage | None   # the damaged span stepped over, if any
    pos: int                # the next valid frame, the end of the file, or a torn tail ...
    offset: int             # ... and the offset expected there
    torn: bool              # the bytes from ``pos`` to the end are a torn tail
    salvaged: Salvaged | None = None   # or: the damaged frame stepped over, and what it held

    @property
    def spans(self) -> list[Damage]:
        """Every damaged span stepped over."""
        if self.salvaged is not None:
            return self.salvaged.damage
        return [self.damage] if self.damage is not None else []


class Scanned(NamedTuple):
    """Where a ``scan`` stopped, and the damaged spans it stepped over."""

    pos: int
    offset: int
    torn: bool
    damage: list[Damage]


class SegmentBytes:
    """A segment's bytes through a sliding window: a damaged span may be as long as the
    segment, so it is never read whole. ``size`` is the file's size when the walk began."""

    def __init__(self, fd: int, size: int | None = None):
        self.fd = fd
        self.size = os.fstat(fd).st_size if size is None else size
        self.buf = b""
        self.start = 0

    def at(self, pos: int, n: int) -> tuple[bytes, int]:
        """A buffer holding bytes ``pos`` to ``pos + n`` (fewer at the end of the file), and
        the index of ``pos`` in it."""
        n = max(0, min(n, self.size - pos))
        i = pos - self.start
        if i < 0 or i + n > len(self.buf):
            self.buf = os.pread(self.fd, max(n, READ_CHUNK), pos)
            self.start, i = pos, 0
        return self.buf, i

    def u32(self, pos: int) -> int | None:
        buf, i = self.at(pos, 4)
        return U32.unpack_from(buf, i)[0] if len(buf) - i >= 4 else None

    def frame(self, pos: int) -> Frame | str:
        """The whole, valid frame at ``pos``, else why not."""
        buf, i = self.at(pos, READ_CHUNK)
        try:
            frame = frame_at(buf, i)
            if frame.size < 0:
                buf, i = self.at(pos, -frame.size)
                frame = frame_at(buf, i)
        except CorruptFrame as exc:
            return str(exc)
        if frame.size < 0:
            return f"its length, {-frame.size} bytes, runs past the end of the file"
        return frame

    def small_u32s(self, pos: int, most: int) -> Iterator[tuple[int, int]]:
        """(position, value) of the u32s from ``pos`` on that may be at most ``most``, and
        certainly every one that is: the regex engine skips to the bytes small enough to be the
        high byte of one, as a length or a distance within a segment is (little-endian)."""
        pattern = _small_byte(min(most, 0xFFFFFFFF) >> 24)
        while pos + 4 <= self.size:
            buf, i = self.at(pos, READ_CHUNK)
            window, last = self.start, len(buf) - 4
            for match in pattern.finditer(buf, i + 3, last + 4):
                j = match.start() - 3
                yield window + j, U32.unpack_from(buf, j)[0]
            pos = window + last + 1

    def valid_from(self, pos: int, offset: int) -> Placed | None:
        """The first frame at or after ``pos`` whose records are not below ``offset`` and that
        is whole and valid, or whose groups can be salvaged (its length, trailer and checked
        head hold: see ``salvage``), or None."""
        for at, body_len in self.small_u32s(pos, min(MAX_BODY, self.size - pos)):
            if not BODY_HEAD.size <= body_len <= self.size - at - OVERHEAD:
                continue
            if self.u32(at + body_len + PREFIX.size) != body_len + OVERHEAD:
                continue
            found = self.frame(at)
            if not isinstance(found, str):
                if found.base >= offset:
                    return Placed(at, found.base, found.records)
                continue
            head = _checked_head(self, at, body_len + OVERHEAD)
            if head is not None and head.base >= offset:
                return Placed(at, head.base, head.records)
        return None

    def complete_length(self, pos: int) -> int | None:
        """The size of the frame at ``pos`` if its length and its trailer agree, the whole of it
        in the file (valid or not); else None."""
        body_len = self.u32(pos)
        if (body_len is not None and BODY_HEAD.size <= body_len <= self.size - pos - OVERHEAD
                and self.u32(pos + body_len + PREFIX.size) == body_len + OVERHEAD):
            return body_len + OVERHEAD
        return None

    def whole_length(self, pos: int) -> int | None:
        """The size of a frame at ``pos`` whose length is whole though it is not valid: its
        length and trailer agree, or (its length damaged) a trailer further on points back at
        it. None if neither: the bytes may be the start of a torn frame, or no frame at all."""
        complete = self.complete_length(pos)
        if complete is not None:
            return complete
        for at, length in self.small_u32s(pos + MIN_FRAME - TRAILER.size, self.size - pos):
            if length == at + TRAILER.size - pos:
                return length
        return None


_SMALL_BYTES: dict[int, re.Pattern[bytes]] = {}


def _small_byte(high: int) -> re.Pattern[bytes]:
    pattern = _SMALL_BYTES.get(high)
    if pattern is None:
        pattern = _SMALL_BYTES[high] = re.compile(b"[\\x00-\\x%02x]" % high)
    return pattern


def _most_records(frame_bytes: int) -> int:
    """The most records ``frame_bytes`` bytes of frames could hold."""
    return max(0, (frame_bytes - MIN_FRAME) // MIN_RECORD_BYTES)


def _records_end(data: SegmentBytes, pos: int, size: int, offset: int) -> int:
    """The offset after a damaged but whole-length frame at ``pos`` that should start at
    ``offset``. A head with groups is checked by its own CRC; one without is believed only if it
    is in sequence and the payload's msgpack array header says the same (one flipped bit cannot
    make both agree); else the most records the frame could hold."""
    most = _most_records(size)
    checked = _checked_head(data, pos, size)
    if checked is not None and checked.base == offset:
        return offset + checked.records
    buf, i = data.at(pos + PREFIX.size, BODY_HEAD.size + 5)
    if len(buf) - i >= BODY_HEAD.size + 1:
        base, count, _ = BODY_HEAD.unpack_from(buf, i)
        if (base == offset and 0 < count <= most
                and _array_length(buf, i + BODY_HEAD.size) == 2 * count):
            return offset + count
    return offset + most


class CheckedHead(NamedTuple):
    """The head and group table of a frame with groups, checked by their own CRC."""

    base: int
    records: int
    timestamp: float
    entries: list[tuple[int, int]]   # per group: where its records end in the payload, CRC-32
    payload: int                     # the payload's position in the segment


def _checked_head(data: SegmentBytes, pos: int, size: int) -> CheckedHead | None:
    """The head of the whole-length frame of ``size`` bytes at ``pos``, if it has groups and
    its head and group table check out; else None."""
    body = pos + PREFIX.size
    end = pos + size - TRAILER.size
    buf, i = data.at(body, BODY_HEAD.size + GROUP_HEAD.size)
    if len(buf) - i < BODY_HEAD.size + GROUP_HEAD.size:
        return None
    base, raw, timestamp = BODY_HEAD.unpack_from(buf, i)
    groups, check = GROUP_HEAD.unpack_from(buf, i + BODY_HEAD.size)
    count = raw & COUNT_MASK
    payload = body + BODY_HEAD.size + GROUP_HEAD.size + GROUP_ENTRY.size * groups
    if not raw & GROUPED or groups != groups_of(count) or payload > end:
        return None
    buf, i = data.at(body, payload - body)
    head = buf[i:i + BODY_HEAD.size]
    table = buf[i + BODY_HEAD.size + GROUP_HEAD.size:i + payload - body]
    groups_field = buf[i + BODY_HEAD.size:i + BODY_HEAD.size + 4]
    if zlib.crc32(table, zlib.crc32(groups_field, zlib.crc32(head))) != check:
        return None
    entries = [GROUP_ENTRY.unpack_from(table, k * GROUP_ENTRY.size) for k in range(groups)]
    return CheckedHead(base, count, timestamp, entries, payload)


def salvage(data: SegmentBytes, pos: int, size: int, offset: int,
            reason: str) -> Salvaged | None:
    """What the damaged, whole-length frame of ``size`` bytes at ``pos``, which should hold the
    records from ``offset`` on, still holds: every group whose CRC holds is read; every other
    is a damaged span (its bytes, its offsets, ``reason``). None when the frame has no groups,
    or its head or group table does not check out (it is lost whole)."""
    head = _checked_head(data, pos, size)
    if head is None or head.base != offset:
        return None
    base, count, payload = head.base, head.records, head.payload
    end = pos + size - TRAILER.size
    runs: list[Run] = []
    damage: list[Damage] = []
    start = payload + array_header_size(2 * count)
    for k, (group_end, crc) in enumerate(head.entries):
        first = base + k * GROUP_RECORDS
        n = min(GROUP_RECORDS, count - k * GROUP_RECORDS)
        stop = payload + group_end
        items = _group_items(data, start, stop, end, crc, n)
        if items is None:
            damage.append(Damage(min(start, end), min(max(start, stop), end), first, first + n,
                                 reason))
        elif runs and runs[-1].first + runs[-1].records == first:
            last = runs[-1]
            runs[-1] = Run(last.first, last.records + n, last.items + items)
        else:
            runs.append(Run(first, n, items))
        start = stop
    return Salvaged(runs, damage, head.timestamp)


def _group_items(data: SegmentBytes, start: int, stop: int, end: int, crc: int,
                 n: int) -> list | None:
    """The flat [k0, v0, ...] of a group's ``n`` records at bytes ``start`` to ``stop``, if
    they lie in the payload (which ends at ``end``) and check out against ``crc``; else None."""
    if not start <= stop <= end:
        return None
    buf, i = data.at(start, stop - start)
    raw = buf[i:i + stop - start]
    if len(raw) != stop - start or zlib.crc32(raw) != crc:
        return None
    try:
        items = msgpack.unpackb(msgpack.Packer().pack_array_header(2 * n) + raw)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    return items if isinstance(items, list) and len(items) == 2 * n else None


def _array_length(buf: bytes, i: int) -> int | None:
    """The length a msgpack array header at ``buf[i]`` declares, or None."""
    kind = buf[i]
    if 0x90 <= kind <= 0x9F:
        return kind & 0x0F
    width = {0xDC: 2, 0xDD: 4}.get(kind)
    if width is None or len(buf) < i + 1 + width:
        return None
    return int.from_bytes(buf[i + 1:i + 1 + width], "big")


def _looks_torn(data: SegmentBytes, pos: int, offset: int) -> bool:
    """Whether the bytes from ``pos`` to the end could be the start of the frame a writer would
    append at offset ``offset``: too short for a frame's prefix, or a possible length that runs
    past the end of the file, and (when it is there) a head starting at ``offset``."""
    left = data.size - pos
    if left < PREFIX.size:
        return True
    body_len = data.u32(pos)
    assert body_len is not None
    if not BODY_HEAD.size <= body_len <= MAX_BODY or body_len + OVERHEAD <= left:
        return False
    if left >= PREFIX.size + I64.size:
        buf, i = data.at(pos + PREFIX.size, I64.size)
        return I64.unpack_from(buf, i)[0] == offset
    return True


def past_damage(data: SegmentBytes, pos: int, offset: int, next_base: int | None) -> Step:
    """Step over what lies at ``pos``, where no valid frame holding ``offset`` starts.
    ``next_base`` is the base of the following segment, None if this is the last one (only
    the last one can have a torn tail)."""
    found = data.frame(pos)
    if isinstance(found, str):
        reason = found
        # Only a frame whose own length and trailer agree, all of it in the file: the frame a
        # writer is appending now has its head and group table written before the rest, and
        # must wait as a torn tail does, not have its unwritten groups taken for damage.
        size = data.complete_length(pos)
        saved = None if size is None else salvage(data, pos, size, offset, reason)
        if saved is not None and size is not None:   # saved only if size is
            end = offset + sum(run.records for run in saved.runs) + sum(
                d.stop - d.first for d in saved.damage)
            return Step(None, pos + size, end, False, saved)
    else:
        reason = f"a valid frame out of sequence (offset {found.base}, expected {offset})"
    after = data.valid_from(pos + 1, offset)
    if after is not None:
        return Step(Damage(pos, after.pos, offset, after.base, reason), after.pos, after.base,
                    False)
    size = data.size
    if next_base is not None:
        # Not the last segment: it is finished, so its end is damage too, never a torn tail.
        stop = max(offset, next_base)
        return Step(Damage(pos, size, offset, stop, reason), size, stop, False)
    # The end of the last segment, with no valid frame in it: peel off damaged frames whose
    # length is whole, then what is left is a torn tail or unreadable bytes.
    p, end = pos, offset
    while p < size:
        frame_size = data.whole_length(p)
        if frame_size is not None:
            end = _records_end(data, p, frame_size, end)
            p += frame_size
            continue
        if _looks_torn(data, p, end):
            break
        end += _most_records(size - p)
        p = size
    end = min(end, MAX_OFFSET)
    damage = Damage(pos, p, offset, end, reason) if p > pos else None
    return Step(damage, p, end, p < size)


def scan(fd: int, pos: int, offset: int, until: int | None = None,
         on_frame: Callable[[int, int], None] | None = None,
         next_base: int | None = None) -> Scanned:
    """Walk a segment from byte ``pos`` (where the frame holding record ``offset`` starts) to
    its end or a torn tail, stepping over damaged spans, or until the frame holding record
    ``until`` has been walked. Calls ``on_frame(position, base offset)`` for each valid frame.
    ``next_base`` is the following segment's base, None for the last segment."""
    data = SegmentBytes(fd)
    damage: list[Damage] = []
    while pos < data.size and (until is None or offset <= until):
        found = data.frame(pos)
        if not isinstance(found, str):
            if found.base == offset:
                if on_frame is not None:
                    on_frame(pos, found.base)
                pos += found.size
                offset += found.records
                continue
            if found.base > offset:
                # Whole frames on either side, offsets missing between them.
                damage.append(Damage(pos, pos, offset, found.base,
                                     "offsets missing between frames"))
                offset = found.base
                continue
        step = past_damage(data, pos, offset, next_base)
        damage += step.spans
        pos, offset = step.pos, step.offset
        if step.torn:
            return Scanned(pos, offset, True, damage)
    if pos >= data.size and next_base is not None and offset < next_base:
        damage.append(Damage(pos, pos, offset, next_base, "the segment ends before the next "
                             "one begins"))
        offset = next_base
    return Scanned(pos, offset, False, damage)
