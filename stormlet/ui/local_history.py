"""Local mode's time series: what nimbus keeps from its workers' reports (``metrics.history``),
kept here from the local topologies themselves, so that the UI's charts are the same in both
modes.

A thread takes each local topology's metrics snapshot every ``topology.metrics.report.secs``
(as a worker sends its report) and files it in a ``MetricsHistory``; topologies killed since are
forgotten. ``close()`` stops it (``LocalSource`` also stops it when it is collected).

    history = LocalHistory(cluster)
    history.series(topology_id, "fine")
    history.close()
"""

from __future__ import annotations

import logging
import threading
import time

from .. import config as cfg
from ..local import LocalCluster, UnknownTopologyError
from ..metrics.history import MetricsHistory
from ..repeats import Repeats

log = logging.getLogger(__name__)

# The sampler looks for new topologies at least this often.
IDLE_SECS = 1.0


class LocalHistory:
    def __init__(self, cluster: LocalCluster, history: MetricsHistory | None = None):
        self.cluster = cluster
        self.history = history or MetricsHistory()
        self._stop = threading.Event()
        self._due: dict[str, float] = {}   # topology id -> when its next sample is due
        self._repeats = Repeats(log)   # the sampler's thread alone uses it
        self._thread = threading.Thread(target=self._run, name="ui-history", daemon=True)
        self._thread.start()

    def series(self, topology_id: str, resolution: str) -> dict:
        return self.history.series(topology_id, resolution)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._sample()):
            pass

    def _sample(self) -> float:
        """Sample every topology whose sample is due; returns how long to wait for the next."""
        now = time.monotonic()
        running = set()
        for name in self.cluster.topologies():
            try:
                runtime = self.cluster.runtime(name)
                tid = runtime.conf[cfg.STORMLET_TOPOLOGY_ID]
                running.add(tid)
                if now < self._due.get(tid, now):
                    continue
                self._due[tid] = now + float(runtime.conf[cfg.TOPOLOGY_METRICS_REPORT_SECS])
                self.history.add(tid, runtime.metrics_snapshot())
                self._repeats.clear(name)
            except UnknownTopologyError:
                continue   # killed since listed
            except Exception as exc:   # one topology's trouble must not stop the others' charts
                self._repeats.warning(name, "could not take the metrics of local topology %s "
                                      "for its charts: %r", name, exc)
        self._due = {tid: due for tid, due in self._due.items() if tid in running}
        self.history.retain(running)
        names = set(self.cluster.topologies())
        self._repeats.retain(lambda key: key in names)
        return max(0.05, min([IDLE_SECS, *(due - time.monotonic() for due in self._due.values())]))
