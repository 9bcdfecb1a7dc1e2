"""Hosts made of Linux network namespaces, and a stormlet cluster across them, for tests.

    with MultiHostCluster(base) as cluster:      # ZooKeeper, nimbus and a client, each a host
        cluster.add_supervisor("s1")             # a supervisor on a host of its own
        cluster.wait_for_leader()
        cluster.cli("list")                      # the CLI, run from the client's host
        cluster.host("s1").cut_off()             # eth0 down: the host is off the network
        cluster.host("s1").heal()                # every fault of that host undone

Every host is a namespace with one interface, ``eth0``, at 10.77.0.N/24, its veth's other end on
a bridge of the run's own; nothing routes off that bridge, so the hosts reach each other and
nothing else. The hosts share the filesystem: each daemon gets its own data directory under
``base``, and the test process reads the workers' heartbeat files and the topology's output
directly, as an operator with a shared disk would. ZooKeeper is out of the test process's reach
(it listens on its host's address), so reads of it go through the client host.

Names carry a prefix unique to the run (``smh<pid><letter>``): parallel runs never collide, and a
run killed too hard for its teardown leaves names whose pid is dead, which the next run removes
(or ``deploy/netns.sh cleanup PREFIX``). Teardown kills every process of every host, then
deletes the namespaces and the bridge; an atexit hook does it for a network still up when the
interpreter exits.

Faults (``Host``): ``cut_off``/``reconnect``, ``drop_to`` (one link, one direction; call it on
both ends for both), ``loss`` (random, nftables' numgen), ``slow`` (tbf: this kernel has no
netem), ``crash`` (kill -9 of every process on the host); ``heal`` undoes all but a crash.
``MultiHostChaosRun`` injects them mid-stream as scenarios: ``cut_off``, ``link_cut``,
``isolate``, ``slow_link``, ``loss``, ``host_crash`` (and its return, same data directory),
``leader_cut_off`` (the leading nimbus's host) and ``zk_member_cut_off``.

``MultiHostCluster(base, zk_members=3)`` runs ZooKeeper as an ensemble, a member on each of
hosts zk1, zk2 and zk3; ``add_nimbus(host="client")`` puts a (standby) nimbus on an existing
host. ``add_redis()`` runs a Redis server on a host of its own (``HostRedis``), for the stateful
run: ``MultiHostChaosRun(cluster, ..., redis=cluster.add_redis())``.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import re
import secrets
import signal
import string
import subprocess
import sys
import time
import weakref
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from cluster_support import REPO, Cluster, Daemon, wait_until
from redis_server import RedisServer
from zookeeper_server import SCRIPT as ZOOKEEPER_SCRIPT
from zookeeper_server import SRVR_SOURCE, ZooKeeperServer, ZooKeeperServerError

# The chaos suite's run and checker serve here too (tests/chaos is not a package).
sys.path.insert(0, str(Path(__file__).resolve().parent / "chaos"))
from harness import NAME, ChaosRun  # noqa: E402

if TYPE_CHECKING:   # imported where a run keeps state on Redis
    from history import StateWrites

SUBNET = "10.77.0"         # every host's address is SUBNET.N/24, on the run's own bridge
NETNS_SCRIPT = REPO / "deploy" / "netns.sh"
PREFIX = "smh"             # + the test process's pid + a letter: see the module docstring
ZOOKEEPER_PORT = 2181
NIMBUS_PORT = 6627
UI_PORT = 8080
REDIS_PORT = 6379
FAULT_TABLE = "stormlet_faults"


# ----- can namespaces be made here?

@cache
def unavailable_reason() -> str | None:
    """Why hosts cannot be made here (not root, no ``ip`` or ``nft``, not permitted), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        check = subprocess.run(["bash", str(NETNS_SCRIPT), "check"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"deploy/netns.sh check failed: {e}"
    if check.returncode != 0:
        return (check.stderr or check.stdout).strip() + " (see deploy/netns.sh install)"
    return None


def multi_host_available() -> bool:
    """Whether hosts can be made here. With ``STORMLET_REQUIRE_MULTI_HOST`` set to a non-empty
    value other than ``0``, raises ``RuntimeError`` instead of returning False (CI, where a skip
    would hide breakage), as ``zookeeper_available`` does for STORMLET_REQUIRE_ZOOKEEPER."""
    reason = unavailable_reason()
    if reason and os.environ.get("STORMLET_REQUIRE_MULTI_HOST", "") not in ("", "0"):
        raise RuntimeError(f"multi-host tests cannot run: {reason} "
                           f"(STORMLET_REQUIRE_MULTI_HOST is set)")
    return reason is None


# ----- hosts

def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


class Host:
    """One host: a network namespace whose ``eth0`` has ``address``."""

    def __init__(self, name: str, namespace: str, address: str):
        self.name = name
        self.namespace = namespace
        self.address = address

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.namespace!r}, {self.address!r})"

    @property
    def prefix(self) -> tuple[str, ...]:
        """The command that runs the rest on this host (it execs it: the pid is kept)."""
        return ("ip", "netns", "exec", self.namespace)

    def run(self, args: list[str], timeout: float = 60, check: bool = True,
            **kwargs) -> subprocess.CompletedProcess:
        result = subprocess.run([*self.prefix, *args], capture_output=True, text=True,
                                timeout=timeout, **kwargs)
        if check and result.returncode != 0:
            raise RuntimeError(f"on {self.name}: {' '.join(args)} failed "
                               f"(exit {result.returncode}): {result.stderr.strip()}")
        return result

    def pids(self) -> set[int]:
        """Every process on this host (in its network namespace)."""
        out = _ip("netns", "pids", self.namespace, check=False).stdout
        return {int(p) for p in out.split()}

    # ----- faults

    def cut_off(self) -> None:
        """The host's cable pulled: nothing in or out until ``reconnect``."""
        self.run(["ip", "link", "set", "eth0", "down"])

    def reconnect(self) -> None:
        self.run(["ip", "link", "set", "eth0", "up"])

    def drop_to(self, address: str, outgoing: bool = True) -> None:
        """Drop this host's packets to ``address`` (``outgoing``), or those from it: one
        direction of one link. Both directions: call it for both, or on both hosts."""
        if outgoing:
            self._nft(f"add rule inet {FAULT_TABLE} output ip daddr {address} drop")
        else:
            self._nft(f"add rule inet {FAULT_TABLE} input ip saddr {address} drop")

    def loss(self, percent: int) -> None:
        """Drop ``percent``% of the packets leaving and entering eth0, at random."""
        # numgen's value is 0..99, and nft refuses a comparison with 100 (out of its range).
        sample = "" if percent >= 100 else f"numgen random mod 100 < {percent} "
        for chain, iface in (("output", "oifname"), ("input", "iifname")):
            self._nft(f'add rule inet {FAULT_TABLE} {chain} {iface} "eth0" {sample}drop')

    def slow(self, rate: str = "64kbit") -> None:
        """A slow link out of this host: eth0 sends at ``rate``, queueing up to 2 s."""
        self.run(["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate,
                  "burst", "8kb", "latency", "2000ms"])

    def heal(self) -> None:
        """Undo every network fault of this host (a crash stays: restart its daemons)."""
        self.run(["nft", "delete", "table", "inet", FAULT_TABLE], check=False)
        self.run(["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        self.reconnect()

    def crash(self, timeout: float = 10) -> list[int]:
        """kill -9 every process on the host, as a power cut would; returns their pids."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout
        # Again until none is left: a supervisor may start a worker between listing and killing.
        while pids := self.pids():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes on {self.name} survive SIGKILL: {sorted(pids)}")
            time.sleep(0.05)
        return killed

    def _nft(self, rule: str) -> None:
        # add table and add chain do nothing when they exist: every rule can bring them along.
        script = (f"add table inet {FAULT_TABLE}\n"
                  f"add chain inet {FAULT_TABLE} output {{ type filter hook output priority 0; }}\n"
                  f"add chain inet {FAULT_TABLE} input {{ type filter hook input priority 0; }}\n"
                  f"{rule}\n")
        self.run(["nft", "-f", "-"], input=script)


_counter = itertools.count()
# Networks still up at interpreter exit are torn down, so an interrupted run leaves no hosts.
_live_networks: "weakref.WeakSet[Network]" = weakref.WeakSet()


@atexit.register
def _destroy_leftovers() -> None:
    for network in list(_live_networks):
        try:
            network.destroy()
        except Exception:
            pass


class Network:
    """A bridge and the hosts on it. ``with Network() as net: h = net.add_host("zk")``."""

    def __init__(self) -> None:
        # A letter, not a number, after the pid: remove_stale() must tell where the pid ends.
        self.prefix = f"{PREFIX}{os.getpid()}{string.ascii_lowercase[next(_counter) % 26]}"
        self.bridge = f"{self.prefix}b"
        self.hosts: dict[str, Host] = {}

    def __enter__(self) -> "Network":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.destroy()

    def create(self) -> "Network":
        remove_stale()
        _live_networks.add(self)
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        return self

    def add_host(self, name: str) -> Host:
        n = len(self.hosts) + 1
        host = Host(name, f"{self.prefix}-{name}", f"{SUBNET}.{10 + n}")
        outside, inside = f"{self.prefix}v{n}", f"{self.prefix}p{n}"
        self.hosts[name] = host   # before anything exists, so destroy() finds a half-made host
        _ip("netns", "add", host.namespace)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", outside, "master", self.bridge, "up")
        _ip("link", "set", inside, "netns", host.namespace)
        for command in (["ip", "link", "set", inside, "name", "eth0"],
                        ["ip", "addr", "add", f"{host.address}/24", "dev", "eth0"],
                        ["ip", "link", "set", "eth0", "up"],
                        ["ip", "link", "set", "lo", "up"]):
            host.run(command)
        return host

    def destroy(self) -> None:
        """Kill every process on every host, delete the namespaces (their veths go with them)
        and the bridge. Safe to call twice, and on a network half made."""
        _live_networks.discard(self)
        _remove(self.prefix)


def _remove(prefix: str) -> None:
    """Remove every namespace and link whose name starts with ``prefix``, processes first (a
    namespace with a process in it outlives ``ip netns delete``)."""
    for namespace in _ip("netns", "list", check=False).stdout.split():
        if namespace.startswith(prefix + "-"):
            try:
                Host(namespace, namespace, "").crash()
            finally:
                _ip("netns", "delete", namespace, check=False)
    for link in re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show").stdout, re.M):
        if link.startswith(prefix) and link[len(prefix):][:1] in ("b", "v"):
            _ip("link", "delete", link, check=False)


def remove_stale() -> None:
    """Remove what runs whose process is gone left behind (a run killed with SIGKILL)."""
    names = _ip("netns", "list", check=False).stdout.split()
    names += re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show").stdout, re.M)
    for name in names:
        match = re.match(rf"^({PREFIX}(\d+)[a-z])[-bvp]", name)
        if match and not _pid_alive(int(match.group(2))):
            _remove(match.group(1))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# ----- a cluster on the hosts

class HostZooKeeper(ZooKeeperServer):
    """A ZooKeeper server on ``host``: deploy/zookeeper.sh run there, bound to its address."""

    def __init__(self, host: Host, data_dir: Path, tick_time: int = 500):
        super().__init__(data_dir, port=ZOOKEEPER_PORT, tick_time=tick_time,
                         address=host.address)
        self.host = host

    def _script(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, ZK_START_TIMEOUT=str(max(1, round(self.start_timeout))))
        proc = self.host.run(["bash", str(ZOOKEEPER_SCRIPT), *args], timeout=timeout,
                             check=False, env=env, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise ZooKeeperServerError(f"deploy/zookeeper.sh {' '.join(args)} on "
                                       f"{self.host.name} failed (exit {proc.returncode}):\n"
                                       f"{proc.stdout}{proc.stderr}")
        return proc


# Every hash whose key matches argv[3], from the server at argv[1]:argv[2] (its password in
# REDISCLI_AUTH), as JSON in hex.
_READ_HASHES = """
import json, os, sys, redis
client = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]), socket_timeout=10,
                     password=os.environ.get("REDISCLI_AUTH"))
print(json.dumps({key.hex(): {f.hex(): v.hex() for f, v in client.hgetall(key).items()}
                  for key in client.scan_iter(match=sys.argv[3])}))
"""


class HostRedis(RedisServer):
    """A Redis server on ``host`` (tests/redis_server.py's, through deploy/redis.sh), bound to
    its address, with a password (off loopback, Redis's protected mode refuses clients without
    one). This process cannot reach it: what it reads is read on that host."""

    def __init__(self, host: Host, data_dir: Path, port: int = REDIS_PORT):
        super().__init__(data_dir, port, address=host.address, prefix=host.prefix,
                         password=secrets.token_hex(16))
        self.host = host

    @property
    def env(self) -> dict[str, str]:
        """The environment of a redis-cli (or of _READ_HASHES) on the host: the password."""
        return dict(os.environ, REDISCLI_AUTH=self.password or "")   # always one (above)

    def client(self):
        raise RuntimeError(f"Redis listens on {self.host.name}'s address, out of this process's "
                           f"reach: use hashes(), or run a command on the host")

    def cli(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """redis-cli against this server, run on its host."""
        return self.host.run(["redis-cli", "-h", self.address, "-p", str(self.port), *args],
                             timeout=timeout, check=False, env=self.env)

    def answers(self) -> bool:
        try:
            return self.cli("ping", timeout=5).stdout.strip() == "PONG"
        except subprocess.TimeoutExpired:
            return False

    def hashes(self, pattern: str) -> dict[bytes, dict[bytes, bytes]]:
        result = self.host.run([sys.executable, "-c", _READ_HASHES, self.address,
                                str(self.port), pattern], timeout=60, cwd=REPO,
                               env=self.env)
        return {bytes.fromhex(key): {bytes.fromhex(f): bytes.fromhex(v) for f, v in h.items()}
                for key, h in json.loads(result.stdout).items()}

    def monitor(self, path: Path) -> subprocess.Popen:
        """A MONITOR session on the server's host, every command the server runs (those of its
        Lua scripts too, as ``[0 lua]``) written to ``path`` in the order it ran them."""
        with open(path, "ab") as out:
            return subprocess.Popen(
                [*self.host.prefix, "redis-cli", "-h", self.address, "-p", str(self.port),
                 "monitor"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=self.env)


QUORUM_PORT, ELECTION_PORT = 2888, 3888
ZOOKEEPER_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-log4j12.jar",
                  "log4j-1.2.jar")
# Wait, from a host that reaches them, until every member of an ensemble serves (answers srvr
# with a Mode: leader or follower); print each member's mode.
_WAIT_FOR_ENSEMBLE = """
import socket, sys, time
members, deadline = sys.argv[2:], time.monotonic() + float(sys.argv[1])
""" + SRVR_SOURCE + """
while True:
    modes = {m: srvr(f"{m}:2181") for m in members}
    if all(v in ("leader", "follower") for v in modes.values()) or time.monotonic() > deadline:
        print(modes)
        sys.exit(0 if all(v in ("leader", "follower") for v in modes.values()) else 1)
    time.sleep(0.2)
"""


class HostZooKeeperEnsemble:
    """A ZooKeeper ensemble, one member on each of ``hosts`` (``myid`` 1, 2, ...), each bound to
    its host's address: clients on 2181, the quorum on 2888 and 3888. deploy/zookeeper.sh runs
    one standalone server only, so the members are started here, as its start does (the same
    jars and logging), with the ensemble's lines in each zoo.cfg."""

    def __init__(self, hosts: list[Host], base: Path, tick_time: int = 500):
        self.members = hosts
        self.base = base
        self.tick_time = tick_time
        self.processes: dict[str, subprocess.Popen] = {}

    @property
    def hosts(self) -> str:
        return ",".join(f"{h.address}:{ZOOKEEPER_PORT}" for h in self.members)

    def _config(self, n: int, host: Host, directory: Path) -> str:
        servers = "".join(f"server.{i}={h.address}:{QUORUM_PORT}:{ELECTION_PORT}\n"
                          for i, h in enumerate(self.members, 1))
        return (f"tickTime={self.tick_time}\ninitLimit=10\nsyncLimit=5\ndataDir={directory}\n"
                f"clientPort={ZOOKEEPER_PORT}\nclientPortAddress={host.address}\n"
                f"maxClientCnxns=0\nadmin.enableServer=false\n"
                f"4lw.commands.whitelist=srvr, ruok, mntr, isro\nreconfigEnabled=false\n"
                f"{servers}")

    def start_member(self, host: Host) -> None:
        n = self.members.index(host) + 1
        directory = self.base / f"zk{n}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "myid").write_text(f"{n}\n")
        (directory / "zoo.cfg").write_text(self._config(n, host, directory))
        (directory / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, FILE\nlog4j.appender.FILE=org.apache.log4j.FileAppender\n"
            f"log4j.appender.FILE.File={directory}/zookeeper.log\n"
            "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t] - %m%n\n")
        classpath = ":".join([str(directory), *(f"/usr/share/java/{j}" for j in ZOOKEEPER_JARS)])
        with open(directory / "zookeeper.out", "ab") as out:
            self.processes[host.name] = subprocess.Popen(
                [*host.prefix, "java", "-Xmx128m", "-XX:+UseSerialGC", "-cp", classpath,
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(directory / "zoo.cfg")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def start(self, client: Host, timeout: float = 60) -> "HostZooKeeperEnsemble":
        for host in self.members:
            self.start_member(host)
        result = client.run([sys.executable, "-c", _WAIT_FOR_ENSEMBLE, str(timeout),
                             *(h.address for h in self.members)], timeout=timeout + 10,
                            check=False)
        if result.returncode != 0:
            raise ZooKeeperServerError(f"the ensemble did not form: {result.stdout.strip()} "
                                       f"{result.stderr.strip()}")
        return self

    def stop(self, hard: bool = True) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=20)


# Read a spout's committed offsets from ZooKeeper, from a host that reaches it.
_READ_COMMITTED = """
import json, sys
from stormlet.cluster.security import Security
from stormlet.cluster.zk_state import offsets_path
from stormlet.sources.offset_store import ZooKeeperOffsetStore
store = ZooKeeperOffsetStore(sys.argv[1], offsets_path(), Security.load(sys.argv[2]))
try:
    print(json.dumps({p: r["offset"] for p, r in store.all().get(sys.argv[3], {}).items()}))
finally:
    store.close()
"""


class MultiHostCluster(Cluster):
    """ZooKeeper, a nimbus and a client, each on a host of its own, with a cluster secret;
    ``add_supervisor`` puts each supervisor on a new host. Every daemon listens on its host's
    address (``--host``/``--bind``) and has its own data directory under ``base``."""

    def __init__(self, base: Path, worker_timeout: float = 8.0,
                 zk_session_timeout: float | None = Cluster.zk_session_timeout,
                 zk_tick_ms: int = 500, zk_members: int = 1):
        """``zk_session_timeout``: the daemons' (None: their default); ZooKeeper grants at
        most 20 of its ticks (``zk_tick_ms``). ``zk_members``: 1, a standalone ZooKeeper on
        host ``zk``; more, an ensemble, a member on each of hosts ``zk1``, ``zk2``, ..."""
        self.base = base
        self.zk_members = zk_members
        self.zk_tick_ms = zk_tick_ms
        self.worker_timeout = worker_timeout
        self.zk_session_timeout = zk_session_timeout
        self.network = Network()
        self.secret_file = base / "cluster.secret"
        self.supervisors: dict[str, Daemon] = {}
        self.nimbuses: list[Daemon] = []
        self.zk: HostZooKeeper | HostZooKeeperEnsemble | None = None
        self.ui: Daemon | None = None
        self.ui_address = ""
        self.redis: HostRedis | None = None

    def __enter__(self) -> "MultiHostCluster":
        try:
            self.start()
        except BaseException:
            self.shutdown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def host(self, name: str) -> Host:
        return self.network.hosts[name]

    @property
    def zk_hosts(self) -> str:
        """ZooKeeper's connection string, once ``start`` started it."""
        assert self.zk is not None, "start the cluster first"
        return self.zk.hosts

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "stormlet.cli", "secret", "generate",
                        str(self.secret_file)], check=True, capture_output=True, cwd=REPO)
        self.network.create()
        if self.zk_members == 1:
            self.zk = HostZooKeeper(self.network.add_host("zk"), self.base / "zk",
                                    tick_time=self.zk_tick_ms)
            self.network.add_host("client")
            self.zk.start()
        else:
            self.zk = HostZooKeeperEnsemble(
                [self.network.add_host(f"zk{n}") for n in range(1, self.zk_members + 1)],
                self.base, tick_time=self.zk_tick_ms)
            self.zk.start(self.network.add_host("client"))
        self.add_nimbus()

    def _daemon(self, name: str, host: Host, command: str, *args: str) -> Daemon:
        return Daemon(name, ["--log-level", "INFO", command, "--zk", self.zk_hosts,
                             "--secret-file", str(self.secret_file), "--host", host.address,
                             "--bind", host.address, "--data-dir", str(self.base / name),
                             *self.session_args(), *args],
                      self.base / f"{name}.log", prefix=host.prefix).start()

    def add_nimbus(self, host: str | None = None) -> Daemon:
        """A nimbus (leading if it is the first), on a new host of its own name
        (``nimbus0``, ...), or on the existing host ``host``."""
        name = f"nimbus{len(self.nimbuses)}"
        where = self.network.add_host(name) if host is None else self.host(host)
        daemon = self._daemon(name, where, "nimbus", "--port", str(NIMBUS_PORT))
        self.nimbuses.append(daemon)
        return daemon

    def add_ui(self, host: str = "nimbus0") -> Daemon:
        """The UI (web pages, REST API, /metrics) on ``host``, serving its address."""
        where = self.host(host)
        daemon = Daemon("ui", ["--log-level", "INFO", "ui", "--zk", self.zk_hosts,
                               "--secret-file", str(self.secret_file), "--host", where.address,
                               "--port", str(UI_PORT), "--allowed-host", where.address],
                        self.base / "ui.log", prefix=where.prefix).start()
        self.ui_address = f"{where.address}:{UI_PORT}"
        self.ui = daemon
        return daemon

    def ui_get(self, path: str) -> str:
        """GET ``path`` of the UI from the client host, as an operator's browser would; "" when
        it does not answer."""
        result = self.host("client").run(
            [sys.executable, "-c", "import sys, urllib.request; sys.stdout.write(urllib.request"
             ".urlopen(sys.argv[1], timeout=10).read().decode())",
             f"http://{self.ui_address}{path}"], timeout=20, check=False)
        return result.stdout if result.returncode == 0 else ""

    def add_supervisor(self, sid: str, slots: int = 2) -> Daemon:
        """A supervisor on a new host named ``sid``. Its ports are the same on every host:
        each host has its own."""
        ports = ",".join(str(6700 + i) for i in range(slots))
        daemon = self._daemon(sid, self.network.add_host(sid), "supervisor", "--id", sid,
                              "--slots", ports, "--worker-timeout", str(self.worker_timeout))
        self.supervisors[sid] = daemon
        return daemon

    def add_redis(self, host: str = "redis") -> HostRedis:
        """A Redis server on a new host ``host``, which every host reaches. (On ZooKeeper's
        host, a supervisor host isolated from ZooKeeper would lose Redis too, and its orphaned
        workers could write nothing there, fenced or not.)"""
        self.redis = HostRedis(self.network.add_host(host), self.base / host).start()
        return self.redis

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """The CLI run from the client host, with the cluster's secret."""
        return self.host("client").run(
            [sys.executable, "-m", "stormlet.cli", "--log-level", "WARNING", *args,
             "--zk", self.zk_hosts, "--secret-file", str(self.secret_file)],
            timeout=timeout, check=False, cwd=REPO)

    def committed(self, spout_id: str) -> dict[int, int]:
        """The spout's committed offsets by partition, read from ZooKeeper by the client host;
        {} when ZooKeeper cannot be read just now."""
        result = self.host("client").run(
            [sys.executable, "-c", _READ_COMMITTED, self.zk_hosts, str(self.secret_file),
             spout_id], timeout=60, check=False, cwd=REPO)
        if result.returncode != 0:
            return {}
        return {int(p): offset for p, offset in json.loads(result.stdout).items()}

    def shutdown(self) -> None:
        ui = [self.ui] if self.ui is not None else []
        for daemon in [*self.supervisors.values(), *self.nimbuses, *ui]:
            daemon.kill()
        if self.zk is not None:
            self.zk.stop(hard=True)
        if self.redis is not None:
            self.redis.kill()
        self.network.destroy()    # and with it every worker left on a host


# ----- the chaos run's stream, topology and checker across hosts

class MultiHostChaosRun(ChaosRun):
    """tests/chaos/harness.py's run (a live 4-partition log, the offset spout's topology, the
    sinks' ``seen`` files, the checker and the recovery measure) on a ``MultiHostCluster``,
    with the hosts' faults as well: ``run.inject("cut_off", host="s1", down_secs=15)``. It
    keeps a history (tests/history.py), its ZooKeeper watcher on the client host.

    The checker's proof holds as on loopback: ``finish`` waits until the spout's committed
    offsets reach the end of every partition, and then every message below them must be in a
    sink's file (lost), once or more (duplicates counted)."""

    # In place of the loopback cluster: the harness reads only what both have.
    cluster: MultiHostCluster  # type: ignore[assignment]

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("history", True)
        super().__init__(*args, **kwargs)
        self.state_writes: StateWrites | None = None

    def start(self) -> None:
        # With the state on a HostRedis: every write to it recorded from before the submit, so
        # that each namespace's first claim is seen (tests/history.py's StateWrites).
        if isinstance(self.redis, HostRedis):
            from history import StateWrites
            self.workdir.mkdir(parents=True, exist_ok=True)
            hosts = {h.address: name for name, h in self.cluster.network.hosts.items()}
            self.state_writes = StateWrites(self.redis, self.workdir / "redis-monitor.log",
                                            hosts).start()
        super().start()

    def finish(self, timeout: float = 300):
        try:
            report = super().finish(timeout)
        finally:
            if self.state_writes is not None:
                self.state_writes.stop()
        if self.state_writes is not None:
            report.state = self.state_writes.check()
            report.state_lines = report.state.lines(self.started_wall)
        return report

    def watch_prefix(self) -> tuple[str, ...]:
        # ZooKeeper listens on its hosts' addresses, which this process cannot reach.
        return self.cluster.host("client").prefix

    def committed(self) -> dict[int, int]:
        # The history's watcher reads the commits every 0.25 s; without one, a process on the
        # client host reads them.
        if self.history is not None and self.history.watch is not None:
            return self.history.latest_committed() or {}
        return self.cluster.committed(NAME)

    def _zookeeper_now(self) -> dict:
        """The watcher's latest reading of ZooKeeper (waiting up to 10 s for one)."""
        def latest():
            return next((z for z in reversed(self.history.zk) if "error" not in z), None)

        wait_until(lambda: latest() is not None, 10, "the watcher to read ZooKeeper")
        return latest()

    def _host_at(self, address: str) -> Host:
        return next(h for h in self.cluster.network.hosts.values() if h.address == address)

    def _victim(self) -> str:
        return self.random.choice(sorted({sid for sid, _port in self.topology_workers()}))

    # ChaosRun.inject(kind) calls _kill_<kind>: these are the faults of a host.

    def _kill_cut_off(self, host: str | None = None, down_secs: float = 15.0) -> str:
        host = host or self._victim()
        self.cluster.host(host).cut_off()
        self._later(down_secs, self.cluster.host(host).reconnect)
        return f"host {host} cut off (eth0 down), back after {down_secs:.0f}s"

    def _kill_link_cut(self, a: str = "s1", b: str = "s2", down_secs: float = 12.0) -> str:
        """The link between hosts ``a`` and ``b`` cut both ways; each still reaches the rest."""
        first, second = self.cluster.host(a), self.cluster.host(b)
        first.drop_to(second.address)
        second.drop_to(first.address)

        def heal() -> None:
            first.heal()
            second.heal()

        self._later(down_secs, heal)
        return f"link {a} <-> {b} cut both ways, back after {down_secs:.0f}s"

    def _kill_isolate(self, host: str = "s1", peers: tuple[str, ...] = ("zk", "nimbus0"),
                      down_secs: float = 20.0) -> str:
        """``host`` cut off from ``peers`` both ways (by default ZooKeeper's and nimbus's
        hosts), still reaching every other host: the partition behind a split brain."""
        victim = self.cluster.host(host)
        for name in peers:
            address = self.cluster.host(name).address
            victim.drop_to(address)
            victim.drop_to(address, outgoing=False)
        self._later(down_secs, victim.heal)
        return f"host {host} cut off from {', '.join(peers)} for {down_secs:.0f}s"

    def _kill_slow_link(self, host: str = "s1", down_secs: float = 25.0,
                        rate: str = "64kbit") -> str:
        """Everything ``host`` sends goes out at ``rate``, queueing up to 2 s."""
        self.cluster.host(host).slow(rate)
        self._later(down_secs, self.cluster.host(host).heal)
        return f"host {host}'s link slowed to {rate} (2 s queue) for {down_secs:.0f}s"

    def _kill_loss(self, host: str = "s1", percent: int = 15, down_secs: float = 15.0) -> str:
        """``percent``% of the packets in and out of ``host`` dropped at random."""
        self.cluster.host(host).loss(percent)
        self._later(down_secs, self.cluster.host(host).heal)
        return f"{percent}% packet loss in and out of host {host} for {down_secs:.0f}s"

    def _kill_host_crash(self, host: str | None = None, down_secs: float = 15.0) -> str:
        """A power cut: the host falls silent (its cable out, so its peers get no resets
        either) and every process on it dies; after ``down_secs`` it is back on the network
        and its supervisor starts again with the same data directory (its workers' old
        heartbeat files and code in it), as after a reboot."""
        host = host or self._victim()
        victim = self.cluster.host(host)
        victim.cut_off()
        killed = victim.crash()

        def reboot() -> None:
            victim.reconnect()
            self.cluster.supervisors[host].start()

        self._later(down_secs, reboot)
        return (f"host {host} crashed ({len(killed)} processes SIGKILLed, off the network), "
                f"back with its supervisor and data directory after {down_secs:.0f}s")

    def _kill_leader_cut_off(self, down_secs: float = 15.0) -> str:
        """The leading nimbus's host cut off (as ZooKeeper says who leads now)."""
        leader = self._zookeeper_now().get("leader") or {}
        assert leader.get("host"), f"no leader in ZooKeeper: {leader}"
        host = self._host_at(leader["host"])
        host.cut_off()
        self._later(down_secs, host.reconnect)
        return (f"the leading nimbus {leader.get('id')}'s host {host.name} cut off, back after "
                f"{down_secs:.0f}s")

    def _kill_zk_member_cut_off(self, member: str | None = None,
                                down_secs: float = 15.0) -> str:
        """One member of the ZooKeeper ensemble cut off: ``member`` (a host name), or by
        default the ensemble's leader (the harder case: the rest elect a new one, and every
        client connected anywhere loses its connection meanwhile)."""
        if member is None:
            modes = self._zookeeper_now().get("modes", {})
            leaders = [m for m, mode in modes.items() if mode == "leader"]
            assert leaders, f"no ZooKeeper leader in {modes}"
            member = self._host_at(leaders[0].rsplit(":", 1)[0]).name
        host = self.cluster.host(member)
        host.cut_off()
        self._later(down_secs, host.reconnect)
        return f"ZooKeeper member {member} cut off, back after {down_secs:.0f}s"
