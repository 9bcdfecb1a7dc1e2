"""Finding nimbus and calling it: the leader for changes, any live nimbus for reads.

    client = NimbusClient("127.0.0.1:2181")          # or NimbusClient(address="host:6627")
    rows = client.call("list")
    client.close()

Used by the command line (one call, then close) and by the UI (one client for its lifetime, so
ZooKeeper is not reconnected on every page refresh; the nimbus addresses are looked up again
whenever a call fails).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Self

from kazoo.exceptions import NoAuthError

from .code import verify
from .rpc import NOT_LEADER, NimbusUnavailable, RpcError, call
from .security import ADMIN_USER, DAEMON_USER, PASS_THE_SECRET, Security
from .zk_state import DEFAULT_HOSTS, DEFAULT_ROOT

# Requests a standby answers too; everything else needs the leader.
READ_ONLY_OPS = frozenset({"list", "cluster", "errors", "topology_info", "metrics",
                           "blob_list", "events"})
# How long a change needing the leader waits out a leadership change (a leader that just died
# stays registered until its ZooKeeper session expires).
LEADER_WAIT_SECS = 15.0
READ_TIMEOUT_SECS = 5.0


def fetch_code(address: str, topology_id: str, expected_sha256: str | None, security: Security,
               timeout: float) -> bytes:
    """The code package of ``topology_id`` from the nimbus at ``address``, asked as a daemon;
    ``RpcError`` if it has none, ``CodeError`` if its bytes do not match ``expected_sha256``
    (the digest in the topology's record)."""
    code = call(address, "get_code", timeout=timeout, topology_id=topology_id,
                credentials=security.rpc_client_keys(DAEMON_USER))
    verify(code, expected_sha256, topology_id)
    return code


class NimbusClient:
    def __init__(self, zk: str = DEFAULT_HOSTS, zk_root: str = DEFAULT_ROOT,
                 address: str | None = None, security: Security | None = None,
                 user: str = ADMIN_USER):
        """Calls present ``user``'s keys when ``security`` holds the cluster secret."""
        self.security = security or Security()
        self.credentials = self.security.rpc_client_keys(user)
        self.zk = zk
        self.zk_root = zk_root
        self.address = address and (address if "://" in address else f"tcp://{address}")
        self._zk_client: Any = None
        self._lock = threading.Lock()

    def addresses(self) -> list[str]:
        """The leader first, then the standbys (which can answer read-only requests). Raises
        ``NimbusUnavailable`` when ZooKeeper cannot be reached or no nimbus is registered."""
        if self.address:
            return [self.address]
        from .zk_state import ClusterState

        with self._lock:
            client = self._connected_zk()
            try:
                addresses = ClusterState(client, self.zk_root).nimbus_addresses()
            except NoAuthError:
                self._drop_zk()
                if not self.security.enabled:
                    raise RpcError(f"ZooKeeper at {self.zk} refused this client, which has no "
                                   f"credentials: the cluster has a secret; {PASS_THE_SECRET}"
                                   ) from None
                raise RpcError(f"ZooKeeper at {self.zk} refused this client's credentials: is "
                               f"the secret file the cluster's?") from None
            except Exception:   # any ZooKeeper failure: reconnect on the next call
                self._drop_zk()
                raise NimbusUnavailable(f"lost ZooKeeper at {self.zk} while looking for nimbus")
        if not addresses:
            raise NimbusUnavailable("no nimbus is running (none registered in ZooKeeper)")
        return addresses

    def _connected_zk(self) -> Any:
        from .zk_state import connect

        if self._zk_client is None:
            try:
                self._zk_client = connect(self.zk, timeout=10, security=self.security)
            except Exception:   # kazoo's timeout, a bad host string, a refused connection
                raise NimbusUnavailable(f"cannot reach ZooKeeper at {self.zk} to find nimbus "
                                        f"(use --zk, or --nimbus host:port)") from None
        return self._zk_client

    def _drop_zk(self) -> None:
        if self._zk_client is not None:
            self._zk_client.stop()
            self._zk_client.close()
            self._zk_client = None

    def call(self, op: str, timeout: float = 15, **args: Any) -> Any:
        """``op`` on the leader (waiting out a leadership change for up to LEADER_WAIT_SECS), or
        for a read-only op on the first nimbus that answers. Raises ``RpcError`` with nimbus's
        message when it refuses, ``NimbusUnavailable`` when none answers."""
        read_only = op in READ_ONLY_OPS
        deadline = time.monotonic() + (0 if read_only else LEADER_WAIT_SECS)
        while True:
            addresses = self.addresses()
            if not read_only:
                addresses = addresses[:1]
            for address in addresses:
                try:
                    return call(address, op, timeout=READ_TIMEOUT_SECS if read_only else timeout,
                                credentials=self.credentials, **args)
                except NimbusUnavailable as exc:
                    problem: RpcError = exc
                except RpcError as exc:
                    if not str(exc).startswith(NOT_LEADER):
                        raise
                    problem = NimbusUnavailable(str(exc))
            if time.monotonic() >= deadline or self.address:
                raise problem
            time.sleep(0.5)

    def close(self) -> None:
        with self._lock:
            self._drop_zk()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
