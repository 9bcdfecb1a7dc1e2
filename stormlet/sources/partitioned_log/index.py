"""A reader's sparse index of one segment: where to start walking frames to reach an offset.

It covers only whole, valid frames: its scan stops at the first torn or corrupt one, and picks up
from there when the segment has grown.
"""

from __future__ import annotations

import os
from bisect import bisect_right

from .frames import scan, tail_frame

INDEX_EVERY = 64 << 10        # bytes of segment between two entries of a reader's sparse index


class SegmentIndex:
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

        self.scanned_pos, self.scanned_end = scan(fd, self.scanned_pos, self.scanned_end,
                                                  until, note)

    def floor(self, offset: int) -> tuple[int, int]:
        """(position, base offset) of an indexed frame at or before the one holding ``offset``."""
        i = bisect_right(self.offsets, offset) - 1
        return self.positions[i], self.offsets[i]

    def end(self, fd: int) -> int:
        """The offset after the segment's last whole record."""
        size = os.fstat(fd).st_size
        if size != self.scanned_pos:
            tail = tail_frame(fd, size)
            if tail is not None and tail[0] >= self.scanned_pos and tail[1] >= self.scanned_end:
                return tail[1] + tail[2]
            self.extend(fd)
        return self.scanned_end
