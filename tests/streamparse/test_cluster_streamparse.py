"""A streamparse project submitted to a real loopback cluster (ZooKeeper, nimbus, a supervisor,
two workers): its code package carries the project root, so workers import its components
through src/ and the project root as the topology file does."""

from __future__ import annotations

from collections import Counter

import pytest
from cluster_support import serve_cluster, wait_until
from test_streamparse import FEATURES, events
from zookeeper_server import zookeeper_available

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"), 1, {"s1": 2})


def test_stormlet_submit_runs_a_streamparse_project_across_two_workers(cluster, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    cluster.submit(FEATURES / "topologies" / "reliable.py", "reliable", "topology.workers=2",
                   f"test.output.dir={output}", "test.count=200")
    try:
        wait_until(lambda: len(cluster.topology_workers("reliable")) == 2, 40, "two workers")
        wait_until(lambda: len({e["n"] for e in events(output, "numbers")
                                if e["event"] == "ack"}) == 200, 60, "every number acked")
    except AssertionError:
        print(cluster.logs())
        raise
    spout = events(output, "numbers")
    assert Counter(e["n"] for e in spout if e["event"] == "ack") == Counter(range(200))
    fails = Counter(e["n"] for e in spout if e["event"] == "fail")
    assert fails == Counter({n: 1 for n in range(200) if n % 10 in (3, 7)} | {42: 3})
    assert {e["n"] for e in events(output, "sink")} == set(range(200)) - {42}
    cluster.kill_and_wait("reliable")
