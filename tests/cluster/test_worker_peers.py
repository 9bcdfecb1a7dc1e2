"""A worker starts its spouts only once every other worker of its topology accepts connections,
as Storm's workers do. Before, a spout whose peer was still starting emitted into ZeroMQ's queue
for that peer, and the peer then received all of it at once, far more than its backpressure bounds.

The test places a fast spout (and its acker) in one worker and a slow bolt in another, by writing
the assignment itself, and starts the bolt's worker seconds after the spout's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from support import wait_until
from zookeeper_server import ZooKeeperServer, free_port, zookeeper_available

from stormlet.cluster.zk_state import ClusterState

pytestmark = [pytest.mark.cluster,   # starts stormlet worker processes (and ZooKeeper)
              pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")]

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = Path(__file__).resolve().parents[1] / "cluster_topologies" / "slow_bolt.py"
ROOT, TOPOLOGY_ID = "/worker-peers", "slow-1"


def start_worker(zookeeper, port: int, tmp_path: Path) -> subprocess.Popen:
    log = open(tmp_path / f"worker-{port}.log", "wb")
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", "stormlet", "worker", "--zk", zookeeper.hosts, "--zk-root", ROOT,
             "--topology-id", TOPOLOGY_ID, "--supervisor-id", "s1", "--port", str(port),
             "--code", str(TOPOLOGY), "--heartbeat-file", str(tmp_path / f"beat-{port}.json")],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)


def status(tmp_path: Path, name: str) -> dict:
    try:
        return json.loads((tmp_path / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def test_spouts_wait_for_a_peer_worker_that_is_not_listening_yet(tmp_path):
    spout_port, bolt_port = free_port(), free_port()
    workers = []
    with ZooKeeperServer(tmp_path / "zk") as zookeeper:
        client = KazooClient(hosts=zookeeper.hosts)
        client.start(timeout=15)
        try:
            state = ClusterState(client, ROOT)
            state.set_topology(TOPOLOGY_ID, {
                "name": "slow", "id": TOPOLOGY_ID, "status": "active",
                "conf": {"topology.acker.executors": 1, "topology.message.timeout.secs": 10,
                         "slow.dir": str(tmp_path), "slow.ms": 2}})
            # Tasks are numbered in component-id order: __acker 1, firehose 2, slow 3.
            state.set_assignment(TOPOLOGY_ID, {"executors": [
                ["firehose", [2], "s1", "127.0.0.1", spout_port],
                ["__acker", [1], "s1", "127.0.0.1", spout_port],
                ["slow", [3], "s1", "127.0.0.1", bolt_port]]})
        finally:
            client.stop()
            client.close()
        try:
            workers.append(start_worker(zookeeper, spout_port, tmp_path))
            wait_until(lambda: status(tmp_path, "spout") or workers[0].poll() is not None, 60,
                       "the spout to open")
            time.sleep(3)   # the spout, let go, would emit some 100,000 tuples by now
            assert workers[0].poll() is None, (tmp_path / f"worker-{spout_port}.log").read_text()
            assert status(tmp_path, "spout")["emitted"] == 0

            workers.append(start_worker(zookeeper, bolt_port, tmp_path))
            wait_until(lambda: status(tmp_path, "spout").get("acked", 0) > 1000, 60,
                       "tuples to be acked once the bolt's worker listens")
            time.sleep(5)
            spout = status(tmp_path, "spout")
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
    # What backpressure bounds when both workers run from the start (see test_cluster.py's slow
    # bolt test): an inbox's worth and the queues in front of it, some tens of thousands.
    assert spout["max_in_flight"] < 100_000, spout
    assert spout["timeouts"] == 0 and spout["failed"] == 0, spout
