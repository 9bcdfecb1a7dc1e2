"""An executor's inbox: a queue of message batches, bounded for data only.

Data batches count against ``capacity`` and senders wait while it is full (backpressure that is
local and gradual). Acker and control traffic is never refused: it is small, bounded by the number
of tuples in flight, and refusing it could deadlock a spout waiting on a bolt waiting on an acker.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

Message = tuple  # (kind, dest_task, src_task, payload)


def wait_for_room(accepting: Callable[[int], bool], task: int, stopping: Any = None) -> float:
    """Sleep, a little longer each time, until ``accepting(task)`` (or ``stopping`` is set);
    the seconds waited. How every data route waits out backpressure."""
    started = time.monotonic()
    delay = 0.0002
    while not accepting(task) and not (stopping and stopping.is_set()):
        time.sleep(delay)
        delay = min(delay * 2, 0.005)
    return time.monotonic() - started


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
        return not self.full()

    def put_data(self, message: Message, stopping: Any = None) -> float:
        """Put a data batch, waiting while the inbox is full (unless ``stopping`` is set).
        Returns the seconds it waited: the sender's time throttled by backpressure."""
        waited = 0.0 if self.accepting(0) else wait_for_room(self.accepting, 0, stopping)
        self._queue.put(message)
        return waited
