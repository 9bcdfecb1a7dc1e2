"""A reader's sparse index of one segment: where to start walking frames to reach an offset.

It covers only whole, valid frames, stepping over damaged spans (recovery.py) and noting them in
``damage``; its scan stops at a torn tail, and picks up from there when the segment has grown.
"""

from __future__ import annotations

import os
from bisect import bisect_right

from .frames import tail_frame
from .recovery import Damage, scan

INDEX_EVERY = 64 << 10        # bytes of segment between two entries of a reader's sparse index


class SegmentIndex:
    """Where the frames of one segment start: a sparse list of (first offset, byte position),
    an entry every INDEX_EVERY bytes, built by one scan and extended as the segment grows."""

    def __init__(self, base: int):
        self.offsets = [base]
        self.positions = [0]
        self.scanned_pos = 0        # the frames and damaged spans scanned end here ...
        self.scanned_end = base     # ... and this is the offset after them
        self.damage: list[Damage] = []    # the damaged spans stepped over, in order

    def extend(self, fd: int, until: int | None = None, next_base: int | None = None) -> None:
        """Scan on from where the last scan stopped (``next_base``: see ``recovery.scan``)."""
        def note(pos: int, base: int) -> None:
            if pos - self.positions[-1] >= INDEX_EVERY:
                self.offsets.append(base)
                self.positions.append(pos)

        scanned = scan(fd, self.scanned_pos, self.scanned_end, until, note, next_base)
        self.scanned_pos, self.scanned_end = scanned.pos, scanned.offset
        self.damage += scanned.damage

    def floor(self, offset: int) -> tuple[int, int]:
        """(position, base offset) of an indexed frame at or before the one holding ``offset``."""
        i = bisect_right(self.offsets, offset) - 1
        return self.positions[i], self.offsets[i]

    def end(self, fd: int) -> int:
        """The offset after the last segment's last record, or after its damaged tail."""
        size = os.fstat(fd).st_size
        if size != self.scanned_pos:
            tail = tail_frame(fd, size)
            if tail is not None and tail.pos >= self.scanned_pos and tail.base >= self.scanned_end:
                return tail.end
            self.extend(fd)
        return self.scanned_end
