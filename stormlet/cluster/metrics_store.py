"""Nimbus's memory of its workers' metrics: the newest snapshot per worker, nothing older.

Workers push a snapshot (``TopologyRuntime.metrics_snapshot()``, host and port filled) every
``topology.metrics.report.secs``; see ``metrics_reporter``. Nothing is written to ZooKeeper or
disk: a new leader knows nothing until the next round of reports, one interval later.

    store = MetricsStore()
    store.put("wc-1-ab12", "127.0.0.1", 6700, snapshot)            # from report_metrics
    store.snapshots("wc-1-ab12", {("127.0.0.1", 6700)}, max_age=15)  # for metrics, topology_info

A reader passes the slots the topology is assigned now and how old a snapshot may be (3 report
intervals): a worker that moved away, or went silent, drops out of every answer at once and out
of memory with it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..metrics.shape import snapshot_problem, task_row_problem

WorkerKey = tuple[str, str, int]   # (topology_id, host, port)


class MetricsStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()   # the RPC thread writes; the monitor thread prunes
        self._newest: dict[WorkerKey, tuple[float, dict]] = {}   # key -> (received, snapshot)

    def put(self, topology_id: Any, host: Any, port: Any, snapshot: Any) -> None:
        """Keep ``snapshot`` as this worker's newest; ValueError says what is malformed."""
        check_report(topology_id, host, port, snapshot)
        with self._lock:
            # Received time on nimbus's own clock: a worker's clock may be off.
            self._newest[(topology_id, host, port)] = (time.monotonic(), snapshot)

    def snapshots(self, topology_id: str, slots: set[tuple[str, int]],
                  max_age: float) -> list[dict]:
        """The topology's snapshots from workers at ``slots`` (host, port) reported within
        ``max_age`` seconds, in slot order; forgets the topology's others."""
        oldest = time.monotonic() - max_age
        found = []
        with self._lock:
            for key in sorted(k for k in self._newest if k[0] == topology_id):
                received, snapshot = self._newest[key]
                if key[1:] in slots and received >= oldest:
                    found.append(snapshot)
                else:
                    del self._newest[key]
        return found

    def retain(self, topology_ids: set[str]) -> None:
        """Forget every topology not in ``topology_ids`` (killed ones)."""
        with self._lock:
            for key in [k for k in self._newest if k[0] not in topology_ids]:
                del self._newest[key]


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
