"""A worker's heartbeat file: how a worker tells the supervisor on its machine that it is alive,
and what it has done. The worker writes it, the supervisor reads it; nothing else does.

    <supervisor data dir>/heartbeats/<port>.json
    {"time", "pid", "started", "topology_id", "port", "tasks": the tasks it runs now,
     "metrics": its runtime's summary (per component), "errors": errors.heartbeat_errors(...),
     "stopping": why it is about to exit (only in the last beat of a worker that chose to)}

The worker rewrites the file every HEARTBEAT_SECS; the supervisor takes the file's age as the
worker's liveness and reads the rest for its report to ZooKeeper. A beat is written whole or not
at all (a temporary file renamed over the old), so a reader never sees half of one; but it is
not fsynced: after a crash of the machine a heartbeat is worth nothing anyway.

    write_heartbeat(path, topology_id="wc-1", port=6700, started=t0, metrics={}, errors=[])
    beat = read_heartbeat(path)                   # a Heartbeat, or None while there is no beat
    beat.metrics if beat else {}

This module is the only one that spells the file's keys: readers get a ``Heartbeat``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

HEARTBEAT_SECS = 1.0


class Heartbeat(NamedTuple):
    """One beat as read back. A field that is missing or of the wrong type (a file from another
    version, or damaged) reads as None, or as empty for ``metrics`` and ``errors``."""
    time: float | None        # when it was written
    pid: int | None           # the worker process
    started: float | None     # when the worker started
    topology_id: str | None
    port: int | None
    metrics: dict             # its runtime's summary, per component
    tasks: list               # the tasks it runs now (they change as executors move)
    errors: list              # as written by errors.heartbeat_errors: read with report_errors
    stopping: str | None      # why it is about to exit (the last beat of a worker that chose to)


def heartbeat_path(data_dir: Path, port: int) -> Path:
    """The heartbeat file of the worker on ``port`` of the supervisor keeping ``data_dir``."""
    return data_dir / "heartbeats" / f"{port}.json"


def write_heartbeat(path: Path, *, topology_id: str, port: int, started: float, metrics: dict,
                    errors: list[dict], stopping: str | None = None,
                    tasks: list[int] | None = None) -> None:
    """One beat of this process, stamped with the time and its pid. Callers writing from
    several threads hold one lock around it: the temporary file is shared."""
    beat = {"time": time.time(), "pid": os.getpid(), "started": started,
            "topology_id": topology_id, "port": port, "tasks": tasks or [], "metrics": metrics,
            "errors": errors}
    if stopping:
        beat["stopping"] = stopping
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(beat))
    os.replace(partial, path)


def read_heartbeat(path: Path) -> Heartbeat | None:
    """The latest beat, or None when there is none, it does not parse, or it is empty."""
    try:
        beat = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(beat, dict) or not beat:
        return None
    return Heartbeat(time=_typed(beat, "time", (int, float)), pid=_typed(beat, "pid", int),
                     started=_typed(beat, "started", (int, float)),
                     topology_id=_typed(beat, "topology_id", str), port=_typed(beat, "port", int),
                     metrics=_typed(beat, "metrics", dict) or {},
                     tasks=_typed(beat, "tasks", list) or [],
                     errors=_typed(beat, "errors", list) or [],
                     stopping=_typed(beat, "stopping", str))


def _typed(beat: dict, key: str, types: type | tuple[type, ...]) -> Any:
    """``beat[key]`` if it is of ``types`` (a bool is no number here), else None."""
    value = beat.get(key)
    return value if isinstance(value, types) and not isinstance(value, bool) else None


def last_beat_time(path: Path) -> float | None:
    """When the file was last written (its mtime, so a beat that does not parse still counts as
    a sign of life), or None when there is no file."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None
