"""An executor's inbox: a queue of message batches, bounded for data only.

Data batches count against ``capacity`` and senders wait while it is full (backpressure that is
local and gradual). Acker and control traffic is never refused: it is small, bounded by the number
of tuples in flight, and refusing it could deadlock a spout waiting on a bolt waiting on an acker.

A sender waiting for room is woken by the executor taking a batch (``took_data``), not by polling:
the capacity can then be small, so the tuples between two executors are still in the core's
cache when the second takes them, at no cost in idle time. Each batch taken wakes one sender, the
one that waited longest, which then goes in: several senders share a full inbox in turn, and it
stays bounded.
"""

from __future__ import annotations

import queue
import time
from _thread import allocate_lock
from collections.abc import Callable
from typing import Any

from .protocol import Message

# A waiting sender looks again this often even if no wake-up came (one registered just after the
# executor took a batch, or a stop): the wake-up is what makes waiting short, not this.
ROOM_RECHECK_SECS = 0.005


def wait_for_room(accepting: Callable[[int], bool], task: int, stopping: Any = None) -> float:
    """Sleep, a little longer each time, until ``accepting(task)`` (or ``stopping`` is set);
    the seconds waited. How a route that cannot wake its senders (another worker's) waits out
    backpressure."""
    started = time.monotonic()
    delay = 0.0002
    while not accepting(task) and not (stopping and stopping.is_set()):
        time.sleep(delay)
        delay = min(delay * 2, ROOM_RECHECK_SECS)
    return time.monotonic() - started


class Inbox:
    __slots__ = ("_queue", "_room_wakers", "capacity", "empty", "get", "get_nowait",
                 "put", "qsize")

    def __init__(self, capacity: int):
        """``capacity``: data batches held before local senders wait (the runtime passes
        ``topology.executor.receive.buffer.size``, whose default is config.py's)."""
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.capacity = capacity
        # Called (each once) when the executor next takes a data batch: waiting senders' locks.
        self._room_wakers: list[Callable[[], Any]] = []
        # Bound methods of the C queue: no Python frame per handoff.
        self.put: Callable[[Message], None] = self._queue.put
        self.get = self._queue.get
        self.get_nowait = self._queue.get_nowait
        self.qsize = self._queue.qsize
        self.empty = self._queue.empty

    def ring_on_put(self, ring: Callable[[], Any]) -> None:
        """Call ``ring`` after every put: how a thread that runs this inbox's executor among
        others (runner.SharedThread) learns, while asleep, that a message came."""
        queue_put = self._queue.put

        def put(message: Message) -> None:
            queue_put(message)
            ring()
        self.put = put

    def full(self) -> bool:
        return self._queue.qsize() >= self.capacity

    def accepting(self, _task: int) -> bool:
        return not self.full()

    def took_data(self) -> None:
        """The executor took a data batch: wake the sender that has waited longest for room.
        (Called once a batch, on the executor's thread; a list read when nobody waits.)

        One sender a batch taken: the woken one goes in even if the inbox is full again (data
        from another worker, never refused, may have taken the room), so waking every waiter
        would let them all in and grow the inbox by all but one batch a take."""
        wakers = self._room_wakers
        while wakers:
            try:
                wake = wakers.pop(0)
            except IndexError:   # the last waiter withdrew meanwhile, on its own thread
                return
            if wake() is not False:   # False: no longer waiting; wake the next one instead
                return

    def when_room(self, _task: int, wake: Callable[[], Any]) -> None:
        """Call ``wake`` (once, on the executor's thread) when the executor takes a data batch
        and ``wake`` has waited longest: how a spout holding data back for this inbox learns it
        may send again. A ``wake`` that returns False was no longer waiting, and the next one
        is called instead."""
        if wake not in self._room_wakers:
            self._room_wakers.append(wake)

    def withdraw(self, wake: Callable[[], Any]) -> None:
        """Stop waiting: ``wake`` is not called (if the executor has not called it already)."""
        try:
            self._room_wakers.remove(wake)
        except ValueError:   # the executor took it (and called it) meanwhile
            pass

    def put_data(self, message: Message, stopping: Any = None, wait: bool = True) -> float:
        """Put a data batch, waiting while the inbox is full (unless ``stopping`` is set, or
        ``wait`` is false: a sender in a cycle with this inbox's executor, which may be waiting
        for it). Returns the seconds it waited: the sender's time throttled by backpressure."""
        waited = 0.0 if not wait or not self.full() else self._wait_for_room(stopping)
        self.put(message)
        return waited

    def _wait_for_room(self, stopping: Any) -> float:
        started = time.monotonic()
        room = allocate_lock()
        room.acquire()
        wake = room.release
        self.when_room(0, wake)   # once: rechecking keeps its place in the line
        while self.full() and not (stopping and stopping.is_set()):
            # Woken, it goes in even if the inbox is full again: data from other workers, which
            # is never refused, may have taken the room, and must not starve this sender.
            if room.acquire(timeout=ROOM_RECHECK_SECS):
                break
        else:
            self.withdraw(wake)   # room without a wake-up: that goes to a sender still waiting
        return time.monotonic() - started


class CycleGate:
    """The inboxes in one process of the executors of a cycle of bolts
    (``Topology.cycle_of``). Inside the cycle data never waits for room (``Transfer``), since
    its bolts would wait on each other; data entering it from outside waits instead while any
    of these inboxes is full, so a slow bolt anywhere in the cycle slows what feeds the cycle,
    and what circulates stays bounded."""

    __slots__ = ("inboxes",)

    def __init__(self) -> None:
        self.inboxes: list[Inbox] = []

    def closed(self) -> bool:
        """Whether an inbox of the cycle is full."""
        for inbox in self.inboxes:
            if inbox.full():
                return True
        return False

    def wait_open(self, task: int, stopping: Any = None) -> float:
        """Wait (polling, as for another worker's room) until no inbox of the cycle is full or
        ``stopping`` is set; the seconds waited."""
        return wait_for_room(lambda _task: not self.closed(), task, stopping)
