"""ZooKeeper as both the cluster and the offset spouts use it: a connected client, the
cluster's root node, and where offset spouts commit under it. The cluster's whole layout is
``cluster/zk_state.py``'s (its table lists these paths too; it imports them from here), so that
an offset store in a worker reaches ZooKeeper without importing the daemons.

kazoo is imported when a client is made: the command line and the sources import this module for
its paths and defaults alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kazoo.client import KazooClient

DEFAULT_HOSTS = "127.0.0.1:2181"
DEFAULT_ROOT = "/stormlet"
# How long ZooKeeper keeps a daemon's session through silence: how soon a dead supervisor's
# workers move, and how long a congested link may stall before it is taken for a dead host.
# Storm's storm.zookeeper.session.timeout; the server caps it at 20 of its ticks (tickTime).
DEFAULT_SESSION_TIMEOUT = 20.0


def cluster_root(root: str | None) -> str:
    """The root node as every daemon uses it: no trailing slash, and DEFAULT_ROOT for none (or
    for ``/``: the cluster's nodes never sit at ZooKeeper's own root)."""
    return (root or "").rstrip("/") or DEFAULT_ROOT


def offsets_path(root: str | None = DEFAULT_ROOT) -> str:
    """Where offset spouts of the cluster under ``root`` commit:
    ``<root>/offsets/<spout_id>/<partition>`` (see ``sources/offset_store.py``)."""
    return f"{cluster_root(root)}/offsets"


def spout_offsets_path(offsets_root: str, spout_id: str) -> str:
    """The node under which one spout id commits, a child per partition. ``offsets_root`` is
    ``offsets_path(root)`` on a cluster, or whatever root an offset store was given."""
    return f"{offsets_root.rstrip('/')}/{spout_id}"


def offset_path(offsets_root: str, spout_id: str, partition: int) -> str:
    """The node of one spout id's commit for one partition:
    ``<offsets_root>/<spout_id>/<partition>``, as storm-kafka kept them."""
    return f"{spout_offsets_path(offsets_root, spout_id)}/{partition}"


def connect(hosts: str, timeout: float = 15.0, session_timeout: float = DEFAULT_SESSION_TIMEOUT,
            security: Any = None) -> KazooClient:
    """A started client, authenticated and creating nodes with the ACL ``security`` gives (a
    ``zookeeper_auth.ZooKeeperCredentials``, or a ``cluster.security.Security``, which holds
    one; None: no credentials, ZooKeeper's open ACL). The session
    timeout bounds how long a dead daemon's ephemeral nodes (a supervisor's registration, the
    nimbus leader) outlive it."""
    from kazoo.client import KazooClient

    auth = security.zk_auth() if security is not None else []
    acl = security.zk_acl() if security is not None else None
    client = KazooClient(hosts=hosts, timeout=session_timeout,
                         connection_retry={"max_tries": -1, "max_delay": 2},
                         handler=_bounded_connects(connect_timeout(hosts, session_timeout)),
                         auth_data=auth or None, default_acl=acl)
    client.start(timeout=timeout)
    return client


def connect_timeout(hosts: str, session_timeout: float) -> float:
    """How long one TCP connection attempt to one ZooKeeper server may take: half the session
    shared among the servers (at least a second), so that a client whose first try is a member
    cut off from the network still reaches another before its session expires. kazoo would
    wait the whole session on it (its ``ConnectionHandler._connect``)."""
    servers = len(hosts.split("/", 1)[0].split(","))
    return max(1.0, session_timeout / (2 * servers))


def _bounded_connects(seconds: float) -> Any:
    """kazoo's default handler, with each TCP connection attempt bounded to ``seconds``."""
    from kazoo.handlers.threading import SequentialThreadingHandler

    class BoundedConnects(SequentialThreadingHandler):
        def create_connection(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("timeout") is not None:
                kwargs["timeout"] = min(kwargs["timeout"], seconds)
            return super().create_connection(*args, **kwargs)

    return BoundedConnects()
