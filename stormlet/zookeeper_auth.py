"""A process's ZooKeeper credentials, derived from the cluster secret: the ZooKeeper half of
``cluster/security.py``'s ``Security``, which holds one of these and delegates to it. Here,
below the daemons, so that an offset store in a worker finds its topology's credentials
(``ZooKeeperCredentials.from_environment``) without importing the cluster.

Every identity is a digest one, ``<user>:<password>``, the password derived from the secret
with HMAC-SHA256 under ``zk/<user>``: the daemons' identity may do anything; read-only clients
read; a topology's own identity (by name, so a resubmission resumes) reads its record and
assignment and may do anything with its offsets (``zk_topology_acl``); every worker's shared
identity reads only where the leading nimbus is (``zk_shared_acl``). A node whose ACL names
anyone else was not made by the cluster (``zk_acl_problem``): it is refused, never read.

kazoo is imported when an ACL is made: the sources import this module for its defaults alone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

SECRET_FILE_ENV = "STORMLET_SECRET_FILE"
# Where a worker finds the credentials its supervisor wrote for it.
WORKER_CREDENTIALS_ENV = "STORMLET_WORKER_CREDENTIALS"
SECRET_BYTES = 32
# ZooKeeper digest identities: "<user>:<password>", the password derived from the secret.
ZK_DAEMON_USER, ZK_WORKER_USER, ZK_READER_USER, ZK_TOPOLOGY_USER_PREFIX = (
    "stormlet-daemon", "stormlet-worker", "stormlet-reader", "stormlet-topology-")
# ZooKeeper's permission bits (kazoo.security.Permissions): every one, and write.
_ZK_ALL, _ZK_WRITE = 31, 2
# What a read-only credentials file says it is (``stormlet secret read-only``).
READ_ONLY_KIND = "stormlet-read-only"

_T = TypeVar("_T")


class SecurityError(Exception):
    """A secret or credentials file that cannot be used, or a setting security forbids."""


def derive(key: bytes, label: str) -> bytes:
    """The key derivation every credential uses: HMAC-SHA256 of ``label`` under ``key``."""
    return hmac.new(key, label.encode(), hashlib.sha256).digest()


def credentials_from_environment(worker: Callable[[str], _T],
                                 secret_file: Callable[[str | None], _T]) -> _T:
    """``worker`` of the worker credentials file the environment names
    (``WORKER_CREDENTIALS_ENV``), else ``secret_file`` of the cluster secret's path
    (``SECRET_FILE_ENV``; None when unset: security off). How a process finds its credentials,
    for ``ZooKeeperCredentials`` and ``cluster/security.py``'s ``Security`` alike."""
    credentials = os.environ.get(WORKER_CREDENTIALS_ENV)
    if credentials:
        return worker(credentials)
    return secret_file(os.environ.get(SECRET_FILE_ENV))


def load_secret_file(path: str | Path | None, secret: Callable[[bytes], _T],
                     read_only: Callable[[dict[str, Any]], _T], off: Callable[[], _T]) -> _T:
    """``secret`` of the cluster secret in ``path``, or ``read_only`` of the read-only
    credentials record it holds instead (``read_secret_file``; a field missing or malformed in
    it is a SecurityError), or ``off()`` for no path (security off). How a process loads its
    secret file, for ``ZooKeeperCredentials`` and ``Security`` alike."""
    if path is None or str(path) == "":
        return off()
    path = Path(path)
    found = read_secret_file(path)
    if isinstance(found, bytes):
        return secret(found)
    with read_only_fields(path):
        return read_only(found)


def read_secret_file(path: Path) -> bytes | dict[str, Any]:
    """The cluster secret in ``path``, or the read-only credentials record
    (``read_only_record``) it holds instead. The file must be readable by its owner only."""
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise SecurityError(f"cannot read the cluster secret {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecurityError(f"the cluster secret {path} is readable by others: "
                            f"chmod 600 {path}")
    if text.startswith("{"):
        with read_only_fields(path):
            record = json.loads(text)
            if record.get("kind") != READ_ONLY_KIND:
                raise ValueError(f"not a {READ_ONLY_KIND} file")
        return record
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise SecurityError(f"{path} does not hold a stormlet cluster secret "
                            f"({SECRET_BYTES * 2} hex digits)")
    return secret


@contextmanager
def read_only_fields(path: Path) -> Iterator[None]:
    """Reading the read-only credentials in ``path``: a malformed record is a SecurityError."""
    try:
        yield
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SecurityError(f"{path} holds neither a cluster secret nor read-only "
                            f"credentials: {exc}") from None


def read_worker_credentials(path: str | Path, parse: Callable[[dict[str, Any]], _T]) -> _T:
    """``parse`` of the worker credentials record in ``path`` (``worker_record``); a file
    that cannot be read or parsed is a SecurityError."""
    try:
        return parse(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SecurityError(f"cannot read the worker credentials {path}: {exc}") from None


class _WorkerZooKeeper(NamedTuple):
    """A worker's ZooKeeper identities and the ACL ids of the nodes it creates."""

    logins: list[str]        # "user:password", each added to its sessions
    owner_ids: list[str]     # may do anything with its nodes: the daemons, its topology
    reader_id: str           # may read them: read-only clients


class _ReadOnlyZooKeeper(NamedTuple):
    """A read-only client's ZooKeeper identity (``stormlet secret read-only``)."""

    login: str
    daemon_id: str           # the owner of any node it has to create


class ZooKeeperCredentials:
    """ZooKeeper credentials for one process: from the cluster secret (daemons, the CLI), one
    topology's (a worker), a read-only client's, or none (security off). The methods are named
    as ``Security``'s, so ``zookeeper.connect`` and the offset store take either."""

    def __init__(self, cluster_secret: bytes | None = None,
                 worker: _WorkerZooKeeper | None = None,
                 read_only: _ReadOnlyZooKeeper | None = None):
        self._cluster_secret = cluster_secret
        self._worker = worker
        self._read_only = read_only

    # ----- loading

    @classmethod
    def from_environment(cls) -> ZooKeeperCredentials:
        """A worker's credentials (``WORKER_CREDENTIALS_ENV``) or the cluster secret's
        (``SECRET_FILE_ENV``), whichever the environment names; off when neither."""
        return credentials_from_environment(
            lambda path: read_worker_credentials(path, cls.from_worker_record), cls.load)

    @classmethod
    def load(cls, path: str | Path | None) -> ZooKeeperCredentials:
        """The credentials of the cluster secret or the read-only credentials in ``path``
        (``read_secret_file``); security off for None."""
        return load_secret_file(path, lambda secret: cls(cluster_secret=secret),
                                cls.from_read_only_record, cls)

    @classmethod
    def from_read_only_record(cls, record: dict[str, Any]) -> ZooKeeperCredentials:
        """A read-only client's credentials, from its file's record (``read_only_record``)."""
        return cls(read_only=_ReadOnlyZooKeeper(str(record["zk_login"]),
                                                str(record["zk_daemon_id"])))

    @classmethod
    def from_worker_record(cls, record: dict[str, Any]) -> ZooKeeperCredentials:
        """A worker's credentials, from the record its supervisor wrote (``worker_record``)."""
        return cls(worker=_WorkerZooKeeper([str(a) for a in record["zk_auth"]],
                                           [str(i) for i in record["zk_acl_ids"]],
                                           str(record["zk_reader_id"])))

    def worker_record(self, topology_name: str) -> dict[str, Any]:
        """The ZooKeeper part of what a supervisor hands a worker of ``topology_name``: its
        identities (the workers' and its topology's) and the ACL ids its offsets nodes grant
        (the daemons', its own)."""
        topology_user = _topology_user(topology_name)
        return {"zk_auth": [self._login(ZK_WORKER_USER), self._login(topology_user)],
                "zk_acl_ids": [self._id(ZK_DAEMON_USER), self._id(topology_user)],
                "zk_reader_id": self._id(ZK_READER_USER)}

    def read_only_record(self) -> dict[str, str]:
        """The ZooKeeper part of a read-only credentials file: read access, to find nimbus."""
        return {"zk_login": self._login(ZK_READER_USER),
                "zk_daemon_id": self._id(ZK_DAEMON_USER)}

    # ----- what it allows

    @property
    def holds_secret(self) -> bool:
        """Whether these come from the cluster secret itself."""
        return self._cluster_secret is not None

    @property
    def enabled(self) -> bool:
        return (self._cluster_secret is not None or self._worker is not None
                or self._read_only is not None)

    def _login(self, user: str) -> str:
        if self._cluster_secret is None:
            raise SecurityError("this process holds no cluster secret")
        return f"{user}:{derive(self._cluster_secret, f'zk/{user}').hex()}"

    def _id(self, user: str) -> str:
        """The digest ACL id of ``user``: ``user:base64(sha1(user:password))``."""
        login = self._login(user)
        return f"{user}:{base64.b64encode(hashlib.sha1(login.encode()).digest()).decode()}"

    def zk_auth(self) -> list[tuple[str, str]]:
        """The digest credentials this process's ZooKeeper sessions present."""
        if self._worker is not None:
            return [("digest", login) for login in self._worker.logins]
        if self._read_only is not None:
            return [("digest", self._read_only.login)]
        if self._cluster_secret is None:
            return []
        return [("digest", self._login(ZK_DAEMON_USER))]

    def zk_acl(self) -> list | None:
        """The ACL of the nodes this process creates by default (None: ZooKeeper's open
        default, with security off). A daemon's: the daemons may do anything, read-only clients
        read, workers nothing (what they read is granted node by node: ``zk_shared_acl``,
        ``zk_topology_acl``). A worker's (its offsets): ``zk_topology_acl`` of its topology with
        write access. A read-only client's (a path it ensures before nimbus made it): the
        daemons' alone."""
        from kazoo.security import make_acl

        if self._worker is not None:
            return [*(make_acl("digest", acl_id, all=True)
                      for acl_id in self._worker.owner_ids),
                    make_acl("digest", self._worker.reader_id, read=True)]
        if self._read_only is not None:
            return [make_acl("digest", self._read_only.daemon_id, all=True)]
        if self._cluster_secret is None:
            return None
        return [make_acl("digest", self._id(ZK_DAEMON_USER), all=True),
                make_acl("digest", self._id(ZK_READER_USER), read=True)]

    def zk_shared_acl(self) -> list | None:
        """The ACL of a daemon's node that every worker reads (where the leading nimbus is):
        ``zk_acl`` and read access for the workers' shared identity."""
        from kazoo.security import make_acl

        acl = self.zk_acl()
        if acl is None or not self.holds_secret:
            return acl
        return [*acl, make_acl("digest", self._id(ZK_WORKER_USER), read=True)]

    def zk_topology_acl(self, topology_name: str, write: bool = False) -> list | None:
        """The ACL of a node that belongs to one topology: the daemons may do anything,
        read-only clients read, and the topology's own identity (by name, so a resubmission
        resumes) reads it (its record and assignment) or, with ``write``, may do anything (its
        offsets, the same ACL its workers give the nodes they create). No other topology's
        workers may touch it."""
        from kazoo.security import make_acl

        if self._cluster_secret is None:
            return None
        topology_id = self._id(_topology_user(topology_name))
        return [make_acl("digest", self._id(ZK_DAEMON_USER), all=True),
                make_acl("digest", topology_id, all=write, read=True),
                make_acl("digest", self._id(ZK_READER_USER), read=True)]

    def zk_acl_problem(self, acl: list) -> str | None:
        """Why ``acl`` (a node's, as ZooKeeper gives it) is not one this cluster's daemons or
        workers would have given a node, or None if it is: every entry a digest identity
        derived from the cluster secret (a topology's checked against its name), and the
        daemons' with every permission. A node without such an ACL was made by someone else
        (anonymously before the cluster existed, say) and must not be trusted."""
        daemon = self._id(ZK_DAEMON_USER)
        known = {daemon, self._id(ZK_WORKER_USER), self._id(ZK_READER_USER)}
        daemon_has_all = False
        for entry in acl:
            scheme, acl_id = entry.id.scheme, entry.id.id
            user = acl_id.partition(":")[0]
            if scheme != "digest" or not (
                    acl_id in known or (user.startswith(ZK_TOPOLOGY_USER_PREFIX)
                                        and acl_id == self._id(user))):
                return f"it grants {scheme}:{acl_id}, an identity this cluster did not make"
            daemon_has_all |= acl_id == daemon and entry.perms == _ZK_ALL
        if not daemon_has_all:
            return "the cluster's daemons may not do everything with it"
        return None

    def zk_node_problem(self, acl: list) -> str | None:
        """Why a node this process is about to trust as its own (a committed offset) is not, or
        None: for a worker, any ACL but the one its topology's nodes get (another topology's,
        or one someone planted); for a daemon, ``zk_acl_problem``. None with security off, and
        for a read-only client, which trusts nothing to write."""
        if self._worker is not None:
            if same_acl(acl, self.zk_acl() or []):
                return None
            granted = ", ".join(sorted(f"{e.id.scheme}:{e.id.id.partition(':')[0]}"
                                       for e in acl))
            return f"its ACL ({granted}) is not this topology's"
        if self._cluster_secret is not None:
            return self.zk_acl_problem(acl)
        return None

    def zk_topology_owner(self, acl: list) -> str | None:
        """The name of the topology whose identity ``acl`` grants write access, if one does."""
        for entry in acl:
            user = entry.id.id.partition(":")[0]
            if (user.startswith(ZK_TOPOLOGY_USER_PREFIX) and entry.perms & _ZK_WRITE
                    and entry.id.id == self._id(user)):
                return user[len(ZK_TOPOLOGY_USER_PREFIX):]
        return None


def _topology_user(topology_name: str) -> str:
    """The ZooKeeper identity of a topology's workers: by name, so a resubmission resumes."""
    return ZK_TOPOLOGY_USER_PREFIX + topology_name


def same_acl(a: list, b: list) -> bool:
    """Whether two ZooKeeper ACLs grant the same permissions to the same identities, in any
    order."""
    return ({(e.perms, e.id.scheme, e.id.id) for e in a}
            == {(e.perms, e.id.scheme, e.id.id) for e in b})
