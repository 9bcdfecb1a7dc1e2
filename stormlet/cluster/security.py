"""A cluster's credentials, all derived from one secret.

    stormlet secret generate /etc/stormlet/secret      # once; copy it to every node (mode 600)
    security = Security.load("/etc/stormlet/secret")   # what every daemon and the CLI do

Without a secret (``Security.load(None)``) security is off and the daemons serve on loopback
only. With one, every key is derived from it with HMAC-SHA256 under a label, so nothing but the
secret is distributed:

- nimbus's RPC socket is a CURVE server; clients present the key of a role, and ZeroMQ's ZAP
  handler (one per ZeroMQ context, ``_Gatekeeper``) admits only known keys and tells the server
  who called: ``admin`` (the CLI, the UI's actions), ``read`` (queries only), ``daemon``
  (supervisors and nimbuses: code, blobs and queries) or ``worker:<topology id>`` (a worker: its own
  topology's metrics and code);
- each topology has a secret of its own, derived from the cluster's; a supervisor hands its
  workers that one only, never the cluster's (``worker_credentials``). The workers' data, ack
  and backpressure frames travel over CURVE with a key pair derived from it: a peer without it
  is refused at the handshake (and counted), so no frame of its reaches the worker. (Without a
  secret the handshake still names the topology, in the clear: no security, but a worker of
  another topology that still holds a reused port refuses the connection instead of taking its
  frames; see ``transport_server``);
- ZooKeeper nodes carry digest ACLs (``zk_auth``, ``zk_acl``): the daemons' identity may do
  anything; read-only clients read; a topology's own identity (by name, so a resubmission
  resumes) reads its record and assignment and may do anything with its offsets, in the spout
  id nodes nimbus made for it at submit (``zk_topology_acl``); every worker's shared identity
  reads only where the leading nimbus is (``zk_shared_acl``) and creates nothing. Anonymous
  clients may do nothing (``NoAuth``), and a node whose ACL names anyone else was not made by
  the cluster (``zk_acl_problem``): it is refused, never read. These are ``zookeeper_auth.py``'s
  ``ZooKeeperCredentials`` (below the daemons, for the offset stores), which ``Security``
  holds and delegates to; that module finds the secret or worker credentials file the
  environment names and reads it, for both (``credentials_from_environment``,
  ``load_secret_file``).

Daemons hold the secret file; workers run the topology's code and get only their topology's
credentials.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Any, Callable, NamedTuple

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

# The environment's names for the credentials files, and the error: re-exported, since the
# daemons and the CLI know them as the cluster's security's.
from ..zookeeper_auth import (  # noqa: F401
    READ_ONLY_KIND,
    SECRET_BYTES,
    SECRET_FILE_ENV,
    WORKER_CREDENTIALS_ENV,
    SecurityError,
    ZooKeeperCredentials,
    credentials_from_environment,
    derive,
    load_secret_file,
    read_worker_credentials,
)

log = logging.getLogger(__name__)

# Who calls nimbus (the user ZAP names for a key) ...
ADMIN_USER, READ_USER, DAEMON_USER, WORKER_USER_PREFIX = "admin", "read", "daemon", "worker:"
# ... and what an operation requires: ADMIN changes the cluster, READ queries it, WORKER is
# what a worker does for its own topology (the operation's ``topology_id`` argument), DAEMON
# what only the daemons need (a blob's bytes: no worker fetches those itself).
ADMIN, READ, WORKER, DAEMON = "admin", "read", "worker", "daemon"
RPC_DOMAIN, TRANSPORT_DOMAIN = "nimbus", "transport"
# Socket monitor events of a handshake that failed: an unknown key or topology, the wrong key of
# the server's, or another mechanism.
HANDSHAKE_FAILED_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                           | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
PASS_THE_SECRET = "pass it with --secret-file FILE (or STORMLET_SECRET_FILE=FILE)"
SECURITY_HINT = ("create a cluster secret with `stormlet secret generate FILE`, copy it to every "
                 f"node, and {PASS_THE_SECRET}")


@dataclass(frozen=True)
class CurveKeys:
    """A CURVE client's view of a connection: the server's public key and its own pair (z85)."""

    server_public: bytes
    public: bytes
    secret: bytes

    def apply(self, sock: zmq.Socket) -> None:
        sock.curve_serverkey = self.server_public
        sock.curve_publickey = self.public
        sock.curve_secretkey = self.secret


class _WorkerTopology(NamedTuple):
    """What a worker holds of its topology."""

    topology_id: str
    secret: bytes
    nimbus_key: bytes   # nimbus's public CURVE key (z85)


#: What a daemon's files (topology code, logs, heartbeats, state) let others do: their owner
#: reads and writes, the owner's group reads (a log shipper, say), nobody else anything. They
#: hold the topologies' code and data, which only the cluster's users should see.
DAEMON_UMASK = 0o027


def restrict_new_files() -> None:
    """Give every file and directory this process makes from now on ``DAEMON_UMASK``'s modes
    (640 and 750); the worker processes a supervisor starts inherit it. For the daemons'
    commands, before they make anything."""
    os.umask(DAEMON_UMASK)


def write_private_file(path: str | Path, text: str, replace: bool = False) -> None:
    """Write ``text`` to a new file at ``path`` only its owner may read (mode 600). With
    ``replace``, through a private temporary file renamed over whatever is there; without,
    refuse (``FileExistsError``) if ``path`` exists."""
    path = Path(path)
    target = path.with_name(f".{path.name}.{os.getpid()}") if replace else path
    if replace:
        target.unlink(missing_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if replace:
        os.replace(target, path)


def _keypair(seed: bytes) -> tuple[bytes, bytes]:
    """A CURVE key pair (public, secret; z85) from 32 seed bytes: any 32 bytes are a
    Curve25519 secret key."""
    secret = z85.encode(seed)
    return zmq.curve_public(secret), secret


class Security:
    """Credentials for one process: the cluster secret (daemons, the CLI), one topology's (a
    worker), a read-only client's, or none (security off)."""

    def __init__(self, cluster_secret: bytes | None = None,
                 topology: _WorkerTopology | None = None,
                 zookeeper: ZooKeeperCredentials | None = None,
                 read_only: CurveKeys | None = None):
        """``zookeeper``: the process's ZooKeeper credentials; by default the cluster
        secret's. ``read_only``: a read-only client's keys to nimbus."""
        self._cluster_secret = cluster_secret
        self._topology = topology
        self._zookeeper = (zookeeper if zookeeper is not None
                           else ZooKeeperCredentials(cluster_secret=cluster_secret))
        self._read_only = read_only

    # ----- loading

    @classmethod
    def load(cls, path: str | Path | None) -> Security:
        """The cluster secret, or the read-only credentials (``read_only_credentials``), in
        ``path``; security off for None. The file must be readable by its owner only."""
        def read_only(record: dict[str, Any]) -> Security:
            keys = CurveKeys(*(record[k].encode("ascii")
                               for k in ("nimbus_key", "public", "secret")))
            return cls(zookeeper=ZooKeeperCredentials.from_read_only_record(record),
                       read_only=keys)

        return load_secret_file(path, lambda secret: cls(cluster_secret=secret), read_only, cls)

    def read_only_credentials(self) -> dict[str, str]:
        """A file's worth of credentials that may only read (the ``read`` role, and read
        access to ZooKeeper to find nimbus): for monitoring, say, without the secret."""
        public, secret = self._role_keys(READ_USER)
        return {"kind": READ_ONLY_KIND, "nimbus_key": self._nimbus_keys()[0].decode("ascii"),
                "public": public.decode("ascii"), "secret": secret.decode("ascii"),
                **self._zookeeper.read_only_record()}

    @classmethod
    def from_environment(cls) -> Security:
        """A worker's credentials (``WORKER_CREDENTIALS_ENV``) or the cluster secret
        (``SECRET_FILE_ENV``), whichever the environment names; off when neither."""
        return credentials_from_environment(cls.for_worker, cls.load)

    @classmethod
    def for_worker(cls, path: str | Path) -> Security:
        def parse(record: dict[str, Any]) -> Security:
            topology = _WorkerTopology(record["topology_id"],
                                       bytes.fromhex(record["topology_secret"]),
                                       record["nimbus_key"].encode("ascii"))
            return cls(topology=topology,
                       zookeeper=ZooKeeperCredentials.from_worker_record(record))

        return read_worker_credentials(path, parse)

    @staticmethod
    def generate(path: str | Path) -> None:
        """Write a new cluster secret to ``path`` (mode 600); refuse to overwrite one."""
        try:
            write_private_file(path, secrets.token_hex(SECRET_BYTES) + "\n")
        except FileExistsError:
            raise SecurityError(f"{path} exists already; a new secret would lock out every "
                                f"node holding the old one") from None

    # ----- what it allows

    @property
    def holds_secret(self) -> bool:
        """Whether this process holds the cluster secret itself (not a worker's or read-only
        credentials derived from it)."""
        return self._cluster_secret is not None

    @property
    def enabled(self) -> bool:
        return (self._cluster_secret is not None or self._topology is not None
                or self._read_only is not None)

    def _derive(self, label: str) -> bytes:
        if self._cluster_secret is None:
            raise SecurityError("this process holds no cluster secret")
        return derive(self._cluster_secret, label)

    def topology_secret(self, topology_id: str) -> bytes:
        if self._topology is not None and self._topology.topology_id == topology_id:
            return self._topology.secret
        return self._derive(f"topology/{topology_id}")

    def _nimbus_keys(self) -> tuple[bytes, bytes]:
        return _keypair(self._derive("rpc/nimbus"))

    def _role_keys(self, user: str) -> tuple[bytes, bytes]:
        if user.startswith(WORKER_USER_PREFIX):
            topology_id = user[len(WORKER_USER_PREFIX):]
            return _keypair(derive(self.topology_secret(topology_id), "rpc/worker"))
        return _keypair(self._derive(f"rpc/{user}"))

    def rpc_client_keys(self, user: str = ADMIN_USER) -> CurveKeys | None:
        """The keys this process presents to nimbus as ``user`` (a worker: always its own
        topology's worker user); None with security off."""
        if not self.enabled:
            return None
        if self._read_only is not None:
            return self._read_only
        if self._topology is not None:
            user = WORKER_USER_PREFIX + self._topology.topology_id
            server_public = self._topology.nimbus_key
        else:
            server_public = self._nimbus_keys()[0]
        public, secret = self._role_keys(user)
        return CurveKeys(server_public, public, secret)

    def ui_token(self) -> str | None:
        """The UI's access token (``stormlet secret ui-token`` prints it); None without the
        cluster secret."""
        return self._derive("ui/token").hex() if self.holds_secret else None

    def worker_credentials(self, topology_id: str, topology_name: str) -> dict[str, Any]:
        """What a supervisor hands a worker of ``topology_id`` (see ``for_worker``): its
        topology's secret, nimbus's public key, and its ZooKeeper identities (the workers' and
        its topology's) with the ACL ids its offsets nodes grant (the daemons', its own)."""
        return {"topology_id": topology_id,
                "topology_secret": self.topology_secret(topology_id).hex(),
                "nimbus_key": self._nimbus_keys()[0].decode("ascii"),
                **self._zookeeper.worker_record(topology_name)}

    # ----- ZooKeeper: ``zookeeper_auth.ZooKeeperCredentials``'s

    def zk_auth(self) -> list[tuple[str, str]]:
        """The digest credentials this process's ZooKeeper sessions present."""
        return self._zookeeper.zk_auth()

    def zk_acl(self) -> list | None:
        """The ACL of the nodes this process creates by default (``ZooKeeperCredentials``)."""
        return self._zookeeper.zk_acl()

    def zk_shared_acl(self) -> list | None:
        """The ACL of a daemon's node that every worker reads (``ZooKeeperCredentials``)."""
        return self._zookeeper.zk_shared_acl()

    def zk_topology_acl(self, topology_name: str, write: bool = False) -> list | None:
        """The ACL of a node that belongs to one topology (``ZooKeeperCredentials``)."""
        return self._zookeeper.zk_topology_acl(topology_name, write)

    def zk_acl_problem(self, acl: list) -> str | None:
        """Why ``acl`` is not one this cluster would have given a node, or None
        (``ZooKeeperCredentials``)."""
        return self._zookeeper.zk_acl_problem(acl)

    def zk_node_problem(self, acl: list) -> str | None:
        """Why a node this process is about to trust as its own is not, or None
        (``ZooKeeperCredentials``)."""
        return self._zookeeper.zk_node_problem(acl)

    def zk_topology_owner(self, acl: list) -> str | None:
        """The name of the topology whose identity ``acl`` grants write access, if one does."""
        return self._zookeeper.zk_topology_owner(acl)

    def secure_rpc_server(self, sock: zmq.Socket, topology_ids: Callable[[], AbstractSet[str]],
                          domain: str = RPC_DOMAIN) -> None:
        """Make ``sock`` (not yet bound) nimbus's CURVE server: it admits the role keys and the
        worker keys of the topologies ``topology_ids()`` names, and tags each message with its
        caller (``rpc.caller``). A no-op with security off. ``topology_ids`` runs on the ZAP
        thread at every handshake of a key that is not a role's: it must be quick and must not
        wait on ZooKeeper (nimbus passes a set it keeps up to date). Another server with the
        same keys (a supervisor's node service) takes a ``domain`` of its own: a context's ZAP
        handler holds one rule per domain, and nimbus may run in the same process."""
        if not self.enabled:
            return
        public, secret = self._nimbus_keys()
        users = {self._role_keys(u)[0]: u for u in (ADMIN_USER, READ_USER, DAEMON_USER)}
        worker_keys: dict[str, bytes] = {}   # topology id -> its workers' public key

        def who(key: bytes) -> str | None:
            if key in users:
                return users[key]
            for tid in topology_ids():
                if tid not in worker_keys:
                    worker_keys[tid] = self._role_keys(WORKER_USER_PREFIX + tid)[0]
                if worker_keys[tid] == key:
                    return WORKER_USER_PREFIX + tid
            return None

        _serve_curve(sock, domain, who, public, secret)

    def _transport_keys(self, topology_id: str) -> tuple[bytes, bytes]:
        return _keypair(derive(self.topology_secret(topology_id), "transport"))

    def transport_server(self, sock: zmq.Socket, topology_id: str) -> zmq.Socket:
        """Make a worker's receiving socket (not yet bound) admit only the topology's own
        workers; returns a monitor socket on which each refused handshake arrives as an event.
        With security on, by CURVE with the topology's transport keys. Without, by ZeroMQ's
        PLAIN mechanism with the topology id as the user name (``_topology_login``), which
        proves nothing but spares a worker the frames of another topology's, as when a port
        is reused while the worker that held it drains."""
        # A domain per topology: a context's ZAP handler holds one rule per domain.
        domain = f"{TRANSPORT_DOMAIN}/{topology_id}"
        if self.enabled:
            public, secret = self._transport_keys(topology_id)
            _serve_curve(sock, domain, lambda key: "peer" if key == public else None,
                         public, secret)
        else:
            _serve_plain(sock, domain, *_topology_login(topology_id))
        return sock.get_monitor_socket(HANDSHAKE_FAILED_EVENTS)

    def transport_client(self, sock: zmq.Socket, topology_id: str) -> None:
        """Give a worker's sending socket (not yet connected) what ``transport_server`` of the
        same topology admits: its transport keys, or its id."""
        if self.enabled:
            public, secret = self._transport_keys(topology_id)
            CurveKeys(public, public, secret).apply(sock)
        else:
            sock.plain_username, sock.plain_password = _topology_login(topology_id)


def _topology_login(topology_id: str) -> tuple[bytes, bytes]:
    """The PLAIN user name and password of a topology's workers without security. Neither may
    be empty (libzmq would fall back to no mechanism), hence the prefix and the fixed word."""
    return f"topology:{topology_id}".encode(), b"stormlet"


def release(context: zmq.Context) -> None:
    """Stop ``context``'s ZAP handler, if it has one (every worker's does): its sockets would
    keep ``term()`` waiting."""
    with _Gatekeeper._lock:
        gatekeeper = _Gatekeeper._by_context.pop(id(context), None)
    if gatekeeper is not None and gatekeeper.context is context:
        gatekeeper.stop()


def _serve_curve(sock: zmq.Socket, domain: str, who: Callable[[bytes], str | None],
                 public: bytes, secret: bytes) -> None:
    """Make ``sock`` a CURVE server whose clients ``who`` names (None: refused)."""
    _guarded(sock, domain).admit(domain, who)
    sock.curve_server = True
    sock.curve_publickey = public
    sock.curve_secretkey = secret


def _serve_plain(sock: zmq.Socket, domain: str, user: bytes, password: bytes) -> None:
    """Make ``sock`` a PLAIN server admitting only ``user`` with ``password``."""
    _guarded(sock, domain).configure_plain(domain, {user.decode(): password.decode()})
    sock.plain_server = True


def _guarded(sock: zmq.Socket, domain: str) -> _Gatekeeper:
    """Put ``sock``'s handshakes under ``domain`` of its context's ZAP handler, which is
    returned for the caller to say whom the domain admits."""
    sock.zap_domain = domain.encode()
    # Without a ZAP handler libzmq would admit any client: refuse instead.
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
    return _Gatekeeper.of(sock.context)


class _Gatekeeper(ThreadAuthenticator):
    """A context's ZAP handler (ZeroMQ consults one per context): for each CURVE domain, a
    function from a client's public key to its user, or None to refuse it; for each PLAIN
    domain, the user name and password it admits."""

    _by_context: dict[int, _Gatekeeper] = {}
    _lock = threading.Lock()

    @classmethod
    def of(cls, context: zmq.Context) -> _Gatekeeper:
        with cls._lock:
            gatekeeper = cls._by_context.get(id(context))
            if gatekeeper is None or gatekeeper.context is not context:
                gatekeeper = cls._by_context[id(context)] = cls(context)
                gatekeeper.start()
            return gatekeeper

    def __init__(self, context: zmq.Context):
        super().__init__(context)
        self._users: dict[str, Callable[[bytes], str | None]] = {}
        self._last_user: dict[bytes, str] = {}

    def admit(self, domain: str, who: Callable[[bytes], str | None]) -> None:
        self._users[domain] = who
        self.configure_curve_callback(domain, credentials_provider=_Provider(self, domain))

    def resolve(self, domain: str, key: bytes) -> bool:
        # An exception would end pyzmq's ZAP thread and leave every later handshake waiting.
        try:
            user = self._users[domain](key)
        except Exception:
            log.exception("could not check a client's key in the %s domain; refused it", domain)
            return False
        if user is None:
            return False
        self._last_user[z85.decode(key)] = user
        return True

    def curve_user_id(self, client_public_key: bytes) -> str:
        # Called on the ZAP thread right after ``resolve`` admitted the same key.
        return self._last_user.pop(client_public_key, "")


@dataclass
class _Provider:
    gatekeeper: _Gatekeeper
    domain: str

    def callback(self, domain: str, key: bytes) -> bool:
        return self.gatekeeper.resolve(self.domain, key)


def permits(user: str | None, role: str, arguments: dict) -> bool:
    """Whether ``user`` (None: security is off) may call an operation requiring ``role``."""
    if user is None:
        return True
    if role == ADMIN:
        return user == ADMIN_USER
    if role == READ:
        return user in (ADMIN_USER, READ_USER, DAEMON_USER)
    if role == WORKER:
        return user == DAEMON_USER or user == WORKER_USER_PREFIX + str(arguments.get("topology_id"))
    if role == DAEMON:
        return user in (ADMIN_USER, DAEMON_USER)
    return False


def check_bind_address(host: str, security: Security, what: str) -> None:
    """Refuse to serve beyond loopback without a cluster secret: anyone who reaches an
    unauthenticated port can run code on every node."""
    if security.enabled or is_loopback(host):
        return
    raise SecurityError(f"{what} would listen on {host}, beyond this machine, with no cluster "
                        f"secret: {SECURITY_HINT}")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if host == "localhost":
        return True
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)
