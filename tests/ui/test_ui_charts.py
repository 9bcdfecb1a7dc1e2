"""The charts' data: ``GET /api/v1/topology/<id>/history`` over running local topologies (the
same ``MetricsHistory`` nimbus keeps, fed by local mode's sampler), and nimbus's
``metrics_history`` operation on a real loopback cluster."""

from __future__ import annotations

import gc
import threading
import time

import pytest
from charts_support import COARSE_STEP, STEP, charts_cluster
from cluster_support import LEDGER, LoopbackCluster
from metrics_feed import HOST, TID, Clock, Task, Worker, run
from ui_support import COMPONENTS, get, request, wait_until
from zookeeper_server import zookeeper_available

from stormlet import LocalCluster
from stormlet.cluster import rpc
from stormlet.cluster.nimbus import Nimbus
from stormlet.cluster.nimbus_client import NimbusClient
from stormlet.cluster.security import READ_USER, Security
from stormlet.metrics.history import COARSE_STEP_SECS, METRICS, STEP_SECS, MetricsHistory
from stormlet.ui.source import ClusterSource, LocalSource


@pytest.fixture(scope="module")
def ui():
    with charts_cluster("finite", "steady") as (cluster, server):
        yield cluster, server


def history(server, name: str, resolution: str = "fine") -> dict:
    return get(server, f"/api/v1/topology/{name}/history?resolution={resolution}")


def points(server, name: str, n: int, resolution: str = "fine") -> dict:
    """The history once it has ``n`` points."""
    wait_until(lambda: len(history(server, name, resolution)["times"]) >= n, 30,
               f"{n} points of {name}'s {resolution} history")
    return history(server, name, resolution)


def spout_emitted(server, name: str) -> int:
    page = get(server, f"/api/v1/topology/{name}")
    return next(c for c in page["spouts"] if c["id"] == "numbers")["emitted"]


def test_the_history_has_a_series_per_component_and_metric(ui):
    _cluster, server = ui
    series = points(server, "steady", 4)
    assert series["topologyName"] == "steady" and series["topologyId"].startswith("steady-")
    assert series["resolution"] == "fine" and series["step"] == STEP
    times = series["times"]
    assert all(b - a == STEP for a, b in zip(times, times[1:]))
    assert time.time() - 5 < times[-1] < time.time()
    assert list(series["components"]) == list(COMPONENTS)
    for cid, component in series["components"].items():
        assert component["kind"] == ("spout" if cid == "numbers" else "bolt")
        assert set(component) == {"kind", *METRICS}
        assert all(len(component[m]) == len(times) for m in METRICS)
    numbers, sink = series["components"]["numbers"], series["components"]["sink"]
    assert numbers["emitted"][-1] > 0 and sink["acked"][-1] > 0
    assert numbers["complete_p99_ms"][-1] >= numbers["complete_p50_ms"][-1] > 0
    assert sink["complete_p50_ms"] == [None] * len(times)   # bolts complete no trees
    assert all(0 <= c["capacity"][-1] <= 1 and 0 <= c["backpressure"][-1] <= 1
               for c in series["components"].values())


def test_the_charted_rate_is_the_rate_the_counters_grew_at(ui):
    _cluster, server = ui
    points(server, "steady", 2)
    started, before = time.time(), spout_emitted(server, "steady")
    time.sleep(6 * STEP)
    ended, after = time.time(), spout_emitted(server, "steady")
    counted = (after - before) / (ended - started)
    wait_until(lambda: history(server, "steady")["times"][-1] >= ended, 10,
               "the history to cover the time measured")
    series = history(server, "steady")
    inside = [rate for t, rate in zip(series["times"], series["components"]["numbers"]["emitted"])
              if started <= t and t + STEP <= ended]
    assert len(inside) >= 3
    charted = sum(inside) / len(inside)
    assert charted == pytest.approx(counted, rel=0.25), (inside, counted)


def test_a_topology_that_stopped_emitting_charts_zeros_not_gaps(ui):
    _cluster, server = ui
    wait_until(lambda: spout_emitted(server, "finite") >= 400, 20, "finite to emit everything")
    done = time.time() + 2 * STEP
    wait_until(lambda: history(server, "finite")["times"][-1] > done + STEP, 20,
               "buckets after finite stopped")
    series = history(server, "finite")
    emitted = series["components"]["numbers"]["emitted"]
    idle = [rate for t, rate in zip(series["times"], emitted) if t > done]
    assert idle and set(idle) == {0.0}
    assert max(emitted) > 0   # while it ran


def test_the_whole_life_series_and_the_errors(ui):
    _cluster, server = ui
    coarse = points(server, "steady", 2, "coarse")
    assert coarse["resolution"] == "coarse" and coarse["step"] >= COARSE_STEP
    assert coarse["times"][0] <= history(server, "steady")["times"][0]
    assert list(coarse["components"]) == list(COMPONENTS)
    status, body = request(server, "/api/v1/topology/steady/history?resolution=daily")
    assert status == 400 and "fine, coarse" in body["error"]
    status, body = request(server, "/api/v1/topology/nope/history")
    assert status == 404 and "nope" in body["error"]


def test_local_modes_sampler_ends_with_its_source():
    """The thread that feeds local mode's history stops when the UI's source is closed or
    collected, so a LocalCluster outliving its UI is not sampled for ever."""
    with LocalCluster() as cluster:
        closed = LocalSource(cluster)
        closed.charts.close()
        collected = LocalSource(cluster)
        thread = collected.charts._thread
        del collected
        gc.collect()
        for sampler in (closed.charts._thread, thread):
            sampler.join(5)
            assert not sampler.is_alive()


class OneTopology:
    """The ZooKeeper reads ``report_metrics`` and ``metrics_history`` make: one topology, whose
    one worker is at HOST:6700."""

    def topologies(self) -> dict[str, dict]:
        return {TID: {"name": "wc", "status": "active"}}

    def checked_assignment(self, _tid: str) -> dict:
        return {"executors": [["source", [1], "s1", HOST, 6700]]}

    def submissions(self) -> dict:
        return {}   # none being prepared or refused


class ToNimbus:
    """Sends a synthetic worker's reports as its reporter would: ``report_metrics``."""

    def __init__(self, nimbus: Nimbus):
        self.nimbus = nimbus

    def add(self, topology_id: str, snapshot: dict) -> None:
        worker = snapshot["worker"]
        self.nimbus.report_metrics(topology_id, worker["host"], worker["port"], snapshot)


def test_with_security_on_nimbus_serves_the_history_to_read_credentials(tmp_path):
    """A leading nimbus (no ZooKeeper: OneTopology) that a worker reported to for 40 s, its
    operations served over CURVE: a holder of read-only keys gets the series."""
    security = Security(cluster_secret=bytes(range(32)))
    nimbus = Nimbus("unused:2181", data_dir=tmp_path, security=security)
    nimbus.state = OneTopology()
    nimbus.is_leader.set()
    clock = Clock()
    nimbus.charts.history = MetricsHistory(clock)
    run(clock, [Worker(ToNimbus(nimbus), clock, 6700, [Task("source", 1)])], 40, every=5)
    assert nimbus._operations()["metrics_history"].role == rpc.READ
    stopping = threading.Event()
    server = rpc.RpcServer("tcp://127.0.0.1:*", nimbus._operations(), stopping,
                           security=security, topology_ids=set)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        read = security.rpc_client_keys(READ_USER)
        series = rpc.call(server.endpoint, "metrics_history", timeout=5, credentials=read,
                          name="wc", resolution="fine")
        assert (series["id"], series["name"], series["resolution"]) == (TID, "wc", "fine")
        assert series["components"]["source"]["emitted"][-1] == pytest.approx(10.0)
        assert rpc.call(server.endpoint, "metrics_history", timeout=5, credentials=read,
                        name=TID, resolution="coarse")["resolution"] == "coarse"
        with pytest.raises(rpc.RpcError, match="resolution must be one of fine, coarse"):
            rpc.call(server.endpoint, "metrics_history", timeout=5, credentials=read,
                     name="wc", resolution="daily")
        with pytest.raises(rpc.RpcError, match="no topology named 'nope'"):
            rpc.call(server.endpoint, "metrics_history", timeout=5, credentials=read,
                     name="nope")
    finally:
        stopping.set()
        thread.join(5)


LEDGER_MESSAGES = 4000


@pytest.mark.cluster
@pytest.mark.skipif(not zookeeper_available(),
                    reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")
def test_on_a_cluster_nimbus_keeps_the_history_from_its_workers_reports(tmp_path):
    with LoopbackCluster(tmp_path) as cluster:
        try:
            cluster.add_nimbus()
            cluster.add_supervisor("s1", 2)
            cluster.wait_for_leader()
            result = cluster.cli("submit", str(LEDGER), "--name", "ledger",
                                 "-c", "topology.workers=2", "-c", f"ledger.dir={tmp_path}",
                                 "-c", f"ledger.messages={LEDGER_MESSAGES}",
                                 "-c", "ledger.rate=50", "-c", "topology.metrics.report.secs=1")
            assert result.returncode == 0, result.stderr
            source = ClusterSource(NimbusClient(cluster.zk.hosts))
            try:
                def ledger() -> dict:
                    return source.history("ledger", "fine")
                wait_until(lambda: len(ledger()["times"]) >= 2, 60,
                           "two points of the ledger's history on nimbus")
                series = ledger()
                assert series["name"] == "ledger" and series["step"] == STEP_SECS   # nimbus's
                assert set(series["components"]) == {"source", "relay", "sink"}
                # Both workers' tasks add up: the two spout tasks emit 50 a second each.
                assert series["components"]["source"]["emitted"][-1] == pytest.approx(100, rel=0.3)
                assert series["components"]["sink"]["acked"][-1] > 0
                coarse = source.history("ledger", "coarse")
                assert coarse["resolution"] == "coarse" and coarse["step"] == COARSE_STEP_SECS
            finally:
                source.close()
        except BaseException:
            print(cluster.logs())
            raise
