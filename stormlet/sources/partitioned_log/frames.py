"""The frame: how a segment file holds records.

A segment is a sequence of frames, each a batch of consecutive records:

    u32 body length | u32 CRC-32 of body | body | u32 frame length (trailer)
    body = i64 base offset | u32 record count | f64 append time | msgpack [k0, v0, k1, v1, ...]

A frame is whole or it is not there: a reader returns no record of a frame that is incomplete or
fails its CRC. What happens to such bytes (a torn tail truncated, a damaged span stepped over and
set aside) is recovery.py's. The trailer lets a writer or reader find the last frame's end offset
from the end of the file, without scanning the segment, and marks where a frame ends.

This module encodes frames and validates one at a position; the reader repeats ``frame_at``'s
checks inline on its fast path, and decodes the payload itself.
"""

from __future__ import annotations

import os
import struct
import zlib

import msgpack

from .errors import LogError
from .layout import MAX_OFFSET

MAX_BODY = 1 << 30
READ_CHUNK = 1 << 20          # bytes a reader asks the kernel for at once

PREFIX = struct.Struct("<II")        # body length, CRC-32 of the body
BODY_HEAD = struct.Struct("<qId")    # base offset, record count, append time
TRAILER = struct.Struct("<I")        # length of the whole frame
OVERHEAD = PREFIX.size + TRAILER.size
PAYLOAD_START = PREFIX.size + BODY_HEAD.size


class CorruptFrame(Exception):
    """The bytes at a frame position are not a valid frame."""


def encode_frame(base: int, count: int, timestamp: float, flat: list) -> bytes:
    """The frame of ``count`` records from offset ``base``; ``flat`` is [k0, v0, k1, v1, ...]."""
    if base + count > MAX_OFFSET:
        raise LogError(f"cannot append {count} messages at offset {base}: offsets end at "
                       f"{MAX_OFFSET}")
    head = BODY_HEAD.pack(base, count, timestamp)
    payload = msgpack.packb(flat, use_bin_type=True)
    body_len = len(head) + len(payload)
    if body_len > MAX_BODY:
        raise LogError(f"a batch of {count} messages is {body_len} bytes: more than a frame "
                       f"holds ({MAX_BODY}); append smaller messages")
    crc = zlib.crc32(payload, zlib.crc32(head))
    return b"".join((PREFIX.pack(body_len, crc), head, payload,
                     TRAILER.pack(body_len + OVERHEAD)))


def frame_at(buf: bytes, i: int) -> tuple[int, int, int, float]:
    """The frame starting at ``buf[i]``: (size, base offset, count, time) if it is whole and
    valid; (-bytes needed from i, 0, 0, 0.0) if ``buf`` ends first; raises CorruptFrame."""
    avail = len(buf) - i
    if avail < PREFIX.size:
        return -PREFIX.size, 0, 0, 0.0
    body_len, crc = PREFIX.unpack_from(buf, i)
    if not BODY_HEAD.size <= body_len <= MAX_BODY:
        raise CorruptFrame(f"impossible frame length {body_len}")
    size = body_len + OVERHEAD
    if avail < size:
        return -size, 0, 0, 0.0
    start = i + PREFIX.size
    if zlib.crc32(memoryview(buf)[start:start + body_len]) != crc:
        raise CorruptFrame("CRC mismatch")
    if TRAILER.unpack_from(buf, i + size - TRAILER.size)[0] != size:
        raise CorruptFrame("frame trailer does not match its length")
    base, count, timestamp = BODY_HEAD.unpack_from(buf, start)
    return size, base, count, timestamp


def tail_frame(fd: int, size: int) -> tuple[int, int, int] | None:
    """(position, base offset, count) of the frame that ends the file, found through its trailer;
    None if the file does not end with a whole, valid frame (it is empty or has a torn tail)."""
    if size < OVERHEAD + BODY_HEAD.size:
        return None
    (length,) = TRAILER.unpack(os.pread(fd, TRAILER.size, size - TRAILER.size))
    if not OVERHEAD + BODY_HEAD.size <= length <= size:
        return None
    try:
        frame_size, base, count, _ = frame_at(os.pread(fd, length, size - length), 0)
    except CorruptFrame:
        return None
    if frame_size != length:
        return None
    return size - length, base, count
