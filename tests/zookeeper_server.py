"""A real standalone ZooKeeper server for tests, driven through ``deploy/zookeeper.sh``.

Usage::

    from zookeeper_server import ZooKeeperServer, zookeeper_available, SKIP_REASON

    pytestmark = pytest.mark.skipif(not zookeeper_available(), reason=SKIP_REASON)

    def test_something(tmp_path):
        with ZooKeeperServer(tmp_path / "zk") as zk:       # started, on a free loopback port
            client = KazooClient(hosts=zk.hosts)
            ...
            zk.stop(hard=True)                             # kill -9: a crash
            time.sleep(15)
            zk.start()                                     # same data dir and port

Set ``STORMLET_REQUIRE_ZOOKEEPER=1`` to make ``zookeeper_available()`` raise instead of returning
False, so that a CI run cannot silently skip the ZooKeeper tests.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import weakref
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "deploy" / "zookeeper.sh"
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SKIP_REASON = (
    f"ZooKeeper is not installed (needs java and {ZOOKEEPER_JAR}): "
    "run 'deploy/zookeeper.sh install'"
)
PID_FILE = "zookeeper.pid"
LOG_FILE = "zookeeper.log"


class ZooKeeperServerError(RuntimeError):
    """deploy/zookeeper.sh failed; the message holds its output (including the server's log
    tail)."""


def zookeeper_available() -> bool:
    """Whether java and Debian's ZooKeeper jar are present.

    With ``STORMLET_REQUIRE_ZOOKEEPER`` set to a non-empty value other than ``0``, a missing
    installation raises ``RuntimeError`` instead (for CI, where skipping would hide breakage).
    """
    ok = shutil.which("java") is not None and ZOOKEEPER_JAR.is_file() and SCRIPT.is_file()
    if not ok and os.environ.get("STORMLET_REQUIRE_ZOOKEEPER", "") not in ("", "0"):
        raise RuntimeError(SKIP_REASON + " (STORMLET_REQUIRE_ZOOKEEPER is set)")
    return ok


# Ports free_port gave this process: two servers started one after the other must not get one.
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now, below the kernel's ephemeral range and
    not handed out before in this process.

    Not the bind-to-0 trick: that gives a port from the ephemeral range, which any outgoing
    connection on the machine may take as its source port before the server binds it, or
    between two binds of a server that restarts on it (a supervisor's slots, a ZooKeeper
    stopped and started). A CI run lost a cluster module that way ("Address already in use"
    for a worker's slot). Servers are given ports below that range, as Storm's slots are."""
    first_ephemeral = _first_ephemeral_port()
    candidates = range(min(20_000, first_ephemeral // 2), first_ephemeral)
    start = random.randrange(len(candidates))
    for i in range(len(candidates)):
        port = candidates[(start + i) % len(candidates)]
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port on {host} below the ephemeral range ({first_ephemeral})")


def _first_ephemeral_port() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768   # Linux's default


def four_letter_word(host: str, port: int, word: str = "srvr", timeout: float = 2.0) -> str:
    """The server's answer to a four-letter word, or "" if nothing answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode("ascii"))
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Is ``pid`` a live process? Zombies count as dead (init here may reap them late)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


# Servers still running at interpreter exit are killed, so a crashed test run leaves no JVMs.
_live_servers: "weakref.WeakSet[ZooKeeperServer]" = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_live_servers):
        try:
            server.stop(hard=True)
        except Exception:
            pass


class ZooKeeperServer:
    """A standalone ZooKeeper on loopback, with its files in ``data_dir``.

    ``start()`` returns once the server answers ``srvr`` (a cold start takes ~0.7 s). ``stop()``
    stops it gracefully (SIGTERM; ~1.3 s), ``stop(hard=True)`` kills it with SIGKILL at once.
    ``start()`` may be called again after either: same data dir, same port, data kept.
    As a context manager it starts on entry (a no-op if already running) and kills hard on exit.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        tick_time: int = 500,
        *,
        address: str = "127.0.0.1",
        start_timeout: float = 20.0,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.address = address
        self.port = port if port is not None else free_port(address)
        self.tick_time = tick_time
        self.start_timeout = start_timeout

    def __repr__(self) -> str:
        return f"ZooKeeperServer({str(self.data_dir)!r}, port={self.port}, pid={self.pid})"

    @property
    def hosts(self) -> str:
        """The connection string for clients, e.g. ``"127.0.0.1:2181"``."""
        return f"{self.address}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / PID_FILE

    @property
    def log_file(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def pid(self) -> int | None:
        """The server's pid from its pid file, or None when not running."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def srvr(self) -> str:
        """The server's answer to ``srvr`` ("" when it does not answer)."""
        return four_letter_word(self.address, self.port, "srvr")

    def is_serving(self) -> bool:
        return "Mode:" in self.srvr()

    def _script(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, ZK_START_TIMEOUT=str(max(1, round(self.start_timeout))))
        try:
            proc = subprocess.run(
                ["bash", str(SCRIPT), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as e:
            # The output so far is bytes here even with text=True (subprocess documents it).
            said = b"".join(out for out in (e.stdout, e.stderr) if isinstance(out, bytes))
            raise ZooKeeperServerError(
                f"deploy/zookeeper.sh {' '.join(args)} timed out after {timeout:.0f}s\n"
                f"{said.decode(errors='replace')}"
            ) from None
        if proc.returncode != 0:
            raise ZooKeeperServerError(
                f"deploy/zookeeper.sh {' '.join(args)} failed (exit {proc.returncode}):\n"
                f"{proc.stdout}{proc.stderr}"
            )
        return proc

    def start(self) -> "ZooKeeperServer":
        """Start the server (a no-op if it already runs) and wait until it answers."""
        self._script(
            "start",
            "--port", str(self.port),
            "--data-dir", str(self.data_dir),
            "--tick-time", str(self.tick_time),
            "--address", self.address,
            timeout=self.start_timeout + 15,
        )
        _live_servers.add(self)
        return self

    def stop(self, hard: bool = False, timeout: float = 10.0) -> None:
        """Stop the server: SIGTERM (then SIGKILL) through the script, or SIGKILL at once if
        ``hard``.

        Returns once the process is gone and the port refuses connections. A no-op when not running.
        """
        _live_servers.discard(self)
        if not hard:
            self._script("stop", "--data-dir", str(self.data_dir), timeout=timeout + 10)
            return
        pid = self.pid
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while _alive(pid):
                if time.monotonic() > deadline:
                    raise ZooKeeperServerError(
                        f"ZooKeeper (pid {pid}) survived SIGKILL for {timeout}s")
                time.sleep(0.02)
        try:
            self.pid_file.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop(hard=True)


# Python source of ``srvr(member)``: the mode ("leader", "follower", "standalone"; "" if it
# does not answer) a ZooKeeper server at host:port reports to the four-letter word srvr. For
# scripts run on other hosts (tests/multi_host.py, tests/history.py), which cannot import it.
SRVR_SOURCE = r"""
def srvr(member):
    host, port = member.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5) as s:
            s.settimeout(0.5)
            s.sendall(b"srvr")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return ""
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return ""
"""
