"""A supervisor's node service: what nimbus asks of one node on a user's behalf, starting with
its log files (Storm's logviewer, behind nimbus).

    service = NodeService(logs_dir(data_dir), bind, port, host, security, in_use)
    service.start()     # its address goes in the supervisor's ZooKeeper record, as "service"
    service.stop()

An ``rpc.RpcServer`` on a port of its own, with the cluster's keys as nimbus's server has them
(in a ZAP domain of its own), that answers the daemons only (``rpc.DAEMON``): nimbus checks the
user's own role, then calls here with its daemon credentials (log_service.py). It reads only
regular files under its logs directory (``log_files.resolve`` says why it refuses a name).

Operations (more come with ``add_operation``, or a method and a line in ``operations``):

- ``list_files(topology_id=None)``: the files of known kinds (log_files.list_files), every one
  or a topology's workers';
- ``read_file(file, offset=0, length=MAX_READ_BYTES, from_end=False, inode=None, grep=None,
  component=None, task=None, since=None, redacted=False)``: whole records of one file from
  ``offset`` (from its end with ``from_end``), with a filter only those wanted (log_search.py;
  ``redacted``: ``grep`` matched against the text as a reader without admin access sees it),
  scanning up to
  ``SCAN_BYTES`` to find them; ``{"file", "data", "start", "next", "size", "inode", "mtime",
  "eof", "restarted"}``: the next read begins at "next"; "eof": none is worth making now. A reader
  that follows a file passes the ``inode`` it read: after a rotation the rest of that file is read
  under its rotated name ("file" says which), and if it is gone, or was cut shorter than ``offset``,
  the current file from its start ("restarted").

Its own thread keeps the node's logs bounded: every ``HOUSEKEEPING_SECS`` each worker's raw
output (``worker.out``) is cut to ``max_bytes``; every ``RETENTION_CHECK_SECS`` the directories
of topologies no longer here that were quiet for ``log_files.RETENTION_SECS`` are removed.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

import zmq

from ..repeats import Repeats
from . import rpc
from .log_files import (
    MAX_READ_BYTES,
    WORKER_OUT,
    WORKERS_DIR,
    bound_output,
    find_by_inode,
    list_files,
    read_range,
    remove_old_workers,
    resolve,
)
from .log_search import RecordFilter, select, whole_records
from .names import check_topology_id
from .security import DAEMON_USER, Security

log = logging.getLogger(__name__)

# The port a supervisor's node service listens on unless told (`stormlet supervisor
# --service-port`); 0 takes any free one (nimbus finds it in ZooKeeper either way).
DEFAULT_PORT = 6628
# Its ZAP domain (see Security.secure_rpc_server).
DOMAIN = "node"
# How much of a file one filtered read looks through, and for how long, to find what it wants.
SCAN_BYTES = 8 * 1024 * 1024
SCAN_SECS = 3.0
HOUSEKEEPING_SECS = 5.0
RETENTION_CHECK_SECS = 3600.0


class NodeServiceError(Exception):
    """The node service cannot serve (its port is taken, say); the message says what to do."""


class NodeService:
    def __init__(self, logs_dir: Path, bind: str, port: int, host: str,
                 security: Security | None = None,
                 in_use: Callable[[], set[str]] = set,
                 output_max_bytes: int = 20 * 1024 * 1024):
        """``logs_dir``: the directory it serves. It listens on ``bind``:``port`` (0: any)
        and is reached at ``host``. ``in_use``: the topologies this node runs or is assigned
        (their logs are never removed). ``output_max_bytes``: how large a worker's raw output
        may grow (log_files.bound_output)."""
        self.logs_dir = Path(logs_dir)
        self.bind = bind
        self.port = port
        self.host = host
        self.security = security or Security()
        self.in_use = in_use
        self.output_max_bytes = output_max_bytes
        self.stopping = threading.Event()
        self.address: str | None = None   # once started
        self._repeats = Repeats(log)   # a housekeeping failure that lasts: once a minute
        self._threads: list[threading.Thread] = []
        self._more: dict[str, rpc.Operation] = {}   # add_operation's

    def operations(self) -> dict[str, rpc.Operation]:
        """What it answers: the daemons' only (see the module doc)."""
        Op, daemon = rpc.Operation, rpc.DAEMON
        return {
            "list_files": Op(self.list_files, daemon),
            # Slow: a filtered read looks through megabytes; the listing goes on meanwhile.
            "read_file": Op(self.read_file, daemon, slow=True),
            **self._more,
        }

    def add_operation(self, name: str, operation: rpc.Operation) -> None:
        """Answer ``name`` with ``operation`` too, from ``start`` on: what the supervisor does
        for nimbus beyond reading files (a worker's stack dump, a profile), with what only it
        knows (its workers' pids)."""
        if self.address is not None:
            raise RuntimeError(f"add {name} before the node service starts")
        self._more[name] = operation

    def start(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        try:
            server = rpc.RpcServer(f"tcp://{self.bind}:{self.port}", self.operations(),
                                   self.stopping, self.security, domain=DOMAIN)
        except zmq.ZMQError as exc:
            raise NodeServiceError(f"this node's service (its logs, for nimbus) cannot listen "
                                   f"on {self.bind}:{self.port}: {exc}; choose another "
                                   f"--service-port (0: any free port)") from None
        self.port = int(server.endpoint.rsplit(":", 1)[1])
        self.address = f"tcp://{self.host}:{self.port}"
        for target, name in ((server.serve, "rpc"), (self._keep_bounded, "housekeeping")):
            thread = threading.Thread(target=target, name=f"node-service-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("node service serving %s on %s", self.logs_dir, server.endpoint)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=5)

    # ----- operations

    def list_files(self, topology_id: str | None = None) -> list[dict]:
        if topology_id is not None:
            check_topology_id(topology_id)
        return list_files(self.logs_dir, topology_id)

    def read_file(self, file: str, offset: int = 0, length: int = MAX_READ_BYTES,
                  from_end: bool = False, inode: int | None = None, grep: str | None = None,
                  component: str | None = None, task: int | None = None,
                  since: float | None = None, redacted: bool = False) -> dict[str, Any]:
        wanted = RecordFilter(grep, component, task, since, redacted)
        path = resolve(self.logs_dir, file)
        restarted = False
        if inode is not None and not from_end:
            followed = find_by_inode(path, inode)
            if followed is None:
                offset, restarted = 0, True   # rotated out of reach: the current one afresh
            else:
                path = followed
        if not isinstance(length, int) or length < 0:
            raise ValueError(f"length must be a whole number of at least 0, not {length!r}")
        length = min(length, SCAN_BYTES if wanted.active else MAX_READ_BYTES)
        try:
            chunk = read_range(path, offset, length, from_end)
            if inode is not None and not from_end and offset > chunk.size:
                # Cut shorter than where its follower was (log_files.bound_output): afresh.
                chunk, restarted = read_range(path, 0, length), True
        except OSError as exc:
            raise ValueError(f"cannot read {file!r}: {exc.strerror}") from None
        records, next_offset = whole_records(chunk, from_end)
        start = records[0].offset if records else chunk.start
        stopped = None
        if wanted.active:
            records, stopped = select(records, wanted, MAX_READ_BYTES,
                                      time.monotonic() + SCAN_SECS)
            if stopped is not None:
                next_offset = stopped
        return {"file": path.relative_to(self.logs_dir).as_posix(),
                "data": b"".join(record.data for record in records), "start": start,
                "next": next_offset, "size": chunk.size, "inode": chunk.inode,
                "mtime": chunk.mtime,
                # Nothing more to read now: what is held back (a line still being written, and
                # the record before it) comes with a later read.
                "eof": chunk.end >= chunk.size and stopped is None,
                "restarted": restarted}

    # ----- keeping the node's logs bounded

    def _keep_bounded(self) -> None:
        last_retention = 0.0
        while not self.stopping.wait(HOUSEKEEPING_SECS):
            try:
                for output in self.logs_dir.glob(f"{WORKERS_DIR}/*/*/{WORKER_OUT}"):
                    if bound_output(output, self.output_max_bytes):
                        log.info("cut %s to its last %d bytes (its worker writes much to stdout "
                                 "or stderr outside Python's streams)", output,
                                 self.output_max_bytes)
                if time.monotonic() - last_retention >= RETENTION_CHECK_SECS:
                    last_retention = time.monotonic()
                    for tid in remove_old_workers(self.logs_dir, self.in_use()):
                        log.info("removed the worker logs of %s: it left this node long ago",
                                 tid)
            except Exception as exc:
                self._repeats.warning("housekeeping", "keeping the logs in %s bounded failed "
                                      "(%s: %s); it tries again every %.0f s", self.logs_dir,
                                      type(exc).__name__, exc, HOUSEKEEPING_SECS)
            else:
                self._repeats.clear("housekeeping")


def call_node(security: Security, supervisor: str, info: dict, op: str, timeout: float,
              purpose: str, **args: Any) -> Any:
    """``op`` on the node service of ``supervisor`` (``info``: its record in ZooKeeper), as a
    daemon: how nimbus reads a node's logs and looks into its workers for a user whose role it
    checked. ``RpcError`` saying which node and why; ``purpose`` ends the message for a node
    that serves nothing ("serve its logs")."""
    where = f"{info.get('host')} (supervisor {supervisor})"
    address = info.get("service")
    if not isinstance(address, str):
        raise rpc.RpcError(f"{where} runs no node service: a stormlet too old to {purpose}")
    try:
        return rpc.call(address, op, timeout=timeout,
                        credentials=security.rpc_client_keys(DAEMON_USER), **args)
    except rpc.NimbusUnavailable:
        raise rpc.RpcError(f"{where} did not answer within {timeout:g} s") from None
    except rpc.RpcError as exc:
        raise rpc.RpcError(f"{where}: {exc}") from None
