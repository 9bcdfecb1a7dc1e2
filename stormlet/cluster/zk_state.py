"""The cluster's state in ZooKeeper: every path and its JSON, in one place.

    <root>/nimbus/election        kazoo election among nimbus processes
    <root>/nimbus/leader          ephemeral: {"host", "port"} of the leading nimbus
    <root>/nimbus/hosts/<id>      ephemeral: every live nimbus, leader or standby
    <root>/supervisors/<id>       ephemeral: {"host", "slots", "started"}
    <root>/heartbeats/<id>        a supervisor's report on its workers (metrics, recent errors),
                                  rewritten every few seconds
    <root>/topologies/<tid>       {"name", "status", "conf", "launched", "summary", ...}
    <root>/assignments/<tid>      {"executors": [[component, tasks, supervisor, host, port]], ...}
                                  (each executor an ``Executor`` when read: see assigned_executors)
    <root>/submissions/<tid>      a topology accepted without waiting, prepared or refused
                                  (``Submission``, submissions.py); no worker reads it; made
                                  with the first, so a cluster without any has no node
    <root>/offsets/<spout>/<p>    an offset spout's commit for one partition (written by
                                  sources/offset_store.py; offsets_path, offset_path)
    <root>/blobs/<key>            a blob store key's current version: {"sha256", "version",
                                  "size", "created", "updated"} (blob_service.py); made with
                                  the first blob, so a cluster without blobs has no node
    <root>/events/<tid>           a topology's event history (events.py; events_path): {"name",
                                  "limit", "submitted", "removed"}, made by nimbus at submit
                                  and deleted events.KEEP_SECS after the topology's removal
    <root>/events/<tid>/e-<seq>   one event, a sequential node: {"time", "kind", "text",
                                  "writer", "detail"}, written by nimbus or a supervisor

Only small state lives here. Topology code and blobs stay with nimbus (they can exceed
ZooKeeper's 1 MB node limit). A node that does not parse is logged with its path and skipped, never
fatal.

With a cluster secret every node carries a digest ACL (``Security``): the daemons' nodes are
theirs (read-only clients read them, workers read only where the leader is); a topology's record
and assignment are readable by its own identity and no other topology's; the offsets root is the
daemons', and nimbus makes each spout id's node there for the topology that commits under it
(``claim_offsets``), so no topology's workers can create, read or write another's offsets. Event
histories have the daemons' ACL: nimbus and supervisors write them, read-only clients read them,
workers need not.
Nimbus refuses a root it did not make (``check_root``): a node planted before it started, with
an ACL of someone else's, is never adopted.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)

from ..zookeeper import (  # noqa: F401  (the cluster's layout: re-exported)
    DEFAULT_HOSTS,
    DEFAULT_ROOT,
    DEFAULT_SESSION_TIMEOUT,
    cluster_root,
    connect,
    connect_timeout,
    offset_path,
    offsets_path,
    spout_offsets_path,
)
from ..zookeeper_auth import same_acl
from .names import is_digest
from .security import Security, SecurityError
from .submissions import Submission

if TYPE_CHECKING:
    # kazoo.client is slow to import: the command line and the sources import this module for
    # its paths and defaults alone, and only a daemon connects.
    from kazoo.client import KazooClient
    from kazoo.recipe.election import Election

log = logging.getLogger(__name__)


#: What a ZooKeeper call raises when the server is out of reach or the session ended: on a real
#: network an expected condition, which a daemon logs in one line (``describe``), no traceback.
CONNECTION_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)


def describe(exc: BaseException) -> str:
    """An exception in a few words: its type, and its text when it has one (kazoo's errors
    mostly have none, so the text alone would be empty)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def events_path(root: str | None = DEFAULT_ROOT) -> str:
    """Where topologies' event histories are kept: ``<root>/events/<topology id>/e-<seq>``
    (see ``events.py``, which owns what is under it)."""
    return f"{cluster_root(root)}/events"


def leader_path(root: str | None = DEFAULT_ROOT) -> str:
    """The leading nimbus's ephemeral record, ``{"host", "port"}``: where clients and workers
    find it."""
    return f"{cluster_root(root)}/nimbus/leader"


def rpc_address(info: dict) -> str:
    """The ZeroMQ address of a nimbus from its leader or hosts record."""
    return f"tcp://{info['host']}:{info['port']}"


def decode_node(path: str, data: bytes) -> dict | None:
    """A node's JSON object, or None (logged with the path) when it is not one. For readers
    that get node data themselves, such as watches."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("ignoring corrupt ZooKeeper node %s: %s", path, exc)
        return None
    if not isinstance(value, dict):
        log.warning("ignoring ZooKeeper node %s: expected a JSON object", path)
        return None
    return value


class Slot(NamedTuple):
    """A worker slot: a port of a supervisor's host."""
    supervisor: str
    host: str
    port: int


class Executor(NamedTuple):
    """One executor's place in an assignment. A NamedTuple, so it is stored as the same JSON
    list as ever: ``[component, [task, ...], supervisor, host, port]``."""
    component: str
    tasks: list[int]
    supervisor: str
    host: str
    port: int

    @property
    def slot(self) -> Slot:
        """The worker slot that runs this executor."""
        return Slot(self.supervisor, self.host, self.port)


def valid_assignment(value: dict) -> bool:
    """An assignment's shape: ``{"executors": [[component, [task, ...], supervisor, host,
    port], ...], "tenures": {slot: version, ...}, ...}`` (no tenures in one written before
    them: see tenure.py). Anything else is treated as corrupt."""
    executors = value.get("executors")
    if not isinstance(executors, list):
        return False
    if "tenures" in value and not valid_tenures(value["tenures"]):
        return False
    for entry in executors:
        if not (isinstance(entry, list) and len(entry) == len(Executor._fields)):
            return False
        e = Executor(*entry)
        if not (isinstance(e.component, str) and isinstance(e.tasks, list)
                and all(isinstance(t, int) for t in e.tasks) and isinstance(e.supervisor, str)
                and isinstance(e.host, str) and isinstance(e.port, int)):
            return False
    return True


def valid_tenures(value: Any) -> bool:
    """The shape of an assignment's ``tenures``: slot keys to versions."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in value.items())


def assigned_executors(assignment: dict | None) -> list[Executor]:
    """The executors of an assignment as read from ZooKeeper (none for no assignment). Raises
    ``TypeError`` for an entry that is not five fields (``valid_assignment`` says beforehand)."""
    return [Executor(*e) for e in (assignment or {}).get("executors", [])]


def slot_executors(assignment: dict, supervisor_id: str, port: int) -> list[Executor]:
    """The executors an assignment gives to one worker slot."""
    return [e for e in assigned_executors(assignment)
            if e.supervisor == supervisor_id and e.port == port]


class BlobRecord(NamedTuple):
    """A blob store key's current version, as its node holds it: the content's SHA-256 (hex:
    the name of its file in nimbus's store and in every supervisor's cache), the version (1 at
    upload, one more at each update), its size in bytes, and when it was first uploaded and
    last changed (Unix time)."""
    sha256: str
    version: int
    size: int
    created: float
    updated: float

    @classmethod
    def of(cls, path: str, value: dict | None) -> BlobRecord | None:
        """The record in a node's JSON, or None (logged with ``path``) when it is not one: its
        digest becomes a file name on every node, so it is checked before anything uses it."""
        if value is None:
            return None
        try:
            record = cls(**{field: value[field] for field in cls._fields})
        except KeyError as exc:
            log.warning("ignoring ZooKeeper node %s: a blob record without %s", path, exc)
            return None
        whole = all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                    for n in (record.version, record.size))
        times = all(isinstance(t, (int, float)) for t in (record.created, record.updated))
        if not (is_digest(record.sha256) and whole and times):
            log.warning("ignoring ZooKeeper node %s: not a valid blob record", path)
            return None
        return record


class FoundTopology(NamedTuple):
    """A running topology found by its name or id (nimbus's ``_find_any``): its id and its
    record (the JSON of its node under ``topologies``)."""

    topology_id: str
    record: dict


class ForeignNodeError(SecurityError):
    """A node under the cluster's root that this cluster did not make: refused, never adopted."""


ASSIGNMENTS, SUPERVISORS = "assignments", "supervisors"
#: The nodes under the root that nimbus makes at start, each a parent of records.
STATE_DIRS = ("nimbus/hosts", SUPERVISORS, "heartbeats", "topologies", ASSIGNMENTS)


def assignments_path(root: str | None = DEFAULT_ROOT) -> str:
    """Where nimbus writes each topology's assignment: ``<root>/assignments/<topology id>``."""
    return f"{cluster_root(root)}/{ASSIGNMENTS}"


def supervisors_path(root: str | None = DEFAULT_ROOT) -> str:
    """Where each live supervisor registers, ephemeral: ``<root>/supervisors/<id>``."""
    return f"{cluster_root(root)}/{SUPERVISORS}"


class ClusterState:
    """The cluster's nodes under ``root``. ``security``: the process's credentials, whose ACLs
    the nodes it writes get (the daemons pass theirs; readers need not). Holding the cluster
    secret, it first refuses a root the cluster did not make (``check_root``); with
    ``adopt_open``, after giving the nodes anyone may use the daemons' ACL (``adopt_open_nodes``;
    how many is ``adopted``)."""

    def __init__(self, client: KazooClient, root: str = DEFAULT_ROOT,
                 security: Security | None = None, adopt_open: bool = False):
        self.client = client
        self.root = cluster_root(root)
        self.security = security or Security()
        self.adopted = 0
        if self.security.holds_secret:
            if adopt_open:
                self.adopted = self.adopt_open_nodes()
            self.check_root()
        for sub in STATE_DIRS:
            client.ensure_path(self._path(sub))

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    # ----- who may touch what (with a cluster secret)

    def ensure_offsets_root(self) -> None:
        """Create the node offset spouts commit under, the daemons' alone (workers commit in
        the spout id nodes ``claim_offsets`` makes for their topology)."""
        path = offsets_path(self.root)
        acl = self.security.zk_acl()
        self.client.ensure_path(path, acl=acl)
        self.client.set_acls(path, acl)

    def secure_topology_nodes(self) -> int:
        """Give each topology's record and assignment the ACL that only its own topology's
        workers read (nodes written by a release that let every worker read them); returns
        how many changed."""
        changed = 0
        for tid, record in self.topologies().items():
            acl = self.security.zk_topology_acl(str(record.get("name")))
            if acl is None:   # security is off: nothing to secure
                continue
            for path in (self.topology_path(tid), self.assignment_path(tid)):
                try:
                    if not same_acl(self.client.get_acls(path)[0], acl):
                        self.client.set_acls(path, acl)
                        changed += 1
                except NoNodeError:
                    continue
        return changed

    def claim_offsets(self, spout_id: str, topology_name: str,
                      running: set[str]) -> None:
        """Make ``spout_id``'s node under the offsets root the topology ``topology_name``'s, so
        its workers may commit there and no other topology's may: create it, keep it when it is
        the topology's already (a resubmission resumes), or take it over when nobody owns it
        (secured by ``adopt_open_nodes``). Raises ``ForeignNodeError`` naming the node when
        another topology owns it (running or not: its commits are that topology's to resume),
        or when it, or a commit in it, was not made by this cluster."""
        path = spout_offsets_path(offsets_path(self.root), spout_id)
        acl = self.security.zk_topology_acl(topology_name, write=True)
        try:
            self.client.create(path, acl=acl)
            return
        except NodeExistsError:
            pass
        current = self._acl_of(path)
        owner = self.security.zk_topology_owner(current)
        if owner is not None and owner != topology_name:
            state = "a running topology" if owner in running else "a topology"
            raise ForeignNodeError(
                f"spout id {spout_id!r} commits its offsets at {path}, which belong to {state} "
                f"named {owner!r}: give the spout another spout_id, or submit this topology as "
                f"{owner!r} to resume from those commits")
        commits = [f"{path}/{child}" for child in self.client.get_children(path)]
        for node in (path, *commits):
            node_acl = current if node == path else self._acl_of(node)
            problem = self.security.zk_acl_problem(node_acl)
            if problem is not None:
                raise ForeignNodeError(f"refusing the offsets node {node}: {problem}; delete it "
                                       f"(with ZooKeeper's super user) if it is not yours")
        if owner is None:   # secured from open nodes: the first topology to claim takes them
            for node in (path, *commits):
                self.client.set_acls(node, acl)
            log.info("topology %s takes over the offsets at %s, which no topology owned",
                     topology_name, path)

    def check_root(self) -> None:
        """Make the root with the daemons' ACL if it is not there; refuse
        (``ForeignNodeError``) a root, or any node under it, that this cluster did not make:
        something planted there before nimbus started would otherwise be taken for cluster
        state. The constructor calls it for a holder of the secret."""
        try:
            self.client.create(self.root, acl=self.security.zk_acl(), makepath=True)
            return
        except NodeExistsError:
            pass
        for path in self._walk():
            try:
                problem = self.security.zk_acl_problem(self._acl_of(path))
            except NoNodeError:   # removed meanwhile
                continue
            if problem is not None:
                raise ForeignNodeError(
                    f"refusing the ZooKeeper root {self.root}: its node {path} was not made by "
                    f"this cluster ({problem}). If this cluster ran without a secret before and "
                    f"you trust what is there, run `stormlet secret adopt-zookeeper` once; "
                    f"else remove {self.root} or choose another --zk-root")

    def adopt_open_nodes(self) -> int:
        """Give every node under the root that anyone may use (made before the cluster had a
        secret) the daemons' ACL; the offsets in it then belong to no topology until one
        claims them (``claim_offsets``). Returns how many changed. For an operator who trusts
        what is there (``stormlet secret adopt-zookeeper``): nimbus adopts nothing itself."""
        acl = self.security.zk_acl()
        changed = 0
        for path in self._walk():
            try:
                if any(entry.id.scheme == "world" for entry in self._acl_of(path)):
                    self.client.set_acls(path, acl)
                    changed += 1
            except NoNodeError:   # removed meanwhile
                continue
        return changed

    def _walk(self) -> list[str]:
        """The root and every node under it, parents before children."""
        found, pending = [], [self.root]
        while pending:
            path = pending.pop()
            try:
                children = self.client.get_children(path)
            except NoNodeError:
                continue
            except NoAuthError:
                children = []   # _acl_of names the node
            found.append(path)
            pending.extend(f"{path}/{child}" for child in children)
        return found

    def _acl_of(self, path: str) -> list:
        """The ACL of ``path``; a node the daemons may not even read is refused."""
        try:
            return self.client.get_acls(path)[0]
        except NoAuthError:
            raise ForeignNodeError(f"the ZooKeeper node {path} is not readable by this "
                                   f"cluster's daemons: it was made by someone else") from None

    # ----- JSON nodes

    def _read(self, path: str) -> Any:
        try:
            data, _stat = self.client.get(path)
        except NoNodeError:
            return None
        return decode_node(path, data)

    def _write(self, path: str, value: dict, ephemeral: bool = False,
               acl: Callable[[], list | None] = lambda: None) -> None:
        """``acl()``: the node's ACL if this creates it (None: the client's default)."""
        data = json.dumps(value, sort_keys=True).encode("utf-8")
        if ephemeral:
            try:
                self.client.create(path, data, acl=acl(), ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                self.client.delete(path)
                self.client.create(path, data, acl=acl(), ephemeral=True, makepath=True)
                return
        try:
            self.client.set(path, data)
        except NoNodeError:
            self.client.create(path, data, acl=acl(), makepath=True)

    def _children(self, *parts: str) -> dict[str, dict]:
        path = self._path(*parts)
        try:
            names = self.client.get_children(path)
        except NoNodeError:
            return {}
        found = {}
        for name in sorted(names):
            value = self._read(f"{path}/{name}")
            if value is not None:
                found[name] = value
        return found

    def _delete(self, path: str) -> None:
        try:
            self.client.delete(path, recursive=True)
        except NoNodeError:
            pass

    # ----- nimbus

    def election(self, identifier: str) -> Election:
        return self.client.Election(self._path("nimbus", "election"), identifier)

    def announce_nimbus(self, nimbus_id: str, info: dict) -> None:
        self._write(self._path("nimbus", "hosts", nimbus_id), info, ephemeral=True)

    def nimbuses(self) -> dict[str, dict]:
        return self._children("nimbus", "hosts")

    def nimbus_addresses(self) -> list[str]:
        """Every live nimbus's RPC address, the leader first."""
        leader = self.leader()
        addresses = [rpc_address(leader)] if leader else []
        for info in self.nimbuses().values():
            if rpc_address(info) not in addresses:
                addresses.append(rpc_address(info))
        return addresses

    def set_leader(self, info: dict) -> None:
        # Every worker reads it: where to report its metrics.
        self._write(leader_path(self.root), info, ephemeral=True,
                    acl=self.security.zk_shared_acl)

    def leader(self) -> dict | None:
        return self._read(leader_path(self.root))

    # ----- supervisors

    def register_supervisor(self, supervisor_id: str, info: dict) -> None:
        self._write(self._path(SUPERVISORS, supervisor_id), info, ephemeral=True)

    def supervisors(self) -> dict[str, dict]:
        return self._children(SUPERVISORS)

    def set_heartbeat(self, supervisor_id: str, report: dict) -> None:
        self._write(self._path("heartbeats", supervisor_id), report)

    def heartbeats(self) -> dict[str, dict]:
        """Every supervisor's latest report, by supervisor id (a dead supervisor's stays)."""
        return self._children("heartbeats")

    # ----- topologies

    def set_topology(self, topology_id: str, record: dict) -> None:
        self._write(self._path("topologies", topology_id), record,
                    acl=lambda: self.security.zk_topology_acl(str(record.get("name"))))

    def topology(self, topology_id: str) -> dict | None:
        return self._read(self._path("topologies", topology_id))

    def topology_path(self, topology_id: str) -> str:
        return self._path("topologies", topology_id)

    def topologies(self) -> dict[str, dict]:
        return self._children("topologies")

    def remove_topology(self, topology_id: str) -> None:
        self._delete(self._path(ASSIGNMENTS, topology_id))
        self._delete(self._path("topologies", topology_id))

    # ----- submissions nimbus prepares in the background (submissions.py)

    def set_submission(self, submission: Submission) -> None:
        """Under the daemons' ACL: workers need none of it, and its config may hold a
        credential."""
        self._write(self._path("submissions", submission.id), submission.record())

    def submission(self, topology_id: str) -> Submission | None:
        path = self._path("submissions", topology_id)
        return Submission.of(path, self._read(path))

    def submissions(self) -> dict[str, Submission]:
        """Every well-formed submission by topology id; a malformed one is logged and left out."""
        found = {}
        for tid, value in self._children("submissions").items():
            submission = Submission.of(self._path("submissions", tid), value)
            if submission is not None and submission.id == tid:
                found[tid] = submission
        return found

    def remove_submission(self, topology_id: str) -> None:
        self._delete(self._path("submissions", topology_id))

    # ----- assignments

    def set_assignment(self, topology_id: str, assignment: dict) -> None:
        """Written after the topology's record, whose name gives a new node its ACL."""
        def acl() -> list | None:
            record = self.topology(topology_id) if self.security.holds_secret else None
            return (None if record is None
                    else self.security.zk_topology_acl(str(record.get("name"))))

        self._write(self._path(ASSIGNMENTS, topology_id), assignment, acl=acl)

    def assignment(self, topology_id: str) -> dict | None:
        """The topology's assignment node as it is, checked for JSON only: see
        ``valid_assignment``, or read it with ``checked_assignment``."""
        return self._read(self._path(ASSIGNMENTS, topology_id))

    def checked_assignment(self, topology_id: str) -> dict | None:
        """The topology's assignment if it is well-formed; None when there is none or its node
        is corrupt (logged with its path, as ``checked_assignments`` does)."""
        return self._checked_assignment(self.assignment_path(topology_id))[0]

    def assignment_path(self, topology_id: str) -> str:
        return self._path(ASSIGNMENTS, topology_id)

    def assignments(self) -> dict[str, dict]:
        return self.checked_assignments()[0]

    def checked_assignments(self) -> tuple[dict[str, dict], set[str]]:
        """The well-formed assignments, and the ids of topologies whose assignment node is
        corrupt (logged with its path). A reader keeps acting on the last good version of a
        corrupt one: treating it as absent would stop that topology's workers."""
        path = self._path(ASSIGNMENTS)
        try:
            names = self.client.get_children(path)
        except NoNodeError:
            return {}, set()
        good, corrupt = {}, set()
        for name in sorted(names):
            value, is_corrupt = self._checked_assignment(f"{path}/{name}")
            if is_corrupt:
                corrupt.add(name)
            elif value is not None:   # else removed since the listing
                good[name] = value
        return good, corrupt

    def _checked_assignment(self, node: str) -> tuple[dict | None, bool]:
        """The well-formed assignment at ``node`` or None, and whether the node is there but
        corrupt (logged with its path)."""
        try:
            data, _stat = self.client.get(node)
        except NoNodeError:
            return None, False
        value = decode_node(node, data)
        if value is not None and not valid_assignment(value):
            log.warning("ignoring ZooKeeper node %s: not a valid assignment", node)
            value = None
        return value, value is None

    # ----- the blob store's keys (their bytes stay on nimbus's disk: blob_store.py)

    def set_blob(self, key: str, record: BlobRecord) -> None:
        self._write(self._path("blobs", key), record._asdict())

    def blob(self, key: str) -> BlobRecord | None:
        path = self._path("blobs", key)
        return BlobRecord.of(path, self._read(path))

    def blobs(self) -> dict[str, BlobRecord]:
        """Every key's well-formed record, by key (none before the first upload); a malformed
        one is logged with its path and left out."""
        found = {}
        for key, value in self._children("blobs").items():
            record = BlobRecord.of(self._path("blobs", key), value)
            if record is not None:
                found[key] = record
        return found

    def remove_blob(self, key: str) -> None:
        self._delete(self._path("blobs", key))
