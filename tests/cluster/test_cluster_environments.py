"""Issue 52, Python dependencies on a real loopback cluster (ZooKeeper, a nimbus, a supervisor on
the same host, sharing one environments directory, installing with no index): topologies that
declare dependencies run in environments of their own, built once on the host and reused.

The projects are made per test: a topology file from tests/cluster_topologies/versioned/ (or
the streamparse project tests/streamparse_projects/versioned/), a requirements file pinning a
version of ``stormlet_testdep``, and its wheels (tests/local_wheels.py) in ``wheels/``."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from cluster_support import LoopbackCluster, after_test, json_outputs, wait_until
from local_wheels import make_testdep_wheels
from zookeeper_server import zookeeper_available

from stormlet.cluster.environments import DIRECTORY_ENV, NO_INDEX

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

HERE = Path(__file__).resolve().parents[1]
VERSIONED = HERE / "cluster_topologies" / "versioned" / "topology.py"
STREAMPARSE_VERSIONED = HERE / "streamparse_projects" / "versioned"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("environments-cluster")
    with LoopbackCluster(base) as cluster:
        # One environments directory for both daemons, as on one host by default; no index.
        cluster.daemon_env = {DIRECTORY_ENV: str(base / "environments"),
                              "STORMLET_PIP_INDEX_URL": NO_INDEX}
        cluster.add_nimbus()
        cluster.add_supervisor("s1", 3)
        yield from cluster.serving()


@pytest.fixture(autouse=True)
def logs_on_failure(request, cluster):
    yield
    after_test(request, cluster)


def versioned_project(directory: Path, *requirements: str) -> Path:
    """A project holding the versioned topology, a requirements.txt of ``requirements`` and the
    test package's wheels; the topology file's path."""
    directory.mkdir(parents=True)
    shutil.copy(VERSIONED, directory / "topology.py")
    (directory / "requirements.txt").write_text("".join(r + "\n" for r in requirements))
    make_testdep_wheels(directory / "wheels")
    return directory / "topology.py"


def submit_timed(cluster, path: Path, name: str, *conf: str) -> tuple[str, float]:
    started = time.monotonic()
    result = cluster.submit(path, name, *conf)
    return result.stdout, time.monotonic() - started


def kill_all(cluster, *names: str) -> None:
    for name in names:
        assert cluster.cli("kill", name, "--wait", "1").returncode == 0
    for name in names:
        wait_until(lambda: not cluster.topology_workers(name), 40, f"{name}'s workers to exit")
    wait_until(lambda: not any(n in cluster.cli("list").stdout for n in names), 20,
               "the topologies to leave the list")


def test_two_topologies_pinning_two_versions_run_side_by_side_and_resubmits_reuse(cluster,
                                                                                 tmp_path):
    """Two pins of one package on one node, each topology's bolt importing its own; nimbus
    builds each environment once (inspecting the topology in it: its import needs it) and the
    supervisor reuses nimbus's builds; a third submit of the first project reuses its
    environment, and says so."""
    out = tmp_path / "out"
    out.mkdir()
    one = versioned_project(tmp_path / "one", "stormlet_testdep==1.0")
    two = versioned_project(tmp_path / "two", "stormlet-testdep == 2.0")
    conf = (f"versioned.dir={out}", "versioned.count=20")
    first, first_secs = submit_timed(cluster, one, "pin-one", *conf, "versioned.label=one")
    second, _ = submit_timed(cluster, two, "pin-two", *conf, "versioned.label=two")
    again, again_secs = submit_timed(cluster, one, "pin-again", *conf,
                                     "versioned.label=again")
    print(f"submit building the environment: {first_secs:.1f} s; submit reusing it: "
          f"{again_secs:.1f} s")
    assert "needs 1 Python package (requirements.txt)" in first
    assert "built environment" in first and "built environment" in second
    assert "reused environment" in again
    built_key = first.split("built environment ")[1].split()[0]
    assert built_key in again and built_key not in second

    def done(label: str) -> bool:
        found = json_outputs(out, label)
        return len(found) == 1 and found[0]["seen"] == 20

    wait_until(lambda: all(done(label) for label in ("one", "two", "again")), 40,
               "every topology's bolt to see its numbers")
    seen = {label: json_outputs(out, label)[0] for label in ("one", "two", "again")}
    assert {label: r["version"] for label, r in seen.items()} == {
        "one": "1.0", "two": "2.0", "again": "1.0"}
    environments = cluster.base / "environments"
    assert Path(seen["one"]["prefix"]) == environments / built_key
    assert seen["again"]["prefix"] == seen["one"]["prefix"] != seen["two"]["prefix"]
    # Built once each on this host, by nimbus; the supervisor found them built.
    assert len([p for p in environments.iterdir() if p.is_dir()]) == 2
    building = {path.name: path.read_text().count("building environment")
                for path in cluster.base.glob("*.log")}
    assert building == {"nimbus0.log": 2, "s1.log": 0}
    kill_all(cluster, "pin-one", "pin-two", "pin-again")


def test_a_dependency_that_cannot_be_installed_refuses_the_submit_and_disturbs_nothing(
        cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    steady = versioned_project(tmp_path / "steady", "stormlet_testdep==1.0")
    cluster.submit(steady, "steady", f"versioned.dir={out}", "versioned.label=steady",
                   "versioned.count=100000", "versioned.interval=0.05")
    wait_until(lambda: [r["seen"] for r in json_outputs(out, "steady")] not in ([], [0]), 30,
               "the steady topology to run")
    workers = {slot: beat["pid"] for slot, beat in cluster.topology_workers("steady").items()}
    broken = versioned_project(tmp_path / "broken", "stormlet_testdep==1.0",
                               "no_such_package_anywhere==1.0")
    result = cluster.cli("submit", str(broken), "--name", "broken")
    assert result.returncode != 0
    # pip's own words, through nimbus, as the command's error.
    assert "Python dependencies could not be installed" in result.stderr
    assert ("No matching distribution found for no-such-package-anywhere==1.0"
            in result.stderr), result.stderr
    listing = cluster.cli("list").stdout
    assert "broken" not in listing and "steady" in listing
    before = json_outputs(out, "steady")[0]["seen"]
    wait_until(lambda: json_outputs(out, "steady")[0]["seen"] > before + 10, 20,
               "the steady topology to keep going")
    assert {slot: beat["pid"] for slot, beat in
            cluster.topology_workers("steady").items()} == workers
    kill_all(cluster, "steady")


def test_a_streamparse_projects_virtualenvs_file_is_honoured(cluster, tmp_path):
    """``virtualenvs/versioned.txt`` (``streamparse`` and a pin of 2.0) is what the topology
    gets, not the root's requirements.txt (a pin of 1.0), as ``sparse submit`` reads it."""
    project = tmp_path / "project"
    shutil.copytree(STREAMPARSE_VERSIONED, project)
    (project / "requirements.txt").write_text("stormlet_testdep==1.0\n")
    make_testdep_wheels(project / "wheels")
    out = tmp_path / "out"
    out.mkdir()
    submitted, _ = submit_timed(cluster, project / "topologies" / "versioned.py", "sp-versioned",
                                f"versioned.dir={out}", "versioned.label=sp",
                                "versioned.count=10")
    assert "(virtualenvs/versioned.txt)" in submitted
    wait_until(lambda: [r["seen"] for r in json_outputs(out, "sp")] == [10], 40,
               "the streamparse bolt to see its numbers")
    record = json_outputs(out, "sp")[0]
    assert record["version"] == "2.0"
    assert Path(record["prefix"]).parent == cluster.base / "environments"
    kill_all(cluster, "sp-versioned")
