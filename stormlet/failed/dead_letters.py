"""A spout task's dead letters: the one writer of its failed-message log files, and, for any
reliable spout, the count of failures per message id.

Enabled per spout with ``topology.spout.dead.letter.attempts`` (N). The spout executor counts
``fail`` verdicts per message id (a spout that replays a failed message emits it again under the
same id); the N-th one is not delivered to ``Spout.fail``: the tuple's values are written to the
failed-message log (``stormlet.failed.dir``) with the reason, and ``Spout.dead_lettered(msg_id,
reason)`` is called so the spout can forget the message. A spout may also dead-letter a message
itself with ``collector.dead_letter(values, msg_id, reason)``.

Offset-tracking spouts count attempts themselves (per partition offset) and hand complete
records, with the source's partition and offset, to ``put``.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from typing import Any

from .record import FailedRecord
from .writer import FailedMessageWriter

log = logging.getLogger(__name__)

# Failure counts kept per task at most: a spout that never replays its failures must not make
# this grow without bound (the oldest counts are forgotten first).
MAX_TRACKED = 100_000
DEFAULT_DIR = "stormlet-failed"


class Failures:
    """How many times one message has failed so far, and when it first did; counted up in
    place at each failure."""

    __slots__ = ("count", "first_at")

    def __init__(self, first_at: float) -> None:
        self.count = 0
        self.first_at = first_at


class DeadLetterBox:
    def __init__(self, directory: str | None, topology: str, component: str, task: int,
                 attempts: int | None, registry: Any = None):
        self.directory = os.path.abspath(directory or DEFAULT_DIR)
        self.topology, self.component, self.task = topology, component, task
        self.attempts = attempts
        self.registry = registry   # the topology's types, which the values may hold
        self._failures: OrderedDict[Any, Failures] = OrderedDict()  # by msg id
        self._writer: FailedMessageWriter | None = None
        self.unflushed = 0

    def failed(self, msg_id: Any) -> int:
        """Count one failure of ``msg_id``; returns the count, or 0 when counting is off or the
        id cannot be counted (not hashable)."""
        if not self.attempts:
            return 0
        try:
            history = self._failures.pop(msg_id, None)
        except TypeError:
            return 0
        if history is None:
            history = Failures(time.time())
            if len(self._failures) >= MAX_TRACKED:
                self._failures.popitem(last=False)
        history.count += 1
        self._failures[msg_id] = history
        return history.count

    def _pop(self, msg_id: Any) -> Failures | None:
        """Take out ``msg_id``'s failures, if it has any counted (an id that is not hashable
        never has)."""
        try:
            return self._failures.pop(msg_id, None)
        except TypeError:
            return None

    def exhausted(self, count: int) -> bool:
        return self.attempts is not None and self.attempts != 0 and count >= self.attempts

    def forget(self, msg_id: Any) -> None:
        if self._failures:
            self._pop(msg_id)

    def write(self, values: Any, msg_id: Any, reason: Any, attempts: int = 1) -> None:
        """Write one message, with the failure times this box counted for it."""
        history = self._pop(msg_id)
        now = time.time()
        self.put(FailedRecord(message_id=msg_id, reason=reason, attempts=attempts,
                              first_failed_at=history.first_at if history else now,
                              last_failed_at=now, value=values))

    def put(self, record: FailedRecord) -> None:
        """Write one record; it is durable after the next ``flush``, which callers make before
        anything may count the message as done."""
        if self._writer is None:
            self._writer = FailedMessageWriter(self.directory, self.topology, self.component,
                                               self.task, registry=self.registry)
        self._writer.write(record)
        self.unflushed += 1
        where = record.source
        log.warning("%s:%d dead-lettered message %r%s after %d attempts: %s", self.component,
                    self.task, record.message_id,
                    f" ({where['name']} partition {where['partition']} offset {where['offset']})"
                    if where else "", record.attempts, record.reason)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()
        self.unflushed = 0

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
