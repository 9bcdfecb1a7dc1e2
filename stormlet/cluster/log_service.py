"""Nimbus's log operations: a topology's worker logs, wherever they are in the cluster, read
through each supervisor's node service (node_service.py) on a reader's behalf.

Both are the read role's (``rpc.READ``) and any nimbus's, leader or standby. Nimbus calls the
node services with its own daemon credentials, having checked the caller's role itself; a node
reads only files under its logs directory, and nimbus asks only for the topology's own worker
files.

``name`` is a topology's name or id, or the id of a topology that is gone (killed: its workers'
logs stay on the nodes for a while, and tell why it died).

- ``logs_list(name)``: every file of the topology's workers on every live supervisor, each with
  the supervisor, host and port it is on and the executors the assignment places on that slot
  now (``[component, [task, ...]]``), plus "unanswered": a line for each supervisor that did not
  answer within ``NODE_TIMEOUT_SECS`` or cannot be reached ("h2 (supervisor s2) did not answer
  within 5 s"). One node out of reach never fails the listing of the others.
- ``logs_read(name, supervisor, file, offset=0, length=None, from_end=False, inode=None,
  grep=None, component=None, task=None, since=None)``: one read of one file (its name as the
  listing gives it), as the node service answers it (node_service.py), with the supervisor, host
  and port. A caller who is not the admin gets its text with credentials redacted, as with
  ``errors``, and its ``grep`` matched against that redacted text (``redacted``, imposed by the
  operation), so that no pattern can probe for what it may not read.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..redaction import redact_text
from . import rpc
from .log_files import DAEMON, MAX_READ_BYTES, identify
from .names import is_topology_id
from .node_service import call_node
from .security import Security
from .zk_state import ClusterState, FoundTopology, assigned_executors

log = logging.getLogger(__name__)

# How long nimbus waits for one node's answer (they are asked at once, so a listing takes this
# long at most however many are out of reach).
NODE_TIMEOUT_SECS = 5.0
# How long a caller of logs_list or logs_read waits for nimbus: its wait on a node, which may
# be scanning a file for a filter (node_service.SCAN_SECS), with room to spare.
CALLER_TIMEOUT_SECS = 30.0
MAX_PARALLEL_NODES = 16


class LogService:
    def __init__(self, state: Callable[[], ClusterState],
                 find: Callable[[str], FoundTopology], security: Security):
        """``find``: a topology's id and record from its name or id (RpcError if none)."""
        self._state = state
        self._find = find
        self.security = security

    def _topology(self, name: str) -> str:
        """The id of the topology ``name`` names (its name or id), or ``name`` itself if it is
        the id of one that is gone: its workers' logs stay on the nodes a while
        (log_files.RETENTION_SECS), which is when they are wanted most."""
        try:
            return self._find(name).topology_id
        except rpc.RpcError:
            if is_topology_id(name):
                return name
            raise

    def list(self, name: str) -> dict[str, Any]:
        topology_id = self._topology(name)
        state = self._state()
        executors = assigned_executors(state.checked_assignment(topology_id) or {})
        placed: dict[tuple[str, int], list] = {}
        for executor in executors:
            placed.setdefault((executor.supervisor, executor.port), []).append(
                [executor.component, executor.tasks])
        nodes = state.supervisors()
        unanswered = [f"supervisor {sid} ({host}), assigned workers of {topology_id}, is not "
                      f"running: its logs cannot be read now"
                      for sid, host in sorted({(e.supervisor, e.host) for e in executors})
                      if sid not in nodes]
        files: list[dict] = []
        if nodes:
            with ThreadPoolExecutor(min(len(nodes), MAX_PARALLEL_NODES),
                                    thread_name_prefix="logs-list") as pool:
                asked = {sid: pool.submit(self._call, sid, info, "list_files",
                                          topology_id=topology_id)
                         for sid, info in sorted(nodes.items())}
                for sid, answer in asked.items():
                    try:
                        found = answer.result()
                    except rpc.RpcError as exc:
                        unanswered.append(str(exc))
                        continue
                    host = nodes[sid].get("host")
                    files += [{**entry, "supervisor": sid, "host": host,
                               "executors": placed.get((sid, entry.get("port")), [])}
                              for entry in found]
        return {"topology_id": topology_id, "files": files, "unanswered": unanswered}

    def read(self, name: str, supervisor: str, file: str, offset: int = 0,
             length: int | None = None, from_end: bool = False, inode: int | None = None,
             grep: str | None = None, component: str | None = None, task: int | None = None,
             since: float | None = None, redacted: bool = False) -> dict[str, Any]:
        topology_id = self._topology(name)
        described = identify(file) if isinstance(file, str) else None
        if described is None or described.kind == DAEMON or described.topology_id != topology_id:
            raise rpc.RpcError(f"{file!r} is not a file of {topology_id}'s workers: "
                               f"logs_list names them")
        info = self._state().supervisors().get(supervisor)
        if info is None:
            raise rpc.RpcError(f"supervisor {supervisor!r} is not running: its logs cannot be "
                               f"read now")
        answer = self._call(supervisor, info, "read_file", file=file, offset=offset,
                            length=MAX_READ_BYTES if length is None else length,
                            from_end=from_end, inode=inode, grep=grep, component=component,
                            task=task, since=since, redacted=redacted)
        return {**answer, "supervisor": supervisor, "host": info.get("host"),
                "port": described.port}

    def _call(self, supervisor: str, info: dict, op: str, **args: Any) -> Any:
        return call_node(self.security, supervisor, info, op, NODE_TIMEOUT_SECS,
                         "serve its logs", **args)


def shown_to_readers(answer: dict[str, Any]) -> dict[str, Any]:
    """A ``logs_read`` answer as a caller without admin access gets it: credentials in its text
    redacted (redaction.py), as ``errors`` does."""
    data = answer.get("data")
    if not isinstance(data, bytes) or not data:
        return answer
    return {**answer, "data": redact_text(data.decode("utf-8", "replace")).encode("utf-8")}
