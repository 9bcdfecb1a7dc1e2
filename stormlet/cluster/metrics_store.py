"""Nimbus's memory of its workers' metrics: the newest snapshot per worker, and what the workers
it replaced had counted.

Workers push a snapshot (``TopologyRuntime.metrics_snapshot()``, host and port filled) every
``topology.metrics.report.secs``; see ``metrics_reporter``. Nothing is written to ZooKeeper or
disk: a standby that becomes leader starts empty, and knows a worker only from its next report
(back as far as that report's own windows reach); what workers replaced before it led counted is
lost to it.

    store = MetricsStore()
    store.put("wc-1-ab12", "127.0.0.1", 6700, snapshot)            # from report_metrics
    store.snapshots("wc-1-ab12", {("127.0.0.1", 6700)}, max_age=15)  # for metrics, topology_info

A reader passes the slots the topology is assigned now and how old a snapshot may be (3 report
intervals). Only the snapshots of assigned workers that reported within that age are answered,
but no worker's counts are dropped with it (``retired_metrics`` says how they are kept and aged):

- A worker is *replaced* when its slot leaves the assignment, or when a report at its slot comes
  from another process (another pid or start time: its supervisor restarted it). Its tasks'
  counts are folded into the topology's retired counts, per task, and it is forgotten.
- A worker that went silent but is still assigned is kept as it last reported; its counts count,
  frozen at that report and aging, until it reports again (then it is live as before) or is
  replaced.

Each task row of an answer counts its task's retired and silent workers too (the newest live row
of the task, if several hold it for a moment). A task that no live worker reports holds its past
counts in one extra snapshot marked ``"retired": true``, with no worker (host and port None, pid
0): the views and ``/metrics`` count its tasks and leave it out of the workers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..metrics.shape import snapshot_problem, task_row_problem
from .retired_metrics import PastWindows, RetiredTask, TaskHistory, combine, past_only, with_past

log = logging.getLogger(__name__)

WorkerKey = tuple[str, str, int]   # (topology_id, host, port)
TaskKey = tuple[str, int]   # (topology_id, task)
NO_WORKER = {"host": None, "port": None, "pid": 0, "started": 0.0, "uptime": 0.0,
             "cpu_percent": 0.0, "rss_bytes": 0}


@dataclass
class _Worker:
    """One worker process as its reports tell it."""

    identity: tuple[int, float]   # (pid, started): a new process at the same slot has another
    received: float               # when its newest report came, on nimbus's monotonic clock
    snapshot: dict
    tasks: dict[int, TaskHistory]

    def update(self, now: float, snapshot: dict) -> list[TaskHistory]:
        """Take a newer report; returns the histories of the tasks it no longer runs."""
        self.received, self.snapshot = now, snapshot
        for row in snapshot["tasks"]:
            history = self.tasks.get(row["task"])
            if history is None:
                self.tasks[row["task"]] = TaskHistory(now, row)
            else:
                history.update(now, row)
        running = {row["task"] for row in snapshot["tasks"]}
        return [self.tasks.pop(task) for task in list(self.tasks) if task not in running]


def _identity(snapshot: dict) -> tuple[int, float]:
    worker = snapshot["worker"]
    return worker["pid"], worker["started"]


class MetricsStore:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock   # nimbus's own: a worker's clock may be off
        self._lock = threading.Lock()   # the RPC thread writes; the monitor thread prunes
        self._workers: dict[WorkerKey, _Worker] = {}
        self._retired: dict[TaskKey, RetiredTask] = {}
        self._names: dict[str, Any] = {}   # topology id -> its name, as its snapshots say
        # The last process replaced at each slot: a report of it still in flight must not
        # bring it back (its counts are retired already), nor one of a process before it.
        self._gone: dict[WorkerKey, tuple[int, float]] = {}

    def put(self, topology_id: Any, host: Any, port: Any, snapshot: Any) -> None:
        """Keep ``snapshot`` as this worker's newest; ValueError says what is malformed. A
        report from another process than the slot's last replaces it (see the module
        docstring); one from a process older than the slot's last is a dead worker's late
        report, and is dropped."""
        check_report(topology_id, host, port, snapshot)
        key = (topology_id, host, port)
        identity = _identity(snapshot)
        now = self._clock()
        with self._lock:
            held = self._workers.get(key)
            gone = self._gone.get(key)
            if gone is not None and (identity == gone or identity[1] < gone[1]) or (
                    held is not None and identity[1] < held.identity[1]):
                log.debug("dropped a late metrics report of replaced worker pid %s at %s:%s",
                          identity[0], host, port)
                return
            if held is not None and held.identity != identity:
                log.debug("worker pid %s at %s:%s replaced pid %s: keeping its counts",
                          identity[0], host, port, held.identity[0])
                self._retire(key, held)
                held = None
            if held is None:
                held = self._workers[key] = _Worker(identity, now, snapshot, {})
            for history in held.update(now, snapshot):   # tasks that moved off it
                self._retire_task(topology_id, history)
            self._names[topology_id] = snapshot.get("name")

    def _retire(self, key: WorkerKey, worker: _Worker) -> None:
        """Fold a replaced worker's counts into its topology's retired counts; forget it."""
        for history in worker.tasks.values():
            self._retire_task(key[0], history)
        self._workers.pop(key, None)
        self._gone[key] = worker.identity

    def _retire_task(self, topology_id: str, history: TaskHistory) -> None:
        task = history.row["task"]
        retired = self._retired.get((topology_id, task))
        if retired is None:
            retired = self._retired[(topology_id, task)] = RetiredTask(
                history.row["component"], history.row["kind"])
        retired.merge(history)

    def snapshots(self, topology_id: str, slots: set[tuple[str, int]],
                  max_age: float) -> list[dict]:
        """The topology's snapshots from workers at ``slots`` (host, port) reported within
        ``max_age`` seconds, in slot order, their task rows counting what replaced and silent
        workers of the same tasks counted; then, if some task is run by no such worker, the
        ``"retired"`` snapshot of its past counts. Workers no longer at ``slots`` are replaced
        (see the module docstring)."""
        now = self._clock()
        oldest = now - max_age
        live: list[dict] = []
        past: dict[int, PastWindows] = {}
        shapes: dict[int, RetiredTask] = {}   # task -> one that says its component and kind
        with self._lock:
            for key in sorted(k for k in self._workers if k[0] == topology_id):
                held = self._workers[key]
                if key[1:] not in slots:
                    self._retire(key, held)
                elif held.received >= oldest:
                    live.append(held.snapshot)
                else:   # silent: its counts as of its last report, aging
                    for task, history in held.tasks.items():
                        frozen = RetiredTask(history.row["component"], history.row["kind"])
                        frozen.merge(history)
                        _add_past(past, task, frozen.windows(now))
                        shapes[task] = frozen
            for (tid, task), retired in self._retired.items():
                if tid == topology_id:
                    _add_past(past, task, retired.windows(now))
                    shapes[task] = retired
            name = self._names.get(topology_id)
        return _with_past(topology_id, name, live, past, shapes)

    def retain(self, topology_ids: set[str]) -> None:
        """Forget every topology not in ``topology_ids`` (killed ones)."""
        with self._lock:
            for key in [k for k in self._workers if k[0] not in topology_ids]:
                del self._workers[key]
            for retired in [k for k in self._retired if k[0] not in topology_ids]:
                del self._retired[retired]
            for key in [k for k in self._gone if k[0] not in topology_ids]:
                del self._gone[key]
            for tid in [t for t in self._names if t not in topology_ids]:
                del self._names[tid]


def _add_past(past: dict[int, PastWindows], task: int, windows: PastWindows) -> None:
    held = past.get(task)
    past[task] = windows if held is None else combine(held, windows)


def _with_past(topology_id: str, name: Any, live: list[dict], past: dict[int, PastWindows],
               shapes: dict[int, RetiredTask]) -> list[dict]:
    """``live`` with ``past`` counted in the newest row of each task; the tasks no live row
    holds in one ``"retired"`` snapshot. The stored snapshots are left as they are."""
    if not past:
        return live
    newest: dict[int, tuple[int, int]] = {}   # task -> (index in live, index in its tasks)
    for i, snapshot in enumerate(live):
        for j, row in enumerate(snapshot["tasks"]):
            held = newest.get(row["task"])
            if held is None or live[held[0]]["time"] < snapshot["time"]:
                newest[row["task"]] = (i, j)
    answer = [{**snapshot, "tasks": list(snapshot["tasks"])} for snapshot in live]
    for task, (i, j) in newest.items():
        if task in past:
            row = answer[i]["tasks"][j]
            answer[i]["tasks"][j] = {**row, "windows": with_past(row["windows"], past[task])}
    orphans = [{"component": shapes[task].component, "task": task, "kind": shapes[task].kind,
                "executor": shapes[task].executor, "queue_depth": 0, "queue_capacity": 0,
                "user": {}, "windows": past_only(past[task])}
               for task in sorted(set(past) - set(newest))]
    if orphans:
        answer.append({"topology_id": topology_id, "name": name, "time": time.time(),
                       "retired": True, "worker": dict(NO_WORKER), "tasks": orphans})
    return answer


def check_report(topology_id: Any, host: Any, port: Any, snapshot: Any) -> None:
    """Raise ValueError naming the first thing wrong with a report: every field, with its type,
    that a reader of a snapshot relies on (see stormlet.metrics.shape; contract:
    ``TopologyRuntime.metrics_snapshot``). A report that passes cannot break a page or a
    scrape."""
    if not isinstance(topology_id, str) or not topology_id:
        raise ValueError(f"topology_id must be a non-empty string, got {topology_id!r}")
    if not isinstance(host, str) or not host:
        raise ValueError(f"host must be a non-empty string, got {host!r}")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError(f"port must be a TCP port number, got {port!r}")
    if not isinstance(snapshot, dict):
        raise ValueError(f"snapshot must be a map, got {type(snapshot).__name__}")
    if snapshot.get("topology_id") != topology_id:
        raise ValueError(f"the snapshot is of topology {snapshot.get('topology_id')!r}, "
                         f"not {topology_id!r}")
    worker = snapshot.get("worker")
    if not isinstance(worker, dict) or (worker.get("host"), worker.get("port")) != (host, port):
        raise ValueError(f"the snapshot's worker is not {host}:{port}")
    problem = snapshot_problem(snapshot)
    if problem:
        raise ValueError(f"the snapshot: {problem}")
    for i, task in enumerate(snapshot["tasks"]):
        problem = task_row_problem(task)
        if problem:
            raise ValueError(f"the snapshot's task #{i}: {problem}")
