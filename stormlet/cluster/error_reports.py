"""Errors on a cluster: from a worker's heartbeat, through its supervisor's report in ZooKeeper,
to nimbus, which answers ``stormlet errors`` and the errors column of ``stormlet list``.

    worker heartbeat file   "errors": its tasks' recent errors (errors.RECENT per task), as dicts
    supervisor report (ZK)  per worker, its newest PER_WORKER errors with shorter texts; per
                            slot, the same of the last worker there that exited, with the
                            supervisor's own error of the slot (a worker stopped over its memory
                            limit: memory_limit.py) and their count ("supervisor_errors"); per
                            slot whose worker cannot start (its topology's environment failed to
                            build, environments.py), that error, ENVIRONMENT_COMPONENT's; all of
                            a report's errors together at most REPORT_BYTES of JSON
    nimbus                  one topology's errors from every report, with host:port, newest first

An error as a dict: ``{"component", "task", "time" (epoch seconds), "error", "detail"}``. Anything
read back from a file or ZooKeeper is checked field by field: a malformed entry is skipped.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable, Iterator

from ..runtime.task_errors import ErrorRecord, clip, clip_tail

HEARTBEAT_TEXT = 1000
HEARTBEAT_DETAIL = 2000
PER_WORKER = 10
REPORT_TEXT = 300
REPORT_DETAIL = 800
REPORT_BYTES = 64 * 1024
# The component an error is reported against when a topology's environment failed to build on
# a node, so that none of its workers could start there.
ENVIRONMENT_COMPONENT = "(environment)"
# The component nimbus reports a refused submission against (submissions.py): it was accepted
# without waiting (`stormlet submit --no-wait`), then its environment or inspection failed.
SUBMIT_COMPONENT = "(submit)"
# A supervisor report's groups of slots: running workers, the last exited worker of each slot,
# and slots whose worker could not start.
REPORT_GROUPS = ("workers", "exited", "unstarted")


def heartbeat_errors(records: Iterable[ErrorRecord]) -> list[dict]:
    return [{"component": r.component, "task": r.task, "time": r.time,
             "error": clip(r.error, HEARTBEAT_TEXT),
             "detail": clip_tail(r.detail, HEARTBEAT_DETAIL)} for r in records]


def _valid(entry: Any) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("component"), str)
            and isinstance(entry.get("task"), int) and isinstance(entry.get("time"), (int, float))
            and isinstance(entry.get("error"), str) and isinstance(entry.get("detail", ""), str))


def report_errors(beat_errors: Any, limit: int = PER_WORKER) -> list[dict]:
    """A worker's newest ``limit`` errors from its heartbeat, shortened for ZooKeeper."""
    if not isinstance(beat_errors, list):
        return []
    valid = sorted((e for e in beat_errors if _valid(e)), key=lambda e: e["time"])[-limit:]
    return [{"component": e["component"], "task": e["task"], "time": e["time"],
             "error": clip(e["error"], REPORT_TEXT),
             "detail": clip_tail(e.get("detail", ""), REPORT_DETAIL)} for e in valid]


def unstarted_entry(topology_id: str, error: str, failures: int) -> dict:
    """A slot's entry in a supervisor report when its worker cannot start because the
    topology's environment failed to build there (``error``, ending with pip's last lines; the
    ``failures``-th time in a row): one error of ENVIRONMENT_COMPONENT, counted as
    ``failures`` errors."""
    # Pip says why last ("ERROR: No matching distribution found for ..."): the error's line.
    reason = (error.strip().splitlines() or [""])[-1]
    return {"topology_id": topology_id, "failures": failures,
            "metrics": {ENVIRONMENT_COMPONENT: {"errors": failures}},
            "errors": [{"component": ENVIRONMENT_COMPONENT, "task": -1, "time": time.time(),
                        "error": clip(f"its environment failed to build: {reason}",
                                      REPORT_TEXT),
                        "detail": clip_tail(error, REPORT_DETAIL)}]}


def error_count(metrics: Any) -> int:
    """Every error a worker counted, from its heartbeat's per-component metrics."""
    if not isinstance(metrics, dict):
        return 0
    return sum(m.get("errors", 0) for m in metrics.values()
               if isinstance(m, dict) and isinstance(m.get("errors", 0), int))


def cap_report(entries: Iterable[dict], limit: int = REPORT_BYTES) -> None:
    """Keep the newest errors of ``entries`` (dicts with an "errors" list) that fit in ``limit``
    bytes of JSON together, drop the rest: a supervisor rewrites its report every few seconds,
    and ZooKeeper holds every node in memory."""
    entries = list(entries)
    newest_first = sorted(((e["time"], i, j) for i, entry in enumerate(entries)
                           for j, e in enumerate(entry["errors"])), reverse=True)
    keep, size = set(), 0
    for _time, i, j in newest_first:
        size += len(json.dumps(entries[i]["errors"][j])) + 2
        if size > limit:
            break
        keep.add((i, j))
    for i, entry in enumerate(entries):
        entry["errors"] = [e for j, e in enumerate(entry["errors"]) if (i, j) in keep]


def _slots(report: Any) -> Iterable[tuple[str, dict]]:
    """(port, entry) of every slot a supervisor report describes: its worker running, exited,
    or unable to start."""
    if not isinstance(report, dict):
        return
    for group in REPORT_GROUPS:
        entries = report.get(group)
        if isinstance(entries, dict):
            for port, entry in entries.items():
                if isinstance(entry, dict):
                    yield port, entry


def _topology_workers(reports: dict[str, Any],
                      topology_id: str) -> Iterator[tuple[Any, str, dict]]:
    """(host, port, entry) of every worker of the topology that the reports describe."""
    for report in reports.values():
        for port, entry in _slots(report):
            if entry.get("topology_id") == topology_id:
                yield report.get("host", "?"), port, entry


def _valid_errors(entry: dict) -> Iterator[dict]:
    """The well-formed errors of a worker's entry in a supervisor report."""
    errors = entry.get("errors")
    if isinstance(errors, list):
        yield from (e for e in errors if _valid(e))


def topology_errors(reports: dict[str, Any], topology_id: str, limit: int) -> list[dict]:
    """The newest ``limit`` errors of a topology from every supervisor's report, newest first,
    each with the worker's ``host`` and ``port``."""
    found = [{**error, "host": host, "port": int(port) if str(port).isdigit() else port}
             for host, port, entry in _topology_workers(reports, topology_id)
             for error in _valid_errors(entry)]
    found.sort(key=lambda e: e["time"], reverse=True)
    return found[:limit]


def topology_error_summary(reports: dict[str, Any], topology_id: str) -> dict:
    """``{"errors": count, "last_error": time or None}``: what the topology's workers counted
    (the running ones, and the last exited one of each slot), and when the newest reported
    error happened."""
    count, last = 0, None
    for _host, _port, entry in _topology_workers(reports, topology_id):
        count += error_count(entry.get("metrics"))
        # Its supervisor's own errors of the slot (workers stopped over their memory limit).
        own = entry.get("supervisor_errors", 0)
        count += own if isinstance(own, int) and not isinstance(own, bool) else 0
        for error in _valid_errors(entry):
            if last is None or error["time"] > last:
                last = error["time"]
    return {"errors": count, "last_error": last}
