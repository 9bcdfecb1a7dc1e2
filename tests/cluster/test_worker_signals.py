"""A worker process ends through its clean path whenever SIGTERM or SIGINT comes, even while it is
still starting: a supervisor that rebalances a worker it has just launched sends SIGTERM at once,
and that worker must still stop its executors (closing its spouts, so that they commit their
offsets) and exit 0, not die of the signal's default action or as click's "Aborted!".

The topology file holds the worker in its start-up until the test has sent the signal, so the
signal lands inside ``Worker.start()`` every time, not by luck of timing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from support import wait_until
from zookeeper_server import ZooKeeperServer, free_port, zookeeper_available

from stormlet.cluster.zk_state import ClusterState

pytestmark = [pytest.mark.cluster,   # starts a stormlet worker process (and ZooKeeper)
              pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")]

REPO = Path(__file__).resolve().parents[2]

# Loading this file is part of Worker.start(): it says it is loading, then waits for "go".
TOPOLOGY = '''
import time
from pathlib import Path

from stormlet import Spout, TopologyBuilder

HERE = Path({here!r})
(HERE / "loading").touch()
deadline = time.monotonic() + 60
while not (HERE / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.01)


class Quiet(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        (HERE / "opened").touch()

    def next_tuple(self):
        time.sleep(0.01)

    def close(self):
        (HERE / "closed").touch()


builder = TopologyBuilder()
builder.set_spout("quiet", Quiet())
topology = builder.build()
'''


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_start_up_stops_the_worker_cleanly(zookeeper, tmp_path, sig):
    entry = tmp_path / "quiet.py"
    entry.write_text(TOPOLOGY.format(here=str(tmp_path)))
    port, root, tid = free_port(), "/worker-signals", f"quiet-{sig.name}"
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=15)
    try:
        state = ClusterState(client, root)
        state.set_topology(tid, {"name": "quiet", "id": tid, "status": "active",
                                 "conf": {"topology.acker.executors": 0}})
        state.set_assignment(tid, {"executors": [["quiet", [1], "s1", "127.0.0.1", port]]})
    finally:
        client.stop()
        client.close()

    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "stormlet", "worker", "--zk", zookeeper.hosts, "--zk-root", root,
             "--topology-id", tid, "--supervisor-id", "s1", "--port", str(port),
             "--code", str(entry), "--heartbeat-file", str(tmp_path / "beat.json")],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    try:
        wait_until(lambda: (tmp_path / "loading").exists() or worker.poll() is not None, 60,
                   "the worker to load its topology")
        assert worker.poll() is None, log_path.read_text()
        worker.send_signal(sig)
        time.sleep(0.2)    # let the handler run while start-up is still held
        (tmp_path / "go").touch()
        code = worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    output = log_path.read_text()
    assert code == 0, output
    assert f"stopping: {sig.name}" in output
    assert (tmp_path / "opened").exists() and (tmp_path / "closed").exists(), output
