"""The watchdog: reports executors stuck in user code, and closes error-summary windows.

Each executor says what it is doing in ``busy`` (set once per batch, see executor.py); this thread
looks every so often. An executor in the same call for longer than its ``hang_secs`` is reported
once, as an error of that task with the thread's current stack ("component count task 4 has been
in execute for 45 s"), and once more when that call returns. The hung executor is left alone:
Python cannot stop a thread, and its inbox filling up slows its upstream down, which is the
backpressure a slow component gets anyway. The rest of the process keeps running.

The same thread flushes every task's error windows, so a summary ("... and N more like it") is
logged even when the errors stop.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from typing import Sequence

from .executor import Busy, Executor
from .metrics import TaskMetrics
from .task_errors import MAX_DETAIL, clip_tail

log = logging.getLogger(__name__)

# How often it looks at most, and at least (relative to the smallest threshold).
MAX_INTERVAL = 1.0
MIN_INTERVAL = 0.05


class Watchdog(threading.Thread):
    def __init__(self, name: str, executors: Sequence[Executor],
                 metrics: Sequence[TaskMetrics], stopping: threading.Event):
        super().__init__(name=f"{name}:watchdog", daemon=True)
        self.stopping = stopping
        self.watch(executors, metrics)
        # Executor -> the Busy record reported as hung, until that call returns (or it is no
        # longer watched). Only this thread touches it.
        self._hung: dict[Executor, Busy] = {}

    def watch(self, executors: Sequence[Executor], metrics: Sequence[TaskMetrics]) -> None:
        """Watch ``executors`` and flush the error windows of ``metrics`` from the next look on,
        instead of what it watched: executors come and go while a worker runs. Safe from any
        thread: each list is replaced whole, and a look reads each once."""
        self.executors = list(executors)
        self.metrics = list(metrics)
        thresholds = [e.hang_secs for e in self.executors if e.hang_secs > 0]
        self.interval = max(MIN_INTERVAL, min([MAX_INTERVAL, *(t / 4 for t in thresholds)]))

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.check(time.monotonic())
            except Exception:  # never let the watchdog itself die quietly
                log.exception("watchdog pass failed")

    def check(self, now: float) -> None:
        executors = self.executors
        if self._hung:   # forget hangs of executors no longer watched
            for gone in [e for e in self._hung if e not in executors]:
                del self._hung[gone]
        for executor in executors:
            busy = executor.busy
            reported = self._hung.get(executor)
            if reported is not None and busy is not reported:
                del self._hung[executor]
                self._recovered(reported, now)
            if (busy is not None and executor.hang_secs > 0 and executor not in self._hung
                    and now - busy.since >= executor.hang_secs):
                self._hung[executor] = busy
                self._report(executor, busy, now)
        for metrics in self.metrics:
            metrics.errors.flush(now)

    def _report(self, executor: Executor, busy: Busy, now: float) -> None:
        task = busy.task
        frame = sys._current_frames().get(executor.ident or -1)
        stack = ("".join(traceback.format_stack(frame)).rstrip() if frame is not None
                 else "(no stack: the thread is gone)")
        task.metrics.errors.note(
            f"component {task.component_id} task {task.task_id} has been in {busy.call} for "
            f"{now - busy.since:.0f} s (threshold {executor.hang_secs:g} s); its stack:",
            detail=clip_tail(stack, MAX_DETAIL))

    def _recovered(self, busy: Busy, now: float) -> None:
        task = busy.task
        task.metrics.errors.note(
            f"component {task.component_id} task {task.task_id} returned from {busy.call} after "
            f"about {now - busy.since:.0f} s", level=logging.WARNING, counted=False)
