"""A hostile or clumsy client cannot stop nimbus answering, and a forged code package is refused:
real ZooKeeper, nimbus and supervisor processes on loopback."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq
from cluster_support import LEDGER, serve_cluster, wait_until
from kazoo.client import KazooClient
from zookeeper_server import zookeeper_available

from stormlet.cluster import rpc
from stormlet.cluster.code import package_topology
from stormlet.cluster.zk_state import ClusterState, rpc_address

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")



@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("hardening")
    yield from serve_cluster(base, 1, {"s1": 1})


@pytest.fixture
def zk_state(cluster):
    client = KazooClient(hosts=cluster.zk.hosts)
    client.start()
    yield ClusterState(client)
    client.stop()
    client.close()


@pytest.fixture
def leader(zk_state) -> str:
    return rpc_address(zk_state.leader())


def peak_memory_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def send_raw(address: str, *frames: bytes, answer: bool = True) -> dict | None:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    try:
        sock.send_multipart(list(frames))
        if not sock.poll(10_000 if answer else 2_000):
            return None
        return msgpack.unpackb(sock.recv())
    finally:
        sock.close()


def test_bad_requests_get_errors_or_are_dropped_and_nimbus_memory_stays_flat(cluster, leader):
    pid = cluster.nimbuses[0].process.pid
    before = peak_memory_kb(pid)
    listing = [b"list", msgpack.packb({})]
    for frames in ([b"list"], [*listing, b"x", b"y"], [msgpack.packb({"op": "list"})],
                   [b"kill", msgpack.packb({"name": 7, "wait": "soon"})],
                   [b"report_metrics", msgpack.packb({"snapshot": [[]] * 300_000})]):
        reply = send_raw(leader, *frames)
        assert reply is not None and reply["ok"] is False, (frames[0], reply)
    # 300 MB in one frame: the socket drops the sender before buffering it.
    assert send_raw(leader, b"list", b"\0" * (300 * 1024 * 1024), answer=False) is None
    # Within the socket's limit, over the operation's: refused before decoding.
    reply = send_raw(leader, b"list", b"\x90" * (8 * 1024 * 1024))
    assert reply["ok"] is False and "over its limit" in reply["error"]
    assert send_raw(leader, *listing)["ok"] is True
    grown_mb = (peak_memory_kb(pid) - before) / 1024
    assert grown_mb < 100, f"nimbus's peak memory grew by {grown_mb:.0f} MB"


@pytest.mark.parametrize("setting, message", [
    ("topology.transfer.batch.size=0", "topology.transfer.batch.size must be a whole number of "
                                       "tuples, at least 1"),
    ("topology.max.spout.pending=-1", "topology.max.spout.pending must be a whole number of "
                                      "tuples, at least 0"),
    ("topology.executor.receive.buffer.size=none", "topology.executor.receive.buffer.size must "
                                                   "be a whole number of batches, at least 1"),
])
def test_a_setting_the_topology_cannot_run_with_is_refused_at_submit(cluster, setting, message):
    # Checked by nimbus's inspection of the code with the submit's settings applied: before,
    # only the batch size was, and the others failed in every worker, which then restarted.
    result = cluster.cli("submit", str(LEDGER), "--name", "badconf", "-c", setting)
    assert result.returncode != 0
    assert message in result.stderr
    assert "badconf" not in cluster.cli("list").stdout


def test_list_is_answered_while_a_slow_submission_is_inspected(cluster, leader, tmp_path):
    slow = tmp_path / "slow.py"
    inspecting = tmp_path / "inspecting"   # made by the import of nimbus's inspection
    slow.write_text(LEDGER.read_text() + f"\nimport pathlib, time\n"
                    f"pathlib.Path({str(inspecting)!r}).touch()\ntime.sleep(6)\n")
    submitted = {}

    def submit() -> None:
        submitted["result"] = cluster.cli("submit", str(slow), "--name", "slow",
                                          "-c", f"ledger.dir={tmp_path}", "-c", "ledger.rate=50")

    thread = threading.Thread(target=submit)
    thread.start()
    wait_until(inspecting.exists, 30, "nimbus to inspect the submission")
    answered = 0
    while thread.is_alive() and answered < 10:
        assert isinstance(rpc.call(leader, "list", timeout=2), list)
        answered += 1
        time.sleep(0.2)
    thread.join(60)
    assert answered == 10, "the submission ended before list was asked ten times"
    assert submitted["result"].returncode == 0, submitted["result"].stderr
    assert cluster.cli("kill", "slow", "--wait", "0").returncode == 0
    wait_until(lambda: "slow" not in cluster.cli("list").stdout, 30, "slow to leave the list")


def test_path_tricks_in_names_ids_and_manifests_are_refused(cluster, leader, tmp_path):
    with pytest.raises(rpc.RpcError, match="invalid topology id"):
        rpc.call(leader, "get_code", timeout=5, topology_id="../../../etc/passwd")
    with pytest.raises(rpc.RpcError, match="invalid topology name"):
        rpc.call(leader, "submit", timeout=5, name="../x", payload=b"zip")
    import io
    import zipfile
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("topo.py", LEDGER.read_text())
        archive.writestr("stormlet-manifest.json", '{"entry": "../../topo.py"}')
    with pytest.raises(rpc.RpcError, match="manifest names"):
        rpc.call(leader, "submit", timeout=30, name="tricky", payload=buffer.getvalue())
    assert "tricky" not in cluster.cli("list").stdout


def test_a_supervisor_refuses_a_modified_package_from_a_fake_nimbus(cluster, zk_state, leader,
                                                                     tmp_path):
    # The impostor serves a package that would leave a mark where the real one does not.
    mark = tmp_path / "impostor-ran"
    impostor_source = tmp_path / "impostor" / "ledger.py"
    impostor_source.parent.mkdir()
    impostor_source.write_text(LEDGER.read_text() + f"\nopen({str(mark)!r}, 'w').close()\n")
    forged = package_topology(impostor_source)
    asked = []
    stopping = threading.Event()
    impostor = rpc.RpcServer("tcp://127.0.0.1:*", {
        "get_code": rpc.Operation(lambda topology_id: asked.append(topology_id) or forged,
                                  rpc.WORKER)}, stopping)
    port = int(impostor.endpoint.rsplit(":", 1)[1])
    threading.Thread(target=impostor.serve, daemon=True).start()
    real_leader = zk_state.leader()
    try:
        # Whoever can write to ZooKeeper (no ACLs yet) names the impostor the leader.
        zk_state.set_leader({"host": "127.0.0.1", "port": port, "id": "impostor"})
        ledger = tmp_path / "ledger"
        ledger.mkdir()
        result = cluster.cli("submit", str(LEDGER), "--name", "genuine", "--nimbus",
                             leader.removeprefix("tcp://"), "-c", f"ledger.dir={ledger}",
                             "-c", "ledger.rate=200")
        assert result.returncode == 0, result.stderr
        wait_until(lambda: list(ledger.glob("acked-*.log")), 60, "the genuine code to run")
        assert asked, "the supervisor did not ask the impostor"
        assert not mark.exists(), "the supervisor ran the impostor's package"
        assert "refused the code of genuine-" in (cluster.base / "s1.log").read_text()
    finally:
        stopping.set()
        zk_state.set_leader(real_leader)
        cluster.cli("kill", "genuine", "--wait", "0", "--nimbus", leader.removeprefix("tcp://"))
        wait_until(lambda: "genuine" not in cluster.cli("list").stdout, 30, "genuine to go")
        shutil.rmtree(tmp_path / "impostor", ignore_errors=True)
