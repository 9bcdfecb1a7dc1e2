"""The shape of a metrics snapshot, as its readers rely on it: every field the views
(``views.py``) and the Prometheus collector (``stormlet.ui.prometheus``) read, with its type.
Nimbus refuses a worker's report that does not fit (``cluster.metrics_store.check_report``), and
the views skip a task row that does not, so one malformed report cannot turn every page and
scrape into an error. The contract is ``TopologyRuntime.metrics_snapshot``.

Each check returns what is wrong, in words, or None. A check never raises, whatever it is given.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from .windows import ALL_TIME, WINDOWS

TASK_KINDS = ("spout", "bolt", "acker")
EVERY_WINDOW = (*WINDOWS, ALL_TIME)
LATENCIES = ("execute", "process", "complete")
COUNTS = ("seconds", "transferred", "executed", "acked", "failed", "busy_secs", "throttled_secs")
WORKER_NUMBERS = ("started", "uptime", "cpu_percent", "rss_bytes")
STATS = ("mean", "p50", "p99")


def _number(value: Any) -> bool:
    """A finite int or float (not a bool): what arithmetic, sorting and JSON all accept."""
    if type(value) is int:
        return True
    return type(value) is float and math.isfinite(value)


def _int(value: Any) -> bool:
    return type(value) is int


def _seq(value: Any) -> TypeGuard[list | tuple]:
    return isinstance(value, (list, tuple))


def _histogram_problem(h: Any) -> str | None:
    if not (isinstance(h, dict) and _int(h.get("count")) and _number(h.get("sum"))
            and _seq(h.get("buckets"))):
        return "needs count, sum and buckets"
    for pair in h["buckets"]:
        if not (_seq(pair) and len(pair) == 2 and _int(pair[0]) and _int(pair[1])):
            return "has a bucket that is not [bucket, count]"
    return None


def window_problem(w: Any) -> str | None:
    """What is wrong with one window (``W`` in the contract: ``runtime.metrics.window_stats``)."""
    if not isinstance(w, dict):
        return "is not a map"
    for key in COUNTS:
        if not _number(w.get(key)):
            return f"has no number {key}"
    emitted = w.get("emitted")
    if not (isinstance(emitted, dict) and all(isinstance(s, str) and _number(n)
                                              for s, n in emitted.items())):
        return "has no emitted map of stream to count"
    reasons = w.get("fail_reasons")
    if not (_seq(reasons) and all(
            _seq(r) and len(r) == 3 and isinstance(r[0], str)
            and (r[1] is None or isinstance(r[1], str)) and _number(r[2]) for r in reasons)):
        return "has no fail_reasons list of [kind, component, count]"
    histograms = w.get("histograms")
    if not isinstance(histograms, dict):
        return "has no histograms"
    for name in LATENCIES:
        summary = w.get(f"{name}_latency_ms")
        if not (isinstance(summary, dict) and all(
                summary.get(stat) is None or _number(summary.get(stat)) for stat in STATS)):
            return f"has no {name}_latency_ms"
        problem = _histogram_problem(histograms.get(name))
        if problem:
            return f"histogram {name} {problem}"
    return None


def task_row_problem(row: Any, windows: tuple[str, ...] = EVERY_WINDOW) -> str | None:
    """What is wrong with one task row of a snapshot, checking only ``windows`` (a view reads
    one; nimbus checks them all)."""
    if not isinstance(row, dict):
        return "is not a map"
    if not (isinstance(row.get("component"), str) and _int(row.get("task"))
            and row.get("kind") in TASK_KINDS):
        return "lacks component, task or kind"
    executor = row.get("executor")
    if executor is not None and not (_seq(executor) and all(_int(t) for t in executor)):
        return "has an executor that is not a list of tasks"
    if not (_int(row.get("queue_depth")) and _int(row.get("queue_capacity"))):
        return "lacks queue_depth or queue_capacity"
    user = row.get("user")
    if not (isinstance(user, dict) and all(isinstance(name, str) for name in user)):
        return "has no user metrics map"
    partitions = row.get("partitions")
    if partitions is not None and not (_seq(partitions)
                                       and all(isinstance(p, dict) for p in partitions)):
        return "has partitions that are not a list of maps"
    found = row.get("windows")
    if not isinstance(found, dict):
        return "lacks windows"
    for key in windows:
        problem = window_problem(found.get(key))
        if problem:
            return f"window {key!r} {problem}"
    return None


def snapshot_problem(snapshot: Any) -> str | None:
    """What is wrong with a snapshot's own fields (not its task rows)."""
    if not isinstance(snapshot, dict):
        return f"must be a map, got {type(snapshot).__name__}"
    if not isinstance(snapshot.get("topology_id"), str):
        return "no topology_id"
    if not _number(snapshot.get("time")):
        return "no time (a number)"
    worker = snapshot.get("worker")
    if not isinstance(worker, dict):
        return "no worker map"
    # Local mode's worker has neither host nor port (None), but the keys are there.
    host, port = worker.get("host", 0), worker.get("port", "")
    if not ((host is None or isinstance(host, str)) and (port is None or _int(port))):
        return "the worker's host or port is not a string and a number"
    if not _int(worker.get("pid")):
        return "the worker has no pid"
    for key in WORKER_NUMBERS:
        if not _number(worker.get(key)):
            return f"the worker has no number {key}"
    if not isinstance(snapshot.get("tasks"), list):
        return "tasks must be a list"
    return None
