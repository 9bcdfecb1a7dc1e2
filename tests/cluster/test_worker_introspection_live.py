"""A real ``stormlet worker`` looked into while it runs a reliable topology: its stacks, asked of
it many times over, name its executor threads (after their component and tasks) and show the
busy bolt's function, and it loses no tuple and keeps running; py-spy's dump and profile of it
show the same.

The worker runs as its supervisor starts it (with ``--log-dir``), against a real ZooKeeper that
holds its topology's record and assignment; no nimbus or supervisor is needed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from support import wait_until
from test_worker_introspection import needs_py_spy
from zookeeper_server import ZooKeeperServer, free_port, zookeeper_available

from stormlet.cluster.worker_introspection import WorkerGone, profile, stack_dump
from stormlet.cluster.zk_state import ClusterState

pytestmark = [pytest.mark.cluster,   # starts a stormlet worker process (and ZooKeeper)
              pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")]

REPO = Path(__file__).resolve().parents[2]

# Spout "numbers" emits reliably and counts its acks and fails in a file; bolt "busy" (on a
# thread of its own) burns CPU on every tuple. Task ids: __acker 1, busy 2, numbers 3.
TOPOLOGY = '''
from pathlib import Path

from stormlet import Bolt, Spout, TopologyBuilder

HERE = Path({here!r})


def burn_cpu(rounds):
    total = 0
    for i in range(rounds):
        total += i * i
    return total


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.next, self.acked, self.failed = collector, 0, 0, 0

    def next_tuple(self):
        self.collector.emit([self.next], msg_id=self.next)
        self.next += 1

    def ack(self, msg_id):
        self.acked += 1
        if self.acked % 20 == 0:
            self.record()

    def fail(self, msg_id, reason):
        self.failed += 1
        self.record()

    def record(self):
        (HERE / "counts.part").write_text(f"{{self.acked}} {{self.failed}}")
        (HERE / "counts.part").replace(HERE / "counts")


class Busy(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        burn_cpu(20_000)
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_bolt("busy", Busy()).shuffle_grouping("numbers").add_configurations(
    {{"stormlet.executor.shared.thread": False}})
topology = builder.build()
'''
TID = "introspect-1"
BUSY_THREAD = '"introspect:busy:2-2"'


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


@pytest.fixture
def worker(zookeeper, tmp_path):
    entry = tmp_path / "introspect.py"
    entry.write_text(TOPOLOGY.format(here=str(tmp_path)))
    port, root = free_port(), "/worker-introspection"
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=15)
    try:
        state = ClusterState(client, root)
        state.set_topology(TID, {"name": "introspect", "id": TID, "status": "active",
                                 "conf": {"topology.acker.executors": 1,
                                          "topology.max.spout.pending": 20}})
        state.set_assignment(TID, {"executors": [
            [component, [task], "s1", "127.0.0.1", port]
            for component, task in [("__acker", 1), ("busy", 2), ("numbers", 3)]]})
    finally:
        client.stop()
        client.close()
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    log_path = log_dir / "worker.out"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "stormlet", "worker", "--zk", zookeeper.hosts,
             "--zk-root", root, "--topology-id", TID, "--supervisor-id", "s1",
             "--port", str(port), "--code", str(entry),
             "--heartbeat-file", str(tmp_path / "beat.json"), "--log-dir", str(log_dir)],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    process.log_dir, process.log_path, process.counts = log_dir, log_path, tmp_path / "counts"
    try:
        wait_until(lambda: counts(process)[0] >= 100 or process.poll() is not None, 60,
                   "the worker to ack its first tuples")
        assert process.poll() is None, log_path.read_text()
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def counts(process) -> tuple[int, int]:
    """The spout's (acked, failed) so far."""
    try:
        acked, failed = process.counts.read_text().split()
    except (FileNotFoundError, ValueError):
        return 0, 0
    return int(acked), int(failed)


def test_a_running_worker_dumps_its_stacks_without_losing_a_tuple(worker):
    dumps = [stack_dump(worker.pid, worker.log_dir) for _ in range(25)]
    for text in dumps:
        assert "Written by the process itself on SIGUSR1" in text, text
        # The spout and the acker take turns on the shared thread (runtime/threads.py).
        assert BUSY_THREAD in text and '"introspect:executors"' in text, text
        # Its main thread waits for it to end, or (a first tuple acked) still ends its start.
        main = text.split('"MainThread"', 1)[1]
        assert "Worker.wait" in main or "Worker.start" in main, text
    # The busy bolt is caught at its work (it spends nearly all its time there).
    assert any("burn_cpu" in text.split(BUSY_THREAD, 1)[1].split("\nThread ", 1)[0]
               for text in dumps), dumps[-1]
    acked = counts(worker)[0]
    wait_until(lambda: counts(worker)[0] >= acked + 200, 60, "more tuples to be acked")
    assert worker.poll() is None
    assert counts(worker)[1] == 0, worker.log_path.read_text()   # no tuple failed


@needs_py_spy
def test_py_spy_dumps_and_profiles_a_running_worker(worker):
    text = stack_dump(worker.pid)   # no log directory: py-spy's
    assert BUSY_THREAD in text and '"MainThread"' in text, text
    svg = profile(worker.pid, 2)
    assert b"<svg" in svg and b"burn_cpu" in svg and BUSY_THREAD.strip('"').encode() in svg
    assert worker.poll() is None and counts(worker)[1] == 0


def test_a_stopped_worker_is_said_to_be_gone(worker):
    worker.terminate()
    assert worker.wait(timeout=60) == 0
    with pytest.raises(WorkerGone):
        stack_dump(worker.pid, worker.log_dir)
