"""A worker's heartbeat file: how a worker tells the supervisor on its machine that it is alive,
and what it has done. The worker writes it, the supervisor reads it; nothing else does.

    <supervisor data dir>/heartbeats/<port>.json
    {"time", "pid", "started", "topology_id", "port",
     "metrics": its runtime's summary (per component), "errors": errors.heartbeat_errors(...),
     "stopping": why it is about to exit (only in the last beat of a worker that chose to)}

The worker rewrites the file every HEARTBEAT_SECS; the supervisor takes the file's age as the
worker's liveness and reads the rest for its report to ZooKeeper. A beat is written whole or not
at all (a temporary file renamed over the old), so a reader never sees half of one; but it is
not fsynced: after a crash of the machine a heartbeat is worth nothing anyway.

    write_heartbeat(path, topology_id="wc-1", port=6700, started=t0, metrics={}, errors=[])
    read_heartbeat(path).get("metrics", {})      # {} while there is no readable beat
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

HEARTBEAT_SECS = 1.0


def heartbeat_path(data_dir: Path, port: int) -> Path:
    """The heartbeat file of the worker on ``port`` of the supervisor keeping ``data_dir``."""
    return data_dir / "heartbeats" / f"{port}.json"


def write_heartbeat(path: Path, *, topology_id: str, port: int, started: float, metrics: dict,
                    errors: list[dict], stopping: str | None = None) -> None:
    """One beat of this process, stamped with the time and its pid. Callers writing from
    several threads hold one lock around it: the temporary file is shared."""
    beat = {"time": time.time(), "pid": os.getpid(), "started": started,
            "topology_id": topology_id, "port": port, "metrics": metrics, "errors": errors}
    if stopping:
        beat["stopping"] = stopping
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(beat))
    os.replace(partial, path)


def read_heartbeat(path: Path) -> dict:
    """The latest beat, or {} when there is none or it does not parse."""
    try:
        beat = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return beat if isinstance(beat, dict) else {}


def last_beat_time(path: Path) -> float | None:
    """When the file was last written (its mtime, so a beat that does not parse still counts as
    a sign of life), or None when there is no file."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None
