"""A real Spark standalone cluster for tests: a master and one worker, started from the
pip-installed PySpark on loopback, as separate JVMs in one process group of their own.

    with SparkCluster(tmp_path / "spark") as cluster:     # master and worker on free ports
        run(["python", "-m", "stormlet", "replay", ..., "--master", cluster.url])
        cluster.applications()                           # the master's view of the apps

The worker starts its executors (and they their Python workers) in its work directory, with the
environment it was started with: ``PYTHONPATH`` names this checkout, standing for a stormlet
installed on the workers. Executors are children of the worker, so stopping the process group
ends them too.

Set ``STORMLET_REQUIRE_SPARK=1`` to make ``spark_cluster_available()`` raise instead of returning
False, so that a CI run cannot silently skip the Spark cluster tests.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from zookeeper_server import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
SKIP_REASON = "a Spark standalone cluster needs java and PySpark: pip install -e '.[test]'"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def pyspark_home() -> Path | None:
    """The installed ``pyspark`` package's directory (it holds ``bin/spark-class`` and the
    jars), or None."""
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).resolve().parent


def spark_cluster_available() -> bool:
    """Whether java and PySpark (with its launch scripts) are present.

    With ``STORMLET_REQUIRE_SPARK`` set to a non-empty value other than ``0``, a missing
    installation raises ``RuntimeError`` instead (for CI, where skipping would hide breakage).
    """
    home = pyspark_home()
    ok = shutil.which("java") is not None and home is not None \
        and (home / "bin" / "spark-class").is_file()
    if not ok and os.environ.get("STORMLET_REQUIRE_SPARK", "") not in ("", "0"):
        raise RuntimeError(SKIP_REASON + " (STORMLET_REQUIRE_SPARK is set)")
    return ok


class SparkClusterError(RuntimeError):
    """The cluster did not come up; the message holds the daemons' log tails."""


# Clusters still running at interpreter exit are stopped, so a crashed test run leaves no JVMs.
_live: set[SparkCluster] = set()


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_live):
        cluster.stop()


class SparkCluster:
    """A standalone master and one worker (``cores`` cores, ``memory`` of memory for
    executors) on loopback, with their logs and the worker's work directory under
    ``directory``; without the worker if not ``worker`` (a master nobody can run jobs on)."""

    def __init__(self, directory: Path, *, cores: int = 2, memory: str = "2g",
                 worker: bool = True):
        self.directory = Path(directory).resolve()
        self.cores, self.memory, self.with_worker = cores, memory, worker
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.work_dir = self.directory / "work"
        self.master: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The master URL a driver is given: ``spark://127.0.0.1:PORT``."""
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str], group: int | None) -> subprocess.Popen:
        home = pyspark_home()
        assert home is not None, SKIP_REASON
        env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_DAEMON_MEMORY="512m",
                   # What the workers' Python has installed: the stormlet under test.
                   PYTHONPATH=os.pathsep.join(
                       [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        with open(self.directory / f"{name}.log", "ab") as log:
            # spark-class execs java, so the pid is the JVM's. The master leads a new process
            # group and the worker joins it: one killpg ends both, and the executors the worker
            # started. (Not a new session: a process can only join a group of its own session.)
            return subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args], cwd=self.directory, env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                process_group=0 if group is None else group)

    def start(self, timeout: float = 60.0) -> SparkCluster:
        """Start the master, then the worker; return once the master lists the worker ALIVE
        (without a worker: once the master is ALIVE)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(exist_ok=True)
        _live.add(self)
        self.master = self._spawn("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port",
                                             str(self.port), "--webui-port", str(self.ui_port)],
                                  None)
        if self.with_worker:
            self.worker = self._spawn("worker", [
                WORKER_CLASS, self.url, "--host", "127.0.0.1", "--cores", str(self.cores),
                "--memory", self.memory, "--webui-port", str(self.worker_ui_port),
                "--work-dir", str(self.work_dir)], self.master.pid)
        deadline = time.monotonic() + timeout
        while not self._ready():
            for name, process in (("master", self.master), ("worker", self.worker)):
                if process is not None and process.poll() is not None:
                    self._fail(f"the Spark {name} exited with status {process.returncode}")
            if time.monotonic() > deadline:
                self._fail(f"the Spark master at {self.url} was not ALIVE"
                           + (" with an ALIVE worker" if self.with_worker else "")
                           + f" within {timeout:g} s")
            time.sleep(0.25)
        return self

    def _fail(self, what: str) -> None:
        tails = "\n".join(f"--- {name}.log (tail)\n{self.log_tail(name)}"
                          for name in ("master", "worker"))
        self.stop()
        raise SparkClusterError(f"{what}\n{tails}")

    def log_tail(self, name: str, chars: int = 3000) -> str:
        """The end of the master's or the worker's log."""
        try:
            return (self.directory / f"{name}.log").read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def state(self) -> dict[str, Any]:
        """The master's web UI JSON (workers, active and completed applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
            return json.load(r)

    def _ready(self) -> bool:
        try:
            state = self.state()
        except (OSError, ValueError):
            return False     # not listening yet
        return state.get("status") == "ALIVE" and (not self.with_worker or any(
            w.get("state") == "ALIVE" for w in state.get("workers", [])))

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master has seen, active and completed."""
        state = self.state()
        return state.get("activeapps", []) + state.get("completedapps", [])

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the process group (the worker kills its executors), then, once the daemons
        exited or after ``timeout``, SIGKILL to whatever is left in it."""
        _live.discard(self)
        if self.master is None:
            return
        daemons = [p for p in (self.master, self.worker) if p is not None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.master.pid, sig)
            except ProcessLookupError:
                break
            for process in daemons:
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
        self.master = self.worker = None

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster (master and one 2-core worker) shared by the tests of a
    session (import this fixture into a test module); skips without java or PySpark."""
    if not spark_cluster_available():
        pytest.skip(SKIP_REASON)
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster
