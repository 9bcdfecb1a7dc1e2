"""Workers' metrics on a cluster: pushed to the nimbus leader, kept in its memory, served over its
RPC (``metrics``, ``topology_info``, ``cluster``). One real loopback cluster runs one reliable
topology with a known input for the cluster tests here; the store's expiry is tested directly."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import msgpack
import pytest
import zmq
from cluster_support import LEDGER, acked_ids, serve_cluster, wait_until
from support import running
from zookeeper_server import zookeeper_available

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.cluster import rpc
from stormlet.cluster.metrics_reporter import MetricsReporter
from stormlet.cluster.metrics_store import MetricsStore
from stormlet.cluster.zk_state import ClusterState, connect, rpc_address
from stormlet.metrics.shape import EVERY_WINDOW
from stormlet.metrics.views import topology_stats
from stormlet.runtime.metrics import TaskMetrics, window_stats

MESSAGES = 2000
NAME = "metered"

needs_zookeeper = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")


def task_row() -> dict:
    """A task row as the engine makes one: every field a view or /metrics reads."""
    metrics = TaskMetrics("source", 1, streams=["default"])
    metrics.count_emits_with({"default": SimpleNamespace(emitted=3)})   # a route's counter
    metrics.count_fail("timeout", None)
    metrics.complete_latency.record(0.01)
    window = window_stats(1.0, metrics.sample())
    return {"component": "source", "task": 1, "kind": "spout", "executor": [1, 1],
            "queue_depth": 0, "queue_capacity": 1024, "user": {"lines": 3},
            "windows": {key: window for key in EVERY_WINDOW}}


def snapshot(topology_id: str = "t-1", host: str = "127.0.0.1", port: int = 6700,
             pid: int = 42) -> dict:
    return {"topology_id": topology_id, "name": "t", "time": time.time(),
            "worker": {"host": host, "port": port, "pid": pid, "started": 1.0, "uptime": 2.0,
                       "cpu_percent": 0.5, "rss_bytes": 1000},
            "tasks": [task_row()]}


def altered(change) -> dict:
    """A valid snapshot, then ``change(snapshot)``."""
    snap = snapshot()
    change(snap)
    return snap


# ----- the store, on its own

def test_the_store_keeps_the_newest_snapshot_of_each_assigned_worker_that_is_fresh():
    store = MetricsStore()
    store.put("t-1", "127.0.0.1", 6700, snapshot(pid=1))
    store.put("t-1", "127.0.0.1", 6700, snapshot(pid=2))
    store.put("t-1", "127.0.0.1", 6701, snapshot(port=6701, pid=3))
    store.put("t-2", "127.0.0.1", 6702, snapshot("t-2", port=6702, pid=4))
    assigned = {("127.0.0.1", 6700), ("127.0.0.1", 6701)}
    pids = [s["worker"]["pid"] for s in store.snapshots("t-1", assigned, max_age=60)]
    assert pids == [2, 3]
    # 6701 moved away: gone from the answer (its counts stay: see test_metrics_store.py).
    assert [s["worker"]["pid"] for s in store.snapshots("t-1", {("127.0.0.1", 6700)}, 60)] == [2]
    assert [s["worker"]["pid"] for s in store.snapshots("t-1", assigned, 60)] == [2]
    time.sleep(0.05)
    # Silent too long: no worker's snapshot, only the one of counts no live worker reports.
    assert [s.get("retired") for s in store.snapshots("t-1", assigned, max_age=0.01)] == [True]
    store.retain({"t-1"})   # t-2 was killed
    assert store.snapshots("t-2", {("127.0.0.1", 6702)}, max_age=60) == []


@pytest.mark.parametrize("args, problem", [
    (("", "h", 1, snapshot("")), "topology_id"),
    (("t-1", None, 6700, snapshot()), "host"),
    (("t-1", "127.0.0.1", "6700", snapshot()), "port"),
    (("t-1", "127.0.0.1", 6700, [1, 2]), "must be a map"),
    (("t-1", "127.0.0.1", 6700, snapshot("t-9")), "of topology 't-9'"),
    (("t-1", "127.0.0.1", 6700, snapshot(port=6799)), "worker is not 127.0.0.1:6700"),
    (("t-1", "127.0.0.1", 6700, {**snapshot(), "tasks": {}}), "tasks must be a list"),
    (("t-1", "127.0.0.1", 6700, {**snapshot(), "tasks": [{"component": "x"}]}), "task #0"),
    # Every field the views and /metrics read, with its type:
    (("t-1", "127.0.0.1", 6700, {**snapshot(), "time": "now"}), "time"),
    (("t-1", "127.0.0.1", 6700, altered(lambda s: s["worker"].pop("cpu_percent"))),
     "cpu_percent"),
    (("t-1", "127.0.0.1", 6700, altered(lambda s: s["worker"].update(uptime=float("nan")))),
     "uptime"),
    (("t-1", "127.0.0.1", 6700, altered(lambda s: s["tasks"][0]["windows"].pop("600"))),
     "window '600'"),
    (("t-1", "127.0.0.1", 6700, altered(lambda s: s["tasks"][0]["windows"].update(all=3))),
     "window 'all'"),
    (("t-1", "127.0.0.1", 6700,
      altered(lambda s: s["tasks"][0]["windows"].update(all={**task_row()["windows"]["all"],
                                                            "emitted": [1]}))), "emitted"),
    (("t-1", "127.0.0.1", 6700,
      altered(lambda s: s["tasks"][0]["windows"].update(all={**task_row()["windows"]["all"],
                                                            "acked": "3"}))), "acked"),
    (("t-1", "127.0.0.1", 6700,
      altered(lambda s: s["tasks"][0]["windows"].update(all={**task_row()["windows"]["all"],
                                                            "fail_reasons": [["timeout"]]}))),
     "fail_reasons"),
    (("t-1", "127.0.0.1", 6700,
      altered(lambda s: s["tasks"][0]["windows"].update(all={**task_row()["windows"]["all"],
                                                            "histograms": {}}))), "histogram"),
    (("t-1", "127.0.0.1", 6700,
      altered(lambda s: s["tasks"][0]["windows"].update(all={
          **task_row()["windows"]["all"], "execute_latency_ms": {"p50": "fast"}}))),
     "execute_latency_ms"),
    (("t-1", "127.0.0.1", 6700, altered(lambda s: s["tasks"][0].pop("queue_depth"))),
     "queue_depth"),
    (("t-1", "127.0.0.1", 6700, altered(lambda s: s["tasks"][0].update(user=[]))), "user"),
    (("t-1", "127.0.0.1", 6700, altered(lambda s: s["tasks"][0].update(executor="1-1"))),
     "executor"),
    (("t-1", "127.0.0.1", 6700, altered(lambda s: s["tasks"][0].update(partitions=[3]))),
     "partitions"),
])
def test_the_store_refuses_a_malformed_report_and_says_what_is_wrong(args, problem):
    store = MetricsStore()
    with pytest.raises(ValueError, match=problem):
        store.put(*args)
    assert store.snapshots("t-1", {("127.0.0.1", 6700)}, max_age=60) == []


def test_the_store_takes_a_snapshot_as_the_engine_makes_it():
    b = TopologyBuilder()
    b.set_spout("source", OneSpout())
    b.set_bolt("sink", Measured()).shuffle_grouping("source")
    with running(b.build(), {}) as cluster:
        runtime = cluster.runtime("test")
        cluster.wait_for(lambda: runtime.summary()["sink"]["acked"] >= 1, timeout=10)
        snap = msgpack.unpackb(msgpack.packb(runtime.metrics_snapshot("127.0.0.1", 6700)))
    store = MetricsStore()
    store.put(snap["topology_id"], "127.0.0.1", 6700, snap)
    assert store.snapshots(snap["topology_id"], {("127.0.0.1", 6700)}, 60) == [snap]


class OneSpout(Spout):
    outputs = ["value"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.sent = False

    def next_tuple(self):
        if not self.sent:
            self.sent = True
            self.collector.emit([1.5], msg_id=1)


class Measured(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.sizes = context.register_histogram("sizes")
        context.register_gauge("name", lambda: "a string")

    def execute(self, tup):
        self.sizes.update(tup["value"])
        self.collector.ack(tup)


# ----- the reporter, against nimbus stand-ins

class FakeNimbus:
    """A REP socket on loopback answering every request with ``answer(request)``."""

    def __init__(self, answer):
        self.requests: list[dict] = []
        self.socket = zmq.Context.instance().socket(zmq.REP)
        self.port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.info = {"host": "127.0.0.1", "port": self.port}
        self.thread = threading.Thread(target=self._serve, args=(answer,), daemon=True)
        self.thread.start()

    def _serve(self, answer):
        if self.socket.poll(5000):
            op, arguments = self.socket.recv_multipart()
            self.requests.append({"op": op.decode(), **msgpack.unpackb(arguments)})
            self.socket.send(msgpack.packb(answer(self.requests[-1])))
        self.socket.close(linger=0)


def test_the_reporter_sends_its_snapshot_and_asks_anew_for_the_leader_after_a_refusal():
    standby = FakeNimbus(lambda r: {"ok": False, "error": f"{rpc.NOT_LEADER}; the leader is at x"})
    leader = FakeNimbus(lambda r: {"ok": True, "result": None})
    leaders = [standby.info, leader.info]
    reporter = MetricsReporter(snapshot, lambda: leaders.pop(0), "t-1", "127.0.0.1", 6700,
                               interval=1)
    assert reporter.report() is False
    assert reporter.report() is True
    (request,) = leader.requests
    assert request["op"] == "report_metrics"
    assert (request["topology_id"], request["host"], request["port"]) == ("t-1", "127.0.0.1", 6700)
    assert request["snapshot"] == {**snapshot(), "time": request["snapshot"]["time"]}


def test_a_report_to_a_silent_nimbus_is_dropped_within_the_interval():
    silent = zmq.Context.instance().socket(zmq.ROUTER)   # takes the request, never answers
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    reporter = MetricsReporter(snapshot, lambda: {"host": "127.0.0.1", "port": port},
                               "t-1", "127.0.0.1", 6700, interval=0.5)
    started = time.monotonic()
    assert reporter.report() is False
    assert time.monotonic() - started < 1.0
    silent.close(linger=0)


# ----- a real cluster

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed: run deploy/zookeeper.sh install")
    base = tmp_path_factory.mktemp("metrics-cluster")
    yield from serve_cluster(base, 1, {"s1": 3})


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


@pytest.fixture(scope="module")
def ledger(cluster, tmp_path_factory) -> Path:
    """The ledger topology on two workers, every one of its MESSAGES acked."""
    directory = tmp_path_factory.mktemp("ledger")
    result = cluster.cli("submit", str(LEDGER), "--name", NAME, "-c", "topology.workers=2",
                         "-c", f"ledger.dir={directory}", "-c", f"ledger.messages={MESSAGES}",
                         "-c", "topology.metrics.report.secs=1",
                         "-c", "topology.message.timeout.secs=30")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: len(acked_ids(directory)) == MESSAGES, 60, "every message to be acked")
    return directory


@pytest.fixture(autouse=True)
def logs_on_failure(request):
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed and "cluster" in request.fixturenames:
        print(request.getfixturevalue("cluster").logs())


def spout_total(snapshots: list[dict], key: str) -> int:
    total = 0
    for snap in snapshots:
        for task in snap["tasks"]:
            if task["component"] == "source":
                value = task["windows"]["all"][key]
                total += sum(value.values()) if isinstance(value, dict) else value
    return total


@needs_zookeeper
def test_the_acks_summed_over_every_worker_s_snapshot_are_exactly_the_spout_s(leader, ledger):
    def snapshots() -> list[dict]:
        return rpc.call(leader, "metrics", timeout=5, name=NAME)

    # Reports come every second: wait for the ones taken after the last ack.
    wait_until(lambda: spout_total(snapshots(), "acked") >= MESSAGES, 15,
               "the workers' reports to count every ack")
    found = snapshots()
    assert spout_total(found, "acked") == MESSAGES
    assert spout_total(found, "emitted") == MESSAGES + spout_total(found, "failed")
    info = rpc.call(leader, "topology_info", timeout=5, name=NAME)
    slots = {(host, port) for _c, _t, _sid, host, port in info["assignment"]}
    assert len(slots) == 2
    assert {(s["worker"]["host"], s["worker"]["port"]) for s in found} == slots
    assert all(s["topology_id"] == info["id"] for s in found)


@needs_zookeeper
def test_topology_info_and_cluster_info_describe_the_placement(leader, ledger):
    info = rpc.call(leader, "topology_info", timeout=5, name=NAME)
    assert (info["name"], info["status"], info["workers"]) == (NAME, "active", 2)
    assert info["executors"] == len(info["assignment"]) == 2 + 2 + 2 + 2   # 3 components, 2 ackers
    assert info["conf"]["ledger.messages"] == MESSAGES
    assert set(info["structure"]["components"]) == {"source", "relay", "sink"}
    assert info["errors"] == []
    snapshot_pids = {(s["worker"]["host"], s["worker"]["port"]): s["worker"]["pid"]
                     for s in rpc.call(leader, "metrics", timeout=5, name=NAME)
                     if not s.get("retired")}
    wait_until(lambda: all(row["pid"] for row in rpc.call(leader, "topology_info", timeout=5,
                                                         name=NAME)["worker_slots"]),
               10, "the supervisor to report its workers")
    rows = rpc.call(leader, "topology_info", timeout=5, name=NAME)["worker_slots"]
    assert {(r["host"], r["port"]): r["pid"] for r in rows} == snapshot_pids
    assert [r["restarts"] for r in rows] == [0, 0]
    supervisor = rpc.call(leader, "cluster", timeout=5)["supervisors"]["s1"]
    assert (len(supervisor["slots"]), supervisor["used_slots"]) == (3, 2)


@needs_zookeeper
def test_a_garbage_report_is_refused_and_nimbus_keeps_serving(leader, ledger):
    wait_until(lambda: rpc.call(leader, "metrics", timeout=5, name=NAME), 30, "a first report")
    before = rpc.call(leader, "metrics", timeout=5, name=NAME)
    (host, port) = before[0]["worker"]["host"], before[0]["worker"]["port"]
    tid = before[0]["topology_id"]
    for garbage in ({"snapshot": "not a map"}, {"snapshot": {"topology_id": tid, "tasks": 3}},
                    {"snapshot": {**before[0], "tasks": [{"component": 1}]}}):
        with pytest.raises(rpc.RpcError, match="malformed metrics report"):
            rpc.call(leader, "report_metrics", timeout=5, topology_id=tid, host=host, port=port,
                     **garbage)
    with pytest.raises(rpc.RpcError):
        rpc.call(leader, "report_metrics", timeout=5, topology_id=tid)   # arguments missing
    # A report for a slot the topology is not assigned (nimbus would keep it for ever).
    elsewhere = {**before[0], "worker": {**before[0]["worker"], "host": "10.9.9.9"}}
    with pytest.raises(rpc.RpcError, match="no worker of .* is assigned to 10.9.9.9"):
        rpc.call(leader, "report_metrics", timeout=5, topology_id=tid, host="10.9.9.9",
                 port=port, snapshot=elsewhere)
    # The worker's own report still stands, and nimbus still answers.
    after = rpc.call(leader, "metrics", timeout=5, name=NAME)
    assert [s["worker"]["pid"] for s in after] == [s["worker"]["pid"] for s in before]
    assert spout_total(after, "acked") == MESSAGES


@needs_zookeeper
def test_a_killed_worker_s_replacement_reports_with_a_new_pid(leader, ledger):
    def pids() -> dict[tuple[str, int], int]:
        return {(s["worker"]["host"], s["worker"]["port"]): s["worker"]["pid"]
                for s in rpc.call(leader, "metrics", timeout=5, name=NAME) if not s.get("retired")}

    before = pids()
    slot, victim = min(before.items())
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: pids().get(slot, victim) != victim, 40,
               "the restarted worker to report")
    after = pids()
    assert after.keys() == before.keys()
    assert after[slot] != victim

    def restarts() -> dict[tuple[str, int], int]:
        rows = rpc.call(leader, "topology_info", timeout=5, name=NAME)["worker_slots"]
        return {(r["host"], r["port"]): r["restarts"] for r in rows}

    wait_until(lambda: restarts()[slot] == 1, 10, "the supervisor to report the restart")
    assert sum(restarts().values()) == 1


FAULTY = Path(__file__).resolve().parents[1] / "cluster_topologies" / "faulty.py"


@needs_zookeeper
def test_failures_and_their_reasons_outlive_a_killed_worker(cluster, leader, tmp_path):
    """Issue 51: after a worker was replaced, the spout's failed count and fail reasons showed
    only the new worker's. Spout ``numbers`` has every tuple failed by bolt ``explode``."""
    result = cluster.cli("submit", str(FAULTY), "--name", "faulty", "-c", "topology.workers=1",
                         "-c", f"ledger.dir={tmp_path}", "-c", "ledger.messages=10",
                         "-c", "faulty.rate=50", "-c", "topology.metrics.report.secs=1")
    assert result.returncode == 0, result.stderr
    try:
        structure = rpc.call(leader, "topology_info", timeout=5, name="faulty")["structure"]

        def shown(window: str) -> tuple[dict, list[int]]:
            """What the REST API computes from nimbus's metrics, and the live workers' pids."""
            found = rpc.call(leader, "metrics", timeout=5, name="faulty")
            return (topology_stats(structure, found, window),
                    [s["worker"]["pid"] for s in found if not s.get("retired")])

        def explode_failures(stats: dict) -> int:
            return sum(n for kind, component, n in stats["fail_reasons"]
                       if (kind, component) == ("error", "explode"))

        wait_until(lambda: shown("all")[0]["failed"] >= 300, 60, "300 failed trees reported")
        before, (victim,) = shown("all")
        recent_before = shown("600")[0]
        assert explode_failures(before) == before["failed_by_kind"]["error"] > 0
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: shown("all")[1] not in ([], [victim]), 60,
                   "the restarted worker to report")
        after, _pids = shown("all")
        recent = shown("600")[0]
        # The new worker counts from zero; the topology's numbers do not.
        assert after["failed"] >= before["failed"]
        assert explode_failures(after) >= explode_failures(before)
        assert recent["failed"] >= recent_before["failed"]
        assert recent["seconds"] >= recent_before["seconds"]
    finally:
        cluster.kill_and_wait("faulty")
