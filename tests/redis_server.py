"""A real Redis server for tests, started on loopback through ``deploy/redis.sh``.

    with RedisServer(tmp_path / "redis") as redis:   # on a free port, data in that directory
        client = redis.client()
        redis.kill()                                  # kill -9: an outage
        redis.start()                                 # same port and data: committed data back

Set ``STORMLET_REQUIRE_REDIS=1`` to make ``redis_available()`` raise instead of returning False,
so that a CI run cannot silently skip the Redis tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Self

import pytest
from zookeeper_server import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "deploy" / "redis.sh"
SKIP_REASON = "redis-server is not installed: run 'deploy/redis.sh install'"


def redis_available() -> bool:
    ok = shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None
    if not ok and os.environ.get("STORMLET_REQUIRE_REDIS", "") not in ("", "0"):
        raise RuntimeError(SKIP_REASON + " (STORMLET_REQUIRE_REDIS is set)")
    return ok


class RedisServer:
    """``address`` is where it listens; ``prefix`` a command that runs the rest elsewhere (on a
    host of tests/multi_host.py, say: ``HostRedis``), the server started through it. With
    ``password`` (needed off loopback: Redis's protected mode), clients must give it."""

    def __init__(self, data_dir: Path, port: int | None = None, address: str = "127.0.0.1",
                 prefix: tuple[str, ...] = (), password: str | None = None):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.address = address
        self.prefix = tuple(prefix)
        self.password = password
        self.process: subprocess.Popen | None = None

    @property
    def provider_config(self) -> dict:
        """What ``topology.state.provider.config`` takes to reach this server."""
        config = {"host": self.address, "port": self.port}
        if self.password:
            config["password"] = self.password
        return config

    def client(self):
        import redis
        return redis.Redis(host=self.address, port=self.port, password=self.password,
                           socket_timeout=5)

    def start(self, timeout: float = 10.0) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        password = []
        if self.password:
            path = self.data_dir / "password"
            path.write_text(self.password + "\n")
            path.chmod(0o600)
            password = ["--password-file", str(path)]
        log = open(self.data_dir / "redis.out", "ab")
        self.process = subprocess.Popen(
            [*self.prefix, "bash", str(SCRIPT), "start", "--port", str(self.port), "--address",
             self.address, "--data-dir", str(self.data_dir), *password, "--foreground"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                tail = (self.data_dir / "redis.out").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not start on {self.address}:{self.port}:"
                                   f"\n{tail}")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except Exception:
            return False

    def hashes(self, pattern: str) -> dict[bytes, dict[bytes, bytes]]:
        """Every hash whose key matches ``pattern`` (Redis's glob), whole."""
        client = self.client()
        try:
            return {key: client.hgetall(key) for key in client.scan_iter(match=pattern)}
        finally:
            client.close()

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A Redis server for a test module (import this fixture into it); skips without Redis."""
    if not redis_available():
        pytest.skip(SKIP_REASON)
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server
