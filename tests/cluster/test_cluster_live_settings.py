"""Log levels and tuple sampling while a topology runs, on a real cluster with a secret
(ZooKeeper, nimbus, a supervisor and its workers on loopback), driven through the CLI as an
operator drives it: ``stormlet set-log-level`` makes a bolt's DEBUG lines appear in its worker's
log and stop when the time runs out (or at once when cleared); ``stormlet debug`` samples a
component's emitted tuples, which its worker writes to samples.jsonl and ``stormlet debug
--show`` prints; read-only credentials may look, not change; the UI on the cluster makes the
same changes and shows the samples, with its token."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_support import REPO, after_test, serve_cluster, wait_until
from cluster_topologies import chatty
from support import whole_json_lines
from ui_support import request
from zookeeper_server import zookeeper_available

from stormlet.cluster.log_files import SAMPLES
from stormlet.cluster.nimbus_client import NimbusClient
from stormlet.cluster.security import Security
from stormlet.ui.access import UiAccess
from stormlet.ui.app import serve
from stormlet.ui.source import ClusterSource

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

CHATTY = Path(chatty.__file__)
# The spout emits 20 words a second: this long without a new line means none come.
QUIET_SECS = 1.5


def stormlet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stormlet.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO)


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("secret") / "cluster.secret"
    made = stormlet("secret", "generate", str(path))
    assert made.returncode == 0, made.stderr
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, secret_file):
    yield from serve_cluster(tmp_path_factory.mktemp("live"), 1, {"s1": 2}, secret_file)


@pytest.fixture(autouse=True)
def logs_on_failure(request, cluster):
    yield
    after_test(request, cluster, kill_left=False)


@pytest.fixture(scope="module")
def running(cluster):
    # Workers report every second: nimbus's `samples` answers from their reports.
    cluster.submit(CHATTY, "chatty", "topology.metrics.report.secs=1")
    wait_until(lambda: cluster.metric("sink", "acked") > 5, 60, "tuples to flow")
    yield
    cluster.kill_and_wait("chatty")


def chatty_lines(cluster) -> int:
    """The bolt's DEBUG lines in the logs on the supervisor's node (whichever file its worker
    logs to there)."""
    return sum(path.read_text(errors="replace").count(chatty.LINE)
               for path in (cluster.base / "s1" / "logs").rglob("*.log"))


def quiet(cluster) -> bool:
    """Whether no new DEBUG line came for QUIET_SECS."""
    before = chatty_lines(cluster)
    time.sleep(QUIET_SECS)
    return chatty_lines(cluster) == before


def test_set_log_level_shows_a_bolts_debug_lines_until_its_time_runs_out(cluster, running):
    assert chatty_lines(cluster) == 0   # the worker's level is INFO, the logger has none
    result = cluster.cli("set-log-level", "chatty", f"{chatty.CHATTY_LOGGER}=DEBUG:6")
    assert result.returncode == 0, result.stderr
    assert chatty.CHATTY_LOGGER in result.stdout and "DEBUG" in result.stdout
    set_at = time.monotonic()
    wait_until(lambda: chatty_lines(cluster) > 10, 20, "the bolt's debug lines")
    shown = cluster.cli("set-log-level", "chatty")
    assert shown.returncode == 0 and chatty.CHATTY_LOGGER in shown.stdout
    wait_until(lambda: quiet(cluster), 30, "the debug lines to stop once the level reverted")
    assert time.monotonic() - set_at > 5   # not before its time
    # Nimbus removed the entry whose time ran out.
    wait_until(lambda: "no log levels set" in cluster.cli("set-log-level", "chatty").stdout,
               10, "nimbus to remove the expired level")


def test_clearing_a_level_puts_the_logger_back_at_once(cluster, running):
    set_ = cluster.cli("set-log-level", "chatty", f"{chatty.CHATTY_LOGGER}=DEBUG")
    assert set_.returncode == 0, set_.stderr
    assert "until cleared" in set_.stdout
    before = chatty_lines(cluster)
    wait_until(lambda: chatty_lines(cluster) > before + 5, 20, "the bolt's debug lines")
    cleared = cluster.cli("set-log-level", "chatty", "-r", chatty.CHATTY_LOGGER)
    assert cleared.returncode == 0, cleared.stderr
    assert "no log levels set" in cleared.stdout
    wait_until(lambda: quiet(cluster), 10, "the debug lines to stop")


def test_a_bad_level_is_refused_and_read_only_credentials_only_look(cluster, running, tmp_path,
                                                                    secret_file):
    bad = cluster.cli("set-log-level", "chatty", "chatty.bolt=LOUD")
    assert bad.returncode != 0 and "not a log level" in bad.stderr
    read_only = tmp_path / "read.credentials"
    made = stormlet("secret", "read-only", str(read_only), "--secret-file", str(secret_file))
    assert made.returncode == 0, made.stderr
    reader = ["--zk", cluster.zk.hosts, "--secret-file", str(read_only)]
    refused = stormlet("debug", "chatty", "--sampling", "10", *reader)
    assert refused.returncode != 0 and "read may not call" in refused.stderr, refused.stderr
    refused = stormlet("set-log-level", "chatty", "ROOT=DEBUG:5", *reader)
    assert refused.returncode != 0 and "read may not call" in refused.stderr, refused.stderr
    looked = stormlet("debug", "chatty", "--show", *reader)
    assert looked.returncode == 0, looked.stderr


def samples_on_disk(cluster) -> list[dict]:
    """Every sample in the samples.jsonl files of the node's workers, which they may be part
    way through writing."""
    found = []
    for path in (cluster.base / "s1" / "logs" / "workers").rglob(SAMPLES):
        found += whole_json_lines(path)
    return found


def test_debug_samples_a_components_tuples_into_its_workers_file_and_shows_them(cluster,
                                                                               running):
    result = cluster.cli("debug", "chatty", "--component", "chatty", "--sampling", "100",
                         "--seconds", "60")
    assert result.returncode == 0, result.stderr
    assert "chatty" in result.stdout and "100%" in result.stdout
    wait_until(lambda: len(samples_on_disk(cluster)) >= 5, 20, "samples in samples.jsonl")
    samples = samples_on_disk(cluster)
    assert {s["component"] for s in samples} == {"chatty"}
    sample = samples[0]
    assert sample["stream"] == "default" and sample["values"][0].startswith("WORD")
    assert len(sample["roots"]) == 1 and "msg_id" not in sample   # a bolt's: its tree's root

    def shown() -> list[dict]:
        out = cluster.cli("debug", "chatty", "--show", "--component", "chatty", "--json")
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in out.stdout.splitlines()]

    wait_until(lambda: len(shown()) >= 5, 20, "debug --show to print the samples")
    rows = shown()
    assert all(r["component"] == "chatty" and r["host"] == "127.0.0.1" for r in rows)
    assert {r["values"][0] for r in rows} <= {s["values"][0] for s in samples_on_disk(cluster)}

    def samples_stopped(component: str) -> bool:
        before = sum(s["component"] == component for s in samples_on_disk(cluster))
        time.sleep(QUIET_SECS)
        return sum(s["component"] == component for s in samples_on_disk(cluster)) == before

    off = cluster.cli("debug", "chatty", "--off")
    assert off.returncode == 0 and "off" in off.stdout
    # Each worker with a chatty task applies "off" on its own: once none writes any more, the
    # spout's sampling, turned on next, starts after the bolt's stopped everywhere.
    wait_until(lambda: samples_stopped("chatty"), 20, "the bolt's sampling to stop")

    # A spout's samples carry its message id and the root it drew: every sample of the bolt is
    # older than the spout's first (checked at the end, after many writes).
    spout = cluster.cli("debug", "chatty", "--component", "words", "--sampling", "100",
                        "--seconds", "3")
    assert spout.returncode == 0, spout.stderr
    wait_until(lambda: any(s["component"] == "words" for s in samples_on_disk(cluster)), 20,
               "the spout's samples")
    first = next(s for s in samples_on_disk(cluster) if s["component"] == "words")
    assert isinstance(first["msg_id"], int) and len(first["roots"]) == 1

    # It ends by itself, on the worker's clock.
    wait_until(lambda: samples_stopped("words"), 20, "the spout's sampling to end after its 3 s")
    on_disk = samples_on_disk(cluster)
    spout_from = min(s["time"] for s in on_disk if s["component"] == "words")
    assert max(s["time"] for s in on_disk if s["component"] == "chatty") < spout_from


def test_the_ui_on_the_cluster_changes_them_with_its_token_and_shows_the_samples(
        cluster, running, secret_file):
    security = Security.load(secret_file)
    source = ClusterSource(NimbusClient(cluster.zk.hosts, security=security))
    token = security.ui_token()
    server = serve(source, "127.0.0.1", 0, access=UiAccess.for_host("127.0.0.1", token=token))
    signed = {"Content-Type": "application/json", "X-Requested-By": "stormlet-ui",
              "Authorization": f"Bearer {token}"}
    debug = "/api/v1/topology/chatty/component/chatty/debug"
    try:
        assert request(server, f"{debug}/enable/100", "POST", {})[0] == 401
        status, reply = request(server, f"{debug}/enable/100", "POST", {"timeout": 60},
                                headers=signed)
        assert status == 200 and reply["sampling"]["chatty"]["percent"] == 100, reply
        samples = "/api/v1/topology/chatty/component/chatty/samples?limit=5"
        wait_until(lambda: len(request(server, samples)[1]["samples"]) == 5, 20,
                   "the UI to show the worker's samples")
        rows = request(server, samples)[1]["samples"]
        assert all(r["host"] == "127.0.0.1" and r["values"][0].startswith("WORD") for r in rows)
        status, _ = request(server, f"{debug}/disable/0", "POST", {}, headers=signed)
        assert status == 200

        levels = {"namedLoggerLevels": {chatty.CHATTY_LOGGER: {"target_level": "DEBUG",
                                                               "timeout": 30}}}
        status, reply = request(server, "/api/v1/topology/chatty/logconfig", "POST", levels,
                                headers=signed)
        assert status == 200, reply
        shown = request(server, "/api/v1/topology/chatty/logconfig")[1]["namedLoggerLevels"]
        assert shown[chatty.CHATTY_LOGGER]["target_level"] == "DEBUG"
        before = chatty_lines(cluster)
        wait_until(lambda: chatty_lines(cluster) > before + 5, 20, "the bolt's debug lines")
        clear = {"namedLoggerLevels": {chatty.CHATTY_LOGGER: {"target_level": None}}}
        assert request(server, "/api/v1/topology/chatty/logconfig", "POST", clear,
                       headers=signed)[0] == 200
        wait_until(lambda: quiet(cluster), 10, "the debug lines to stop")
    finally:
        server.stop()
        source.close()
