"""A worker's settings on a real cluster (one nimbus, one supervisor with two slots): the
environment variables and Python options a topology's config gives its workers reach them, and
a worker over its memory limit is stopped, reported and started again while another topology's
worker on the same supervisor runs on. The checks themselves:
tests/cluster/test_worker_settings.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_support import REPO, after_test, serve_cluster, wait_until
from cluster_topologies import worker_settings
from zookeeper_server import zookeeper_available

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

PROBE = Path(worker_settings.__file__)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"), 1, {"s1": 2})


@pytest.fixture(autouse=True)
def logs_on_failure(request, cluster):
    yield
    after_test(request, cluster, kill_left=False)


def probes(directory: Path, name: str) -> dict[int, dict]:
    """What the probe bolts of topology ``name`` last wrote, by worker pid."""
    found = {}
    for path in directory.glob(f"{name}-*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found[record["pid"]] = record
    return found


def test_a_worker_gets_its_topologys_variables_and_python_options(cluster, tmp_path):
    cluster.submit(PROBE, "probe", f"probe.dir={tmp_path}",
                   "topology.worker.childopts=-X probe_option=on -W default")
    try:
        wait_until(lambda: probes(tmp_path, "probe"), 40, "the probe bolt to write")
        [record] = probes(tmp_path, "probe").values()
        assert record["greeting"] == worker_settings.GREETING
        assert record["xoptions"] == {"probe_option": "on"}
        # The worker runs this checkout's stormlet, whatever is installed.
        assert Path(record["stormlet"]).is_relative_to(REPO)
        command = Path(f"/proc/{record['pid']}/cmdline").read_bytes().split(b"\0")
        assert command[1:5] == [b"-Xprobe_option=on", b"-Wdefault", b"-m", b"stormlet"]
    finally:
        cluster.kill_and_wait("probe")


def test_a_worker_over_its_memory_limit_is_restarted_and_reported(cluster, tmp_path):
    limit = "topology.worker.max.heap.size.mb=150"
    cluster.submit(PROBE, "calm", f"probe.dir={tmp_path}", limit)
    cluster.submit(PROBE, "hog", f"probe.dir={tmp_path}", limit, "probe.hold.mb=300")
    try:
        wait_until(lambda: probes(tmp_path, "calm"), 40, "calm's probe to write")
        [calm_pid] = probes(tmp_path, "calm")

        def reported() -> str:
            return cluster.cli("errors", "hog").stdout

        wait_until(lambda: "over its limit" in reported(), 40, "hog's overrun to be reported")
        line = next(line for line in reported().splitlines() if "over its limit" in line)
        assert "__system" in line
        assert " of hog-" in line and "over its limit of 150 MB " \
            "(topology.worker.max.heap.size.mb): restarted" in line, line
        used = int(line.split(" used ")[1].split(" MB")[0])
        assert used > 150, line
        # Started again: a second worker got as far as its first tuple.
        wait_until(lambda: len(probes(tmp_path, "hog")) >= 2, 60, "hog's worker to restart")
        assert "over its limit of 150 MB" in (cluster.base / "s1.log").read_text()
        # Counted with the topology's errors (its workers' own errors: none here).
        hog_row = next(row for row in cluster.cli("list").stdout.splitlines()
                       if row.startswith("hog ")).split()
        assert int(hog_row[-3]) >= 1 and hog_row[-1] == "ago", hog_row

        # The other topology's worker, under the same limit, ran on throughout.
        calm = probes(tmp_path, "calm")
        assert list(calm) == [calm_pid] and calm[calm_pid]["rss_mb"] < 150
        before = calm[calm_pid]["tuples"]
        wait_until(lambda: probes(tmp_path, "calm")[calm_pid]["tuples"] > before, 10,
                   "calm to keep processing")
        assert "no errors reported" in cluster.cli("errors", "calm").stdout
    finally:
        cluster.kill_and_wait("hog")
        cluster.kill_and_wait("calm")
