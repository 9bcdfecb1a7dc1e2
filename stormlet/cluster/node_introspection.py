"""A supervisor's introspection operations: what nimbus asks of one of the node's workers on an
admin's behalf (introspection_service.py), served by the node service (node_service.py).

    operations = NodeIntrospection(supervisor.workers.get, log_dir, supervisor.restart_worker,
                                   "h1").operations()
    for name, operation in operations.items():
        node_service.add_operation(name, operation)

Each names its worker by topology id and port, and is refused unless that port runs a worker
of that topology now (the pid stays the supervisor's to know: nimbus never names a process):

- ``worker_stacks(topology_id, port, asked_by=None)``: every thread's stack
  (worker_introspection.stack_dump), ``{"topology_id", "port", "pid", "text"}``;
- ``worker_profile(topology_id, port, seconds, rate=100, idle=False, native=False,
  asked_by=None)``: a CPU profile of the next ``seconds`` as an SVG flame graph, also kept in
  the worker's log directory (``profile-<UTC time>.svg``, the newest ``PROFILES_KEPT``), where
  ``stormlet logs`` and the UI's log pages find it later; ``{"topology_id", "port", "pid",
  "file": its name under the logs directory, "size", "svg": its bytes, or None over
  MAX_PROFILE_BYTES}``;
- ``worker_restart(topology_id, port, reason, asked_by=None)``: the worker stopped and started
  again by the supervisor's loop (worker_introspection.Restarts), ``{"topology_id", "port",
  "pid": the stopped worker's}``.

All three are the daemons' (``rpc.DAEMON``) and slow: they run on the node service's pool of
two, so a dump never holds up a listing. Nimbus runs one profile at a time on a node, so the
other thread stays free for log reads while it lasts.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from . import rpc
from .log_files import PROFILE_PREFIX, PROFILE_SUFFIX, profile_file_name, worker_file_name
from .names import check_topology_id
from .worker_introspection import (
    DEFAULT_PROFILE_RATE,
    DEFAULT_RESTART_TIMEOUT_SECS,
    DEFAULT_STACKS_TIMEOUT_SECS,
    IntrospectionError,
    check_profile_seconds,
    profile,
    stack_dump,
)

log = logging.getLogger(__name__)

STACKS_OP, PROFILE_OP, RESTART_OP = "worker_stacks", "worker_profile", "worker_restart"
# A worker's profiles kept in its log directory, the newest.
PROFILES_KEPT = 5
# The largest flame graph sent back (a larger one stays in the log directory only, read in
# pieces through the log reading path): what nimbus keeps of a profile is bounded by it.
MAX_PROFILE_BYTES = 16 * 1024 * 1024
# A text an operator gave (a reason, who asked): one line in a log and an event.
MAX_TEXT = 500


class _Process(Protocol):
    pid: int


class _Worker(Protocol):
    """What the operations read of a supervisor's worker (supervisor.WorkerProcess)."""

    @property   # read-only: a Popen satisfies _Process only so
    def process(self) -> _Process: ...

    topology_id: str


class NodeIntrospection:
    def __init__(self, worker: Callable[[int], _Worker | None],
                 log_dir: Callable[[str, int], Path],
                 restart: Callable[..., dict], host: str):
        """``worker(port)``: the worker running on ``port`` now, if any; ``log_dir(topology_id,
        port)``: its log directory; ``restart(topology_id, port, reason, timeout)``: the
        supervisor's ``restart_worker``; ``host``: this node's, for messages."""
        self._worker = worker
        self._log_dir = log_dir
        self._restart = restart
        self.host = host

    def operations(self) -> dict[str, rpc.Operation]:
        Op, daemon = rpc.Operation, rpc.DAEMON
        return {STACKS_OP: Op(self.stacks, daemon, slow=True),
                PROFILE_OP: Op(self.profile, daemon, slow=True),
                RESTART_OP: Op(self.restart, daemon, slow=True)}

    def _running(self, topology_id: str, port: int) -> _Worker:
        """The worker of ``topology_id`` on ``port``, or IntrospectionError saying why none."""
        check_topology_id(topology_id)
        if isinstance(port, bool) or not isinstance(port, int):
            raise IntrospectionError(f"a worker's port is a whole number, not {port!r}")
        worker = self._worker(port)
        if worker is None or worker.topology_id != topology_id:
            raise IntrospectionError(f"no worker of {topology_id} runs on port {port} of "
                                     f"{self.host} now (it may be starting, or have moved)")
        return worker

    def stacks(self, topology_id: str, port: int, asked_by: str | None = None) -> dict[str, Any]:
        worker = self._running(topology_id, port)
        pid = worker.process.pid
        log.info("dumping the stacks of worker %s:%d of %s (pid %d)%s", self.host, port,
                 topology_id, pid, _by(asked_by))
        text = stack_dump(pid, self._log_dir(topology_id, port), DEFAULT_STACKS_TIMEOUT_SECS)
        return {"topology_id": topology_id, "port": port, "pid": pid, "text": text}

    def profile(self, topology_id: str, port: int, seconds: int,
                rate: int = DEFAULT_PROFILE_RATE, idle: bool = False, native: bool = False,
                asked_by: str | None = None) -> dict[str, Any]:
        seconds = check_profile_seconds(seconds)
        worker = self._running(topology_id, port)
        pid = worker.process.pid
        log.info("profiling worker %s:%d of %s (pid %d) for %d s%s", self.host, port,
                 topology_id, pid, seconds, _by(asked_by))
        svg = _whole_lines(profile(pid, seconds, rate=rate, idle=bool(idle),
                                   native=bool(native)))
        directory = self._log_dir(topology_id, port)
        path = keep_profile(directory, svg, time.time())
        return {"topology_id": topology_id, "port": port, "pid": pid,
                "file": worker_file_name(topology_id, port, path.name),
                "size": len(svg), "svg": svg if len(svg) <= MAX_PROFILE_BYTES else None}

    def restart(self, topology_id: str, port: int, reason: str,
                asked_by: str | None = None) -> dict[str, Any]:
        self._running(topology_id, port)
        reason = one_line(reason, "reason") or "no reason given"
        why = f"{reason} (asked by {one_line(asked_by, 'asked_by')})" if asked_by else reason
        return self._restart(topology_id, port, why, timeout=DEFAULT_RESTART_TIMEOUT_SECS)


def keep_profile(directory: Path, svg: bytes, when: float) -> Path:
    """Write ``svg`` in ``directory`` as a profile taken at ``when``, and remove all but the
    newest ``PROFILES_KEPT`` there; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    name = profile_file_name(when)
    path, n = directory / name, 1
    while path.exists():   # two in one second
        path = directory / f"{name[:-len(PROFILE_SUFFIX)]}-{n}{PROFILE_SUFFIX}"
        n += 1
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(svg)
    os.replace(partial, path)
    kept = sorted(directory.glob(f"{PROFILE_PREFIX}*{PROFILE_SUFFIX}"),
                  key=lambda p: (p.stat().st_mtime, p.name))
    for old in kept[:-PROFILES_KEPT]:
        old.unlink(missing_ok=True)
    return path


def _whole_lines(svg: bytes) -> bytes:
    """``svg`` ending with a newline, as py-spy's does not: the log reading path hands out whole
    lines only (log_search.whole_records), and would keep its last one back."""
    return svg if svg.endswith(b"\n") else svg + b"\n"


def one_line(text: object, what: str) -> str:
    """``text`` (a reason, who asked) as one line of at most MAX_TEXT characters."""
    if text is None:
        return ""
    if not isinstance(text, str):
        raise IntrospectionError(f"{what} is text, not {text!r}")
    return " ".join(text.split())[:MAX_TEXT]


def _by(asked_by: str | None) -> str:
    return f", asked by {one_line(asked_by, 'asked_by')}" if asked_by else ""
