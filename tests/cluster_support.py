"""A real stormlet cluster on loopback for tests: ZooKeeper, nimbus and supervisor processes.

Every daemon is a real ``stormlet`` process started the way an operator starts it; the CLI is
driven as a user drives it. Teardown kills every process group it started, workers included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Iterator, Self

import support
from kazoo.exceptions import NoNodeError
from zookeeper_server import ZooKeeperServer, free_port

from stormlet.cluster.zk_state import leader_path

REPO = Path(__file__).resolve().parent.parent
# The reliable topology most cluster tests run (see its docstring).
LEDGER = Path(__file__).resolve().parent / "cluster_topologies" / "ledger.py"
LEADER_PATH = leader_path()


def leader_port(zk) -> int | None:
    """The leading nimbus's port, or None while there is none.

    The node is ephemeral: it can vanish between an ``exists`` and a ``get`` when the old
    leader's session expires, so a missing node is read as "no leader" in one call.
    """
    try:
        return json.loads(zk.get(LEADER_PATH)[0])["port"]
    except NoNodeError:
        return None


class Daemon:
    """One ``stormlet`` daemon process, in a process group of its own, logging to ``log_path``.

    ``prefix`` is a command that runs the rest in a context of its own and execs it, keeping the
    pid (``ip netns exec HOST`` for a host of tests/multi_host.py), so ``kill`` still reaches
    the daemon's process group."""

    def __init__(self, name: str, args: list[str], log_path: Path,
                 env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()):
        self.name = name
        self.args = args
        self.log_path = log_path
        self.env = env
        self.prefix = prefix
        self.process: subprocess.Popen | None = None

    def start(self) -> "Daemon":
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "stormlet.cli", *self.args], stdout=log,
                stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                env=None if self.env is None else {**os.environ, **self.env})
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=20)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Cluster:
    """What every test cluster shares, wherever its daemons run: waiting for a leader, the
    workers' heartbeats (files in each supervisor's data directory, ``base / id``), submitting
    and killing topologies through ``cli``, and the daemons' logs. A subclass sets ``base`` and
    ``supervisors`` (id -> Daemon) and defines ``cli``."""

    base: Path
    supervisors: dict[str, Daemon]
    # The daemons' ZooKeeper session: a dead supervisor is noticed in 6 s, not the default 20.
    zk_session_timeout: float | None = 6.0

    def session_args(self) -> list[str]:
        """The daemons' option for ``zk_session_timeout`` (none: the daemons' default)."""
        if self.zk_session_timeout is None:
            return []
        return ["--zk-session-timeout", str(self.zk_session_timeout)]

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        raise NotImplementedError

    def wait_for_leader(self) -> None:
        wait_until(lambda: self.cli("list").returncode == 0, 30, "nimbus to lead")

    def serving(self) -> Iterator[Self]:
        """For a module fixture: yields this cluster once a nimbus leads, and prints every
        daemon's log if what ran with it failed."""
        try:
            self.wait_for_leader()
            yield self
        except BaseException:
            print(self.logs())
            raise

    def heartbeats(self) -> dict[tuple[str, int], dict]:
        """The latest heartbeat of every live worker process, by (supervisor, port)."""
        beats = {}
        for sid in self.supervisors:
            for path in (self.base / sid / "heartbeats").glob("*.json"):
                try:
                    beat = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                # Fresh and from a living process (a dead worker's file stays behind).
                if _pid_alive(beat.get("pid", -1)) and time.time() - beat.get("time", 0) < 5:
                    beats[(sid, int(path.stem))] = beat
        return beats

    def metric(self, component: str, key: str) -> int:
        return sum(beat["metrics"].get(component, {}).get(key, 0)
                   for beat in self.heartbeats().values())

    def topology_workers(self, name: str) -> dict[tuple[str, int], dict]:
        """The heartbeats of topology ``name``'s live workers, by (supervisor, port)."""
        return {slot: beat for slot, beat in self.heartbeats().items()
                if beat["topology_id"].startswith(name + "-")}

    def submit(self, path: Path, name: str, *conf: str) -> subprocess.CompletedProcess:
        """Submit the topology file ``path`` as ``name`` with ``key=value`` config pairs."""
        args = ["submit", str(path), "--name", name]
        for pair in conf:
            args += ["-c", pair]
        result = self.cli(*args)
        assert result.returncode == 0, result.stderr
        assert f"submitted {name}" in result.stdout
        return result

    def kill_and_wait(self, name: str) -> None:
        """Kill topology ``name`` and wait until its workers are gone and nimbus forgot it."""
        result = self.cli("kill", name, "--wait", "1")
        assert result.returncode == 0, result.stderr
        wait_until(lambda: not self.topology_workers(name), 40, f"{name}'s workers to exit")
        wait_until(lambda: name not in self.cli("list").stdout, 20, f"{name} to leave the list")

    def logs(self) -> str:
        """The tail of every daemon's and worker's log, and of each worker's raw output."""
        parts = []
        for path in sorted([*self.base.rglob("*.log"), *self.base.rglob("worker.out")]):
            if path.name.startswith(("acked-", "seen-")) or (
                    path.parent.name == "logs" and path.suffix == ".log"):
                continue   # a daemon's own copy of what its output file (base/NAME.log) holds
            if path.name == "worker.out" and not path.stat().st_size:
                continue
            parts.append(f"==== {path.relative_to(self.base)}\n" + path.read_text()[-3000:])
        return "\n".join(parts)


class LoopbackCluster(Cluster):
    """``with LoopbackCluster(tmp) as c: c.add_nimbus(); c.add_supervisor("s1", 2); c.cli(...)``

    With ``secret_file``, the daemons get it in their environment (STORMLET_SECRET_FILE) and
    ``cli`` passes it with --secret-file."""

    def __init__(self, base: Path, worker_timeout: float = 8.0, secret_file: Path | None = None):
        self.base = base
        self.secret_file = secret_file
        self.daemon_env = {"STORMLET_SECRET_FILE": str(secret_file)} if secret_file else None
        self.zk = ZooKeeperServer(base / "zk", tick_time=500)
        self.nimbuses: list[Daemon] = []
        self.supervisors: dict[str, Daemon] = {}
        self.worker_timeout = worker_timeout

    def __enter__(self) -> "LoopbackCluster":
        self.zk.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def add_nimbus(self) -> Daemon:
        n = len(self.nimbuses)
        port = free_port()
        daemon = Daemon(f"nimbus{n}", ["--log-level", "INFO", "nimbus", "--zk", self.zk.hosts,
                                       "--port", str(port), "--data-dir",
                                       str(self.base / f"nimbus{n}"), *self.session_args()],
                        self.base / f"nimbus{n}.log", self.daemon_env).start()
        self.nimbuses.append(daemon)
        return daemon

    def add_supervisor(self, sid: str, slots: int = 2) -> Daemon:
        ports = ",".join(str(free_port()) for _ in range(slots))
        daemon = Daemon(sid, ["--log-level", "INFO", "supervisor", "--zk", self.zk.hosts, "--id",
                              sid, "--slots", ports, "--data-dir", str(self.base / sid),
                              "--worker-timeout", str(self.worker_timeout),
                              # Several supervisors share this host: any free port each.
                              "--service-port", "0", *self.session_args()],
                        self.base / f"{sid}.log", self.daemon_env).start()
        self.supervisors[sid] = daemon
        return daemon

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A call on nimbus through the CLI, with this cluster's secret if it has one."""
        secret = ["--secret-file", str(self.secret_file)] if self.secret_file else []
        return subprocess.run([sys.executable, "-m", "stormlet.cli", "--log-level", "WARNING",
                               *args, "--zk", self.zk.hosts, *secret], capture_output=True,
                              text=True, timeout=timeout, cwd=REPO)

    def worker_pids(self) -> set[int]:
        out = subprocess.run(["pgrep", "-f", "stormlet worker --zk " + self.zk.hosts],
                             capture_output=True, text=True)
        return {int(p) for p in out.stdout.split()}

    def shutdown(self) -> None:
        for daemon in [*self.supervisors.values(), *self.nimbuses]:
            daemon.kill()
        for pid in self.worker_pids():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.zk.stop(hard=True)


def stormlet_command(*args: str) -> list[str]:
    """The ``stormlet`` command line with ``args``, as a test runs it (its own warnings only)."""
    return [sys.executable, "-m", "stormlet.cli", "--log-level", "WARNING", *args]


def new_secret_file(directory: Path) -> Path:
    """A cluster secret made by ``stormlet secret generate`` in ``directory``."""
    path = directory / "cluster.secret"
    result = subprocess.run(stormlet_command("secret", "generate", str(path)),
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return path


def serve_cluster(base: Path, nimbuses: int = 1, supervisors: dict[str, int] | None = None,
                  secret_file: Path | None = None) -> Iterator[LoopbackCluster]:
    """For a module fixture: ``yield from serve_cluster(base, 2, {"s1": 2})`` yields a cluster
    with that many nimbuses and supervisors (id: slots) once one leads, and tears it down."""
    with LoopbackCluster(base, secret_file=secret_file) as cluster:
        for _ in range(nimbuses):
            cluster.add_nimbus()
        for sid, slots in (supervisors or {"s1": 2}).items():
            cluster.add_supervisor(sid, slots)
        yield from cluster.serving()


def after_test(request, cluster: Cluster, kill_left: bool = True) -> None:
    """For a module's autouse fixture, after its test: if the test failed, print the daemons'
    and workers' logs (the only way to see why) and, with ``kill_left``, kill the topologies it
    left running, so that the next test gets free slots."""
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    print(cluster.logs())
    if kill_left:
        listing = cluster.cli("list").stdout.splitlines()[1:]
        for name in [line.split()[0] for line in listing if line.strip()]:
            if name != "no":
                cluster.kill_and_wait(name)


def json_outputs(directory: Path, prefix: str) -> list[dict]:
    """The JSON files ``<prefix>-*.json`` a test topology's components wrote in ``directory``
    (one being written, or unreadable, is skipped: it is read again on the next look)."""
    found = []
    for path in directory.glob(f"{prefix}-*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def acked_ids(directory: Path) -> set[int]:
    """The message ids a ledger spout recorded as acked (its acked-*.log files)."""
    ids: set[int] = set()
    for path in directory.glob("acked-*.log"):
        ids |= {int(line) for line in path.read_text().split()}
    return ids


def _pid_alive(pid: int) -> bool:
    """True for a running process; a zombie (killed, not yet reaped) counts as dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# The cluster tests poll every 0.2s unless they say otherwise.
wait_until = partial(support.wait_until, interval=0.2)
