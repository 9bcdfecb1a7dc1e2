"""Backpressure between workers: a worker whose executor falls behind tells its peers to hold
data for that executor's tasks, and they do, so spouts slow down instead of queues growing.

Within a worker, inboxes are bounded and a sender waits while one is full. Across workers the
receiving side must never block (its socket carries acks too, and stalling it on one full inbox
would stall every tree), so the receiver always delivers and watches instead: when a data
delivery leaves an inbox at its capacity, every task of that inbox is *overloaded*, and the
receiver sends each peer worker a ``BACKPRESSURE`` message saying so. Peers hold data for those
tasks (``RemoteRoute.put_data`` waits, and with it the executor that emitted), until the inbox
has drained to half its capacity and a resume arrives.

The messages go straight between workers over the data sockets, never through ZooKeeper: the
pause is local to the tasks that are behind, and lifts by itself if its owner goes silent. While
anything is overloaded the receiver repeats its state every ``REFRESH_SECS``; a peer that hears
nothing for ``PAUSE_TTL_SECS`` (the owner died, a message was lost, a new peer joined late)
forgets the pause. Acks and other control messages are never held.

Payload of ``BACKPRESSURE``: a flat batch of ``protocol.Backpressure`` records (between workers,
packed integer columns: wire.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from ..runtime.protocol import BACKPRESSURE, SYSTEM_TASK, Backpressure, Message, records

REFRESH_SECS = 1.0
PAUSE_TTL_SECS = 3.0
# An overloaded inbox is released when it has drained to this fraction of its mark: a gap
# between the two marks keeps peers from flapping between pause and resume on every batch.
RESUME_FRACTION = 0.5
# Data from other workers overloads an inbox at its capacity or at this many batches, whichever
# is more. A local sender waiting for room is woken the moment a batch is taken, so a small
# capacity costs it nothing; a peer's pause and resume each cross the transport's threads and
# sockets, and with only a few batches of slack its data would stall between the two (measured
# at a capacity of 2: the workers kept 1.72 cores busy instead of 1.95).
REMOTE_OVERLOAD_BATCHES = 64


class PausedTasks:
    """The sender's side: remote tasks whose worker asked for their data to be held."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._until: dict[int, float] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def apply(self, payload: list[int]) -> None:
        """Take a peer's ``BACKPRESSURE`` payload."""
        expires = self._clock() + PAUSE_TTL_SECS
        with self._lock:
            for task, overloaded in records(Backpressure, payload):
                if overloaded:
                    self._until[task] = expires
                else:
                    self._until.pop(task, None)

    def paused(self, task: int) -> bool:
        until = self._until.get(task)   # a dict read: safe without the lock, and it is hot
        if until is None:
            return False
        if self._clock() < until:
            return True
        with self._lock:
            if self._until.get(task) == until:
                del self._until[task]
        return False

    def tasks(self) -> list[int]:
        return [task for task in list(self._until) if self.paused(task)]


class OverloadWatch:
    """The receiver's side: which local inboxes are overloaded, and what peers must be told.

    ``routes`` is the worker's task -> route table (inboxes for local tasks); ``peers`` gives the
    addresses of the other workers now; ``send(address, message)`` queues a message for one.
    Used from the receiver thread only. An inbox is overloaded at its capacity or at
    ``at_least`` batches, whichever is more.
    """

    def __init__(self, routes: list[Any], peers: Callable[[], Iterable[str]],
                 send: Callable[[str, tuple], None], clock: Callable[[], float] = time.monotonic,
                 at_least: int = REMOTE_OVERLOAD_BATCHES):
        self.routes = routes
        self.at_least = at_least
        self.peers = peers
        self.send = send
        self.clock = clock
        self.overloaded: dict[int, Any] = {}   # id(inbox) -> inbox
        self._changed: dict[int, int] = {}     # task -> 1/0 not yet announced
        self._last_sent = 0.0
        self.pauses = 0   # how many times an inbox was declared overloaded

    def delivered(self, inbox: Any) -> None:
        """After a data delivery to ``inbox``."""
        if inbox.qsize() >= self._mark(inbox) and id(inbox) not in self.overloaded:
            self.overloaded[id(inbox)] = inbox
            self.pauses += 1
            for task in self._tasks_of(inbox):
                self._changed[task] = 1

    def check(self) -> None:
        """Release inboxes that drained, and tell peers about changes (or repeat the state)."""
        for key, inbox in list(self.overloaded.items()):
            if inbox.qsize() <= self._mark(inbox) * RESUME_FRACTION:
                del self.overloaded[key]
                for task in self._tasks_of(inbox):
                    self._changed[task] = 0
        now = self.clock()
        refresh = self.overloaded and now - self._last_sent >= REFRESH_SECS
        if not (self._changed or refresh):
            return
        # Every message carries every overloaded task, not only the changes: one inbox flapping
        # must not keep another's pause from being repeated before peers let it lapse.
        state = dict(self._changed)
        for inbox in self.overloaded.values():
            state.update((task, 1) for task in self._tasks_of(inbox))
        self._changed.clear()
        self._last_sent = now
        payload = [x for task, flag in sorted(state.items()) for x in Backpressure(task, flag)]
        message = Message(BACKPRESSURE, SYSTEM_TASK, SYSTEM_TASK, payload)
        for address in self.peers():
            self.send(address, message)

    def busy(self) -> bool:
        return bool(self.overloaded)

    def _mark(self, inbox: Any) -> int:
        return max(inbox.capacity, self.at_least)

    def _tasks_of(self, inbox: Any) -> list[int]:
        return [task for task, route in enumerate(self.routes) if route is inbox]
