"""The threads that run executors: each executor on a thread of its own, as in Storm, or a
process's executors taking turns on one (``stormlet.executor.shared.thread``).

Python runs one thread at a time (the interpreter lock), so threads give executors no
parallelism, only the ability to block (in I/O, say) while others go on. Taking turns on one
thread, a batch is run by the next executor right after the last one made it, while its tuples
are still in the core's caches, with no thread switch between them: measured in alternating
pairs, the peer word count ran ~20% faster this way with acking off and ~40% faster with a
``BasicBolt`` (benchmarks/HISTORY.md, 2026-11-28's sixth sitting).

The price is that a call that blocks holds up the executors sharing its thread. A turn longer
than ``BLOCKED_SECS`` hands them to a new shared thread (``Guard``), and the blocked executor
keeps the old one: a bolt waiting on a database holds the rest up once, for about that long.
Starting an executor (its spout's ``open``, its bolts' ``prepare``) is its first turn, handed
off the same way once it lasts ``STARTING_BLOCKED_SECS``. So an executor's calls never overlap
and run on one thread at a time, but may move to a new thread when one that shared it blocks
(each blocked one keeps its thread, so moves are few). A component that must stay on the thread
it started on keeps a thread of its own (its own config sets ``stormlet.executor.shared.thread``
false).

An executor's work is its ``steps()`` generator (executor.py). A thread of its own blocks on the
inbox between its steps; a shared thread gives each executor in turn the messages waiting for
it, then sleeps until a message, a wake-up or the earliest deadline.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Generator, Sequence
from typing import Protocol

from .. import config as cfg
from . import log_context
from .cpu_affinity import pin_executor_thread
from .executor import FOREVER, NOW, Executor

log = logging.getLogger(__name__)

# A turn on a shared thread longer than this hands the thread's other executors to a new one.
BLOCKED_SECS = 0.1
# The same for an executor's start (its first turn: ``open`` or ``prepare``). A hand-off leaves
# the slow executor on a thread of its own for good, the slower way to run (above), and a start
# that connects to something (ZooKeeper, a broker, a database) commonly takes tenths of a second:
# those hold the rest up once, briefly, as before. One that waits longer (for a broker that is
# down, say) holds them up no longer than this.
STARTING_BLOCKED_SECS = 5.0
# Messages an executor is given in one turn at most: a turn stays short (BLOCKED_SECS is for
# executors that block, not for an inbox that grew), and the others get theirs.
MAX_TURN_MESSAGES = 16


class RoundListener(Protocol):
    """Told of a shared thread's rounds: a worker's transport holds what the thread's executors
    send to other workers for a moment (or until the thread sleeps) and sends it then, a frame
    a worker instead of a frame a batch, and takes what came for them at a round's end while
    they are busy (cluster/transport.py's ``TransportRounds``)."""

    def enter(self) -> None:
        """The calling thread starts running executors in rounds."""

    def before_turn(self, now: float) -> None:
        """A turn begins at ``now`` (monotonic): a long round need not hold what it sent."""

    def round_ended(self) -> None:
        """The calling thread ended a round."""

    def idle(self) -> None:
        """The calling thread is about to sleep: its rounds take nothing more until it wakes."""

    def leave(self) -> None:
        """The calling thread runs no more rounds."""

    def look(self, now: float) -> None:
        """From another thread (the guard's, every ``BLOCKED_SECS / 2``): a turn that blocks
        must not hold what its round sent for long."""


def describe(conf: dict) -> str:
    """How a process runs the executors of a topology with ``conf``: a few words for logs and
    benchmark headers."""
    if cfg.merged(conf)[cfg.STORMLET_EXECUTOR_SHARED_THREAD]:
        return "taking turns on one thread"
    return "on a thread each"


class OwnThread(threading.Thread):
    """Runs one executor, blocking on its inbox between steps. That executor does not share
    (its ``shared`` is false), so it never yields ``NOW`` or holds data back: those are how an
    executor gives the others sharing its thread their turn."""

    def __init__(self, executor: Executor, cpu: int | None):
        super().__init__(name=executor.name, daemon=True)
        self.executor = executor
        self.cpu = cpu
        executor.runner = self

    def ring(self) -> None:
        """Nothing: waiting, this thread blocks on its executor's inbox, which a put wakes."""

    def run(self) -> None:
        executor = self.executor
        pin_executor_thread(self.cpu, self.name)
        log_context.enter(executor.log_context)
        inbox = executor.inbox
        get, get_nowait = inbox.get, inbox.get_nowait
        try:
            steps = executor.steps()
            deadline = next(steps)
            while True:
                message = None
                if deadline == FOREVER:
                    message = get()
                else:
                    timeout = deadline - time.monotonic()
                    try:
                        message = get(timeout=timeout) if timeout > 0 else get_nowait()
                    except queue.Empty:
                        pass
                deadline = steps.send(message)
        except StopIteration:
            pass
        except BaseException as exc:
            executor.died(exc)
        finally:
            log_context.enter(None)   # run() here on a caller's thread (tests) leaves none
            executor.ended()


class Turn:
    """An executor's place on a shared thread: its ``steps`` (None until its first turn starts
    them) and the ``deadline`` they last yielded (NOW until then). Updated in place each turn,
    so a class with slots: as cheap to read and write as a list's items."""

    __slots__ = ("executor", "steps", "deadline")

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.steps: Generator[float, tuple | None, None] | None = None
        self.deadline = NOW


class SharedThread(threading.Thread):
    """Runs several executors, each in turn given the messages its inbox holds (or resumed at
    its deadline, or when woken), in the order given: the spouts first, then each bolt after
    those feeding it, so that one round carries a batch as far as it goes.

    A turn that lasts longer than ``BLOCKED_SECS`` (an executor waiting in I/O, or a very long
    batch) hands the other executors to a new shared thread (``hand_off_if_blocked``, called
    by ``Guard``), and the executor keeps this thread as its own: one component's waiting does
    not hold up the rest, as it would not with a thread each."""

    def __init__(self, name: str, executors: Sequence[Executor], cpu: int | None,
                 turns: list[Turn] | None = None, rounds: RoundListener | None = None):
        super().__init__(name=name, daemon=True)
        self.executors = list(executors)
        self.cpu = cpu
        self.rounds = rounds
        self.idle = False
        self._doorbell: queue.SimpleQueue[None] = queue.SimpleQueue()
        # A turn per executor still running here. The list is None until this thread runs,
        # unless it was handed these turns by another.
        self._turns = turns
        self._lock = threading.Lock()   # the turns, the current one, its start and its limit
        self._current: Turn | None = None
        self._current_since = 0.0
        # How long the current turn may last before a hand-off, fixed as it begins: read from
        # the turn when the guard looks, a start that ended an instant before would be judged
        # by a turn's limit.
        self._current_limit = BLOCKED_SECS
        self._handed_off = False
        for executor in self.executors:
            if executor.runner is None:
                # Rings whichever thread runs it when the put comes, this one or a successor.
                executor.inbox.ring_on_put(executor.ring_runner)
            executor.runner = self

    def ring(self) -> None:
        """Wake this thread if it sleeps: a message came, or an executor was woken."""
        if self.idle:
            self._doorbell.put(None)

    def run(self) -> None:
        pin_executor_thread(self.cpu, self.name)
        if self.rounds is None:
            self._run_rounds()
            return
        self.rounds.enter()
        try:
            self._run_rounds()
        finally:
            self.rounds.leave()

    def _run_rounds(self) -> None:
        enter_context = log_context.enter
        rounds = self.rounds
        if self._turns is None:
            self._turns = [Turn(executor) for executor in self.executors]
        while self._turns:
            progressed = False
            for turn in list(self._turns):
                now = time.monotonic()
                if rounds is not None:
                    rounds.before_turn(now)
                with self._lock:
                    self._current, self._current_since = turn, now
                    self._current_limit = (STARTING_BLOCKED_SECS if turn.steps is None
                                           else BLOCKED_SECS)
                enter_context(turn.executor.log_context)   # what its log lines name
                try:
                    if self._take_turn(turn):
                        progressed = True
                except StopIteration:
                    self._end(turn)
                except BaseException as exc:
                    turn.executor.died(exc)
                    self._end(turn)
                with self._lock:
                    self._current = None
                    handed_off, self._handed_off = self._handed_off, False
                if handed_off:
                    break   # the others went to a new thread: what is left here is this turn
            else:
                if rounds is not None:
                    rounds.round_ended()
                if not progressed and self._turns:
                    if rounds is not None:
                        rounds.idle()
                    self._sleep(self._turns)

    def hand_off_if_blocked(self, now: float) -> SharedThread | None:
        """If the turn under way began more than ``BLOCKED_SECS`` before ``now`` (an executor's
        start, ``STARTING_BLOCKED_SECS``), start a new shared thread running every other executor
        of this one, and return it; None if not."""
        with self._lock:
            turn = self._current
            turns = self._turns
            if (turn is None or turns is None or now - self._current_since < self._current_limit
                    or turn not in turns or len(turns) < 2):   # not in: it ended
                return None
            others = [t for t in turns if t is not turn]
            self._turns = [turn]
            self._handed_off = True
            successor = SharedThread(f"{self.name}+", [t.executor for t in others], self.cpu,
                                     others, self.rounds)
        log.info("executor %s held its shared thread for %.2f s: it keeps that thread, and %s "
                 "go on on thread %s", turn.executor.name, now - self._current_since,
                 ", ".join(t.executor.name for t in others), successor.name)
        successor.start()
        return successor

    def _end(self, turn: Turn) -> None:
        with self._lock:
            assert self._turns is not None   # set when this thread began running turns
            self._turns.remove(turn)
        turn.executor.ended()

    @staticmethod
    def _take_turn(turn: Turn) -> bool:
        """Resume one executor with what is waiting for it: at most the messages its inbox held
        when its turn came, so that a busy inbox does not keep the others waiting. Whether it
        ran. An executor's first turn starts it (its spout's ``open`` or its bolts' ``prepare``),
        so that a slow start is a long turn like any other, and the others go on elsewhere."""
        executor, steps, deadline = turn.executor, turn.steps, turn.deadline
        if steps is None:
            steps = turn.steps = executor.steps()
            turn.deadline = next(steps)
            return True
        inbox = executor.inbox
        budget = min(inbox.qsize() + 1, MAX_TURN_MESSAGES)
        ran = False
        while budget:
            budget -= 1
            if deadline == NOW:
                if ran:
                    break   # it asked to let the others run first
                message = None
            elif executor.wants_input and not inbox.empty():
                message = inbox.get_nowait()
            elif _woken(executor) or deadline <= time.monotonic():
                executor.woken = False
                message = None
            else:
                break
            deadline = turn.deadline = steps.send(message)
            ran = True
        return ran

    def _sleep(self, turns: list[Turn]) -> None:
        """Sleep until a message or wake-up comes for an executor, or the earliest deadline."""
        self.idle = True
        try:
            # What came before ``idle`` was set rang no bell: look once more first.
            for turn in turns:
                executor = turn.executor
                if (turn.deadline == NOW or _woken(executor)
                        or (executor.wants_input and not executor.inbox.empty())):
                    return
            timeout = min(turn.deadline for turn in turns) - time.monotonic()
            try:
                if timeout == FOREVER:
                    self._doorbell.get()
                elif timeout > 0:
                    self._doorbell.get(timeout=timeout)
            except queue.Empty:
                pass
        finally:
            self.idle = False
            while not self._doorbell.empty():
                self._doorbell.get_nowait()


def _woken(executor: Executor) -> bool:
    """Whether ``executor``, holding data back, was told that room appeared. (A wake-up that
    comes after the data went in means nothing: the executor waits for input again.)"""
    return executor.woken and not executor.wants_input


class Guard(threading.Thread):
    """Looks every ``BLOCKED_SECS / 2`` for a shared thread held by one executor's turn, and has
    it hand the others to a new thread (``SharedThread.hand_off_if_blocked``)."""

    def __init__(self, name: str, shared: Sequence[SharedThread]):
        super().__init__(name=f"{name}:runner-guard", daemon=True)
        self.shared = list(shared)
        # Set once every executor stopped or was left behind: until then a blocked one may
        # still hold up others (a stop's STOP messages among them).
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(BLOCKED_SECS / 2):
            now = time.monotonic()
            for thread in list(self.shared):
                if thread.rounds is not None:
                    thread.rounds.look(now)
                successor = thread.hand_off_if_blocked(now)
                if successor is not None:
                    self.shared.append(successor)
