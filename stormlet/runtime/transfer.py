"""A task's outgoing buffers: tuples and acker messages are collected per destination and handed
over as one message per destination when the executor flushes.

Batching is what lets Python threads move hundreds of thousands of tuples per second: a handoff
costs about a microsecond whether it carries one tuple or five hundred. The task's transferred
count and time throttled by backpressure are counted here, per handoff.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from .inbox import CycleGate
from .metrics import TaskMetrics
from .protocol import (
    ACK_ACK,
    ACK_FAIL,
    ACK_INIT,
    ACK_RESET,
    ACK_TIMEOUT,
    DATA,
    Message,
    ack_pairs,
)

# A transfer batch size no buffer reaches.
UNBOUNDED = 1 << 62


class Route(Protocol):
    """Where messages for a task go: a local inbox, or (on a cluster) a remote worker."""

    def put(self, message: tuple) -> None: ...

    def put_data(self, message: tuple, stopping: threading.Event | None = None,
                 wait: bool = True) -> float | None:
        """Hand over a data batch, waiting while the receiver is full (unless ``wait`` is
        false); the seconds waited."""

    def accepting(self, task: int) -> bool:
        """Whether a data batch for ``task`` would be taken now without waiting."""

    def when_room(self, task: int, wake: Callable[[], object]) -> None:
        """Call ``wake`` once ``task`` may be accepting again (if this route can tell); a
        ``wake`` returning False declines (it no longer waits)."""


class Transfer:
    def __init__(self, src_task: int, routes: Sequence[Route | None], data_targets: list[int],
                 acker_tasks: list[int], stopping: threading.Event, metrics: TaskMetrics,
                 batch_size: int | None = None, feedback: Sequence[int] = (),
                 entry_gates: dict[int, CycleGate] | None = None):
        self.src_task = src_task
        # Destinations in a cycle with this task (Topology.feeding_back): their data goes in
        # without waiting for room, since they may be waiting for room in this task's inbox.
        self.feedback = frozenset(feedback)
        # Destinations in a cycle this task is not on -> the cycle's gate: data entering the
        # cycle also waits while any of its inboxes here is full (see CycleGate).
        self.entry_gates = entry_gates or {}
        # topology.transfer.batch.size: a destination's buffer holding this many tuples is
        # handed over before the executor's next flush would (has_full_batch); None: no bound.
        self.batch_size = UNBOUNDED if batch_size is None else batch_size
        # None only for a task no data or ack goes to: flush reads the routes of its targets.
        self.routes = cast(Sequence[Route], routes)
        self.data_targets = sorted(set(data_targets))
        # Indexed by destination task id, so emit does one list index, not a dict lookup.
        self.data: list[list] = [[] for _ in range(len(routes))]
        self.acker_tasks = acker_tasks
        n = len(acker_tasks)
        self.inits: list[list] = [[] for _ in range(n)]
        # (root, value) pairs; a bolt's collector combines the acks of one root in a row before
        # adding them (XOR is associative): a bolt that acks ten words of one sentence sends the
        # acker one pair, not ten.
        self.acks: list[array] = [ack_pairs() for _ in range(n)]
        # What must be done before each flush: a bolt's collector folds in the acks it holds.
        self.before_flush: list[Callable[[], None]] = []
        self.fails: list[list] = [[] for _ in range(n)]
        self.resets: list[list] = [[] for _ in range(n)]
        self.timeouts: list[list] = [[] for _ in range(n)]
        # Each kind's buffers, and how to make an empty one.
        self._acker_kinds: tuple[tuple[int, list[Any], Callable[[], Any]], ...]
        self._acker_kinds = ((ACK_INIT, self.inits, list), (ACK_ACK, self.acks, ack_pairs),
                             (ACK_FAIL, self.fails, list), (ACK_RESET, self.resets, list),
                             (ACK_TIMEOUT, self.timeouts, list))
        self.stopping = stopping
        self.metrics = metrics
        # Destinations data is held back for, and those whose inbox took a batch since: the next
        # batch for one of those goes in even if the inbox is full again (see flush).
        self._held: set[int] = set()
        self._granted: set[int] = set()
        self._room_wakers: dict[tuple[int, Callable[[], object]], Callable[[], bool]] = {}

    def has_full_batch(self) -> bool:
        """Whether a destination's buffer holds ``batch_size`` tuples or more."""
        data = self.data
        size = self.batch_size
        for task in self.data_targets:
            if len(data[task]) >= size:
                return True
        return False

    def flush(self, hold_back: bool = False, wake: Callable[[], object] | None = None) -> bool:
        """Hand everything over. With ``hold_back``, data for a destination that is not accepting
        (backpressure) stays buffered instead of waiting, and ``wake`` is called once it has
        room (where its route can tell); returns whether any was held.

        Held data whose destination then took a batch goes in at the next flush even if the
        inbox is full again, as a woken bolt's does (inbox.py): data from other workers is never
        refused, and could otherwise keep a spout out of an inbox it shares with them."""
        for settle in self.before_flush:
            settle()
        src = self.src_task
        routes = self.routes
        # Acker messages first: an init that reaches the acker before the acks of its tree keeps
        # the ledger from holding task-less entries.
        for kind, buffers, empty in self._acker_kinds:
            for i, buf in enumerate(buffers):
                if buf:
                    buffers[i] = empty()
                    task = self.acker_tasks[i]
                    routes[task].put(Message(kind, task, src, buf))
        data = self.data
        held_for = self._held
        granted = self._granted
        feedback = self.feedback
        gates = self.entry_gates
        held = False
        for task in self.data_targets:
            buf = data[task]
            if buf:
                woken = False
                gate = gates.get(task) if gates else None
                gate_closed = gate is not None and gate.closed()
                # Data for a cycle back to this task is never held: its reader may hold its own.
                if (hold_back and task not in feedback
                        and (gate_closed or not routes[task].accepting(task))):
                    if gate_closed or task not in granted:
                        held = True
                        held_for.add(task)
                        # Held by a closed gate, the spout looks again by itself: the room
                        # of the inbox it enters is not what it waits for.
                        if wake is not None and not gate_closed:
                            routes[task].when_room(task, self._room_waker(task, wake))
                        continue
                    woken = True
                if held_for:   # no longer held: a waker left behind declines its next call
                    held_for.discard(task)
                    granted.discard(task)
                data[task] = []
                self.metrics.transferred += len(buf)
                if woken:   # by a take (only a local inbox wakes): in without waiting
                    routes[task].put(Message(DATA, task, src, buf))
                    continue
                try:
                    if gate_closed and gate is not None:
                        self.metrics.throttled_secs += gate.wait_open(task, self.stopping)
                    waited = routes[task].put_data(Message(DATA, task, src, buf), self.stopping,
                                                   task not in feedback)
                except Exception as exc:
                    # A batch for another worker that would not pack (a value changed after
                    # its emit was checked): dropped and reported, and the executor goes on;
                    # its tracked tuples time out and are replayed.
                    self.metrics.errors.report("dropped a batch that could not be sent", exc)
                    continue
                if waited:
                    self.metrics.throttled_secs += waited
        return held

    def _room_waker(self, task: int, wake: Callable[[], object]) -> Callable[[], bool]:
        """What ``task``'s inbox calls once it took a batch: grants the next batch for it, then
        calls ``wake``; or, if data is no longer held for it (it went in meanwhile), returns
        False, and the inbox wakes another sender instead. One function per destination and
        ``wake``, so an inbox that holds it already does not add it twice."""
        waker = self._room_wakers.get((task, wake))
        if waker is None:
            held_for = self._held
            granted = self._granted

            def waker() -> bool:
                if task not in held_for:
                    return False
                granted.add(task)
                wake()
                return True
            self._room_wakers[(task, wake)] = waker
        return waker
