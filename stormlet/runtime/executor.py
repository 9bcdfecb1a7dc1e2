"""What every executor shares: its inbox, its tasks' outgoing buffers, and error reporting.

An executor runs one or more tasks of one component, on a thread of its own or taking turns on
one with the process's other executors (runner.py). It takes message batches from its inbox,
runs them, and flushes its tasks' outgoing buffers when the inbox runs dry or after a few
batches, so that output batches grow with load and latency stays low when idle.

While it is inside user code (a batch of ``execute`` calls, a burst of ``next_tuple``) its
``busy`` says since when, for which task and in what call; the watchdog reads it to report hangs.
Setting it once per batch is the whole cost of hang detection.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Generator
from typing import Any, NamedTuple

from .. import config as cfg
from ..context import TopologyContext
from . import log_context, task_hooks
from .inbox import Inbox
from .metrics import TaskMetrics
from .transfer import Transfer

log = logging.getLogger(__name__)

# Batches handled between flushes when the inbox stays busy.
FLUSH_EVERY = 8
# What an executor's steps yield: no deadline, or none but a turn for the others first.
FOREVER = float("inf")
NOW = 0.0


class Busy(NamedTuple):
    """What an executor is doing in user code: since when (``time.monotonic()``), for which
    task, in what call (``"execute"``, ``"ack"``, ``"open"``...). The watchdog reads it."""
    since: float
    task: TaskBase
    call: str


class TaskBase:
    """One task: its user object, context, outgoing buffers and counters."""

    collector: Any   # the tasks that emit (spouts', bolts') set theirs

    def __init__(self, task_id: int, component_id: str, obj: Any, conf: dict[str, Any],
                 context: Any, transfer: Transfer, metrics: TaskMetrics):
        self.task_id = task_id
        self.component_id = component_id
        self.obj = obj
        self.conf = conf
        self.context = context
        self.transfer = transfer
        self.metrics = metrics
        if isinstance(context, TopologyContext):   # its first hook swaps in the hooked paths
            context.on_first_hook = self.hooks_on

    def hooks_on(self) -> None:
        """The task's first hook was added: run its hooks from now on (runtime/task_hooks.py;
        each kind of task knows which of its paths to swap)."""

    def add_auto_hooks(self) -> None:
        """Add the hooks ``topology.auto.task.hooks`` names (before open or prepare)."""
        if self.conf.get(cfg.TOPOLOGY_AUTO_TASK_HOOKS):
            task_hooks.add_auto_hooks(self.context, self.conf)

    def cleanup_hooks(self) -> None:
        """Once the task stopped: each hook's ``cleanup``."""
        for hook in getattr(self.context, "hooks", ()):
            try:
                hook.cleanup()
            except Exception as exc:
                self.report("a task hook's cleanup failed", exc)

    def sample_with(self, sampler: Any) -> None:
        """Sample the tuples this task emits with ``sampler`` (runtime/sampling.py), or stop
        (None). Tasks that emit (spouts', bolts') have a collector that does it."""
        self.collector.sample_with(sampler)

    def report(self, what: str, error: BaseException, on: Any = None) -> None:
        """Count, and log and record unless throttled, an error at ``what`` (a fixed phrase,
        "execute raised"), optionally on tuple ``on``. Cheap when throttled: see errors.py."""
        self.metrics.errors.report(what, error, on)


class Executor:
    """One or more tasks of one component and their inbox, run by a thread of their own or taking
    turns with the process's other executors on a shared one (runner.py).

    Its work is the generator ``steps()``: it yields when it needs something, a deadline
    (monotonic seconds; ``FOREVER``: none; ``NOW``: none, just a turn for the others), and is sent
    the next message of its inbox, or None at the deadline. While ``wants_input`` is false (a
    bolt holding data back for a full inbox) it is sent None when the deadline passes or it is
    woken (``wake``), and its messages wait."""

    def __init__(self, name: str, inbox: Inbox, tasks: list, stopping: threading.Event):
        self.name = name
        self.inbox = inbox
        self.tasks = tasks
        self.tasks_by_id = {t.task_id: t for t in tasks}
        self.stopping = stopping
        self.ready = threading.Event()   # set once open/prepare ran on every task
        self.finished = threading.Event()
        # What it is doing while in user code, else None. One assignment of a new record, so the
        # watchdog never reads a start time of one call with the task of another, and tells one
        # call from the next by identity.
        self.busy: Busy | None = None
        self.hang_secs = 0.0   # 0: the watchdog leaves this executor alone
        self.death: str | None = None   # why its steps ended, if they broke
        self.shared = False   # taking turns on a thread with other executors (the engine sets it)
        self.wants_input = True
        self.woken = False
        self.runner: Any = None   # the thread running it, once started
        # What its log lines name (its runner enters it: log_context.py).
        conf = getattr(tasks[0], "conf", None) if tasks else None
        self.log_context = log_context.of_tasks(
            str((conf or {}).get(cfg.STORMLET_TOPOLOGY_ID) or ""), tasks)

    @property
    def ident(self) -> int | None:
        """The id of the thread running this executor (the watchdog reads its stack)."""
        return self.runner.ident if self.runner is not None else None

    def wake(self) -> None:
        """Resume this executor soon even if it wants no input and its deadline is far: room
        appeared for data it holds back. Safe from any thread."""
        self.woken = True
        self.ring_runner()

    def ring_runner(self) -> None:
        """Wake the thread running this executor if it sleeps (a message came for it)."""
        runner = self.runner
        if runner is not None:
            runner.ring()

    def flush(self) -> None:
        for task in self.tasks:
            task.transfer.flush()

    def died(self, exc: BaseException) -> None:
        """Its steps raised: say so loudly, never vanish. Counted and recorded for every task it
        ran (a worker writes one more heartbeat with it before it exits), logged once with the
        whole traceback."""
        tasks = ",".join(str(t.task_id) for t in self.tasks)
        component = self.tasks[0].component_id if self.tasks else "?"
        detail = "".join(traceback.format_exception(exc)).rstrip()
        self.death = (f"component {component} task {tasks}: executor {self.name} died: "
                      f"{type(exc).__name__}: {exc}")
        log.critical("%s\n%s", self.death, detail)
        for task in self.tasks:
            task.metrics.errors.note(f"executor {self.name} died: {type(exc).__name__}: {exc}",
                                     detail=detail, level=None)

    def ended(self) -> None:
        """Its steps are over (returned or raised)."""
        self.busy = None
        self.ready.set()
        self.finished.set()

    def steps(self) -> Generator[float, tuple | None, None]:
        raise NotImplementedError
