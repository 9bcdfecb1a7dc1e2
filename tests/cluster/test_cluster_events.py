"""A topology's event history on a real loopback cluster (ZooKeeper, two nimbus processes, two
supervisors, workers), read with `stormlet events` as an operator runs it: submit, deactivate,
activate, rebalance, a worker killed with kill -9 and its restart, and the kill, in order and in
words; then a nimbus failover and a lost supervisor, whose reassignment the new leader records
with its reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from cluster_support import (
    LEADER_PATH,
    LEDGER,
    REPO,
    after_test,
    leader_port,
    serve_cluster,
    wait_until,
)
from kazoo.client import KazooClient
from zookeeper_server import zookeeper_available

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"), 2, {"s1": 3, "s2": 2})


@pytest.fixture(autouse=True)
def logs_on_failure(request, cluster):
    yield
    after_test(request, cluster)


def history(cluster, name: str, *options: str) -> list[tuple[str, str, str]]:
    """`stormlet events NAME` as a subprocess: (kind, writer, text) of each event, oldest
    first."""
    result = cluster.cli("events", name, "--limit", "200", *options)
    assert result.returncode == 0, result.stderr
    return parse(result.stdout.splitlines())


def parse(lines: list[str]) -> list[tuple[str, str, str]]:
    rows = []
    for line in lines:
        parts = line.split(None, 4)   # date, time, kind, writer, text
        if len(parts) == 5 and parts[0][:2] == "20" and parts[0] != "time":
            rows.append((parts[2], parts[3], parts[4]))
    return rows


def positions(rows: list[tuple[str, str, str]], *wanted: tuple[str, str]) -> list[int]:
    """The indexes of events matching ``wanted`` (kind, a piece of its text) one after the other
    in ``rows``, as far as they are found."""
    found, start = [], 0
    for kind, piece in wanted:
        at = next((i for i in range(start, len(rows))
                   if rows[i][0] == kind and piece in rows[i][2]), None)
        if at is None:
            break
        found.append(at)
        start = at + 1
    return found


def in_order(rows: list[tuple[str, str, str]], *wanted: tuple[str, str]) -> list[int]:
    """``positions`` of every one of ``wanted``; fails naming the first one missing."""
    found = positions(rows, *wanted)
    if len(found) < len(wanted):
        kind, piece = wanted[len(found)]
        listing = "\n".join("  ".join(row) for row in rows)
        raise AssertionError(f"no {kind} event with {piece!r} after the ones before:\n{listing}")
    return found


class Follower:
    """`stormlet events NAME -f` running, its lines collected as they come."""

    def __init__(self, cluster, name: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "stormlet.cli", "--log-level", "WARNING", "events", name,
             "-f", "--zk", cluster.zk.hosts], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=REPO)
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None   # piped
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)   # Ctrl-C: how an operator ends it
        code = self.process.wait(timeout=20)
        self._thread.join(timeout=5)
        return code


def test_an_operator_reads_what_happened_to_a_topology_in_order(cluster, tmp_path):
    cluster.submit(LEDGER, "story", "topology.workers=1", f"ledger.dir={tmp_path}",
                   "ledger.messages=1000000", "ledger.rate=100")
    wait_until(lambda: len(cluster.topology_workers("story")) == 1, 40, "its worker")
    for action in ("deactivate", "activate"):
        result = cluster.cli(action, "story")
        assert result.returncode == 0, result.stderr
    result = cluster.cli("rebalance", "story", "--workers", "2")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: len(cluster.topology_workers("story")) == 2, 60, "two workers")
    wait_until(lambda: sum(kind == "worker-started" for kind, _w, _t in history(cluster, "story"))
               >= 2, 20, "both workers' starts to be recorded")

    follower = Follower(cluster, "story")
    try:
        wait_until(lambda: any("rebalanced" in line for line in follower.lines), 20,
                   "`stormlet events -f` to print the history so far")
        (slot, victim), *_ = cluster.topology_workers("story").items()
        os.kill(victim["pid"], signal.SIGKILL)
        wait_until(lambda: cluster.topology_workers("story").get(slot, {}).get(
            "pid", victim["pid"]) != victim["pid"], 40, "the supervisor to restart the worker")
        # -f prints the exit and the restart as they are recorded.
        wait_until(lambda: len(positions(parse(follower.lines), ("worker-exited", "SIGKILL"),
                                         ("worker-started", "again"))) == 2, 20,
                   "`stormlet events -f` to print the exit and the restart")
    finally:
        assert follower.stop() == 0, follower.process.stderr.read()

    cluster.kill_and_wait("story")
    wait_until(lambda: "worker-stopped" in {kind for kind, _w, _t in history(cluster, "story")},
               20, "the stopped workers to be recorded")
    rows = history(cluster, "story")
    supervisor, port = slot
    in_order(rows,
             ("submitted", "submitted story asking for 1 worker"),
             ("assigned", "assigned at submit to 1 worker: 127.0.0.1:"),
             ("worker-started", "started, pid"),
             ("deactivated", "deactivated: its spouts stop emitting"),
             ("activated", "activated"),
             ("rebalanced", "rebalanced: workers 1 -> 2"),
             ("assigned", "assigned after the rebalance to 2 workers"),
             ("worker-exited", f"worker 127.0.0.1:{port} was killed by signal 9 (SIGKILL)"),
             ("worker-started", f"worker 127.0.0.1:{port} started again (restart "),
             ("killed", "killed: deactivated now, removed in 1 s"),
             ("removed", "removed"),
             ("worker-stopped", "its topology is no longer assigned (killed)"))
    exited = next(row for row in rows if row[0] == "worker-exited")
    assert exited[1] == f"supervisor:{supervisor}@127.0.0.1" and "restarting at once" in exited[2]
    assert {writer.split(":")[0] for kind, writer, _t in rows} == {"nimbus", "supervisor"}
    # One kind only, and the heading says the topology is gone.
    listing = cluster.cli("events", "story", "--kind", "worker-exited")
    assert listing.returncode == 0 and "removed at" in listing.stdout.splitlines()[0]
    assert [kind for kind, _w, _t in parse(listing.stdout.splitlines())] == ["worker-exited"]
    unknown = cluster.cli("events", "no-such-topology")
    assert unknown.returncode != 0 and "no topology named 'no-such-topology'" in unknown.stderr


def test_a_lost_supervisor_s_reassignment_is_recorded_by_the_new_leader(cluster, tmp_path):
    cluster.submit(LEDGER, "moved", "topology.workers=2", f"ledger.dir={tmp_path}",
                   "ledger.messages=1000000", "ledger.rate=100")
    wait_until(lambda: {sid for sid, _ in cluster.topology_workers("moved")} == {"s1", "s2"},
               40, "a worker on each supervisor")

    # The leading nimbus dies: the history is in ZooKeeper, and the new leader adds to it.
    zk = KazooClient(hosts=cluster.zk.hosts)
    zk.start()
    try:
        leader = json.loads(zk.get(LEADER_PATH)[0])
        victim = next(d for d in cluster.nimbuses
                      if f"--port\x00{leader['port']}" in "\x00".join(d.args))
        victim.kill(signal.SIGKILL)
        wait_until(lambda: leader_port(zk) not in (None, leader["port"]), 40,
                   "the standby to take over")
    finally:
        zk.stop()
        zk.close()

    # A whole node dies: supervisor s2 and its workers.
    doomed = [beat["pid"] for (sid, _), beat in cluster.heartbeats().items() if sid == "s2"]
    cluster.supervisors["s2"].kill(signal.SIGKILL)
    for pid in doomed:
        os.kill(pid, signal.SIGKILL)
    del cluster.supervisors["s2"]
    wait_until(lambda: any(kind == "reassigned" for kind, _w, _t in history(cluster, "moved")),
               60, "the new leader to move s2's workers")
    rows = history(cluster, "moved")
    submitted, reassigned = in_order(
        rows, ("submitted", "submitted moved"),
        ("reassigned", "reassigned: supervisor s2 on 127.0.0.1 is gone;"))
    assert "moved off 127.0.0.1:" in rows[reassigned][2]
    assert rows[submitted][1] != rows[reassigned][1], "the same nimbus wrote both"
    assert rows[reassigned][1].startswith("nimbus:")
    cluster.kill_and_wait("moved")
