"""What the UI, the REST API and ``/metrics`` show, computed from a topology's structure
(``structure.topology_structure``) and the metrics snapshots of its workers
(``TopologyRuntime.metrics_snapshot``). Pure functions of plain data: the same on nimbus and in
local mode.

``window`` is one of ``"600"``, ``"10800"``, ``"86400"`` and ``"all"``, as in Storm's UI.
Rates divide each task's count by the seconds its own window covers, then add up, so a task that
started late is not diluted. Latencies of several tasks are merged from their histograms, so a
component's p99 is the p99 of all its tuples, not a mean of percentiles. Capacity is a task's
busy seconds over its window's seconds, and a component shows its busiest task's, as Storm does.
System components (the ackers) are left out: they are not in the structure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .histogram import merge_wire, summary_ms
from .shape import snapshot_problem, task_row_problem

log = logging.getLogger(__name__)

LATENCIES = ("execute", "process", "complete")


def _usable(snapshots: Iterable[dict]) -> list[dict]:
    """The snapshots whose own fields are sound; a malformed one is left out, not shown as an
    error on every page (nimbus refuses such reports already: this guards the pages anyway)."""
    usable = []
    for snapshot in snapshots:
        problem = snapshot_problem(snapshot)
        if problem:
            log.debug("a metrics snapshot is left out: %s", problem)
        else:
            usable.append(snapshot)
    return usable


def _newest_rows(snapshots: Iterable[dict], window: str) -> dict[int, tuple[dict, dict]]:
    """task -> (snapshot, task row), from the newest snapshot holding the task: after a worker
    moves, its old and new workers may both report the task for a moment. A row lacking a field
    the views read (in ``window``) is skipped, so one bad row cannot break a page."""
    found: dict[int, tuple[dict, dict]] = {}
    for snapshot in _usable(snapshots):
        for row in snapshot["tasks"]:
            problem = task_row_problem(row, (window,))
            if problem:
                log.debug("a task row of a metrics snapshot is left out: %s", problem)
                continue
            held = found.get(row["task"])
            if held is None or held[0]["time"] < snapshot["time"]:
                found[row["task"]] = (snapshot, row)
    return found


def _by_component(snapshots: Iterable[dict], window: str) -> dict[str, list[tuple[dict, dict]]]:
    grouped: dict[str, list[tuple[dict, dict]]] = {}
    newest = _newest_rows(snapshots, window)
    for task in sorted(newest):
        snapshot, row = newest[task]
        grouped.setdefault(row["component"], []).append((snapshot, row))
    return grouped


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _merge_reasons(windows: Iterable[dict]) -> list[list]:
    counts: dict[tuple[str, str | None], int] = {}
    for w in windows:
        for kind, component, n in w["fail_reasons"]:
            counts[(kind, component)] = counts.get((kind, component), 0) + n
    return [[kind, component, n] for (kind, component), n
            in sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1] or ""))]


def _latency(windows: list[dict], name: str) -> dict:
    return summary_ms(*merge_wire(w["histograms"][name] for w in windows))


def _totals(windows: list[dict]) -> dict:
    """Counts, failure reasons and latencies of some task windows, added up."""
    by_stream: dict[str, int] = {}
    for w in windows:
        for stream, n in w["emitted"].items():
            by_stream[stream] = by_stream.get(stream, 0) + n
    totals = {
        "seconds": max((w["seconds"] for w in windows), default=0.0),
        "emitted": sum(by_stream.values()),
        "emitted_by_stream": by_stream,
        "transferred": sum(w["transferred"] for w in windows),
        "executed": sum(w["executed"] for w in windows),
        "acked": sum(w["acked"] for w in windows),
        "failed": sum(w["failed"] for w in windows),
        "fail_reasons": _merge_reasons(windows),
        "busy_secs": round(sum(w["busy_secs"] for w in windows), 6),
        "throttled_secs": round(sum(w["throttled_secs"] for w in windows), 6),
    }
    for name in LATENCIES:
        totals[f"{name}_latency_ms"] = _latency(windows, name)
    return totals


def _capacity(w: dict) -> float:
    return round(_rate(w["busy_secs"], w["seconds"]), 6)


def _task_row(snapshot: dict, row: dict, window: str) -> dict:
    w = row["windows"][window]
    worker = snapshot["worker"]
    task = {"task": row["task"], "executor": row.get("executor"), "host": worker["host"],
            "port": worker["port"], "retired": bool(snapshot.get("retired")),
            "uptime": worker["uptime"],
            "queue_depth": row["queue_depth"], "queue_capacity": row["queue_capacity"],
            "capacity": _capacity(w), "user": row["user"]}
    task.update(_totals([w]))
    return task


def component_stats(structure: dict, snapshots: list[dict], window: str = "600") -> dict:
    """Per component: kind, tasks, executors, the window's totals (seconds, emitted and
    emitted_by_stream, transferred, executed, acked, failed, fail_reasons as
    [[kind, component, count]] most first, busy_secs, throttled_secs), merged latencies
    (``{name}_latency_ms``: execute, process, complete), capacity (the busiest task's), queue
    depth (summed over executors), per task rows under ``task_rows`` and, for offset spouts,
    every partition's row (with its task) under ``partitions``."""
    grouped = _by_component(snapshots, window)
    stats = {}
    for cid, shape in structure["components"].items():
        held = grouped.get(cid, [])
        windows = [row["windows"][window] for _snapshot, row in held]
        queues = {(s["worker"]["host"], s["worker"]["port"], tuple(row.get("executor") or
                                                                   [row["task"]])):
                  row["queue_depth"] for s, row in held}
        component = {"kind": shape["kind"], "tasks": shape["tasks"],
                     "executors": shape["executors"]}
        component.update(_totals(windows))
        component["capacity"] = max((_capacity(w) for w in windows), default=0.0)
        component["queue_depth"] = sum(queues.values())
        component["task_rows"] = [_task_row(s, row, window) for s, row in held]
        if any("partitions" in row for _s, row in held):
            component["partitions"] = [{"task": row["task"], **p} for _s, row in held
                                       for p in row.get("partitions", [])]
        stats[cid] = component
    return stats


def topology_stats(structure: dict, snapshots: list[dict], window: str = "600") -> dict:
    """The topology over the window: emitted and transferred by every component; acked, failed
    and complete latency of its spouts (each spout tuple once, as Storm counts them); and why
    tuples failed, as the spouts heard it: ``fail_reasons`` ([[kind, component, count]]),
    ``failed_by_kind`` ({kind: count}) and ``failed_by_component`` ([[component, count]], the
    component that failed the tuple or, for a timeout, the last one its tree reached; null when
    no acker could say)."""
    grouped = _by_component(snapshots, window)
    kinds = {cid: shape["kind"] for cid, shape in structure["components"].items()}
    every = [row["windows"][window] for cid, held in grouped.items() if cid in kinds
             for _s, row in held]
    spouts = [row["windows"][window] for cid, held in grouped.items()
              if kinds.get(cid) == "spout" for _s, row in held]
    everything, from_spouts = _totals(every), _totals(spouts)
    by_kind: dict[str, int] = {}
    by_component: dict[str | None, int] = {}
    for kind, component, n in from_spouts["fail_reasons"]:
        by_kind[kind] = by_kind.get(kind, 0) + n
        by_component[component] = by_component.get(component, 0) + n
    return {
        "window": window,
        "seconds": everything["seconds"],
        "emitted": everything["emitted"],
        "transferred": everything["transferred"],
        "acked": from_spouts["acked"],
        "failed": from_spouts["failed"],
        "complete_latency_ms": from_spouts["complete_latency_ms"],
        "fail_reasons": from_spouts["fail_reasons"],
        "failed_by_kind": by_kind,
        "failed_by_component": sorted(([c, n] for c, n in by_component.items()),
                                      key=lambda item: (-item[1], item[0] or "")),
    }


def edge_rates(structure: dict, snapshots: list[dict], window: str = "600") -> list[dict]:
    """One row per subscription: ``{"from", "to", "stream", "grouping", "rate"}``, the rate being
    the tuples per second its source emitted on that stream over the window (what every
    subscriber of the stream is offered)."""
    grouped = _by_component(snapshots, window)
    edges = []
    for cid, shape in structure["components"].items():
        for sub in shape["inputs"]:
            source, stream = sub["component"], sub["stream"]
            rate = sum(_rate(row["windows"][window]["emitted"].get(stream, 0),
                             row["windows"][window]["seconds"])
                       for _s, row in grouped.get(source, []))
            edges.append({"from": source, "to": cid, "stream": stream,
                          "grouping": sub["grouping"], "rate": round(rate, 3)})
    return edges


def worker_stats(snapshots: list[dict]) -> list[dict]:
    """One row per worker snapshot: its worker fields (host, port, pid, started, uptime,
    cpu_percent, rss_bytes), the snapshot's time, and its tasks and components. Nimbus's
    ``"retired"`` snapshot (the counts of replaced workers, see cluster.metrics_store) is no
    worker: it has no row."""
    rows = []
    for snapshot in _usable(snapshots):
        if snapshot.get("retired"):
            continue
        tasks = [row for row in snapshot["tasks"]
                 if isinstance(row, dict) and isinstance(row.get("component"), str)]
        rows.append({**snapshot["worker"], "topology_id": snapshot["topology_id"],
                     "time": snapshot["time"], "tasks": len(tasks),
                     "components": sorted({row["component"] for row in tasks})})
    return sorted(rows, key=lambda r: (r["host"] or "", r["port"] or 0, r["pid"]))
