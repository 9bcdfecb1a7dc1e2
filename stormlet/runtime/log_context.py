"""Which executor a thread is running now, for log lines that name it.

A worker's log line names its topology, component and task (cluster/logging_setup.py reads this
in a ``logging.Filter``). The runner sets the context where an executor's turn begins: once for
a thread of its own, at every turn on a shared thread, which runs several executors one after
another (runner.py). That is one thread-local assignment per turn, nothing per tuple; a line
logged by a thread that runs no executor (the worker's own, or one a component started) names
none.

    enter(executor.log_context)     # the runner, as a turn begins
    current()                       # a log filter: the context of the calling thread, or None
"""

from __future__ import annotations

import threading
from typing import NamedTuple


class ExecutorContext(NamedTuple):
    """What a log line says of the executor that logged it: its topology (id), its component,
    and its tasks (an executor runs a contiguous range of one component's tasks)."""

    topology: str
    component: str
    first_task: int
    last_task: int

    @property
    def tasks(self) -> str:
        """"4", or "4-6" for an executor of several tasks."""
        if self.first_task == self.last_task:
            return str(self.first_task)
        return f"{self.first_task}-{self.last_task}"


class _Current(threading.local):
    context: ExecutorContext | None = None


_current = _Current()


def enter(context: ExecutorContext | None) -> None:
    """Make ``context`` the calling thread's (None: no executor)."""
    _current.context = context


def current() -> ExecutorContext | None:
    """The context of the executor the calling thread runs now, if any."""
    return _current.context


def of_tasks(topology: str, tasks: list) -> ExecutorContext | None:
    """The context of an executor running ``tasks`` (TaskBase objects: each has ``task_id``
    and ``component_id``) of ``topology``; None without tasks."""
    if not tasks:
        return None
    return ExecutorContext(topology, tasks[0].component_id, tasks[0].task_id, tasks[-1].task_id)
