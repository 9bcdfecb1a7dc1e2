"""An executor's inbox: a queue of message batches, bounded for data only.

Data batches count against ``capacity`` and senders wait while it is full (backpressure that is
local and gradual). Acker and control traffic is never refused: it is small, bounded by the number
of tuples in flight, and refusing it could deadlock a spout waiting on a bolt waiting on an acker.
"""

from __future__ import annotations

import queue
import time
from typing import Any

Message = tuple  # (kind, dest_task, src_task, payload)


class Inbox:
    __slots__ = ("_queue", "capacity", "empty", "get", "get_nowait", "put", "qsize")

    def __init__(self, capacity: int = 64):
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.capacity = capacity
        # Bound methods of the C queue: no Python frame per handoff.
        self.put = self._queue.put
        self.get = self._queue.get
        self.get_nowait = self._queue.get_nowait
        self.qsize = self._queue.qsize
        self.empty = self._queue.empty

    def full(self) -> bool:
        return self._queue.qsize() >= self.capacity

    def accepting(self, _task: int) -> bool:
        return self._queue.qsize() < self.capacity

    def put_data(self, message: Message, stopping: Any = None) -> float:
        """Put a data batch, waiting while the inbox is full (unless ``stopping`` is set).
        Returns the seconds it waited: the sender's time throttled by backpressure."""
        if self._queue.qsize() < self.capacity:
            self._queue.put(message)
            return 0.0
        started = time.monotonic()
        delay = 0.0002
        while self._queue.qsize() >= self.capacity and not (stopping and stopping.is_set()):
            time.sleep(delay)
            delay = min(delay * 2, 0.005)
        self._queue.put(message)
        return time.monotonic() - started
