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
    def __init__(self, data_dir: Path, port: int | None = None):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def provider_config(self) -> dict:
        """What ``topology.state.provider.config`` takes to reach this server."""
        return {"host": "127.0.0.1", "port": self.port}

    def client(self):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "redis.out", "ab")
        self.process = subprocess.Popen(
            ["bash", str(SCRIPT), "start", "--port", str(self.port), "--data-dir",
             str(self.data_dir), "--foreground"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                tail = (self.data_dir / "redis.out").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{tail}")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except Exception:
            return False

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
