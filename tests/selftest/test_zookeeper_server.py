"""deploy/zookeeper.sh and tests/zookeeper_server.py against a real ZooKeeper (Debian's package)."""

from __future__ import annotations

import socket
import subprocess
import threading

import pytest
from kazoo.client import KazooClient, KazooState
from zookeeper_server import (
    SCRIPT,
    SKIP_REASON,
    ZooKeeperServer,
    ZooKeeperServerError,
    four_letter_word,
    zookeeper_available,
)

pytestmark = [pytest.mark.zookeeper,
              pytest.mark.skipif(not zookeeper_available(), reason=SKIP_REASON)]


class StateRecorder:
    """A kazoo connection listener that records states and lets a test wait for one."""

    def __init__(self) -> None:
        self.states: list[str] = []
        self._cond = threading.Condition()

    def __call__(self, state: str) -> None:
        with self._cond:
            self.states.append(state)
            self._cond.notify_all()

    def wait_for(self, state: str, after: int = 0, timeout: float = 10.0) -> None:
        """Wait until ``state`` was recorded at an index >= ``after``."""
        with self._cond:
            ok = self._cond.wait_for(lambda: state in self.states[after:], timeout=timeout)
        assert ok, f"no {state} within {timeout}s; states so far: {self.states}"


def client_for(zk: ZooKeeperServer, session_timeout: float = 10.0) -> KazooClient:
    # Short reconnect back-off so a restarted server is found quickly.
    return KazooClient(
        hosts=zk.hosts,
        timeout=session_timeout,
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 0.5},
    )


def script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_znodes_survive_a_crash_and_restart(tmp_path):
    # The session must outlive a JVM restart on a loaded CI machine: the default 500 ms tick
    # caps sessions at 10 s, which a slow restart plus kazoo's read time-out once exceeded.
    # A 2 s tick allows the 30 s session asked for here.
    with ZooKeeperServer(tmp_path / "zk", tick_time=2000) as zk:
        assert zk.hosts == f"127.0.0.1:{zk.port}"
        assert zk.pid is not None and zk.is_serving()

        client = client_for(zk, session_timeout=30.0)
        states = StateRecorder()
        client.add_listener(states)
        client.start(timeout=10)
        try:
            client.create("/stormlet/assignments/topo-1", b"hello", makepath=True)
            client.create("/stormlet/workers/w1", b"alive", ephemeral=True, makepath=True)
            assert client.get("/stormlet/assignments/topo-1")[0] == b"hello"
            session = client.client_id

            # Crash: kazoo notices the lost connection.
            mark = len(states.states)
            zk.stop(hard=True)
            assert zk.pid is None and not zk.is_serving()
            states.wait_for(KazooState.SUSPENDED, after=mark, timeout=10)
            assert not client.connected

            # Restart on the same data dir and port: kazoo reconnects within the session
            # timeout, keeping its session (and so its ephemeral node).
            mark = len(states.states)
            zk.start()
            states.wait_for(KazooState.CONNECTED, after=mark, timeout=30)
            assert KazooState.LOST not in states.states
            assert client.client_id[0] == session[0]
            assert client.get("/stormlet/assignments/topo-1")[0] == b"hello"
            assert client.exists("/stormlet/workers/w1") is not None
        finally:
            client.stop()
            client.close()

        # A fresh client sees the persisted znode; the closed session's ephemeral is gone.
        fresh = client_for(zk)
        fresh.start(timeout=10)
        try:
            assert fresh.get("/stormlet/assignments/topo-1")[0] == b"hello"
            assert fresh.exists("/stormlet/workers/w1") is None
        finally:
            fresh.stop()
            fresh.close()
    assert not zk.is_serving()


def test_only_the_health_check_four_letter_words_answer(tmp_path):
    """An anonymous client must not learn node paths, sessions or client addresses."""
    with ZooKeeperServer(tmp_path / "zk", tick_time=500) as zk:
        for word in ("wchp", "wchc", "wchs", "dump", "cons", "stat", "envi", "conf", "crst"):
            answer = four_letter_word(zk.address, zk.port, word)
            assert "not in the whitelist" in answer, (word, answer)
        assert "Mode: standalone" in four_letter_word(zk.address, zk.port, "srvr")
        assert four_letter_word(zk.address, zk.port, "ruok") == "imok"
        assert "zk_version" in four_letter_word(zk.address, zk.port, "mntr")


def test_script_status_start_and_stop(tmp_path):
    data_dir = tmp_path / "zk"
    zk = ZooKeeperServer(data_dir, tick_time=500)
    try:
        zk.start()
        cfg = (data_dir / "zoo.cfg").read_text().splitlines()
        for line in ("tickTime=500", f"dataDir={data_dir.resolve()}", f"clientPort={zk.port}",
                     "clientPortAddress=127.0.0.1", "admin.enableServer=false"):
            assert line in cfg
        assert (data_dir / "zookeeper.log").stat().st_size > 0

        status = script("status", "--port", str(zk.port))
        assert status.returncode == 0, status.stderr
        assert "Mode: standalone" in status.stdout

        # start is idempotent: same server, same pid.
        pid = zk.pid
        zk.start()
        assert zk.pid == pid

        # Another data dir on the same port is refused with a clear message.
        other = script("start", "--port", str(zk.port), "--data-dir", str(tmp_path / "other"))
        assert other.returncode == 1
        assert "already used by another ZooKeeper" in other.stderr

        # Graceful stop through the script.
        zk.stop()
        assert zk.pid is None and not (data_dir / "zookeeper.pid").exists()
        status = script("status", "--port", str(zk.port))
        assert status.returncode == 3
        assert "no ZooKeeper answering" in status.stderr
        again = script("stop", "--data-dir", str(data_dir))
        assert again.returncode == 0 and "not running" in again.stdout
    finally:
        zk.stop(hard=True)


def test_start_on_a_busy_port_fails_clearly(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        zk = ZooKeeperServer(tmp_path / "zk", port=squatter.getsockname()[1])
        with pytest.raises(ZooKeeperServerError, match="already in use by another program"):
            zk.start()
    assert zk.pid is None


def test_script_usage_errors():
    for args in (["start", "--data-dir", "/tmp/x"],
                 ["start", "--port", "70000", "--data-dir", "/tmp/x"],
                 ["status"], ["frobnicate"]):
        result = script(*args)
        assert result.returncode == 2, (args, result)
        assert "usage:" in result.stderr


def test_a_timed_out_script_says_what_it_printed_as_text(tmp_path, monkeypatch):
    # subprocess hands a timed-out run's output over as bytes, even with text=True.
    def timing_out(args, **kwargs):
        raise subprocess.TimeoutExpired(args, kwargs["timeout"], output=b"waiting for the port\n",
                                        stderr=b"still waiting\n")

    monkeypatch.setattr(subprocess, "run", timing_out)
    with pytest.raises(ZooKeeperServerError) as raised:
        ZooKeeperServer(tmp_path / "zk").start()
    assert "timed out" in str(raised.value)
    assert str(raised.value).endswith("waiting for the port\nstill waiting\n")
