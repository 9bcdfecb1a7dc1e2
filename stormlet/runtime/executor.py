"""What every executor thread shares: its inbox, its tasks' outgoing buffers, and error reporting.

An executor is one thread running one or more tasks of one component. It takes message batches
from its inbox, runs them, and flushes its tasks' outgoing buffers when the inbox runs dry or
after a few batches, so that output batches grow with load and latency stays low when idle.
"""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any

from .inbox import Inbox
from .metrics import TaskMetrics
from .transfer import Transfer

log = logging.getLogger(__name__)

# Batches handled between flushes when the inbox stays busy.
FLUSH_EVERY = 8


class TaskBase:
    """One task: its user object, context, outgoing buffers and counters."""

    def __init__(self, task_id: int, component_id: str, obj: Any, conf: dict[str, Any],
                 context: Any, transfer: Transfer, metrics: TaskMetrics):
        self.task_id = task_id
        self.component_id = component_id
        self.obj = obj
        self.conf = conf
        self.context = context
        self.transfer = transfer
        self.metrics = metrics

    def report(self, what: str, error: BaseException) -> None:
        text = f"{what}: {type(error).__name__}: {error}"
        self.metrics.error(text)
        log.error("%s task %d %s\n%s", self.component_id, self.task_id, text,
                  "".join(traceback.format_exception(error)).rstrip())


class ExecutorThread(threading.Thread):
    def __init__(self, name: str, inbox: Inbox, tasks: list, stopping: threading.Event):
        super().__init__(name=name, daemon=True)
        self.inbox = inbox
        self.tasks = tasks
        self.tasks_by_id = {t.task_id: t for t in tasks}
        self.stopping = stopping
        self.ready = threading.Event()   # set once open/prepare ran on every task
        self.finished = threading.Event()

    def flush(self) -> None:
        for task in self.tasks:
            task.transfer.flush()

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as exc:  # the loop itself broke: say so loudly, never vanish
            log.critical("executor %s died: %s\n%s", self.name, exc,
                         "".join(traceback.format_exception(exc)).rstrip())
            for task in self.tasks:
                task.metrics.error(f"executor died: {type(exc).__name__}: {exc}")
        finally:
            self.ready.set()
            self.finished.set()

    def loop(self) -> None:
        raise NotImplementedError
