"""Setting aside a damaged span of a segment, and listing what was set aside.

A damaged span stays where it is in its segment: readers and writers step over it (see
recovery.py), and rewriting a segment under readers that hold byte positions in it would be
worse. What is set aside is a copy, beside the segment: ``<base>-<pos>.quarantine`` holds one JSON
line (the segment, the bytes, the offsets lost and why), then the span's bytes as they were, so
they outlive the segment's retention. Whoever finds the span first writes it (the writer that
recovers the partition, or a reader), atomically and once; each process says so in one line.

    head -1 data/events/partition-0/*.quarantine      # what was set aside, and why
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import NamedTuple

from ...durable import replace_atomically
from .directory import quarantine_files, quarantine_path, segment_path
from .recovery import Damage

log = logging.getLogger(__name__)

_reported: set[Path] = set()    # spans this process has reported: say each once, not per read


class Quarantined(NamedTuple):
    """A damaged span set aside in ``path``: bytes ``start`` to ``end`` of ``segment``, which
    held offsets ``first`` to ``stop - 1``."""

    path: Path
    segment: str
    start: int
    end: int
    first: int
    stop: int
    reason: str

    @property
    def lost(self) -> int:
        """How many offsets the span held."""
        return self.stop - self.first


def offsets_text(first: int, stop: int) -> str:
    """``offsets 20-29``, ``offset 20`` or ``no offsets``, for messages."""
    if stop <= first:
        return "no offsets"
    return f"offset {first}" if stop == first + 1 else f"offsets {first}-{stop - 1}"


def set_aside(directory: Path, base: int, damage: Damage, fd: int) -> Path:
    """Copy the damaged span of segment ``base`` (open as ``fd``) into its quarantine file,
    unless it is there already, and say so once per process. Never raises for a file system
    that refuses the copy: the span stays in the segment, and the warning says the copy failed."""
    path = quarantine_path(directory, base, damage.start)
    if path in _reported:
        return path
    _reported.add(path)
    segment = segment_path(directory, base)
    lost = offsets_text(damage.first, damage.stop)
    where = f"set aside in {path}"
    if not path.exists():
        header = {"segment": segment.name, "start": damage.start, "end": damage.end,
                  "first": damage.first, "stop": damage.stop, "reason": damage.reason,
                  "found": time.time()}
        try:
            data = os.pread(fd, damage.end - damage.start, damage.start)
            replace_atomically(path, json.dumps(header).encode() + b"\n" + data)
        except OSError as exc:
            where = f"not set aside ({path}: {exc.strerror or exc}; the bytes stay in the segment)"
    span = (f"bytes {damage.start}-{damage.end - 1} are damaged" if damage.end > damage.start
            else f"at byte {damage.start}")
    log.warning("%s: %s (%s): %s lost and skipped, the records after them are read; %s. "
                "Re-append the lost messages from their source if they matter", segment, span,
                damage.reason, lost, where)
    return path


def quarantined(directory: Path) -> list[Quarantined]:
    """What was set aside in the partition directory, in segment and byte order."""
    found = []
    for path in quarantine_files(directory):
        try:
            with open(path, "rb") as f:
                head = json.loads(f.readline())
            found.append(Quarantined(path, str(head["segment"]), int(head["start"]),
                                     int(head["end"]), int(head["first"]), int(head["stop"]),
                                     str(head["reason"])))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: cannot read this quarantine file's first line (%s): not counted; "
                        "move it away if it is not one", path, exc)
    return found
