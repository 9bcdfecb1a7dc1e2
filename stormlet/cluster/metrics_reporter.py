"""A worker's metrics, pushed to the nimbus leader: one small RPC per worker per interval.

Every ``topology.metrics.report.secs`` the reporter thread takes the runtime's snapshot (with
this worker's host and port) and sends it with ``report_metrics`` (see ``metrics_store`` for what
nimbus keeps). Executors never wait for it: it runs on its own thread, and a report that cannot
be sent is dropped, since the next one carries newer numbers anyway. Nothing goes to ZooKeeper;
the leader's address is read from it once, and again only after a report failed (the leader
moved, or a standby refused).

    snapshot = functools.partial(runtime.metrics_snapshot, host, port)
    reporter = MetricsReporter(snapshot, state.leader, topology_id, host, port, interval=5)
    threading.Thread(target=reporter.run, args=(done_event,), daemon=True).start()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from . import rpc
from .security import CurveKeys
from .zk_state import rpc_address

log = logging.getLogger(__name__)

# The longest a report waits for nimbus: a busy or gone nimbus costs a lost report, no more.
MAX_SEND_SECS = 2.0


class MetricsReporter:
    def __init__(self, snapshot: Callable[[], dict], find_leader: Callable[[], dict | None],
                 topology_id: str, host: str, port: int, interval: float,
                 credentials: CurveKeys | None = None):
        self.snapshot = snapshot
        self.credentials = credentials
        self.find_leader = find_leader
        self.topology_id = topology_id
        self.host = host
        self.port = port
        self.interval = interval
        self.timeout = min(MAX_SEND_SECS, interval)
        self._leader: str | None = None   # known address; None: look it up before sending
        self._warned: set[str] = set()   # kinds of trouble logged as warnings already

    def run(self, done: threading.Event) -> None:
        """Report every interval until ``done`` is set."""
        while not done.wait(self.interval):
            self.report()

    def report(self, lookup: bool = True) -> bool:
        """Send one snapshot; True when the leader took it. ``lookup=False`` sends only to an
        already known leader (a worker on its way out must not wait for ZooKeeper)."""
        try:
            snapshot = self.snapshot()
        except Exception:
            self._warn_once("snapshot", "could not take the metrics snapshot of %s",
                            self.topology_id, exc_info=True)
            return False
        try:
            if self._leader is None and lookup:
                leader = self.find_leader()
                self._leader = rpc_address(leader) if leader else None
            if self._leader is None:
                log.debug("no nimbus leader to send metrics to")
                return False
            rpc.call(self._leader, "report_metrics", timeout=self.timeout,
                     credentials=self.credentials,
                     topology_id=self.topology_id, host=self.host, port=self.port,
                     snapshot=snapshot)
            return True
        except rpc.RpcError as exc:
            if not isinstance(exc, rpc.NimbusUnavailable) and not str(exc).startswith(
                    rpc.NOT_LEADER):
                self._warn_once("refused", "nimbus refused the metrics of %s: %s",
                                self.topology_id, exc)
            log.debug("metrics report to %s failed: %s", self._leader, exc)
        except Exception as exc:   # ZooKeeper away, say: try anew next time
            log.debug("metrics report to %s failed: %s", self._leader, exc)
        self._leader = None
        return False

    def _warn_once(self, kind: str, message: str, *args: object, exc_info: bool = False) -> None:
        """Our bugs, not weather: said once in full, then only counted as lost reports."""
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(message, *args, exc_info=exc_info)
