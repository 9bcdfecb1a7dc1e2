"""Issue 52: ``stormlet submit --no-wait`` on a real loopback cluster (ZooKeeper, a leading and a
standby nimbus, a supervisor; each daemon with an environments directory of its own, as on three
hosts; no index). Nimbus takes the submission at once and prepares it in the background: it
shows as preparing in ``stormlet list``, then runs, or shows as refused there and in ``stormlet
errors`` with pip's own message; a leader that dies while it prepares one leaves it to the next.

An environment build here lasts as long as the test wants: the topologies need
``stormlet_gated``, a source distribution whose build waits for a file (local_wheels.py)."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
from cluster_support import LEADER_PATH, LoopbackCluster, after_test, json_outputs, wait_until
from local_wheels import GATED, make_gated_sdist
from test_cluster_environments import kill_all, versioned_project
from ui_support import get
from zookeeper_server import zookeeper_available

from stormlet.cluster.dependencies import normalize
from stormlet.cluster.environments import DIRECTORY_ENV, MARKER, NO_INDEX
from stormlet.cluster.error_reports import SUBMIT_COMPONENT

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

UNKNOWN = "stormlet_nope==9.9"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("no-wait")
    links = base / "links"
    links.mkdir()
    with LoopbackCluster(base) as cluster:
        cluster.links = links
        for name in ("nimbus0", "nimbus1", "s1"):
            cluster.daemon_env = {DIRECTORY_ENV: str(base / f"{name}-environments"),
                                  "STORMLET_PIP_INDEX_URL": NO_INDEX,
                                  "STORMLET_PIP_FIND_LINKS": str(links),
                                  # A gated package is built each time, never taken from
                                  # pip's cache of the wheels it built.
                                  "PIP_NO_CACHE_DIR": "1"}
            if name == "s1":
                cluster.add_supervisor("s1", 3)
            else:
                cluster.add_nimbus()
                if name == "nimbus0":
                    cluster.wait_for_leader()   # the first leads, the second stands by
        yield from cluster.serving()


@pytest.fixture
def ui(cluster):
    """The UI's REST API for the cluster, as `stormlet ui` serves it."""
    from stormlet.cluster.nimbus_client import NimbusClient
    from stormlet.ui.app import serve
    from stormlet.ui.source import ClusterSource

    source = ClusterSource(NimbusClient(cluster.zk.hosts))
    server = serve(source, "127.0.0.1", 0)
    yield server
    server.stop()
    source.close()


def ui_status(ui, name: str) -> str | None:
    rows = get(ui, "/api/v1/topology/summary")["topologies"]
    return next((row["status"] for row in rows if row["name"] == name), None)


@pytest.fixture(autouse=True)
def logs_on_failure(request, cluster):
    yield
    after_test(request, cluster)


def gated_project(cluster, directory: Path, version: str) -> tuple[Path, Path]:
    """The versioned topology needing ``stormlet_gated`` ``version``, whose build waits for a
    gate file; the topology file and the gate."""
    gate = directory.parent / f"gate-{version}"
    make_gated_sdist(cluster.links, version, gate)
    return versioned_project(directory, "stormlet_testdep==1.0", f"{GATED}=={version}"), gate


def submit_no_wait(cluster, path: Path, name: str, *conf: str) -> tuple[str, float]:
    """Submit with --no-wait; the topology id nimbus answered, and how long the command took."""
    args = ["submit", str(path), "--name", name, "--no-wait"]
    for pair in conf:
        args += ["-c", pair]
    started = time.monotonic()
    result = cluster.cli(*args)
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "`stormlet list`" in result.stdout and f"`stormlet errors {name}`" in result.stdout
    said = re.search(rf"submitted {name} \(([^)]+)\) without waiting", result.stdout)
    assert said, result.stdout
    return said[1], seconds


def list_row(cluster, name: str) -> str | None:
    rows = [line for line in cluster.cli("list").stdout.splitlines()
            if line.split()[:1] == [name]]
    return rows[0] if rows else None


def status(cluster, name: str) -> str | None:
    row = list_row(cluster, name)
    return row.split()[1] if row else None


def build_seconds(environments: Path, requirement: str) -> float:
    """How long the build of the environment holding ``requirement`` took, as it recorded."""
    for marker in environments.glob(f"*/{MARKER}"):
        record = json.loads(marker.read_text())
        if normalize(requirement, "the test") in record["requirements"]:
            return record["build_seconds"]
    raise AssertionError(f"no environment holding {requirement} in {environments}")


def nimbus_daemon(cluster, leading: bool):
    """The live nimbus daemon that leads (or one that does not), by the leader's port in
    ZooKeeper; None while no nimbus leads."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    zk = KazooClient(hosts=cluster.zk.hosts)
    zk.start()
    try:
        port = json.loads(zk.get(LEADER_PATH)[0])["port"]
    except NoNodeError:
        return None
    finally:
        zk.stop()
        zk.close()
    return next((d for d in cluster.nimbuses if d.alive() and
                 (f"--port\x00{port}\x00" in "\x00".join(d.args) + "\x00") == leading), None)


def test_no_wait_returns_before_the_build_ends_and_the_topology_then_runs(cluster, ui,
                                                                           tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    project, gate = gated_project(cluster, tmp_path / "later", "1.0")
    tid, submit_seconds = submit_no_wait(cluster, project, "later", f"versioned.dir={out}",
                                         "versioned.label=later")
    assert tid.startswith("later-")
    # Shown at once, with how long it has been prepared, and pip's progress from the leader.
    row = list_row(cluster, "later")
    assert row.split()[1:5] == ["preparing", "-", "-", "-"], row
    assert ui_status(ui, "later") == "preparing"
    wait_until(lambda: "building its environment: " in (list_row(cluster, "later") or ""), 20,
               "pip's progress in the list")
    # The name is taken while it is prepared.
    again = cluster.cli("submit", str(project), "--name", "later", "--no-wait")
    assert again.returncode != 0 and "is being prepared" in again.stderr, again.stderr
    assert json_outputs(out, "later") == []
    gate.touch()
    wait_until(lambda: [r["seen"] for r in json_outputs(out, "later")] not in ([], [0]), 60,
               "the topology to run once prepared")
    assert status(cluster, "later") == "active"
    leader = nimbus_daemon(cluster, leading=True)
    # The command returned while the build went on: the build lasted longer than it did.
    built = build_seconds(cluster.base / f"{leader.name}-environments", f"{GATED}==1.0")
    assert submit_seconds < built, (submit_seconds, built)
    kill_all(cluster, "later")


def test_a_refused_submission_shows_in_list_and_errors_while_another_topology_runs(cluster, ui,
                                                                                  tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    steady = versioned_project(tmp_path / "steady", "stormlet_testdep==1.0")
    cluster.submit(steady, "steady", f"versioned.dir={out}", "versioned.label=steady",
                   "versioned.count=100000", "versioned.interval=0.05")
    wait_until(lambda: [r["seen"] for r in json_outputs(out, "steady")] not in ([], [0]), 40,
               "the steady topology to run")
    workers = {slot: beat["pid"] for slot, beat in cluster.topology_workers("steady").items()}

    unknown = versioned_project(tmp_path / "unknown", "stormlet_testdep==1.0", UNKNOWN)
    submit_no_wait(cluster, unknown, "unknown", f"versioned.dir={out}")
    wait_until(lambda: status(cluster, "unknown") == "refused", 60, "the build to fail")
    # pip's own reason in the list, where to read all of it, and one error counted.
    row = list_row(cluster, "unknown")
    assert row.endswith("ago: ERROR: No matching distribution found for stormlet-nope==9.9 "
                        "(stormlet errors unknown)"), row
    assert row.split()[6] == "1", row
    shown = cluster.cli("errors", "unknown").stdout
    assert SUBMIT_COMPONENT in shown and "pip could not install" in shown, shown
    assert "ERROR: No matching distribution found for stormlet-nope==9.9" in shown
    # The UI lists it as refused, and its page shows why.
    assert ui_status(ui, "unknown") == "refused"
    page = get(ui, "/api/v1/topology/unknown")
    assert page["status"] == "refused" and page["errors"][0]["component"] == SUBMIT_COMPONENT
    assert "No matching distribution found for stormlet-nope==9.9" in page["errors"][0]["error"]

    # A topology the inspection refuses: its message names the component and the problem.
    broken = tmp_path / "broken.py"
    broken.write_text("from stormlet import TopologyBuilder, Bolt\n"
                      "class B(Bolt):\n    outputs = ['x']\n"
                      "b = TopologyBuilder()\nb.set_bolt('b', B()).shuffle_grouping('nowhere')\n"
                      "topology = b.build()\n")
    submit_no_wait(cluster, broken, "broken")
    wait_until(lambda: status(cluster, "broken") == "refused", 30, "the inspection to refuse")
    assert "no component 'nowhere'" in cluster.cli("errors", "broken").stdout

    # Nothing else stopped or moved.
    before = json_outputs(out, "steady")[0]["seen"]
    wait_until(lambda: json_outputs(out, "steady")[0]["seen"] > before + 10, 20,
               "the steady topology to keep going")
    assert {slot: beat["pid"] for slot, beat in
            cluster.topology_workers("steady").items()} == workers
    assert status(cluster, "steady") == "active"

    # A refusal stays until the name is submitted again, or kill clears it.
    killed = cluster.cli("kill", "unknown")
    assert killed.returncode == 0 and "cleared unknown" in killed.stdout, killed.stderr
    assert list_row(cluster, "unknown") is None
    fixed = versioned_project(tmp_path / "fixed", "stormlet_testdep==1.0")
    submit_no_wait(cluster, fixed, "broken", f"versioned.dir={out}", "versioned.label=fixed")
    assert status(cluster, "broken") in ("preparing", "active")
    wait_until(lambda: json_outputs(out, "fixed") != [], 40, "the resubmitted name to run")
    kill_all(cluster, "steady", "broken")


def test_a_submission_being_prepared_survives_its_leader_s_death(cluster, tmp_path):
    """Last in this module: it leaves the cluster with one nimbus."""
    out = tmp_path / "out"
    out.mkdir()
    project, gate = gated_project(cluster, tmp_path / "handover", "2.0")
    tid, _seconds = submit_no_wait(cluster, project, "handover", f"versioned.dir={out}",
                                   "versioned.label=handover")
    leader, standby = nimbus_daemon(cluster, True), nimbus_daemon(cluster, False)
    copy = cluster.base / standby.name / "code" / f"{tid}.zip"
    wait_until(copy.is_file, 20, "the standby to copy the submission's code")
    assert status(cluster, "handover") == "preparing"
    leader.kill(signal.SIGKILL)   # while its build waits at the gate
    wait_until(lambda: nimbus_daemon(cluster, leading=True) is standby, 40,
               "the standby to take over")
    wait_until(lambda: "preparing handover" in (cluster.base / f"{standby.name}.log").read_text(),
               20, "the new leader to prepare the submission again")
    assert status(cluster, "handover") == "preparing"
    gate.touch()
    wait_until(lambda: json_outputs(out, "handover") != [], 60,
               "the topology to run, prepared by the new leader")
    assert status(cluster, "handover") == "active"
    built = build_seconds(cluster.base / f"{standby.name}-environments", f"{GATED}==2.0")
    assert built > 0
    kill_all(cluster, "handover")
