"""Synthetic worker processes whose counters grow at rates a test sets, reporting metrics
snapshots (as ``TopologyRuntime.metrics_snapshot`` makes them) to a ``MetricsHistory`` on a
clock the test moves: for the tests of the charts' history."""

from __future__ import annotations

import random

from stormlet.metrics.history import MetricsHistory
from stormlet.metrics.windows import ALL_TIME, WINDOWS
from stormlet.runtime.metrics import window_stats

TID = "t-1-00ab12"   # a topology id as nimbus makes them
HOST = "10.0.0.1"
LATENCY_BUCKET = 60   # every complete latency falls in this histogram bucket


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counters(emitted: float, acked: float, busy: float, throttled: float,
             completed: int) -> dict:
    none = {"count": 0, "sum": 0.0, "buckets": {}}
    return {"emitted": {"default": round(emitted)}, "transferred": round(emitted),
            "executed": round(acked), "acked": round(acked), "failed": 0, "fail_reasons": {},
            "busy_secs": busy, "throttled_secs": throttled, "execute": none, "process": none,
            "complete": {"count": completed, "sum": completed * 0.01,
                         "buckets": {LATENCY_BUCKET: completed} if completed else {}}}


class Task:
    """A task of a worker process whose counters grow at a rate the test sets."""

    def __init__(self, component: str, task: int, kind: str = "spout"):
        self.component, self.task, self.kind = component, task, kind
        self.rate = 10.0        # tuples emitted (and acked) a second
        self.busy = 0.25        # busy fraction
        self.throttled = 0.0    # fraction of the time waiting on backpressure
        self.emitted = self.busy_secs = self.throttled_secs = 0.0

    def run(self, seconds: float) -> None:
        self.emitted += self.rate * seconds
        self.busy_secs += self.busy * seconds
        self.throttled_secs += self.throttled * seconds

    def row(self, ran: float) -> dict:
        completed = round(self.emitted) if self.kind == "spout" else 0
        w = window_stats(ran, counters(self.emitted, self.emitted, self.busy_secs,
                                       self.throttled_secs, completed))
        row = {"component": self.component, "task": self.task, "kind": self.kind,
               "executor": [self.task, self.task], "queue_depth": 0, "queue_capacity": 1024,
               "user": {}, "windows": {**{key: w for key in WINDOWS}, ALL_TIME: w}}
        return row


class Worker:
    """A worker process at ``HOST``:``port`` running ``tasks``; each report goes to
    ``history.add(topology_id, snapshot)`` (a ``MetricsHistory``, or whatever stands for one)."""

    pids = iter(range(100, 100_000))

    def __init__(self, history: MetricsHistory, clock: Clock, port: int, tasks: list[Task],
                 topology_id: str = TID):
        self.history, self.clock, self.port, self.tasks = history, clock, port, tasks
        self.topology_id = topology_id
        self.started = clock.now
        self.pid = next(self.pids)
        self.ran = 0.0

    def report(self) -> None:
        self.history.add(self.topology_id, {
            "topology_id": self.topology_id, "name": "t", "time": self.clock.now,
            "worker": {"host": HOST, "port": self.port, "pid": self.pid,
                       "started": self.started, "uptime": self.ran, "cpu_percent": 1.0,
                       "rss_bytes": 1},
            "tasks": [t.row(self.ran) for t in self.tasks]})

    def advance(self, seconds: float) -> None:
        for t in self.tasks:
            t.run(seconds)
        self.ran += seconds


def run(clock: Clock, workers: list[Worker], seconds: float, every: float = 5.0,
        jitter: float = 0.0, rng: random.Random | None = None) -> None:
    """Every worker runs ``seconds`` more, each reporting about every ``every`` seconds (each
    on its own schedule, up to ``jitter`` early or late)."""
    rng = rng or random.Random(7)
    due = {id(w): clock.now + every + rng.uniform(-jitter, jitter) for w in workers}
    end = clock.now + seconds
    while True:
        worker = min(workers, key=lambda w: due[id(w)])
        at = min(due[id(worker)], end)
        for w in workers:
            w.advance(at - clock.now)
        clock.now = at
        if at >= end:
            return
        worker.report()
        due[id(worker)] = at + every + rng.uniform(-jitter, jitter)
