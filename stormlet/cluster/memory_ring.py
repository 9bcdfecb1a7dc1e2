"""Frames in memory that two processes of one host share: a ring with one writer and one reader.

Between two workers of one host, a frame handed to ZeroMQ wakes its I/O thread in the sending
worker, crosses loopback TCP, and wakes the I/O thread and a reader in the receiving one: a few
system calls and thread switches a frame, on the same cores that run the executors. A frame
written here is a copy into memory the other worker reads at the end of its next round, with no
system call while both are busy (the transport decides where a frame goes: transport.py; how two
workers agree on a ring: same_host.py).

The mapping is a header of three cache lines, then ``capacity`` bytes of records:

- ``written``: how many bytes of records the writer has published, a running count;
- ``read``: how many of them the reader is done with (delivered), a running count;
- ``sleeping``: nonzero while the reader is about to wait or waiting, when a writer that
  publishes must ring its doorbell.

Each on a line of its own, so that the two processes do not pull one line back and forth. A record
is a 4-byte length and the frame, padded to 8 bytes. A length of ``_WRAP`` says the rest of the area
is unused and the records go on at its start. A length of ``_PARKED`` is followed by an 8-byte
token: the frame that belongs here was too large for the ring and travels another way under that
token (``put_parked``); the reader stops there until it has it.

Order between the processes: the writer stores a record, then ``written``; the reader loads
``written``, then the records before it, delivers them, then stores ``read``. Both rely on stores
becoming visible in the order they were made, which x86-64 guarantees and weaker machines (ARM)
do not without barriers Python cannot issue, so ``supported`` is false there and workers use
ZeroMQ. Each position is one aligned 8-byte store, never seen half written (through a
memoryview: ``struct.pack_into`` zeroes its place before it writes). Before it waits, the reader
stores ``sleeping`` and then loads ``written``; after publishing, the writer loads ``sleeping``:
a store followed by a load of another place may be reordered even on x86-64, so both put a
fence between them (a locked instruction, which taking an uncontended lock executes). Then
either the reader sees the new record or the writer sees it sleeping; a wake-up is never lost.
"""

from __future__ import annotations

import mmap
import os
import platform
import sys
import threading
from typing import Callable

# Places in the mapping, in 8-byte words (the header) and bytes. Each is stored and loaded
# through a memoryview cast to its width: one aligned store or load (struct.pack_into would
# zero the place before writing it, and the other process could see the zero).
_WRITTEN, _READ, _SLEEPING = 0, 8, 16
_DATA_AT = 192
_WRAP = 0xFFFFFFFF
_PARKED = 0xFFFFFFFE
_PARKED_BYTES = 16   # the marker, padding, and its 8-byte token
_fence_lock = threading.Lock()


def supported() -> bool:
    """Whether rings work here: Linux (memfd) on x86-64 (stores seen in order)."""
    return (sys.platform == "linux" and hasattr(os, "memfd_create")
            and platform.machine() in ("x86_64", "AMD64"))


def _fence() -> None:
    """A full memory fence: an uncontended lock's acquire is a locked compare-and-swap."""
    _fence_lock.acquire()
    _fence_lock.release()


def _padded(size: int) -> int:
    return (4 + size + 7) & ~7


class MemoryRing:
    """One direction between two processes: ``put`` on the writer's side, ``take`` on the
    reader's. Neither side is thread-safe: each side's callers take turns (the transport's
    locks)."""

    def __init__(self, fd: int, capacity: int) -> None:
        """Map ``capacity`` bytes of records in the shared memory open at ``fd`` (``create``
        makes one; the other process gets its descriptor over a Unix socket)."""
        if capacity <= 0 or capacity % 8:
            raise ValueError(f"a ring's capacity must be a positive multiple of 8, not {capacity}")
        self.capacity = capacity
        # A frame larger than this goes another way (``put_parked``), so that one large frame
        # neither waits for a nearly empty ring nor keeps the ring from taking the next ones.
        self.largest = capacity // 4
        self._map = mmap.mmap(fd, _DATA_AT + capacity)
        self._view = memoryview(self._map)
        self._words = self._view.cast("Q")   # the header's positions, a parked frame's token
        self._lengths = self._view.cast("I")   # each record's length, at its start
        self._written = self._words[_WRITTEN]
        self._read = self._words[_READ]
        # The reader stopped at a parked frame's place that has not come: the frame's arrival
        # on the other way wakes it, not the ring.
        self._stopped_at_parked = False

    @classmethod
    def create(cls, capacity: int) -> tuple[MemoryRing, int]:
        """A new ring in new shared memory, and the descriptor to give the other process (the
        caller closes it once given). Nothing is left behind when both processes end, however
        they end: the memory has no name."""
        fd = os.memfd_create("stormlet-ring", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, _DATA_AT + capacity)
            ring = cls(fd, capacity)
        except BaseException:
            os.close(fd)
            raise
        ring._words[_SLEEPING] = 1   # until the reader looks, writers ring
        return ring, fd

    @staticmethod
    def size_of(fd: int) -> int:
        """The capacity of the ring in the shared memory at ``fd``."""
        return os.fstat(fd).st_size - _DATA_AT

    # The writer's side -----------------------------------------------------------------------

    def put(self, frame: bytes) -> bool:
        """Publish ``frame`` (at most ``largest`` bytes); False if the ring has no room now."""
        size = len(frame)
        start = self._reserve(_padded(size))
        if start < 0:
            return False
        self._lengths[start >> 2] = size
        self._view[start + 4:start + 4 + size] = frame
        self._publish(_padded(size))
        return True

    def room_for_parked(self) -> bool:
        """Whether ``put_parked`` would succeed now (only the reader changes it, by making
        room)."""
        return self._reserve(_PARKED_BYTES, dry_run=True) >= 0

    def put_parked(self, token: int) -> bool:
        """Publish the place of a frame that travels another way under ``token``: the reader
        delivers it there, in order. False if the ring has no room now."""
        start = self._reserve(_PARKED_BYTES)
        if start < 0:
            return False
        self._lengths[start >> 2] = _PARKED
        self._words[(start >> 3) + 1] = token
        self._publish(_PARKED_BYTES)
        return True

    def reader_sleeping(self) -> bool:
        """After a put: whether the reader waits (or is about to) and must be woken."""
        _fence()
        return self._words[_SLEEPING] != 0

    def _reserve(self, need: int, dry_run: bool = False) -> int:
        """Where a record of ``need`` bytes starts (wrapping to the area's start when it does not
        fit before its end); -1 if it has no room now."""
        position = self._written
        offset = position % self.capacity
        skip = self.capacity - offset if offset + need > self.capacity else 0
        read = self._words[_READ]
        if self.capacity - (position - read) < skip + need:
            return -1
        if skip and not dry_run:
            self._lengths[(_DATA_AT + offset) >> 2] = _WRAP
            self._written += skip
            offset = 0
        return _DATA_AT + (0 if skip else offset)

    def _publish(self, size: int) -> None:
        self._written += size
        self._words[_WRITTEN] = self._written

    # The reader's side -----------------------------------------------------------------------

    def has_frames(self) -> bool:
        return self._words[_WRITTEN] != self._read

    @property
    def waits_for_parked(self) -> bool:
        """Whether the last ``take`` stopped at the place of a parked frame that had not come."""
        return self._stopped_at_parked

    def sleep(self) -> bool:
        """The reader is about to wait: from now on the writer rings. True if nothing came
        meanwhile that it could take (else it should not wait)."""
        self._words[_SLEEPING] = 1
        _fence()
        return self._stopped_at_parked or not self.has_frames()

    def wake(self) -> None:
        """The reader is busy again: writers need not ring."""
        self._words[_SLEEPING] = 0

    def take(self, deliver: Callable[[bytes], object], limit: int,
             parked: Callable[[int], bytes | None]) -> int:
        """Deliver up to ``limit`` frames in order, then tell the writer their room is free;
        how many were delivered (a place given up is none). At a parked frame's place,
        ``parked(token)`` gives it, None if it has not come yet (the ring waits there), or b""
        to give its place up. A frame whose delivery raises counts as taken."""
        written = self._words[_WRITTEN]
        position = self._read
        taken = 0
        self._stopped_at_parked = False
        try:
            while position != written and taken < limit:
                offset = position % self.capacity
                start = _DATA_AT + offset
                size = self._lengths[start >> 2]
                if size == _WRAP:
                    position += self.capacity - offset
                    continue
                if size == _PARKED:
                    frame = parked(self._words[(start >> 3) + 1])
                    if frame is None:
                        self._stopped_at_parked = True
                        break
                    position += _PARKED_BYTES
                else:
                    frame = self._map[start + 4:start + 4 + size]
                    position += _padded(size)
                if frame:   # b"": a place given up
                    taken += 1
                    deliver(frame)
        finally:
            self._read = position
            self._words[_READ] = position
        return taken

    def close(self) -> None:
        self._words.release()
        self._lengths.release()
        self._view.release()
        self._map.close()
