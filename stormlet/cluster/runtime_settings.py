"""Nimbus's operations on a running topology's run-time settings: its loggers' levels (``stormlet
set-log-level``) and tuple sampling (``stormlet debug``), and reading the samples back.

Changes are the admin's and the leader's: each is checked (known level names, a percentage in
(0, 100], sane seconds; see runtime/live_settings.py) and written into the topology's record
(``record["log_levels"]``, ``record["sampling"]``), which every worker of the topology watches
and follows on its own clock. The leader's monitor pass removes entries whose time ran out
(``expire``), so that the record says what is in force; the workers have reverted them by then.
Each change, and each expiry, is recorded in the topology's event history.

``samples`` is the read role's. Today it answers from what workers report with their metrics
(the newest samples of each component, see ``LiveSettings.reported_samples``), so only the
leader has them. Each worker also writes every sample to ``samples.jsonl`` in its log
directory (``log_files.worker_log_dir``); once supervisors serve their node's files (the node
service), ``samples`` reads those through it instead, for each slot the topology is assigned,
which reaches further back than a report does. Its arguments and answer stay as they are.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from ..runtime import live_settings as live
from . import rpc

if TYPE_CHECKING:
    from .zk_state import FoundTopology

log = logging.getLogger(__name__)

# What a topology with this status no longer takes changes for.
KILLED = "killed"
# The most samples one ``samples`` request answers.
MAX_SAMPLES = 1000


class RuntimeSettings:
    """``find(name)``: (topology id, record) of a topology given by name or id, or RpcError.
    ``lock``: nimbus's, held while a record is read and rewritten. ``snapshots(name)``: the
    topology's workers' newest metrics reports (nimbus's ``metrics``)."""

    def __init__(self, state: Callable[[], Any], require_leader: Callable[[], None],
                 lock: threading.Lock, find: Callable[[str], FoundTopology],
                 record_event: Callable[..., None], snapshots: Callable[[str], list[dict]],
                 clock: Callable[[], float] = time.time):
        self._state = state
        self._require_leader = require_leader
        self._lock = lock
        self._find = find
        self._record_event = record_event
        self._snapshots = snapshots
        self._clock = clock

    def operations(self) -> dict[str, rpc.Operation]:
        Op = rpc.Operation
        return {"set_log_levels": Op(self.set_log_levels, rpc.ADMIN),
                "debug": Op(self.debug, rpc.ADMIN),
                "live_settings": Op(self.live_settings, rpc.READ),
                "samples": Op(self.samples, rpc.READ)}

    # ----- the admin's changes

    def set_log_levels(self, name: str, levels: dict) -> dict:
        """Set or clear loggers' levels: ``levels`` is ``{logger: {"level": "DEBUG", "seconds":
        30} or None}`` (None, or level "CLEAR": back to its own level now; seconds None or 0:
        until cleared). Answers the settings in force."""
        try:
            changes = live.log_level_changes(levels)
        except ValueError as exc:
            raise rpc.RpcError(str(exc)) from None
        tid, record = self._change(name, lambda record, now: {
            live.LOG_LEVELS: live.with_log_levels(record.get(live.LOG_LEVELS), changes, now)})
        for logger, (level, seconds) in changes.items():
            if level is None:
                self._event(tid, "log-level", f"log level of {logger} cleared", logger=logger)
            else:
                lasting = f"for {seconds:g} s" if seconds else "until cleared"
                self._event(tid, "log-level", f"log level of {logger} set to {level} {lasting}",
                            logger=logger, level=level, seconds=seconds)
        return self._shown(record)

    def debug(self, name: str, percent: float | None = None, component: str | None = None,
              seconds: float | None = None) -> dict:
        """Sample ``percent`` of the tuples ``component`` (None: every component) emits, for
        ``seconds`` (None: until turned off), or turn it off (``percent`` None). Answers the
        settings in force."""
        def change(record: dict, now: float) -> dict:
            components = sorted(record.get("summary") or {})
            if component is not None and component not in components:
                raise ValueError(f"topology {record.get('name')!r} has no component "
                                 f"{component!r} (it has {', '.join(components)})")
            return {live.SAMPLING: live.with_sampling(record.get(live.SAMPLING), component,
                                                      percent, seconds, now)}

        tid, record = self._change(name, change)
        which = f"component {component}" if component else "every component"
        if percent is None:
            self._event(tid, "debug", f"tuple sampling of {which} turned off",
                        component=component)
        else:
            lasting = f"for {seconds:g} s" if seconds else "until turned off"
            self._event(tid, "debug", f"tuple sampling of {which} at {percent:g}% {lasting}",
                        component=component, percent=percent, seconds=seconds)
        return self._shown(record)

    def _change(self, name: str, change: Callable[[dict, float], dict]) -> tuple[str, dict]:
        """Rewrite topology ``name``'s record with what ``change(record, now)`` returns merged
        in; its ValueError is the request's refusal."""
        self._require_leader()
        with self._lock:
            tid, record = self._find(name)
            if record.get("status") == KILLED:
                raise rpc.RpcError(f"topology {record.get('name')!r} is being killed")
            try:
                record.update(change(record, self._clock()))
            except ValueError as exc:
                raise rpc.RpcError(str(exc)) from None
            self._state().set_topology(tid, record)
        return tid, record

    # ----- reads

    def live_settings(self, name: str) -> dict:
        """The log levels and sampling in force: ``{"log_levels": ..., "sampling": ...}`` as
        the record holds them (``until`` in epoch seconds, None: until cleared)."""
        return self._shown(self._find(name).record)

    def samples(self, name: str, component: str | None = None, limit: int = 100) -> list[dict]:
        """The newest ``limit`` tuple samples (of ``component``, or every one), oldest first:
        each {"time", "component", "task", "stream", "values", "to_tasks"} and, where known,
        "msg_id", "roots" (ints), "note" (what was cut), with the worker's "host" and "port".
        See the module docstring for where they come from."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise rpc.RpcError(f"limit must be a positive whole number, got {limit!r}")
        tid, _record = self._find(name)
        found = []
        for snapshot in self._snapshots(tid):
            worker = snapshot.get("worker") or {}
            samples = snapshot.get("samples")
            if not isinstance(samples, list):
                continue
            for sample in samples:
                if isinstance(sample, dict) and isinstance(sample.get("time"), (int, float)) and (
                        component is None or sample.get("component") == component):
                    found.append({**sample, "host": worker.get("host"),
                                  "port": worker.get("port")})
        found.sort(key=lambda sample: sample["time"])
        return found[-min(limit, MAX_SAMPLES):]

    # ----- the monitor's pass

    def expire(self, topology_id: str, record: dict) -> None:
        """Remove the entries of ``record`` (topology ``topology_id``'s, just read) whose time
        ran out, and record each in the event history. The monitor calls it with nimbus's lock
        held."""
        now = self._clock()
        gone = {key: sorted(set(record.get(key) or {}) - set(live.in_force(record.get(key), now)))
                for key in (live.LOG_LEVELS, live.SAMPLING)}
        if not any(gone.values()):
            return
        for key in gone:
            record[key] = live.in_force(record.get(key), now)
        self._state().set_topology(topology_id, record)
        for logger in gone[live.LOG_LEVELS]:
            self._event(topology_id, "log-level", f"log level of {logger} expired: back to its "
                        f"own", logger=logger)
        for component in gone[live.SAMPLING]:
            which = ("every component" if component == live.ALL_COMPONENTS
                     else f"component {component}")
            self._event(topology_id, "debug", f"tuple sampling of {which} expired",
                        component=None if component == live.ALL_COMPONENTS else component)

    def _event(self, topology_id: str, kind: str, text: str, **detail: Any) -> None:
        log.info("topology %s: %s", topology_id, text)
        try:
            self._record_event(topology_id, kind, text, **detail)
        except Exception:   # the change is made: a history that cannot take it must not undo it
            log.exception("could not record the event %r of %s", text, topology_id)

    def _shown(self, record: dict) -> dict:
        now = self._clock()
        return {key: live.in_force(record.get(key), now)
                for key in (live.LOG_LEVELS, live.SAMPLING)}
