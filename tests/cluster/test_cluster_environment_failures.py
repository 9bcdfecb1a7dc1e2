"""Issue 52: a topology whose environment builds on nimbus's node but fails on a supervisor's.
Nimbus and the supervisor keep environments in directories of their own here (as on two hosts),
and only nimbus is given the wheels of ``stormlet_testdep`` 3.0 (``--pip-find-links``), so the
supervisor's build fails: that shows in ``stormlet errors`` and ``stormlet list`` against the
topology and the node, and the supervisor's other topology runs on undisturbed."""

from __future__ import annotations

import pytest
from cluster_support import LoopbackCluster, json_outputs, wait_until
from local_wheels import make_testdep_wheels
from test_cluster_environments import kill_all, versioned_project
from zookeeper_server import zookeeper_available

from stormlet.cluster.environments import DIRECTORY_ENV, NO_INDEX

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("environments-apart")
    only_nimbus = make_testdep_wheels(base / "nimbus-wheels", versions=("3.0",))
    with LoopbackCluster(base) as cluster:
        cluster.daemon_env = {DIRECTORY_ENV: str(base / "nimbus-environments"),
                              "STORMLET_PIP_INDEX_URL": NO_INDEX,
                              "STORMLET_PIP_FIND_LINKS": str(only_nimbus)}
        cluster.add_nimbus()
        cluster.daemon_env = {DIRECTORY_ENV: str(base / "s1-environments"),
                              "STORMLET_PIP_INDEX_URL": NO_INDEX}
        cluster.add_supervisor("s1", 2)
        yield from cluster.serving()


def test_a_build_failing_on_a_supervisor_shows_in_errors_and_list_and_stops_nothing(
        cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    steady = versioned_project(tmp_path / "steady", "stormlet_testdep==1.0")
    cluster.submit(steady, "steady", f"versioned.dir={out}", "versioned.label=steady",
                   "versioned.count=100000", "versioned.interval=0.05")
    try:
        # The supervisor builds steady's environment itself (its own directory), off its loop.
        wait_until(lambda: [r["seen"] for r in json_outputs(out, "steady")] not in ([], [0]), 40,
                   "the steady topology to run")
        workers = {slot: beat["pid"] for slot, beat in cluster.topology_workers("steady").items()}
        needs_three = versioned_project(tmp_path / "three", "stormlet_testdep==3.0")
        submitted = cluster.submit(needs_three, "three", f"versioned.dir={out}",
                                   "versioned.label=three").stdout
        assert "built environment" in submitted   # on nimbus's node, which has 3.0

        def environment_errors() -> str:
            return cluster.cli("errors", "three").stdout

        wait_until(lambda: "(environment)" in environment_errors(), 30,
                   "the supervisor's failed build in `stormlet errors`")
        shown = environment_errors()
        assert ("its environment failed to build: ERROR: No matching distribution found for "
                "stormlet-testdep==3.0") in shown
        assert "127.0.0.1:" in shown   # the node and slot
        [row] = [line for line in cluster.cli("list").stdout.splitlines()
                 if line.startswith("three ")]
        # Its error count, and when the last one happened.
        assert row.endswith(" ago") and int(row.split()[-3]) >= 1, row
        assert json_outputs(out, "three") == []
        before = json_outputs(out, "steady")[0]["seen"]
        wait_until(lambda: json_outputs(out, "steady")[0]["seen"] > before + 10, 20,
                   "the steady topology to keep going")
        assert {slot: beat["pid"] for slot, beat in
                cluster.topology_workers("steady").items()} == workers
        s1_log = (cluster.base / "s1.log").read_text()
        assert "building environment" in s1_log and "failed to build" in s1_log
    except AssertionError:
        print(cluster.logs())
        raise
    kill_all(cluster, "steady", "three")
