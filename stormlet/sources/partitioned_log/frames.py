"""The frame: how a segment file holds records.

A segment is a sequence of frames, each a batch of consecutive records:

    u32 body length | u32 CRC-32 of body | body | u32 frame length (trailer)
    body = i64 base offset | u32 record count | f64 append time | msgpack [k0, v0, k1, v1, ...]

A frame of more than GROUP_RECORDS records (in a log of format version 2) also checks its
records in groups of GROUP_RECORDS, so that damage costs only the groups it touches:

    body = i64 base offset | u32 record count | GROUPED | f64 append time
           | u32 groups | u32 CRC-32 of the head and the group table
           | per group: u32 where its records end in the payload | u32 CRC-32 of their bytes
           | msgpack [k0, v0, k1, v1, ...]

The payload is the same msgpack array either way, so a frame that checks out is read in one
call; the groups are read only to salvage a frame that fails its CRC (recovery.py).

A frame is whole or it is not there: a reader returns no record of a frame that is incomplete or
fails its CRC, but those of its groups that check out. What happens to such bytes (a torn tail
truncated, a damaged span stepped over and set aside) is recovery.py's. The trailer lets a
writer or reader find the last frame's end offset from the end of the file, without scanning
the segment, and marks where a frame ends.

This module encodes frames and validates one at a position; the reader repeats ``frame_at``'s
checks inline on its fast path, and decodes the payload itself.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import NamedTuple

import msgpack

from .directory import MAX_OFFSET
from .errors import LogError

MAX_BODY = 1 << 30
READ_CHUNK = 1 << 20          # bytes a reader asks the kernel for at once

PREFIX = struct.Struct("<II")        # body length, CRC-32 of the body
BODY_HEAD = struct.Struct("<qId")    # base offset, record count, append time
TRAILER = struct.Struct("<I")        # length of the whole frame
OVERHEAD = PREFIX.size + TRAILER.size
PAYLOAD_START = PREFIX.size + BODY_HEAD.size    # of a frame without groups

GROUPED = 1 << 31                    # set in a head's record count: the frame has groups
COUNT_MASK = GROUPED - 1
GROUP_RECORDS = 32                   # records a group checks: what one damaged byte costs
GROUP_HEAD = struct.Struct("<II")    # groups, CRC-32 of the body head, this and the table
GROUP_ENTRY = struct.Struct("<II")   # end of the group's records in the payload, their CRC-32
_ARRAY_HEADER = msgpack.Packer()


class CorruptFrame(Exception):
    """The bytes at a frame position are not a valid frame."""


class Frame(NamedTuple):
    """A whole, valid frame as ``frame_at`` reads it: its size in bytes (prefix to trailer),
    base offset, record count and append time."""

    size: int
    base: int
    records: int
    time: float


class Placed(NamedTuple):
    """A whole, valid frame found in a segment: where it starts, its base offset and its
    record count."""

    pos: int
    base: int
    records: int

    @property
    def end(self) -> int:
        """The offset after its last record."""
        return self.base + self.records


def encode_frame(base: int, count: int, timestamp: float, flat: list,
                 grouped: bool = True) -> bytes:
    """The frame of ``count`` records from offset ``base``; ``flat`` is [k0, v0, k1, v1, ...].
    ``grouped``: check its records in groups too, if it has more than one group's worth (a
    log of format version 2; version 1's readers do not know groups)."""
    if base + count > MAX_OFFSET:
        raise LogError(f"cannot append {count} messages at offset {base}: offsets end at "
                       f"{MAX_OFFSET}")
    if grouped and count > GROUP_RECORDS:
        head, payload = _grouped(base, count, timestamp, flat)
    else:
        head = BODY_HEAD.pack(base, count, timestamp)
        payload = msgpack.packb(flat, use_bin_type=True)
    body_len = len(head) + len(payload)
    if body_len > MAX_BODY:
        raise LogError(f"a batch of {count} messages is {body_len} bytes: more than a frame "
                       f"holds ({MAX_BODY}); append smaller messages")
    crc = zlib.crc32(payload, zlib.crc32(head))
    return b"".join((PREFIX.pack(body_len, crc), head, payload,
                     TRAILER.pack(body_len + OVERHEAD)))


def _grouped(base: int, count: int, timestamp: float, flat: list) -> tuple[bytes, bytes]:
    """The head (with its group table) and payload of a frame with groups. Each group is packed
    as an array of its own, whose elements are the whole array's: one msgpack call a group, not
    one a value."""
    header = _ARRAY_HEADER.pack_array_header(len(flat))
    parts: list = [header]
    table = []
    end = len(header)
    step = 2 * GROUP_RECORDS
    for i in range(0, len(flat), step):
        chunk = flat[i:i + step]
        packed = memoryview(msgpack.packb(chunk, use_bin_type=True))
        elements = packed[array_header_size(len(chunk)):]
        parts.append(elements)
        end += len(elements)
        table.append(GROUP_ENTRY.pack(end, zlib.crc32(elements)))
    head = BODY_HEAD.pack(base, count | GROUPED, timestamp)
    table_bytes = b"".join(table)
    groups = struct.pack("<I", len(table))
    check = zlib.crc32(table_bytes, zlib.crc32(groups, zlib.crc32(head)))
    return head + GROUP_HEAD.pack(len(table), check) + table_bytes, b"".join(parts)


def array_header_size(length: int) -> int:
    """The bytes msgpack's header of an array of ``length`` elements takes."""
    return 1 if length < 16 else 3 if length < 1 << 16 else 5


def groups_of(count: int) -> int:
    """How many groups a frame of ``count`` records with groups has."""
    return -(-count // GROUP_RECORDS)


def payload_start(buf: bytes, body: int, raw_count: int) -> int:
    """Where the payload starts, for a body at ``buf[body]`` whose head's count field is
    ``raw_count``."""
    start = body + BODY_HEAD.size
    if raw_count & GROUPED:
        start += GROUP_HEAD.size + GROUP_ENTRY.size * GROUP_HEAD.unpack_from(buf, start)[0]
    return start


def frame_at(buf: bytes, i: int) -> Frame:
    """The frame starting at ``buf[i]`` if it is whole and valid; if ``buf`` ends first, a
    Frame whose size is minus the bytes needed from ``i`` (its other fields 0); raises
    CorruptFrame."""
    avail = len(buf) - i
    if avail < PREFIX.size:
        return Frame(-PREFIX.size, 0, 0, 0.0)
    body_len, crc = PREFIX.unpack_from(buf, i)
    if not BODY_HEAD.size <= body_len <= MAX_BODY:
        raise CorruptFrame(f"impossible frame length {body_len}")
    size = body_len + OVERHEAD
    if avail < size:
        return Frame(-size, 0, 0, 0.0)
    start = i + PREFIX.size
    if zlib.crc32(memoryview(buf)[start:start + body_len]) != crc:
        raise CorruptFrame("CRC mismatch")
    if TRAILER.unpack_from(buf, i + size - TRAILER.size)[0] != size:
        raise CorruptFrame("frame trailer does not match its length")
    base, count, timestamp = BODY_HEAD.unpack_from(buf, start)
    return Frame(size, base, count & COUNT_MASK, timestamp)


def tail_frame(fd: int, size: int) -> Placed | None:
    """The frame that ends the file, found through its trailer; None if the file does not end
    with a whole, valid frame (it is empty or has a torn tail)."""
    if size < OVERHEAD + BODY_HEAD.size:
        return None
    (length,) = TRAILER.unpack(os.pread(fd, TRAILER.size, size - TRAILER.size))
    if not OVERHEAD + BODY_HEAD.size <= length <= size:
        return None
    try:
        frame = frame_at(os.pread(fd, length, size - length), 0)
    except CorruptFrame:
        return None
    if frame.size != length:
        return None
    return Placed(size - length, frame.base, frame.records)
