"""Load-aware shuffle on a real cluster (one nimbus, one supervisor with two slots): a spout
and a sink in each worker, the sinks fed by shuffle. While the sinks keep up, every tuple stays
in its spout's worker; once a sink is slowed and its inbox passes the bound, its worker's
spout widens to the other worker's sink. Crossings are counted by the transport: the tuples
each worker handed over for another (its metrics' ``tuples_sent``).

The choice itself, given loads, is unit-tested in tests/runtime/test_load_aware.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster_support import after_test, serve_cluster, wait_until
from zookeeper_server import zookeeper_available

from stormlet.cluster import rpc
from stormlet.cluster.zk_state import ClusterState, connect, rpc_address
from stormlet.metrics.windows import ALL_TIME

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

TOPOLOGY = Path(__file__).resolve().parents[1] / "cluster_topologies" / "load_aware.py"
NAME = "balanced"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"), 1, {"s1": 2})


@pytest.fixture(autouse=True)
def logs_on_failure(request, cluster):
    yield
    after_test(request, cluster)


@pytest.fixture(scope="module")
def leader(cluster) -> str:
    client = connect(cluster.zk.hosts)
    try:
        leading = ClusterState(client).leader()
        assert leading is not None, "no nimbus leads"
        return rpc_address(leading)
    finally:
        client.stop()
        client.close()


def snapshots(leader: str) -> list[dict]:
    """The workers' newest metrics snapshots (the retired part left out)."""
    return [s for s in rpc.call(leader, "metrics", timeout=5, name=NAME) if not s.get("retired")]


def fresh_snapshots(leader: str, since: float) -> list[dict]:
    """Both workers' snapshots, once both were taken after ``since`` (time.time())."""
    found: list[dict] = []

    def both_fresh() -> bool:
        found[:] = snapshots(leader)
        return len(found) == 2 and all(s["time"] > since for s in found)

    wait_until(both_fresh, 30, "a metrics report from both workers")
    return found


def tasks_of(snapshot: dict, component: str) -> list[int]:
    return sorted(row["task"] for row in snapshot["tasks"] if row["component"] == component)


def test_shuffle_stays_in_the_worker_until_a_sink_is_slowed_then_widens(cluster, leader,
                                                                          tmp_path):
    cluster.submit(TOPOLOGY, NAME, f"load.dir={tmp_path}", "topology.metrics.report.secs=1")
    try:
        wait_until(lambda: cluster.metric("sink", "executed") > 6000, 60,
                   "the sinks to take 6000 tuples")
        workers = fresh_snapshots(leader, time.time())
        # The premise: each worker runs a spout and a sink.
        assert [len(tasks_of(s, "numbers")) for s in workers] == [1, 1]
        assert [len(tasks_of(s, "sink")) for s in workers] == [1, 1]
        executed = sum(row["windows"][ALL_TIME]["executed"] for s in workers for row in s["tasks"]
                       if row["component"] == "sink")
        assert executed > 6000
        # Under the bound, nothing crossed between the workers.
        assert [s["worker"]["tuples_sent"] for s in workers] == [0, 0]

        slowed, other = workers
        (slow_task,) = tasks_of(slowed, "sink")
        (tmp_path / f"slow-{slow_task}").touch()

        def crossed() -> list[int]:
            by_port = {s["worker"]["port"]: s["worker"]["tuples_sent"]
                       for s in snapshots(leader)}
            return [by_port[slowed["worker"]["port"]], by_port[other["worker"]["port"]]]

        # Its inbox full, the slowed sink's worker sends to the other worker's sink; the other
        # worker's spout keeps to its own sink, which keeps up.
        wait_until(lambda: crossed()[0] > 2000, 60, "tuples to cross from the slowed worker")
        assert crossed()[1] == 0
        # In batches, and those in frames; nothing crossed from the other worker.
        sent = {s["worker"]["port"]: s["worker"] for s in snapshots(leader)}
        slowed_sent, other_sent = sent[slowed["worker"]["port"]], sent[other["worker"]["port"]]
        assert 0 < slowed_sent["batches_sent"] < slowed_sent["tuples_sent"]
        assert slowed_sent["frames_sent"] > 0 and other_sent["batches_sent"] == 0
    finally:
        cluster.kill_and_wait(NAME)
