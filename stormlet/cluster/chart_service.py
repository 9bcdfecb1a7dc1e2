"""Nimbus's charts: the time series of each topology's metrics (``metrics.history``), fed by the
reports its workers send the leader, and the read operation that answers them
(``metrics_history``, the read role's: what the UI's charts and anyone with read credentials
draw).

Like the newest snapshots (``metrics_store``), the series live in the leader's memory only: a
standby has none, and one that becomes leader starts its series at the reports it receives.

    charts = ChartService(require_leader, find_topology)
    charts.feed(topology_id, snapshot)     # each report the metrics store took
    charts.read("wordcount", "coarse")      # the operation
    charts.retain(running_ids)              # each monitor pass
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..metrics.history import FINE, MetricsHistory
from . import rpc

if TYPE_CHECKING:
    from .zk_state import FoundTopology


class ChartService:
    def __init__(self, require_leader: Callable[[], None],
                 find_topology: Callable[[str], FoundTopology],
                 history: MetricsHistory | None = None):
        """``find_topology``: a topology found by its name or id, raising
        ``RpcError`` for one not running (nimbus's ``_find_any``)."""
        self.history = history or MetricsHistory()
        self._require_leader = require_leader
        self._find = find_topology

    def feed(self, topology_id: str, snapshot: dict) -> None:
        """A worker's report, as the metrics store accepted it (so it is well formed)."""
        self.history.add(topology_id, snapshot)

    def read(self, name: str, resolution: str = FINE) -> dict:
        """The topology's series at ``resolution`` (see ``MetricsHistory.series``), with its
        ``"id"`` and ``"name"``. ``name`` may be the topology's id. Only the leader has them:
        a standby refuses rather than answer with none."""
        self._require_leader()
        tid, record = self._find(name)
        try:
            series = self.history.series(tid, resolution)
        except ValueError as exc:
            raise rpc.RpcError(str(exc)) from None
        return {"id": tid, "name": record.get("name"), **series}

    def retain(self, topology_ids: Iterable[str]) -> None:
        """Forget the series of every topology not in ``topology_ids`` (killed ones)."""
        self.history.retain(topology_ids)
