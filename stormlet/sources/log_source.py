"""The local partitioned log as a ``Source``: what ``LogSpout`` reads in local mode.

    source = LogSource("data/events")
    source.assign({0: 0, 1: source.earliest(1)})
    records = source.fetch(500, timeout=0.1)    # round-robin over unpaused assigned partitions
    source.pause([0]); source.seek(1, 0); source.resume([0])
    source.close()

The log is opened on first use, not in the constructor: a spout (and its source) is deep-copied
per task before it runs, and open files must not be shared by the copies.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from .partitioned_log import PartitionedLog
from .source import OffsetOutOfRange, Record, SourceError

log = logging.getLogger(__name__)

# How long fetch sleeps between looks at an idle log: from the first to the last, doubling, so a
# burst after a pause is picked up quickly and a long idle spell costs little.
FIRST_POLL = 0.001
MAX_POLL = 0.02


class LogSource:
    """A ``Source`` over the ``PartitionedLog`` at ``path``; ``name`` is its absolute path."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.name = str(self.path.resolve())
        self._log: PartitionedLog | None = None
        self._positions: dict[int, int] = {}
        self._paused: set[int] = set()
        self._active: list[int] = []    # assigned and not paused, sorted
        self._next = 0                  # index in _active of the partition fetch tries first

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_log"] = None
        return state

    def __repr__(self) -> str:
        return f"LogSource({self.name!r})"

    @property
    def log(self) -> PartitionedLog:
        if self._log is None:
            self._log = PartitionedLog(self.name)
        return self._log

    def _check(self, partition: int) -> None:
        if not (isinstance(partition, int) and 0 <= partition < self.log.partitions):
            raise SourceError(f"log {self.name} has no partition {partition!r} (it has "
                              f"{self.log.partitions})")

    def _check_assigned(self, partitions: list[int], action: str) -> None:
        unassigned = [p for p in partitions if p not in self._positions]
        if unassigned:
            raise SourceError(f"log {self.name}: cannot {action} partitions {unassigned}: they "
                              f"are not assigned (assigned: {sorted(self._positions)})")

    def _update_active(self) -> None:
        self._active = sorted(set(self._positions) - self._paused)
        self._next = 0

    def partitions(self) -> list[int]:
        return list(range(self.log.partitions))

    def earliest(self, partition: int) -> int:
        self._check(partition)
        return self.log.start_offset(partition)

    def latest(self, partition: int) -> int:
        self._check(partition)
        return self.log.end_offset(partition)

    def lag_end(self, partition: int) -> int:
        return self.latest(partition)   # the log's end is known here, at no cost

    def lost(self, partition: int) -> int:
        self._check(partition)
        return sum(span.lost for span in self.log.quarantined(partition))

    def assign(self, positions: dict[int, int]) -> None:
        for partition, offset in positions.items():
            self._check(partition)
            if not isinstance(offset, int) or offset < 0:
                raise SourceError(f"log {self.name} partition {partition}: bad offset {offset!r}")
        self._positions = dict(positions)
        self._paused &= set(positions)
        self._update_active()

    def seek(self, partition: int, offset: int) -> None:
        self._check_assigned([partition], "seek")
        if not isinstance(offset, int) or offset < 0:
            raise SourceError(f"log {self.name} partition {partition}: bad offset {offset!r}")
        self._positions[partition] = offset

    def pause(self, partitions: list[int]) -> None:
        self._check_assigned(partitions, "pause")
        self._paused.update(partitions)
        self._update_active()

    def resume(self, partitions: list[int]) -> None:
        self._check_assigned(partitions, "resume")
        self._paused.difference_update(partitions)
        self._update_active()

    def position(self, partition: int) -> int:
        """The offset the next fetch of an assigned partition starts at."""
        self._check_assigned([partition], "read the position of")
        return self._positions[partition]

    def fetch(self, max_records: int, timeout: float = 0.0) -> list[Record]:
        records = self._fetch_once(max_records)
        if records or timeout <= 0:
            return records
        deadline = time.monotonic() + timeout
        pause = FIRST_POLL
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return records
            time.sleep(min(pause, left))
            pause = min(pause * 2, MAX_POLL)
            records = self._fetch_once(max_records)
            if records:
                return records

    def _fetch_once(self, max_records: int) -> list[Record]:
        active = self._active
        n = len(active)
        out: list[Record] = []
        read = self.log.read
        positions = self._positions
        for k in range(n):
            p = active[(self._next + k) % n]
            try:
                records = read(p, positions[p], max_records - len(out))
            except OffsetOutOfRange:
                if out:
                    # Hand over what was read; this partition comes first, and raises, next time.
                    self._next = (self._next + k) % n
                    return out
                raise
            if records:
                positions[p] = records[-1].offset + 1
                out += records
                if len(out) >= max_records:
                    self._next = (self._next + k + 1) % n
                    return out
        if n:
            self._next = (self._next + 1) % n
        return out

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
