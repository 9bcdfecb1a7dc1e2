"""Assembles and runs a topology's executors in this process.

Local mode runs every task here; a worker process (on a cluster) runs the tasks assigned to it,
with routes to remote tasks in place of local inboxes. Either way the executors, the acker and the
groupings are the same objects.

Shutdown is Storm's: deactivate the spouts, let in-flight trees finish (or fail them when the
wait runs out), then stop executors in topological order so that everything a component emitted
reaches the next one before that one stops, and clean every component up on its own thread.

While it runs, executors can be added here (``add_executors``) and removed (``remove_executors``),
as a worker's assignment changes: the others go on undisturbed, with their tuple trees. What a
removed executor had in flight fails or times out at its spout and is replayed, as in a stop.

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
from ..metrics.process import ProcessStats
from ..metrics.structure import topology_structure
from ..metrics.windows import RollingWindows
from ..serializers import registry_for
from ..state.checkpoint import action_timeout_secs
from ..streams import CHECKPOINT_COMPONENT
from ..topology import ComponentSpec, Topology
from . import extensions
from .acker_executor import AckerExecutor
from .bolt_executor import BoltExecutor, BoltTask
from .choosers import LoadAwareChooser
from .executor import Executor, TaskBase
from .inbox import CycleGate, Inbox
from .load_aware import LoadAwareness
from .metrics import TaskMetrics, summarize, window_stats
from .numbering import TopologyLayout
from .protocol import ACKER_COMPONENT, STOP, SYSTEM_TASK, TICK, Message
from .rotating_map import RotatingMap
from .routing import build_routes
from .spout_executor import SpoutExecutor, SpoutTask
from .task_collectors import BoltCollector, SpoutCollector
from .task_errors import ErrorRecord, TaskErrors
from .threads import Guard, OwnThread, RoundListener, SharedThread
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
    ``executor_cpu``, every executor thread runs on that CPU alone (see cpu_affinity.py).
    ``host``: where this runs, as routes to other workers name their hosts (load-aware
    shuffle prefers tasks on the same host: load_aware.py). ``rounds`` is told of the shared
    threads' rounds (a worker's transport)."""

    def __init__(self, name: str, topology: Topology, conf: dict[str, Any],
                 plan: list[tuple[str, list[int]]] | None = None,
                 remote_routes: dict[int, Any] | None = None, executor_cpu: int | None = None,
                 host: str | None = None, rounds: RoundListener | None = None):
        self.name = name
        self.rounds = rounds   # told of the shared threads' rounds (threads.RoundListener)
        self.executor_cpu = executor_cpu   # the one CPU every executor runs on (None: any)
        self.topology = topology
        self.conf = cfg.merged(conf)
        if not self.conf[cfg.STORMLET_TOPOLOGY_ID]:
            # Local mode: each submission is a new topology instance, as on a cluster.
            self.conf[cfg.STORMLET_TOPOLOGY_ID] = f"{name}-{uuid.uuid4().hex[:12]}"
        # The types its tuples may hold (serializers.py): for the check at emit, the wire, the
        # fields grouping's hash and the failed-message log.
        self.registry = registry_for(self.conf)
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
        # Each cycle of bolts with executors here: its gate (see CycleGate), by cycle and by
        # component. A gate stays once made: senders' transfers hold it.
        self._gates: dict[frozenset[str], CycleGate] = {}
        self._cycle_gates: dict[str, CycleGate] = {}
        self.started_at: float | None = None
        # start, stop, add_executors and remove_executors, one at a time (see "Thread safety").
        self._lock = threading.RLock()
        # What was last asked of the data spouts (activate, deactivate), and whether the
        # checkpoint spout was activated (deactivate leaves it on): what added spouts are asked.
        self._activated = False
        self._checkpoints_activated = False
        self._ticks: list[_Tick] = []
        # The load-aware shuffles' balancers, refreshed on the tick thread (load_aware.py).
        self.load_awareness = LoadAwareness(
            float(self.conf[cfg.TOPOLOGY_LOCALITYAWARE_HIGHER_BOUND]),
            float(self.conf[cfg.TOPOLOGY_LOCALITYAWARE_LOWER_BOUND]), host)
        self._ticks_changed = threading.Event()   # wakes the tick thread: new ticks, or a stop
        self._runner_count = 0   # shared threads started by add_executors, for their names
        self._ticker: threading.Thread | None = None
        self._guard: Guard | None = None
        self._watchdog: Watchdog | None = None
        self._build(plan if plan is not None else executor_plan(topology, self.layout),
                    remote_routes or {})
        self._start_windows()

    # ----- assembly

    def _build(self, plan: list[tuple[str, list[int]]], remote_routes: dict[int, Any]) -> None:
        self.routes: list[Any] = [None] * (self.layout.max_task + 1)
        for task, route in remote_routes.items():
            self.routes[task] = route
        self.local_tasks = {task for _c, tasks in plan for task in tasks}
        built = self._assemble(plan, self.local_tasks)
        for _component, executor in built:
            for task in executor.tasks:
                self.routes[task.task_id] = executor.inbox
        self.executors = self._grouped(built)
        self.metrics = [task.metrics for _c, executor in built for task in executor.tasks]
        self._placement = self._placement_of(built)

    def _assemble(self, plan: list[tuple[str, list[int]]], local_tasks: set[int],
                  conf: dict[str, Any] | None = None) -> list[tuple[str, Executor]]:
        """An executor, with a new inbox, for each (component, tasks) of ``plan``, built as if
        ``local_tasks`` ran here, its components' config with ``conf`` over it; their inboxes
        join their cycles' gates."""
        capacity = int(self.conf[cfg.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE])
        local = [(component, tasks, Inbox(capacity)) for component, tasks in plan]
        for component_id, _tasks, inbox in local:   # before any is built: transfers read them
            cycle = (frozenset() if component_id == ACKER_COMPONENT
                     else self.topology.cycle_of(component_id))
            if cycle:
                gate = self._cycle_gates[component_id] = self._gates.setdefault(cycle,
                                                                                CycleGate())
                # Replaced whole: senders elsewhere may be reading it (CycleGate.closed).
                gate.inboxes = [*gate.inboxes, inbox]
        return [(component_id, self._executor(component_id, tasks, inbox, local_tasks, conf))
                for component_id, tasks, inbox in local]

    def _kind(self, component_id: str) -> str:
        return ("acker" if component_id == ACKER_COMPONENT else
                self.topology.components[component_id].kind)

    def _placement_of(self, built: list[tuple[str, Executor]]
                      ) -> dict[int, tuple[str, Inbox, list[int]]]:
        return {task.task_id: (self._kind(component_id), executor.inbox,
                               [executor.tasks[0].task_id, executor.tasks[-1].task_id])
                for component_id, executor in built for task in executor.tasks}

    @staticmethod
    def _grouped(built: list[tuple[str, Executor]],
                 into: dict[str, list[Executor]] | None = None) -> dict[str, list[Executor]]:
        """``into`` (copied) with the executors of ``built`` added, by component."""
        grouped = {component: list(group) for component, group in (into or {}).items()}
        for component_id, executor in built:
            grouped.setdefault(component_id, []).append(executor)
        return grouped

    def _component_conf(self, spec: ComponentSpec,
                        over: dict[str, Any] | None = None) -> dict[str, Any]:
        return spec.component_conf({**self.conf, **over} if over else self.conf)

    def _executor(self, component_id: str, tasks: list[int], inbox: Inbox,
                  local_tasks: set[int], over: dict[str, Any] | None = None) -> Executor:
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
        conf = self._component_conf(spec, over)
        built = [self._task(spec, task, conf, local_tasks) for task in tasks]
        executor: Executor
        if spec.is_spout:
            # The checkpoint spout's actions time out sooner when the topology says so: one
            # lost with a worker is sent again without waiting out the message timeout.
            timeout = (action_timeout_secs(conf) if component_id == CHECKPOINT_COMPONENT
                       else self.timeout_secs)
            executor = SpoutExecutor(name, inbox, built, self.stopping, timeout_secs=timeout,
                                     wait_secs=float(conf[cfg.TOPOLOGY_SPOUT_WAIT_MS]) / 1000,
                                     yields=self._spans_workers(local_tasks))
        else:
            executor = BoltExecutor(name, inbox, built, self.stopping)
        executor.hang_secs = float(conf.get(cfg.TOPOLOGY_HANG_WARNING_SECS) or 0)
        executor.shared = bool(conf[cfg.STORMLET_EXECUTOR_SHARED_THREAD])
        return executor

    def _spans_workers(self, local_tasks: set[int]) -> bool:
        """Whether some tasks run elsewhere (a spout's ``yields``)."""
        return len(local_tasks) < len(self.layout.task_component)

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
        return TaskMetrics(component_id, task, errors, streams)

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
        routes, targets = build_routes(
            layout, spec.id, task, local_tasks, context, rng, self.registry,
            load_aware=not conf[cfg.TOPOLOGY_DISABLE_LOADAWARE_MESSAGING])
        self.load_awareness.add(task, [chooser for route in routes.values()
                                       for chooser in route.choosers
                                       if isinstance(chooser, LoadAwareChooser)])
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
            dead_letters = extensions.dead_letter_box(
                conf.get(cfg.STORMLET_FAILED_DIR), self.name, spec.id, task,
                conf.get(cfg.TOPOLOGY_SPOUT_DEAD_LETTER_ATTEMPTS), registry=self.registry)
            local_ackers = [i for i, acker in enumerate(layout.acker_tasks)
                            if acker in local_tasks]
            collector = SpoutCollector(spec.id, task, routes, transfer, tracking, metrics, debug,
                                       pending=pending, dead_letters=dead_letters,
                                       local_ackers=local_ackers)
            return SpoutTask(*common, collector=collector, pending=pending,
                             max_pending=conf.get(cfg.TOPOLOGY_MAX_SPOUT_PENDING), layout=layout,
                             dead_letters=dead_letters)
        bolt_collector = BoltCollector(spec.id, task, routes, transfer, tracking, metrics, debug,
                                       timeout_secs=self.timeout_secs)
        tick = conf.get(cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS)
        return BoltTask(*common, collector=bolt_collector, tick_secs=tick)

    # ----- running

    def all_executors(self) -> list[Executor]:
        return [e for group in self.executors.values() for e in group]

    def spout_executors(self) -> list[SpoutExecutor]:
        return [e for e in self.all_executors() if isinstance(e, SpoutExecutor)]

    def start(self, active: bool = True) -> None:
        with self._lock:
            # Watching before open/prepare: one that never returns is reported, not just waited
            # on.
            self._watchdog = Watchdog(self.name, self.all_executors(), self.metrics,
                                      self.stopping)
            self._watchdog.start()
            self._run(self.executors, f"{self.name}:executors")
            for executor in self.all_executors():
                executor.ready.wait()
            self.started_at = time.time()
            self._ticks = self._ticks_of(self.all_executors())
            self._ticker = threading.Thread(target=self._tick_loop, name=f"{self.name}:ticks",
                                            daemon=True)
            self._ticker.start()
            if active:
                self.activate()

    def _run(self, executors: dict[str, list[Executor]], shared_name: str) -> None:
        """Start the threads that run ``executors``: one shared by those that share (in the
        order they stop, spouts first, so that a round carries a batch downstream), one for
        each other; the guard watches the shared one."""
        ordered = [e for component in self._stop_order() for e in executors.get(component, [])]
        shared = [e for e in ordered if e.shared]
        runners: list[OwnThread | SharedThread] = [
            OwnThread(e, self.executor_cpu) for e in ordered if not e.shared]
        if shared:
            runners.append(SharedThread(shared_name, shared, self.executor_cpu,
                                        rounds=self.rounds))
        for runner in runners:
            runner.start()
        for runner in runners:
            if isinstance(runner, SharedThread):
                if self._guard is None:
                    self._guard = Guard(self.name, [runner])
                    self._guard.start()
                else:
                    self._guard.shared.append(runner)   # the guard copies it for each look

    def data_spout_executors(self) -> list[SpoutExecutor]:
        """The spout executors but the checkpoint spout's: it goes on while the topology is
        deactivated, so that the acks stateful bolts hold are released by a commit and a
        deactivated topology drains."""
        return [e for e in self.spout_executors() if not self._is_checkpoint(e)]

    def links_back(self) -> None:
        """A link from this worker to another is back after being down (any thread): the
        checkpoint spout, if it runs here, sends its action in flight again, which may have
        been dropped with the link (it looks within its idle wait, 20 ms)."""
        for executor in self.spout_executors():
            if self._is_checkpoint(executor):
                for task in executor.tasks:
                    task.obj.links_back()

    @staticmethod
    def _is_checkpoint(executor: SpoutExecutor) -> bool:
        return executor.tasks[0].component_id == CHECKPOINT_COMPONENT

    def activate(self) -> None:
        # The flag first, then the executors: an add_executors publishing its executors
        # meanwhile either is seen here or sees the flag (it reads it after publishing).
        self._activated = self._checkpoints_activated = True
        for executor in self.spout_executors():
            executor.ask_active(True)

    def deactivate(self) -> None:
        self._activated = False
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

    @staticmethod
    def _ticks_of(executors: list[Executor]) -> list[_Tick]:
        """The tick tuples of the tasks of ``executors`` that want them, the first due a
        period from now."""
        now = time.monotonic()
        return [_Tick(now + float(task.tick_secs), float(task.tick_secs), task.task_id,
                      executor.inbox)
                for executor in executors for task in executor.tasks
                if getattr(task, "tick_secs", None)]

    def _tick_loop(self) -> None:
        """Send tick tuples when due, and sample the metrics windows every SAMPLE_SECS."""
        next_sample = time.monotonic() + SAMPLE_SECS
        while True:
            # Cleared before stopping and the schedule are read: a stop or a change after this
            # ends the wait below at once.
            self._ticks_changed.clear()
            if self.stopping.is_set():
                return
            schedule = self._ticks   # replaced whole when executors come or go
            now = time.monotonic()
            for tick in schedule:
                if now >= tick.due:
                    tick.due += tick.every
                    tick.inbox.put(Message(TICK, tick.task, SYSTEM_TASK, None))
            if now >= next_sample:
                next_sample = now + SAMPLE_SECS
                self._sample_safely(now)
            self._weigh_safely(now)
            balance = self.load_awareness.due()
            wake = min([next_sample] + [tick.due for tick in schedule]
                       + ([balance] if balance is not None else []))
            self._ticks_changed.wait(max(0.0, wake - time.monotonic()))

    def stop(self, wait_secs: float | None = None) -> None:
        """Deactivate, wait up to ``wait_secs`` (default: the message timeout) for in-flight
        trees, then stop every executor and run close/cleanup."""
        with self._lock:
            self._stop(wait_secs)

    def _stop(self, wait_secs: float | None) -> None:
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
        self._ticks_changed.set()
        self._stop_executors(self.executors)
        if self._ticker:
            self._ticker.join()
        if self._guard:
            self._guard.done.set()
            self._guard.join()
        if self._watchdog:
            self._watchdog.join()
            for metrics in self.metrics:   # the last summaries, while they are still news
                metrics.errors.flush(everything=True)

    def _stop_executors(self, executors: dict[str, list[Executor]]) -> list[Executor]:
        """Stop ``executors`` (by component) in stop order: each runs what its inbox held
        before, then close (deactivating a spout first, failing what it has in flight) or
        cleanup. Those that did not finish in time are returned, left behind."""
        left: list[Executor] = []
        for component_id in self._stop_order():
            group = executors.get(component_id, [])
            for executor in group:
                executor.inbox.put(Message(STOP, SYSTEM_TASK, SYSTEM_TASK, None))
            # A component's executors stop side by side, so they share one bound: a component
            # whose every executor is stuck holds the stop up once, not once per executor.
            deadline = time.monotonic() + EXECUTOR_STOP_SECS
            for executor in group:
                if not executor.finished.wait(max(0.0, deadline - time.monotonic())):
                    self._left_behind(executor)
                    left.append(executor)
        return left

    @staticmethod
    def _left_behind(executor: Executor) -> None:
        busy = executor.busy
        where = (f"in {busy.call} of task {busy.task.task_id} for "
                 f"{time.monotonic() - busy.since:.0f} s"
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
        order.append(ACKER_COMPONENT)
        return order

    # ----- changing what runs here, while it runs
    #
    # Thread safety. While add_executors or remove_executors runs (on a worker's ZooKeeper-watch
    # thread, say) the executors go on on their threads, the tick thread sends ticks and samples
    # the windows, the watchdog looks, and other threads may call metrics_snapshot, summary,
    # errors, in_flight, activate and deactivate. start, stop, add_executors and
    # remove_executors hold ``_lock``, so they run one at a time. What they change that others
    # read is replaced whole, never changed in place: ``executors``, ``metrics``,
    # ``_placement``, ``local_tasks``, ``_ticks``, the watchdog's lists, the load-aware
    # balancers, a cycle gate's inboxes; a reader takes one reference and sees all of before
    # or all of after. The metrics, the placement and the windows change together under
    # ``_windows_lock``, which
    # metrics_snapshot and sample_windows hold while they read them. ``routes`` is the one list
    # changed in place, a slot per task (one assignment, atomic), which every Transfer reads
    # afresh at each flush; and a sender's ``entry_gates`` dict gets a key set or removed (one
    # dict operation, atomic; its reader looks a key up per flush). Nothing here is on the
    # per-tuple path.
    #
    # Executors built before a change keep the view of what is local that they were built
    # with, which is harmless: every task is reached through ``routes``, whichever view chose
    # it. A spout keeps drawing its roots for the ackers that were local (one that moved is
    # then reached through its route: its inits and verdicts cross between workers, as every
    # root's do in Storm) and ignores a new local acker; a local-or-shuffle grouping keeps
    # preferring the tasks that were local. Only traffic that could have stayed in this
    # process may cross, none is lost. Two things are brought up to date all the same: every
    # spout's ``yields`` (whether the topology spans workers; an attribute it reads per loop),
    # and the cycle gates senders wait on, which bound what circulates in a cycle (_regate).

    def add_executors(self, plan: list[tuple[str, list[int]]],
                      conf: dict[str, Any] | None = None) -> None:
        """Build and run an executor for each (component, tasks) of ``plan``, while the runtime
        runs (after ``start``); the executors already here go on undisturbed. Each gets a new
        inbox, its tasks' routes switch to it (from wherever they pointed, another worker
        say), and it is tracked like those built at the start: watched, measured, ticked, and
        stopped by ``stop``. New spouts are activated if the topology is. An entry that is
        exactly an executor already here is skipped; acker executors
        (``protocol.ACKER_COMPONENT``) may be added too. ``conf``: settings the new executors'
        components get over the topology's (a worker's ``stormlet.state.epoch``, say).

        Returns once every new executor ran its open or prepare. Refused with ValueError
        (nothing changed) for an unknown component, tasks not its own or given twice, or tasks
        already run here by another executor; with RuntimeError before ``start`` or once
        stopping."""
        with self._lock:
            self._check_running("add executors")
            plan = self._plan_to_add(plan)
            if not plan:
                return
            local_tasks = self.local_tasks | {task for _c, tasks in plan for task in tasks}
            built = self._assemble(plan, local_tasks, conf)
            added = [executor for _c, executor in built]
            metrics = [task.metrics for executor in added for task in executor.tasks]
            now = time.monotonic()
            windows = {m.task: RollingWindows(now, m.sample()) for m in metrics}
            # Tracked before they run (the watchdog sees a stuck open); routed once they run.
            self.executors = self._grouped(built, self.executors)
            self.local_tasks = local_tasks
            with self._windows_lock:
                self._windows.update(windows)
                self._placement = {**self._placement, **self._placement_of(built)}
                self.metrics = [*self.metrics, *metrics]
            self._watch()
            self._ticks = [*self._ticks, *self._ticks_of(added)]
            self._ticks_changed.set()
            self._regate()
            self._runner_count += 1
            self._run(self._grouped(built), f"{self.name}:executors+{self._runner_count}")
            for executor in added:
                for task in executor.tasks:
                    self.routes[task.task_id] = executor.inbox
            self._set_yields()
            for executor in added:   # after publishing them: see activate
                if isinstance(executor, SpoutExecutor):
                    executor.ask_active(self._checkpoints_activated if self._is_checkpoint(
                        executor) else self._activated)
            log.info("topology %s: added executors %s", self.name,
                     ", ".join(e.name for e in added))
        # Outside the lock: a stop need not wait for a slow open (it stops these too).
        for executor in added:
            executor.ready.wait()

    def remove_executors(self, tasks: set[int], routes: dict[int, Any]) -> None:
        """Stop the executors holding ``tasks`` (each removed whole) while the others go on:
        first their tasks' routes switch to ``routes`` (task -> Route: where they now run;
        entries for other tasks are ignored), then each executor runs what its inbox already
        held and stops as in ``stop``: a spout is deactivated and closed (an offset spout
        commits), a bolt cleaned up. They are then no longer tracked: not in the metrics,
        ``summary()``, ``errors()``, nor watched.

        What a removed executor had in flight fails or times out at its spout and is replayed
        (at-least-once), as in a stop; the trees of the other executors are untouched. Routes
        switch before the stop so that little is lost: what a sender put in the old inbox after
        its STOP (it had looked the route up before the switch) is dropped, and times out.

        Refused with ValueError (nothing changed) for tasks that do not run here, a set that
        holds part of an executor, or a task without a route; with RuntimeError before ``start``
        or once stopping."""
        tasks = set(tasks)
        with self._lock:
            self._check_running("remove executors")
            doomed = self._executors_holding(tasks)
            if not doomed:
                return
            unrouted = sorted(task for task in tasks if routes.get(task) is None)
            if unrouted:
                raise ValueError(f"topology {self.name}: no route given for tasks {unrouted}, "
                                 f"which are being removed from here: give where each now runs")
            for task in tasks:
                self.routes[task] = routes[task]
            removed = [executor for _c, executor in doomed]
            # Out of ``executors`` before they stop: a reader of it (a worker's health check)
            # must not take one that finished here for one that died.
            self.executors = {component_id: kept
                              for component_id, group in self.executors.items()
                              if (kept := [e for e in group if e not in removed])}
            self.local_tasks = self.local_tasks - tasks
            left = self._stop_executors(self._grouped(doomed))
            for executor in removed:
                if executor not in left:
                    self._drop_late_messages(executor)
            self._untrack(removed)
            log.info("topology %s: removed executors %s", self.name,
                     ", ".join(e.name for _c, e in doomed))

    def _check_running(self, what: str) -> None:
        if self.started_at is None:
            raise RuntimeError(f"topology {self.name}: cannot {what} before start()")
        if self.stopping.is_set():
            raise RuntimeError(f"topology {self.name}: cannot {what}: it has stopped")

    def _plan_to_add(self, plan: list[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
        """``plan`` without the executors already here (each entry's tasks sorted), or the
        ValueError saying what is wrong with it."""
        running = {(component_id, tuple(task.task_id for task in executor.tasks))
                   for component_id, group in self.executors.items() for executor in group}
        fresh: list[tuple[str, list[int]]] = []
        given: set[int] = set()
        for component_id, tasks in plan:
            tasks = sorted(tasks)
            owned = self.layout.component_tasks.get(component_id)
            if owned is None:
                raise ValueError(f"topology {self.name} has no component {component_id!r} "
                                 f"(it has {sorted(self.layout.component_tasks)})")
            if not tasks:
                raise ValueError(f"an executor of {component_id!r} needs at least one task")
            strangers = [task for task in tasks if task not in owned]
            if strangers:
                raise ValueError(f"tasks {strangers} are not tasks of {component_id!r} (its "
                                 f"tasks are {owned})")
            twice = [task for task in tasks if task in given]
            if twice:
                raise ValueError(f"tasks {twice} of {component_id!r} are given to two "
                                 f"executors")
            given.update(tasks)
            if (component_id, tuple(tasks)) in running:
                continue
            here = [task for task in tasks if task in self.local_tasks]
            if here:
                raise ValueError(f"tasks {here} of {component_id!r} already run here in another "
                                 f"executor: remove it first (remove_executors)")
            fresh.append((component_id, tasks))
        return fresh

    def _executors_holding(self, tasks: set[int]) -> list[tuple[str, Executor]]:
        """The executors here whose tasks are in ``tasks``, or the ValueError saying which
        tasks do not run here or which executors ``tasks`` would split."""
        elsewhere = sorted(task for task in tasks if task not in self.local_tasks)
        if elsewhere:
            raise ValueError(f"topology {self.name}: tasks {elsewhere} do not run here")
        doomed: list[tuple[str, Executor]] = []
        split: list[str] = []
        for component_id, group in self.executors.items():
            for executor in group:
                ids = [task.task_id for task in executor.tasks]
                if not tasks.isdisjoint(ids):
                    if tasks.issuperset(ids):
                        doomed.append((component_id, executor))
                    else:
                        split.append(f"executor {executor.name} (tasks {ids}, of which "
                                     f"{sorted(tasks.intersection(ids))} given)")
        if split:
            raise ValueError(f"an executor is removed whole, with all its tasks; the tasks "
                             f"given hold only part of {'; '.join(split)}")
        return doomed

    def _drop_late_messages(self, executor: Executor) -> None:
        """Empty the inbox of ``executor``, which stopped: what is there came after its STOP
        (from a sender that looked its route up before it switched) and will time out. A
        sender waiting for room there would otherwise wait for good."""
        inbox, dropped = executor.inbox, 0
        while not inbox.empty():
            inbox.get_nowait()
            dropped += 1
        inbox.took_data()   # wake a waiting sender now rather than at its next recheck
        if dropped:
            log.info("executor %s: %d messages came after it stopped; dropped (tracked tuples "
                     "among them time out and are replayed)", executor.name, dropped)

    def _untrack(self, executors: list[Executor]) -> None:
        """Forget ``executors``, which stopped (or were left behind) and already left
        ``executors`` and ``local_tasks``: their tasks leave every other record here, after a
        last flush of their error summaries."""
        gone = {task.task_id for executor in executors for task in executor.tasks}
        self.load_awareness.drop(gone)
        with self._windows_lock:
            self.metrics = [m for m in self.metrics if m.task not in gone]
            self._placement = {t: p for t, p in self._placement.items() if t not in gone}
            for task in gone:
                self._windows.pop(task, None)
        self._watch()
        self._ticks = [tick for tick in self._ticks if tick.task not in gone]
        inboxes = {id(executor.inbox) for executor in executors}
        for gate in self._gates.values():
            gate.inboxes = [inbox for inbox in gate.inboxes if id(inbox) not in inboxes]
        self._regate()
        self._set_yields()
        for executor in executors:
            for task in executor.tasks:
                task.metrics.errors.flush(everything=True)

    def _watch(self) -> None:
        if self._watchdog is not None:
            self._watchdog.watch(self.all_executors(), self.metrics)

    def _set_yields(self) -> None:
        """Every spout's ``yields`` as for a spout built now (an attribute it reads per loop)."""
        spans = self._spans_workers(self.local_tasks)
        for executor in self.spout_executors():
            executor.yields = spans

    def _regate(self) -> None:
        """Every local task's cycle entry gates as ``_task`` would make them now: data for a
        task of a cycle that runs here waits on the cycle's gate (unless the sender is on that
        cycle); data for one that no longer runs here does not. Without it, a sender built
        before a cycle's executor came here would feed the cycle however full it was."""
        layout = self.layout
        local_tasks = self.local_tasks
        for executor in self.all_executors():
            for task in executor.tasks:
                transfer = task.transfer
                cycle = (frozenset() if task.component_id == ACKER_COMPONENT
                         else self.topology.cycle_of(task.component_id))
                gates = transfer.entry_gates
                for target in transfer.data_targets:
                    component = layout.task_component[target]
                    gate = self._cycle_gates.get(component)
                    if gate is not None and target in local_tasks and component not in cycle:
                        if gates.get(target) is not gate:
                            gates[target] = gate
                    elif target in gates:
                        del gates[target]

    # ----- observing

    def summary(self) -> dict[str, dict]:
        return summarize(self.metrics)

    def _weigh_safely(self, now: float) -> None:
        """The load-aware shuffles' look at the inboxes and refresh, where due, on the tick
        thread (as _sample_safely: an error is logged once per kind, and ticks go on)."""
        due = self.load_awareness.due()
        if due is None or now < due:
            return
        try:
            placement = self._placement
            self.load_awareness.tick(now, self.routes,
                                     {task: place[1] for task, place in placement.items()})
        except Exception as exc:
            kind = f"load-aware {type(exc).__name__}"
            if kind not in self._sample_errors:
                self._sample_errors.add(kind)
                log.exception("topology %s: refreshing the load-aware shuffles failed (%s is "
                              "logged once; they keep their last weights)", self.name, kind)

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
        # Only the windows need the lock, and it gives the tasks tracked at one instant (see
        # "Thread safety"). User gauges (user code, maybe slow) and queue depths are read after
        # it is released, so a slow gauge cannot hold up sampling, ticks, or a change of
        # executors.
        with self._windows_lock:
            tracked, placement = self.metrics, self._placement
            for metrics in tracked:
                current = metrics.sample()
                windows = self._windows[metrics.task]
                windows.add(now, current)
                windows_of[metrics.task] = {
                    key: window_stats(seconds, delta)
                    for key, (seconds, delta) in windows.deltas(now, current).items()}
        rows = [self._task_row(metrics, windows_of[metrics.task], placement[metrics.task])
                for metrics in tracked]
        return {"topology_id": self.conf[cfg.STORMLET_TOPOLOGY_ID], "name": self.name,
                "time": time.time(),
                "worker": {"host": host, "port": port, **self.process_stats.read()},
                "tasks": rows}

    @staticmethod
    def _task_row(metrics: TaskMetrics, windows: dict[str, dict],
                  placement: tuple[str, Inbox, list[int]]) -> dict:
        kind, inbox, executor = placement
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
