"""Where every offset of one partition stands, and how far the spout may commit.

    offsets = PartitionOffsets(partition=0, start=100, retry=RetryPolicy())
    offsets.emitted(record)                   # offset 100 is in flight
    offsets.failed(100, now)                  # waiting to retry, due after the backoff
    offsets.due_retries(later)                # [record 100]: in flight again
    offsets.acked(100)                        # done
    offsets.committable()                     # 101: every emitted offset below is done

Each emitted offset is in exactly one state: in flight, waiting to retry, or done (acked, or
dead-lettered once its attempts ran out); done offsets are forgotten at once. ``committable`` is
the lowest offset not done, or ``emitted_to`` when nothing is outstanding, so a commit never
passes an unfinished message, and offsets the source skipped (compaction, retention) are passed
over. This is the fix for storm-kafka's PartitionManager, which kept an offset failed too far
behind in its pending set for ever: commits stuck, memory grew. Here a failure always leads to a
retry or a dead letter, and state is bounded by what is outstanding.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..failed.dead_letters import Failures
from .retry import RetryPolicy
from .source import Record


@dataclass
class DeadLetter:
    """A message whose attempts ran out, for the failed-message log."""

    record: Record
    attempts: int
    first_failed_at: float
    last_failed_at: float
    reason: Any


class PartitionOffsets:
    def __init__(self, partition: int, start: int, retry: RetryPolicy):
        self.partition = partition
        self.retry = retry
        #: The next offset to emit for the first time.
        self.emitted_to = start
        self.in_flight: dict[int, Record] = {}
        self.retrying: dict[int, Record] = {}
        # Offsets in emit order, hence sorted; entries that are done are dropped lazily from the
        # front, which makes the lowest outstanding offset O(1) amortized.
        self._outstanding: deque[int] = deque()
        self._due: list[tuple[float, int]] = []  # heap of (due time, offset) for ``retrying``
        self._failures: dict[int, Failures] = {}     # by offset
        self.acked_count = 0
        self.dead_lettered = 0
        self.skipped = 0   # outstanding messages dropped by a jump

    # ----- transitions

    def emitted(self, record: Record) -> None:
        """A record emitted for the first time (offsets arrive in increasing order)."""
        offset = record.offset
        self.in_flight[offset] = record
        self._outstanding.append(offset)
        self.emitted_to = offset + 1

    def acked(self, offset: int) -> bool:
        """True if the offset was in flight; a late ack (after a jump or a lost partition) is
        ignored."""
        if self.in_flight.pop(offset, None) is None:
            return False
        self._failures.pop(offset, None)
        self.acked_count += 1
        return True

    def failed(self, offset: int, now: float, reason: Any = None) -> DeadLetter | None:
        """Schedule a retry, or return the dead letter when the attempts are used up. A fail for
        an offset not in flight is ignored (returns None)."""
        record = self.in_flight.pop(offset, None)
        if record is None:
            return None
        history = self._failures.get(offset)
        if history is None:
            history = self._failures[offset] = Failures(now)
        history.count += 1
        failures = history.count
        if self.retry.exhausted(failures):
            del self._failures[offset]
            self.dead_lettered += 1
            return DeadLetter(record, failures, history.first_at, now, reason)
        self.retrying[offset] = record
        heapq.heappush(self._due, (now + self.retry.delay(failures), offset))
        return None

    def give_up(self, offset: int, now: float, reason: Any) -> DeadLetter | None:
        """Dead-letter an in-flight offset at once, whatever attempts are left (a message that
        cannot even be emitted will not do better next time)."""
        record = self.in_flight.pop(offset, None)
        if record is None:
            return None
        history = self._failures.pop(offset, None)
        self.dead_lettered += 1
        if history is None:
            return DeadLetter(record, 1, now, now, reason)
        return DeadLetter(record, history.count + 1, history.first_at, now, reason)

    def due_retries(self, now: float, limit: int = 1 << 30) -> list[Record]:
        """Retries whose backoff has passed, moved back in flight, lowest due first."""
        due = self._due
        ready: list[Record] = []
        while due and due[0][0] <= now and len(ready) < limit:
            _when, offset = heapq.heappop(due)
            record = self.retrying.pop(offset, None)
            if record is not None:
                self.in_flight[offset] = record
                ready.append(record)
        return ready

    def next_due(self) -> float | None:
        return self._due[0][0] if self._due else None

    def restart_at(self, offset: int) -> list[Record]:
        """The position left the log: forget everything and read on from ``offset``. Returns
        the outstanding messages dropped, so the caller can dead-letter rather than lose them."""
        dropped = [*self.in_flight.values(), *self.retrying.values()]
        dropped.sort(key=lambda r: r.offset)
        self.in_flight.clear()
        self.retrying.clear()
        self._failures.clear()
        self._due.clear()
        self._outstanding.clear()
        self.emitted_to = offset
        self.skipped += len(dropped)
        return dropped

    # ----- reading

    def committable(self) -> int:
        """The offset a restart may resume from: every emitted offset below it is done."""
        outstanding = self._outstanding
        in_flight, retrying = self.in_flight, self.retrying
        while outstanding and outstanding[0] not in in_flight and outstanding[0] not in retrying:
            outstanding.popleft()
        return outstanding[0] if outstanding else self.emitted_to

    def uncommitted(self) -> int:
        """Offsets between the commit point and the emit point: what the cap bounds."""
        return self.emitted_to - self.committable()

    def outstanding(self) -> int:
        return len(self.in_flight) + len(self.retrying)

    def attempts(self, offset: int) -> int:
        """Failures so far of an outstanding offset."""
        history = self._failures.get(offset)
        return history.count if history else 0
