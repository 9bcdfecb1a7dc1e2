"""Assembles and runs a topology's executors in this process.

Local mode runs every task here; a worker process (on a cluster) runs the tasks assigned to it,
with routes to remote tasks in place of local inboxes. Either way the executors, the acker and the
groupings are the same objects.

Shutdown is Storm's: deactivate the spouts, let in-flight trees finish (or fail them when the
wait runs out), then stop executors in topological order so that everything a component emitted
reaches the next one before that one stops, and clean every component up on its own thread.

``metrics_snapshot()`` is everything measured here, per task and per window, as plain data: a
worker sends it to nimbus, local mode hands it to the UI. Reading it costs a copy of each task's
counters (a few microseconds per task); the executors never wait for it.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import config as cfg
from ..context import TopologyContext
from .layout import TopologyLayout
from ..failed import DeadLetterBox
from ..metrics.process import ProcessStats
from ..metrics.structure import topology_structure
from ..metrics.windows import RollingWindows
from ..protocol import ACKER_COMPONENT, STOP, SYSTEM_TASK, TICK
from ..rotating_map import RotatingMap
from ..state.checkpoint import CHECKPOINT_COMPONENT
from ..topology import ComponentSpec, Topology
from .acker_executor import AckerExecutor
from .bolt_executor import BoltExecutor, BoltTask
from .collector import BoltCollector, SpoutCollector
from .errors import ErrorRecord, TaskErrors
from .executor import Executor, TaskBase
from .runner import Guard, OwnThread, SharedThread
from .inbox import CycleGate, Inbox
from .metrics import TaskMetrics, summarize, window_stats
from .routing import build_routes
from .spout_executor import SpoutExecutor, SpoutTask
from .transfer import Transfer
from .watchdog import Watchdog

log = logging.getLogger(__name__)

# Seconds between samples for the rolling windows, taken whether or not anyone reads them (a
# window keeps one sample per 1/20 of its length: see stormlet.metrics.windows).
SAMPLE_SECS = 5.0
# How long a stop waits for each executor to finish its batch and run close or cleanup. One
# stuck in user code past this is left behind (a daemon thread), so that a stop always ends.
EXECUTOR_STOP_SECS = 30.0


def split_tasks(tasks: list[int], executors: int) -> list[list[int]]:
    """Contiguous, even runs of tasks, one per executor (Storm's executor ranges)."""
    size, extra = divmod(len(tasks), executors)
    runs, start = [], 0
    for i in range(executors):
        end = start + size + (1 if i < extra else 0)
        runs.append(tasks[start:end])
        start = end
    return runs


def acker_count(conf: dict[str, Any]) -> int:
    n = conf.get(cfg.TOPOLOGY_ACKER_EXECUTORS)
    if n is None:
        n = conf.get(cfg.TOPOLOGY_WORKERS) or 1
    return int(n)


def plan_executors(component_tasks: dict[str, list[int]], executor_counts: dict[str, int],
                   order: list[str]) -> list[tuple[str, list[int]]]:
    """Every executor as (component, its tasks): components in ``order``, then the ackers (one
    task each). A component's executor count is capped by its task count, which never changes
    for a running topology; a rebalance changes only the count."""
    plan: list[tuple[str, list[int]]] = []
    for component in order:
        tasks = component_tasks[component]
        count = max(1, min(executor_counts[component], len(tasks)))
        plan += [(component, run) for run in split_tasks(tasks, count)]
    plan += [(ACKER_COMPONENT, [task]) for task in component_tasks.get(ACKER_COMPONENT, [])]
    return plan


def executor_plan(topology: Topology, layout: TopologyLayout) -> list[tuple[str, list[int]]]:
    """The topology's executors as declared, spouts first (what local mode runs)."""
    counts = {cid: spec.executors for cid, spec in topology.components.items()}
    return plan_executors(layout.component_tasks, counts, list(topology.components))



@dataclass(slots=True)
class _Tick:
    """A task's tick tuples: the next one is due at ``due`` (monotonic), then every ``every``."""
    due: float
    every: float
    task: int
    inbox: Inbox

class TopologyRuntime:
    """Runs ``plan`` (default: every executor) here; tasks not in the plan are reached through
    ``remote_routes`` (task -> Route), which a worker can replace while running. With
    ``executor_cpu``, every executor thread runs on that CPU alone (see cpu_affinity.py)."""

    def __init__(self, name: str, topology: Topology, conf: dict[str, Any],
                 plan: list[tuple[str, list[int]]] | None = None,
                 remote_routes: dict[int, Any] | None = None, executor_cpu: int | None = None):
        self.name = name
        self.executor_cpu = executor_cpu   # the one CPU every executor runs on (None: any)
        self.topology = topology
        self.conf = cfg.merged(conf)
        if not self.conf[cfg.STORMLET_TOPOLOGY_ID]:
            # Local mode: each submission is a new topology instance, as on a cluster.
            self.conf[cfg.STORMLET_TOPOLOGY_ID] = f"{name}-{uuid.uuid4().hex[:12]}"
        self.stopping = threading.Event()
        n_ackers = acker_count(self.conf)
        self.layout = TopologyLayout(name, topology, n_ackers)
        self.timeout_secs = float(self.conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        self.metrics: list[TaskMetrics] = []
        self.structure = topology_structure(topology)
        self.process_stats = ProcessStats()
        self._windows: dict[int, RollingWindows] = {}
        self._windows_lock = threading.Lock()
        self._sample_errors: set[str] = set()   # kinds of sampling error already logged
        # task -> (kind, its executor's inbox, its executor's first and last task)
        self._placement: dict[int, tuple[str, Inbox, list[int]]] = {}
        self.executors: dict[str, list[Executor]] = {}
        self.started_at: float | None = None
        self._ticker: threading.Thread | None = None
        self._guard: Guard | None = None
        self._watchdog: Watchdog | None = None
        self._build(plan if plan is not None else executor_plan(topology, self.layout),
                    remote_routes or {})
        self._start_windows()

    # ----- assembly

    def _build(self, plan: list[tuple[str, list[int]]], remote_routes: dict[int, Any]) -> None:
        capacity = int(self.conf[cfg.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE])
        self.routes: list[Any] = [None] * (self.layout.max_task + 1)
        for task, route in remote_routes.items():
            self.routes[task] = route
        local = [(component, tasks, Inbox(capacity)) for component, tasks in plan]
        for _component, tasks, inbox in local:
            for task in tasks:
                self.routes[task] = inbox
        self.local_tasks = {task for _c, tasks, _i in local for task in tasks}
        # Each cycle of bolts with executors here: its gate (see CycleGate), by component.
        self._cycle_gates: dict[str, CycleGate] = {}
        gates: dict[frozenset[str], CycleGate] = {}
        for component_id, _tasks, inbox in local:
            cycle = (frozenset() if component_id == ACKER_COMPONENT
                     else self.topology.cycle_of(component_id))
            if cycle:
                gate = self._cycle_gates[component_id] = gates.setdefault(cycle, CycleGate())
                gate.inboxes.append(inbox)
        for component_id, tasks, inbox in local:
            executor = self._executor(component_id, tasks, inbox, self.local_tasks)
            self.executors.setdefault(component_id, []).append(executor)
            kind = ("acker" if component_id == ACKER_COMPONENT else
                    "spout" if self.topology.components[component_id].is_spout else "bolt")
            for task in tasks:
                self._placement[task] = (kind, inbox, [tasks[0], tasks[-1]])

    def _component_conf(self, spec: ComponentSpec) -> dict[str, Any]:
        return spec.component_conf(self.conf)

    def _executor(self, component_id: str, tasks: list[int], inbox: Inbox,
                  local_tasks: set[int]) -> Executor:
        name = f"{self.name}:{component_id}:{tasks[0]}-{tasks[-1]}"
        if component_id == ACKER_COMPONENT:
            task_component = [0] * (self.layout.max_task + 1)
            for task, component in self.layout.task_component.items():
                task_component[task] = self.layout.component_number[component]
            acker_tasks = [self._acker_task(tasks[0])]
            acker = AckerExecutor(name, inbox, acker_tasks, self.stopping,
                                  timeout_secs=self.timeout_secs, task_component=task_component,
                                  routes=self.routes)
            acker.shared = bool(self.conf[cfg.STORMLET_EXECUTOR_SHARED_THREAD])
            return acker
        spec = self.topology.components[component_id]
        conf = self._component_conf(spec)
        built = [self._task(spec, task, conf, local_tasks) for task in tasks]
        executor: Executor
        if spec.is_spout:
            executor = SpoutExecutor(name, inbox, built, self.stopping,
                                     timeout_secs=self.timeout_secs,
                                     wait_secs=float(conf[cfg.TOPOLOGY_SPOUT_WAIT_MS]) / 1000,
                                     yields=len(local_tasks) < len(self.layout.task_component))
        else:
            executor = BoltExecutor(name, inbox, built, self.stopping)
        executor.hang_secs = float(conf.get(cfg.TOPOLOGY_HANG_WARNING_SECS) or 0)
        executor.shared = bool(conf[cfg.STORMLET_EXECUTOR_SHARED_THREAD])
        return executor

    def _start_windows(self) -> None:
        """Start every task's metrics windows at one instant, once every task is built: a
        window begun at its own task's construction would also cover the building of the tasks
        after it, so a short run's rates would disagree between tasks."""
        now = time.monotonic()
        for metrics in self.metrics:
            self._windows[metrics.task] = RollingWindows(now, metrics.sample())

    def _task_metrics(self, component_id: str, task: int, conf: dict[str, Any],
                      streams: list[str]) -> TaskMetrics:
        errors = TaskErrors(component_id, task,
                            window_secs=float(conf[cfg.TOPOLOGY_ERROR_THROTTLE_INTERVAL_SECS]),
                            per_window=int(conf[cfg.TOPOLOGY_MAX_ERROR_REPORT_PER_INTERVAL]))
        metrics = TaskMetrics(component_id, task, errors, streams)
        self.metrics.append(metrics)
        return metrics

    def _acker_task(self, task: int) -> TaskBase:
        metrics = self._task_metrics(ACKER_COMPONENT, task, self.conf, [])
        transfer = Transfer(task, self.routes, [], [], self.stopping, metrics)
        return TaskBase(task, ACKER_COMPONENT, None, self.conf, None, transfer, metrics)

    def _task(self, spec: ComponentSpec, task: int, conf: dict[str, Any],
              local_tasks: set[int]) -> TaskBase:
        layout = self.layout
        metrics = self._task_metrics(spec.id, task, conf, list(spec.streams))
        context = TopologyContext(layout, task, conf, metrics.user)
        rng = random.Random(os.urandom(16))
        routes, targets = build_routes(layout, spec.id, task, local_tasks, context, rng)
        feedback = [t for cid in self.topology.feeding_back(spec.id)
                    for t in layout.component_tasks[cid]]
        cycle = self.topology.cycle_of(spec.id)
        entry_gates = {t: self._cycle_gates[layout.task_component[t]] for t in targets
                       if t in local_tasks and layout.task_component[t] in self._cycle_gates
                       and layout.task_component[t] not in cycle}
        transfer = Transfer(task, self.routes, targets, layout.acker_tasks, self.stopping,
                            metrics, batch_size=cfg.transfer_batch_size(conf), feedback=feedback,
                            entry_gates=entry_gates)
        tracking = bool(layout.acker_tasks)
        debug = bool(conf.get(cfg.TOPOLOGY_DEBUG))
        obj = spec.new_instance()
        common = (task, spec.id, obj, conf, context, transfer, metrics)
        if spec.is_spout:
            pending: RotatingMap = RotatingMap(2)
            dead_letters = DeadLetterBox(conf.get(cfg.STORMLET_FAILED_DIR), self.name, spec.id,
                                         task, conf.get(cfg.TOPOLOGY_SPOUT_DEAD_LETTER_ATTEMPTS))
            local_ackers = [i for i, acker in enumerate(layout.acker_tasks)
                            if acker in local_tasks]
            collector = SpoutCollector(spec.id, task, routes, transfer, tracking, metrics, debug,
                                       pending=pending, dead_letters=dead_letters,
                                       local_ackers=local_ackers)
            return SpoutTask(*common, collector=collector, pending=pending,
                             max_pending=conf.get(cfg.TOPOLOGY_MAX_SPOUT_PENDING), layout=layout,
                             dead_letters=dead_letters)
        collector = BoltCollector(spec.id, task, routes, transfer, tracking, metrics, debug,
                                  timeout_secs=self.timeout_secs)
        tick = conf.get(cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS)
        return BoltTask(*common, collector=collector, tick_secs=tick)

    # ----- running

    def all_executors(self) -> list[Executor]:
        return [e for group in self.executors.values() for e in group]

    def spout_executors(self) -> list[SpoutExecutor]:
        return [e for e in self.all_executors() if isinstance(e, SpoutExecutor)]

    def start(self, active: bool = True) -> None:
        # Watching before open/prepare: one that never returns is reported, not just waited on.
        self._watchdog = Watchdog(self.name, self.all_executors(), self.metrics, self.stopping)
        self._watchdog.start()
        runners = self._runners()
        for runner in runners:
            runner.start()
        shared = [runner for runner in runners if isinstance(runner, SharedThread)]
        if shared:
            self._guard = Guard(self.name, shared)
            self._guard.start()
        for executor in self.all_executors():
            executor.ready.wait()
        self.started_at = time.time()
        self._ticker = threading.Thread(target=self._tick_loop, name=f"{self.name}:ticks",
                                        daemon=True)
        self._ticker.start()
        if active:
            self.activate()

    def _runners(self) -> list[OwnThread | SharedThread]:
        """The threads that will run the executors: one shared by those that share (in the order
        they stop, spouts first, so that a round carries a batch downstream), one for each other."""
        ordered = [e for component in self._stop_order() for e in self.executors.get(component, [])]
        shared = [e for e in ordered if e.shared]
        runners: list[OwnThread | SharedThread] = [
            OwnThread(e, self.executor_cpu) for e in ordered if not e.shared]
        if shared:
            runners.append(SharedThread(f"{self.name}:executors", shared, self.executor_cpu))
        return runners

    def data_spout_executors(self) -> list[SpoutExecutor]:
        """The spout executors but the checkpoint spout's: it goes on while the topology is
        deactivated, so that the acks stateful bolts hold are released by a commit and a
        deactivated topology drains."""
        return [e for e in self.spout_executors()
                if e.tasks[0].component_id != CHECKPOINT_COMPONENT]

    def activate(self) -> None:
        for executor in self.spout_executors():
            executor.ask_active(True)

    def deactivate(self) -> None:
        for executor in self.data_spout_executors():
            executor.ask_active(False)

    def is_active(self) -> bool:
        """Whether the spouts are asked to emit (activated, not deactivated)."""
        return any(e.want_active for e in self.data_spout_executors())

    def activation_settled(self) -> bool:
        """Whether every spout executor has acted on the last activate or deactivate (each
        does so on its own thread, soon after being asked)."""
        return all(e.active == e.want_active for e in self.spout_executors())

    def in_flight(self) -> int:
        """Tracked data tuples in flight (checkpoints are not data)."""
        return sum(e.in_flight() for e in self.data_spout_executors())

    def _tick_loop(self) -> None:
        """Send tick tuples when due, and sample the metrics windows every SAMPLE_SECS."""
        schedule: list[_Tick] = []
        for executor in self.all_executors():
            for task in executor.tasks:
                secs = getattr(task, "tick_secs", None)
                if secs:
                    schedule.append(_Tick(time.monotonic() + float(secs), float(secs),
                                          task.task_id, executor.inbox))
        next_sample = time.monotonic() + SAMPLE_SECS
        while not self.stopping.is_set():
            now = time.monotonic()
            for tick in schedule:
                if now >= tick.due:
                    tick.due += tick.every
                    tick.inbox.put((TICK, tick.task, SYSTEM_TASK, None))
            if now >= next_sample:
                next_sample = now + SAMPLE_SECS
                self._sample_safely(now)
            wake = min([next_sample] + [tick.due for tick in schedule])
            self.stopping.wait(max(0.0, wake - time.monotonic()))

    def stop(self, wait_secs: float | None = None) -> None:
        """Deactivate, wait up to ``wait_secs`` (default: the message timeout) for in-flight
        trees, then stop every executor and run close/cleanup."""
        if wait_secs is None:
            wait_secs = self.timeout_secs
        self.deactivate()
        deadline = time.monotonic() + wait_secs
        while self.in_flight() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.in_flight():
            log.warning("topology %s: %d tuple trees still in flight after %.1fs; failing them",
                        self.name, self.in_flight(), wait_secs)
        self.stopping.set()
        for component_id in self._stop_order():
            executors = self.executors.get(component_id, [])
            for executor in executors:
                executor.inbox.put((STOP, SYSTEM_TASK, SYSTEM_TASK, None))
            # A component's executors stop side by side, so they share one bound: a component
            # whose every executor is stuck holds the stop up once, not once per executor.
            deadline = time.monotonic() + EXECUTOR_STOP_SECS
            for executor in executors:
                if not executor.finished.wait(max(0.0, deadline - time.monotonic())):
                    self._left_behind(executor)
        if self._ticker:
            self._ticker.join()
        if self._guard:
            self._guard.done.set()
            self._guard.join()
        if self._watchdog:
            self._watchdog.join()
            for metrics in self.metrics:   # the last summaries, while they are still news
                metrics.errors.flush(everything=True)

    @staticmethod
    def _left_behind(executor: Executor) -> None:
        busy = executor.busy
        where = (f"in {busy[2]} of task {busy[1].task_id} for {time.monotonic() - busy[0]:.0f} s"
                 if busy is not None else "not in user code")
        log.error("executor %s did not stop within %g s (%s); the stop goes on without it",
                  executor.name, EXECUTOR_STOP_SECS, where)

    def _stop_order(self) -> list[str]:
        """Spouts, then bolts so that each stops after every component feeding it (cycles broken
        arbitrarily), then the ackers, which spouts wait on until the very end."""
        order: list[str] = []
        remaining = {cid: {sub.source for sub in spec.inputs}
                     for cid, spec in self.topology.components.items()}
        while remaining:
            ready = sorted(cid for cid, sources in remaining.items() if not sources - set(order))
            if not ready:
                ready = [sorted(remaining)[0]]
            for cid in ready:
                order.append(cid)
                del remaining[cid]
        if ACKER_COMPONENT in self.executors:
            order.append(ACKER_COMPONENT)
        return order

    # ----- observing

    def summary(self) -> dict[str, dict]:
        return summarize(self.metrics)

    def sample_windows(self, now: float) -> None:
        """Give every task's rolling windows a sample, where one is due (``now``: monotonic)."""
        with self._windows_lock:
            for metrics in self.metrics:
                self._windows[metrics.task].add(now, metrics.sample())

    def _sample_safely(self, now: float) -> None:
        """sample_windows on the tick thread: an error there must not end the thread, which
        would stop every bolt's tick tuples without a word. Logged once per kind of error."""
        try:
            self.sample_windows(now)
        except Exception as exc:
            kind = type(exc).__name__
            if kind not in self._sample_errors:
                self._sample_errors.add(kind)
                log.exception("topology %s: sampling the metrics windows failed (%s is logged "
                              "once; ticks go on)", self.name, kind)

    def metrics_snapshot(self, host: str | None = None, port: int | None = None) -> dict:
        """Everything measured here, JSON- and msgpack-able: the worker (``host`` and ``port``
        as given, the process's pid, CPU and memory) and, per task, its counters and latencies
        over each window (see stormlet.metrics.windows), queue depth and user metrics."""
        now = time.monotonic()
        windows_of = {}
        # Only the windows need the lock. User gauges (user code, maybe slow) and queue depths
        # are read after it is released, so a slow gauge cannot hold up sampling and ticks.
        with self._windows_lock:
            for metrics in self.metrics:
                current = metrics.sample()
                windows = self._windows[metrics.task]
                windows.add(now, current)
                windows_of[metrics.task] = {
                    key: window_stats(seconds, delta)
                    for key, (seconds, delta) in windows.deltas(now, current).items()}
        rows = [self._task_row(metrics, windows_of[metrics.task]) for metrics in self.metrics]
        return {"topology_id": self.conf[cfg.STORMLET_TOPOLOGY_ID], "name": self.name,
                "time": time.time(),
                "worker": {"host": host, "port": port, **self.process_stats.read()},
                "tasks": rows}

    def _task_row(self, metrics: TaskMetrics, windows: dict[str, dict]) -> dict:
        kind, inbox, executor = self._placement[metrics.task]
        row = {"component": metrics.component, "task": metrics.task, "kind": kind,
               "executor": executor, "queue_depth": inbox.qsize(),
               "queue_capacity": inbox.capacity, "windows": windows,
               "user": metrics.user.read()}
        if metrics.partitions is not None:
            row["partitions"] = metrics.partitions
        return row

    def errors(self) -> list[ErrorRecord]:
        """The recent errors of every task here (at most errors.RECENT per task), oldest first."""
        found = [e for m in self.metrics for e in m.errors.recent_records()]
        return sorted(found, key=lambda e: e.time)

    def instances(self, component_id: str) -> list[Any]:
        """The live component objects of each task (for tests and debugging)."""
        return [task.obj for e in self.executors.get(component_id, []) for task in e.tasks]

    def wait(self, predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)
        return True
