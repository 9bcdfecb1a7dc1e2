"""Where offset-tracking spouts keep committed offsets: ZooKeeper on a cluster, a directory or
this process's memory in local mode. Every store holds the same JSON record per spout id and
partition:

    {"offset": 1234, "partition": 0, "topic": "events", "task": 3, "time": 1763860000.0,
     "topology": {"id": "wc-1763850000", "name": "wc"}}

``offset`` is the next offset to read: every message below it is done (acked or dead-lettered).

    from stormlet.zookeeper import offsets_path    # where a cluster's spouts commit

    store = ZooKeeperOffsetStore("127.0.0.1:2181", offsets_path())
    store.save("events-reader", 0, record)      # at <offsets path>/events-reader/0
    store.load("events-reader", 0)
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, Protocol

from ..durable import replace_atomically

log = logging.getLogger(__name__)


class OffsetStore(Protocol):
    def load(self, spout_id: str, partition: int) -> dict | None:
        """The committed record, or None if there is none (or it does not parse: logged)."""
        ...

    def save(self, spout_id: str, partition: int, record: dict) -> None:
        ...

    def close(self) -> None:
        ...


def _decode(where: str, data: bytes | str) -> dict | None:
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("ignoring unreadable committed offset at %s: %s", where, exc)
        return None
    if not isinstance(record, dict) or not isinstance(record.get("offset"), int):
        log.warning("ignoring committed offset at %s: not a record with an integer offset", where)
        return None
    return record


class ForeignOffsetError(RuntimeError):
    """A committed offset this topology must not trust: another topology's, or planted."""


class StaleCommit(RuntimeError):
    """A commit that would move back a partition's commit made by the same topology instance:
    another task of it committed that partition since (its tasks moved), so this one lost it."""


class OffsetStoreUnavailable(ConnectionError):
    """The store cannot be reached now (ZooKeeper down or not answering): try again later."""


class ZooKeeperOffsetStore:
    """Offsets at ``<root>/<spout_id>/<partition>``, as storm-kafka kept them (the paths are
    ``zookeeper.py``'s: ``offset_path``, ``spout_offsets_path``).

    A spout must go on reading through a ZooKeeper outage, and its topology must be able to
    stop while ZooKeeper is away: ``save`` and ``all`` are refused at once while the client is
    disconnected (kazoo would queue them until the connection came back), and wait at most
    ``request_timeout`` seconds for an answer; both raise ``OffsetStoreUnavailable``, or
    kazoo's own error when the connection drops mid-request. ``load`` waits as long as it
    takes: a partition cannot be read before its commit is known."""

    def __init__(self, hosts: str, root: str, security: Any = None,
                 request_timeout: float = 10.0):
        """``security``: the ZooKeeper credentials to connect with (a
        ``zookeeper_auth.ZooKeeperCredentials``, or a ``cluster.security.Security``, which holds
        one); by default the process's own (a worker's topology credentials, or
        ``STORMLET_SECRET_FILE``)."""
        self.hosts = hosts
        self.root = root.rstrip("/")
        self.security = security
        self.request_timeout = request_timeout
        self._client: Any = None

    @property
    def client(self) -> Any:
        # Connected on first use: a spout's store is deep-copied per task before it runs.
        if self._client is None:
            from ..zookeeper import connect

            self._client = connect(self.hosts, timeout=15, session_timeout=10.0,
                                   security=self._security())
        return self._client

    def _security(self) -> Any:
        from ..zookeeper_auth import ZooKeeperCredentials

        if self.security is None:
            self.security = ZooKeeperCredentials.from_environment()
        return self.security

    def _path(self, spout_id: str, partition: int) -> str:
        from ..zookeeper import offset_path

        return offset_path(self.root, spout_id, partition)

    def _answer(self, request: Any, what: str) -> Any:
        """The answer to an asynchronous kazoo request, waited for at most request_timeout."""
        try:
            return request.get(timeout=self.request_timeout)
        except self.client.handler.timeout_exception:
            raise OffsetStoreUnavailable(
                f"ZooKeeper at {self.hosts} did not answer {what} within "
                f"{self.request_timeout:g}s") from None

    def _connected(self) -> Any:
        """The client, if it is connected now; else ``OffsetStoreUnavailable``."""
        client = self.client
        if not client.connected:
            raise OffsetStoreUnavailable(f"not connected to ZooKeeper at {self.hosts}")
        return client

    def load(self, spout_id: str, partition: int) -> dict | None:
        """The commit, once its node and its spout id's are known to be this topology's own
        (else ``ForeignOffsetError``, naming the node): a node another topology's workers or
        an anonymous client made must never set where this topology starts."""
        from ..zookeeper import spout_offsets_path

        path = self._path(spout_id, partition)
        for node in (spout_offsets_path(self.root, spout_id), path):
            self._check_owner(node)
        return self._read(path, bounded=False)

    def _check_owner(self, path: str) -> None:
        from kazoo.exceptions import NoAuthError, NoNodeError

        if not self._security().enabled:
            return   # without a secret every node is anyone's: there is no owner to check
        try:
            acl, _stat = self.client.get_acls(path)
        except NoNodeError:
            return
        except NoAuthError:
            raise ForeignOffsetError(f"refusing the offsets node {path}: this topology may not "
                                     f"read it; another topology or someone else made it") from None
        problem = self._security().zk_node_problem(acl)
        if problem is not None:
            raise ForeignOffsetError(f"refusing the offsets node {path}: {problem}; delete it "
                                     f"or give the spout another spout_id")

    def _read(self, path: str, bounded: bool) -> dict | None:
        """The record at ``path``; ``bounded``: refused while disconnected, and waited for at
        most request_timeout (else for as long as it takes)."""
        from kazoo.exceptions import NoNodeError

        try:
            if bounded:
                data, _stat = self._answer(self._connected().get_async(path),
                                           f"a read of {path}")
            else:
                data, _stat = self.client.get(path)
        except NoNodeError:
            return None
        return _decode(path, data)

    def save(self, spout_id: str, partition: int, record: dict) -> None:
        """Write the commit, unless it would move back one made by the same topology instance
        (``StaleCommit``): within one instance a partition's commit only moves forward, and two
        tasks of it commit one partition only once its tasks moved, the one moving it back
        being the task that lost it (a worker cut off meanwhile, committing as it closes).
        Read, compared and written with the node's version, so no commit is lost between."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = self._path(spout_id, partition)
        client = self._connected()
        data = json.dumps(record, sort_keys=True).encode()
        for _attempt in range(5):
            try:
                current, stat = self._answer(client.get_async(path), f"a read of {path}")
            except NoNodeError:
                try:
                    self._answer(client.create_async(path, data, makepath=True),
                                 f"the creation of {path}")
                    return
                except NodeExistsError:
                    continue
            held = _decode(path, current)
            if (held is not None and held.get("topology") == record.get("topology")
                    and held["offset"] > record["offset"]):
                raise StaleCommit(f"{path} holds offset {held['offset']}, committed by task "
                                  f"{held.get('task')} of this topology since: not moving it "
                                  f"back to {record['offset']}")
            try:
                self._answer(client.set_async(path, data, version=stat.version),
                             f"a write of {path}")
                return
            except BadVersionError:
                continue    # committed meanwhile: compare again
        raise OffsetStoreUnavailable(f"{path} kept changing under this commit")

    def all(self) -> dict[str, dict[int, dict]]:
        """Every spout id's committed records, by partition."""
        from kazoo.exceptions import NoNodeError

        from ..zookeeper import spout_offsets_path

        def children(path: str) -> list[str]:
            return self._answer(self._connected().get_children_async(path),
                                f"a listing of {path}")

        found: dict[str, dict[int, dict]] = {}
        try:
            spout_ids = children(self.root)
        except NoNodeError:
            return found
        for spout_id in sorted(spout_ids):
            for name in children(spout_offsets_path(self.root, spout_id)):
                if name.isdigit():
                    committed = self._read(self._path(spout_id, int(name)), bounded=True)
                    if committed is not None:
                        found.setdefault(spout_id, {})[int(name)] = committed
        return found

    def close(self) -> None:
        if self._client is not None:
            self._client.stop()
            self._client.close()
            self._client = None


class FileOffsetStore:
    """Offsets at ``<directory>/<spout_id>/<partition>.json``, each replaced atomically (write,
    fsync, rename) so a crash leaves the old commit or the new one, never half of either."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def _path(self, spout_id: str, partition: int) -> Path:
        return self.directory / spout_id / f"{partition}.json"

    def load(self, spout_id: str, partition: int) -> dict | None:
        path = self._path(spout_id, partition)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return _decode(str(path), data)

    def save(self, spout_id: str, partition: int, record: dict) -> None:
        path = self._path(spout_id, partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, json.dumps(record, sort_keys=True).encode())

    def all(self) -> dict[str, dict[int, dict]]:
        found: dict[str, dict[int, dict]] = {}
        if not self.directory.is_dir():
            return found
        for spout_dir in sorted(p for p in self.directory.iterdir() if p.is_dir()):
            for path in spout_dir.glob("*.json"):
                if path.stem.isdigit():
                    record = self.load(spout_dir.name, int(path.stem))
                    if record is not None:
                        found.setdefault(spout_dir.name, {})[int(path.stem)] = record
        return found

    def close(self) -> None:
        pass


class MemoryOffsetStore:
    """Offsets in this process's memory, shared by every store with the same namespace, so a
    topology resubmitted to a LocalCluster resumes where the last one committed."""

    _shared: dict[tuple[str, str, int], dict] = {}
    _lock = threading.Lock()

    def __init__(self, namespace: str = ""):
        self.namespace = namespace

    def load(self, spout_id: str, partition: int) -> dict | None:
        with self._lock:
            record = self._shared.get((self.namespace, spout_id, partition))
        return dict(record) if record is not None else None

    def save(self, spout_id: str, partition: int, record: dict) -> None:
        with self._lock:
            self._shared[(self.namespace, spout_id, partition)] = dict(record)

    def close(self) -> None:
        pass
