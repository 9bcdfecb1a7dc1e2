"""Runs bolt tasks: executes each tuple of each batch, then flushes what the bolts emitted.

Each batch is timed once: its time counts as the task's busy time (capacity), and its time per
tuple as the execute latency of each of its tuples. Its first tuple is timed to its ack (process
latency, see task_collectors.py).

An exception from ``execute`` is counted, logged and recorded with the component and task (the
first of a kind in full, then a summary per interval: see errors.py), and the input is failed with
reason ``error`` carrying the error text, so the spout hears why at once instead of waiting for a
timeout. The executor keeps running: one bad tuple does not take the worker down.
"""

from __future__ import annotations

from collections.abc import Generator
from time import monotonic
from typing import Any

import cython

from ..collectors import BasicOutputCollector
from ..components import BasicBolt
from ..tuples import StreamInfo, Tuple
from . import task_hooks
from .executor import FLUSH_EVERY, FOREVER, Busy, Executor, TaskBase
from .inbox import ROOM_RECHECK_SECS as HELD_RECHECK_SECS
from .protocol import DATA, STOP, SYSTEM_COMPONENT, SYSTEM_TASK, TICK, TICK_STREAM
from .task_collectors import BasicCollector, BoltCollector

TICK_INFO = StreamInfo(SYSTEM_COMPONENT, TICK_STREAM, ["rate_secs"])


class BoltTask(TaskBase):
    def __init__(self, *args: Any, collector: BoltCollector, tick_secs: float | None = None,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.collector = collector
        self.tick_secs = tick_secs
        self.broken: BaseException | None = None
        if isinstance(self.obj, BasicBolt):
            self.execute = self._basic_execute
            self._choose_basic()
            self._basic_user_execute = self.obj.execute   # looked up once, as for any bolt
        else:
            self.execute = self.obj.execute

    def _choose_basic(self) -> None:
        """The collector a basic bolt's emits go through: with ``topology.debug`` or task
        hooks the plain one, over the collector's emit as it is now (logged or hooked); else a
        C call into the collector's emit (sampled or not: the emit samples itself)."""
        collector = self.collector
        if collector.logs_emits or collector.hooks:   # through the collector's wrapped emit
            self._basic = BasicOutputCollector(collector)
        else:
            self._basic = BasicCollector(collector)

    def hooks_on(self) -> None:
        task_hooks.hook_bolt(self)

    def prepare(self) -> None:
        try:
            self.add_auto_hooks()
            if isinstance(self.obj, BasicBolt):
                self.obj.prepare(self.conf, self.context)
            else:
                self.obj.prepare(self.conf, self.context, self.collector)
        except Exception as exc:
            # A bolt that cannot prepare fails everything sent to it, with the reason, rather than
            # letting its input time out in silence.
            self.broken = exc
            self.report("prepare failed", exc)

    @cython.locals(basic=BasicOutputCollector, collector=BoltCollector)
    def _basic_execute(self, tup: Tuple) -> None:
        basic = self._basic
        basic.input = tup
        self._basic_user_execute(tup, basic)
        # Typed, so the ack is a C call: looked up by name on every tuple, it made a basic bolt
        # slower than the same bolt acking by hand (whose attribute lookups the interpreter
        # caches).
        collector = self.collector
        collector.ack(tup)

    def run_batch(self, batch: Any, started: float) -> None:
        """Execute ``batch``, which the executor started on at ``started`` (monotonic): a list
        of tuples, or a batch from another worker still packed (its ``tuples()`` unpacks it, see
        stormlet/cluster/wire.py)."""
        if type(batch) is not list:
            try:
                batch = batch.tuples()
            except Exception as exc:   # a malformed payload: its tracked tuples time out
                self.report("dropped a malformed batch from another worker", exc)
                return
        if self.broken is not None:
            for tup in batch:
                self.collector.fail_with_error(tup, self.broken)
            return
        if batch:
            self.collector.sample_process(batch[0], started)
            self._execute(batch, started)

    def run_tick(self, started: float) -> None:
        self._execute([Tuple([self.tick_secs], TICK_INFO, SYSTEM_TASK, None)], started)

    @cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t)
    def _execute(self, batch: list[Tuple], started: float) -> None:
        execute = self.execute
        n = len(batch)
        i = 0
        while i < n:
            # One try a run of tuples, not one a tuple: entering a try saves the thread's
            # exception state, a cost per tuple that only an error needs.
            try:
                while i < n:
                    execute(batch[i])
                    i += 1
            except Exception as exc:
                self.on_error(batch[i], exc)
                i += 1
        elapsed = monotonic() - started
        metrics = self.metrics
        metrics.executed += n
        metrics.busy_secs += elapsed
        metrics.execute_latency.record_many(elapsed / n, n)

    def on_error(self, tup: Tuple, exc: Exception) -> None:
        self.report("execute raised", exc, on=tup)
        self.collector.fail_with_error(tup, exc)

    def cleanup(self) -> None:
        try:
            self.obj.cleanup()
        except Exception as exc:
            self.report("cleanup failed", exc)
        self.cleanup_hooks()


class BoltExecutor(Executor):
    def steps(self) -> Generator[float, tuple | None, None]:
        for task in self.tasks:
            self.busy = Busy(monotonic(), task, "prepare")
            task.prepare()
        self.busy = None
        self.ready.set()
        inbox = self.inbox
        tasks = self.tasks_by_id
        since_flush = 0
        while True:
            full = False
            # Waiting FOREVER, the runner sends a message, never None.
            kind, dest, _src, payload = yield FOREVER  # type: ignore[misc]
            if kind == DATA or kind == TICK:
                if kind == DATA:
                    inbox.took_data()   # wakes a sender waiting for room
                task = tasks[dest]
                started = monotonic()
                self.busy = Busy(started, task, "execute")
                if kind == DATA:
                    task.run_batch(payload, started)
                else:
                    task.run_tick(started)
                self.busy = None
                full = task.transfer.has_full_batch()
            elif kind == STOP:
                break
            # Let go of the batch now, not when the next message replaces it: its tuples are
            # freed while their memory is still in the core's cache, and the next batch reuses
            # it (held, every bolt kept two batches alive, which a word count's split and count
            # take half the core's cache for).
            payload = None
            since_flush += 1
            if full or since_flush >= FLUSH_EVERY or inbox.empty():
                if self.shared:
                    yield from self._flush_or_hold()
                else:
                    self.flush()
                since_flush = 0
        self.flush()
        for task in self.tasks:
            task.cleanup()

    def _flush_or_hold(self) -> Generator[float, tuple | None, None]:
        """Flush without waiting for room (the executors whose inbox is full may share this
        thread, and run only when this one yields): data for a full inbox stays held, and this
        executor takes no input until it went in. The time held counts as throttled."""
        started = 0.0
        holding: list[BoltTask] = []
        while True:
            if self.stopping.is_set():
                # Stopping, a flush waits for nobody; its STOP is in the inbox this held back.
                self.flush()
                break
            held = [task for task in self.tasks
                    if task.transfer.flush(hold_back=True, wake=self.wake)]
            if not held:
                break
            if not started:
                started = monotonic()
            holding.extend(task for task in held if task not in holding)
            self.wants_input = False
            # Woken once a full inbox took a batch; the deadline, for a route that cannot tell.
            yield monotonic() + HELD_RECHECK_SECS
        self.wants_input = True
        if started:
            waited = monotonic() - started
            for task in holding:
                task.metrics.throttled_secs += waited
