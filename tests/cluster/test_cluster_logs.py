"""`stormlet logs` on a real cluster with its secret on: ZooKeeper, nimbus, a supervisor and two
workers on loopback. What a bolt logs reaches the command through nimbus and the supervisor's
node service, filtered on the node by component, task and pattern; -f shows a line logged after
it started; a read-only user sees the lines with their credentials redacted; the daemons write
their own logs under their data directories."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from cluster_support import (
    REPO,
    after_test,
    new_secret_file,
    serve_cluster,
    wait_until,
)
from cluster_support import (
    stormlet_command as stormlet,
)
from zookeeper_server import zookeeper_available

from stormlet.cluster.log_files import daemon_log_file, worker_log_dir, worker_log_file

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

TALKER = Path(__file__).resolve().parents[1] / "cluster_topologies" / "talker.py"


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory) -> Path:
    return new_secret_file(tmp_path_factory.mktemp("secret"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, secret_file):
    yield from serve_cluster(tmp_path_factory.mktemp("logs"), 1, {"s1": 2}, secret_file)


@pytest.fixture(autouse=True)
def _after(request, cluster):
    yield
    after_test(request, cluster)


@pytest.fixture(scope="module")
def talk(cluster, tmp_path_factory) -> dict:
    """The talker topology on two workers; its directory and id."""
    directory = tmp_path_factory.mktemp("talker")
    cluster.submit(TALKER, "talk", f"talker.dir={directory}", "topology.workers=2")
    wait_until(lambda: len(cluster.topology_workers("talk")) == 2, 60, "both workers")
    tid = next(iter(cluster.topology_workers("talk").values()))["topology_id"]
    wait_until(lambda: all("heard" in worker_log_file(
        worker_log_dir(cluster.base / "s1", tid, port)).read_text()
        for _sid, port in cluster.topology_workers("talk")), 60, "the bolts to log")
    return {"dir": directory, "id": tid}


def say(talk: dict, text: str) -> None:
    (talk["dir"] / "say.part").write_text(text)
    (talk["dir"] / "say.part").replace(talk["dir"] / "say")


def logs(cluster, *args: str) -> subprocess.CompletedProcess:
    result = cluster.cli("logs", "talk", *args, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def shout_tasks(cluster) -> list[int]:
    listing = logs(cluster, "--list").stdout
    return sorted({int(t) for t in re.findall(r"shout \[(\d+)\]", listing)})


def test_a_bolts_line_is_read_across_the_cluster_by_component_and_pattern(cluster, talk):
    say(talk, "first words password=hunter2")
    tid = talk["id"]
    pattern = re.compile(rf"^127\.0\.0\.1:(\d+) \S+ INFO \[{tid} (\w+) (\d+)\] talker: said: "
                         rf"first words password=hunter2$")

    def shouted() -> list[re.Match]:
        lines = logs(cluster, "--component", "shout", "--grep", "said: first").stdout
        return [m for m in map(pattern.match, lines.splitlines()) if m]

    wait_until(lambda: len(shouted()) == 2, 30, "both shout tasks' lines")
    found = shouted()
    tasks = shout_tasks(cluster)
    assert sorted(int(m[3]) for m in found) == tasks and {m[2] for m in found} == {"shout"}
    # Each line is prefixed with the worker (host:port) that logged it.
    ports = {int(m[1]) for m in found}
    assert ports <= {port for _sid, port in cluster.topology_workers("talk")}
    # Only shout's lines, only those matching: not quiet's, not the heartbeat-like chatter.
    everything = logs(cluster, "--component", "shout", "--grep", "said: first").stdout
    assert len(everything.splitlines()) == 2, everything
    # quiet said it too, and a task filter picks one executor's lines.
    quiet = logs(cluster, "--component", "quiet", "--grep", "said: first").stdout
    assert "quiet" in quiet and "shout" not in quiet
    one = logs(cluster, "--task", str(tasks[0]), "--grep", "said: first").stdout.splitlines()
    assert len(one) == 1 and f" shout {tasks[0]}]" in one[0]
    # What the bolt printed is in its log, naming it.
    printed = logs(cluster, "--grep", "printed: first", "--since", "10m").stdout
    assert printed.count(" shout ") == 2 and "stdout: printed: first words" in printed
    assert not logs(cluster, "--grep", "said", "--since", "2999-01-01T00:00").stdout


def test_a_read_only_user_sees_the_lines_with_credentials_redacted(cluster, talk, tmp_path):
    say(talk, "first words password=hunter2")
    read_only = tmp_path / "read.json"
    made = subprocess.run(stormlet("secret", "read-only", str(read_only), "--secret-file",
                                   str(cluster.secret_file)), capture_output=True, text=True,
                          cwd=REPO)
    assert made.returncode == 0, made.stderr

    def read() -> str:
        result = subprocess.run(stormlet("logs", "talk", "--component", "shout", "--grep",
                                         "said: first", "--zk", cluster.zk.hosts,
                                         "--secret-file", str(read_only)),
                                capture_output=True, text=True, cwd=REPO, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    wait_until(lambda: read().count("said: first words") == 2, 30, "the read-only reading")
    shown = read()
    assert "hunter2" not in shown and "password=<redacted>" in shown


def test_follow_shows_a_line_logged_after_it_started(cluster, talk):
    say(talk, "before following")
    wait_until(lambda: logs(cluster, "--component", "shout", "--grep",
                            "said: before following").stdout.count("\n") == 2, 30,
               "the first lines")
    command = stormlet("logs", "talk", "--component", "shout", "--grep", "said", "-f",
                       "--zk", cluster.zk.hosts, "--secret-file", str(cluster.secret_file))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(process.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        wait_until(lambda: sum("said: before following" in line for line in seen) == 2, 30,
                   "-f to show what was there")
        say(talk, "while following")
        wait_until(lambda: sum("said: while following" in line for line in seen) == 2, 30,
                   "-f to show the new lines")
        assert all(" shout " in line for line in seen), seen
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)   # Ctrl-C ends it at once; a loaded machine is slow to exit
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, process.stderr.read()


def test_the_daemons_write_their_own_logs_under_their_data_directories(cluster, talk):
    nimbus_log = daemon_log_file(cluster.base / "nimbus0", "nimbus").read_text()
    supervisor_log = daemon_log_file(cluster.base / "s1", "supervisor").read_text()
    assert " INFO stormlet.cluster.nimbus: nimbus " in nimbus_log
    assert "node service serving" in supervisor_log
    assert "started worker 127.0.0.1:" in supervisor_log
