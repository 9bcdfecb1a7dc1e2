"""Nimbus's RPC server (cluster/rpc.py) on loopback: it answers every well-formed request, and
everything else gets an error reply or is dropped without stopping it."""

from __future__ import annotations

import json
import threading

import msgpack
import pytest
import zmq
from zookeeper_server import free_port

from stormlet.cluster import rpc
from stormlet.cluster.security import CurveKeys, Security


class SlowGate(threading.Event):
    """Lets the slow operation return; ``entered`` is set once its handler runs."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()


@pytest.fixture
def server():
    """An RpcServer on a random loopback port with a fast op, a small one and a slow one."""
    port = free_port()
    release = SlowGate()

    def slow() -> str:
        release.entered.set()
        release.wait(20)
        return "slow done"

    operations = {
        "echo": rpc.Operation(lambda **kw: kw, rpc.READ),
        "tiny": rpc.Operation(lambda **kw: len(kw), rpc.READ, max_bytes=100, max_containers=5),
        "boom": rpc.Operation(lambda: 1 / 0, rpc.READ),
        "slow": rpc.Operation(slow, rpc.ADMIN, slow=True),
        "upload": rpc.Operation(lambda payload, **kw: [len(payload), kw], rpc.ADMIN,
                                max_payload_bytes=1000),
    }
    stopping = threading.Event()
    address = f"tcp://127.0.0.1:{port}"
    srv = rpc.RpcServer(address, operations, stopping)
    thread = threading.Thread(target=srv.serve, daemon=True)
    thread.start()
    yield address, release
    release.set()
    stopping.set()
    thread.join(5)


def raw_request(address: str, *frames: bytes) -> dict:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(address)
    try:
        sock.send_multipart(list(frames))
        return msgpack.unpackb(sock.recv())
    finally:
        sock.close()


def test_a_well_formed_request_is_answered(server):
    address, _ = server
    assert rpc.call(address, "echo", timeout=5, a=1, b=[1, 2]) == {"a": 1, "b": [1, 2]}


@pytest.mark.parametrize("frames, message", [
    ([b"echo"], "two frames"),
    ([b"echo", msgpack.packb({}), b"extra", b"more"], "two frames"),
    ([b"nope", msgpack.packb({})], "unknown operation"),
    ([b"echo", b"\xc1\xff not msgpack"], "not msgpack"),
    ([b"echo", msgpack.packb({"a": 1})[:-1]], "not msgpack"),
    ([b"echo", msgpack.packb([1, 2, 3])], "not a map"),
    ([b"echo", msgpack.packb({1: 2})], "not a map"),
    ([b"tiny", msgpack.packb({"a": "x" * 200})], "over its limit of 100"),
    ([b"tiny", b"\x91" * 6 + b"\x90"], "more than 5 lists"),
    ([b"\xff\xfe", msgpack.packb({})], "unknown operation"),
    ([b"echo", msgpack.packb({}), b"data"], "echo takes no payload"),
    ([b"upload", msgpack.packb({}), b"x" * 1001], "payload of 1001 bytes is over its limit"),
    ([b"upload", msgpack.packb({}), b"1", b"2"], "not 4"),
])
def test_a_malformed_request_gets_an_error_and_the_next_is_answered(server, frames, message):
    address, _ = server
    reply = raw_request(address, *frames)
    assert reply["ok"] is False and message in reply["error"], reply
    assert rpc.call(address, "echo", timeout=5, x=1) == {"x": 1}


def test_a_payload_reaches_its_handler_undecoded_and_only_as_the_payload(server):
    address, _ = server
    assert rpc.call(address, "upload", timeout=5, payload=b"\xc1" * 1000, n=1) == [1000, {"n": 1}]
    # A "payload" inside the arguments map is not taken for the payload frame.
    reply = raw_request(address, b"upload", msgpack.packb({"payload": b"sneaked"}), b"real")
    assert reply == {"ok": True, "result": [4, {}]}


def test_wrong_arguments_and_a_failing_handler_get_error_replies(server):
    address, _ = server
    with pytest.raises(rpc.RpcError, match="unexpected keyword"):
        rpc.call(address, "boom", timeout=5, nonsense=1)
    with pytest.raises(rpc.RpcError, match="internal error in boom: ZeroDivisionError"):
        rpc.call(address, "boom", timeout=5)
    assert rpc.call(address, "echo", timeout=5) == {}


def test_nested_empty_arrays_cannot_expand_a_small_frame(server):
    address, _ = server
    # 10,001 empty arrays in one 30 kB frame: refused at the container limit, not decoded.
    bomb = msgpack.packb({"a": [[]] * (rpc.DEFAULT_MAX_CONTAINERS + 1)})
    reply = raw_request(address, b"echo", bomb)
    assert reply["ok"] is False and "more than" in reply["error"]


def test_a_message_without_a_req_envelope_is_dropped_and_serving_goes_on(server):
    address, _ = server
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(address)
    dealer.send_multipart([b"echo", msgpack.packb({})])   # no empty delimiter frame
    assert dealer.poll(500) == 0
    dealer.close()
    assert rpc.call(address, "echo", timeout=5, y=2) == {"y": 2}


def test_a_frame_over_the_socket_limit_disconnects_its_sender(server):
    address, _ = server
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    sock.send_multipart([b"echo", b"\0" * (rpc.DEFAULT_MAX_BYTES * 4)])
    assert sock.poll(1000) == 0   # no answer: the server dropped the connection unread
    sock.close()
    assert rpc.call(address, "echo", timeout=5, z=3) == {"z": 3}


def test_other_requests_are_answered_while_a_slow_one_runs(server):
    address, release = server
    result = {}
    slow = threading.Thread(target=lambda: result.update(r=rpc.call(address, "slow", timeout=20)))
    slow.start()
    assert release.entered.wait(10), "the slow handler never ran"
    for n in range(20):
        assert rpc.call(address, "echo", timeout=2, n=n) == {"n": n}
    assert slow.is_alive()   # still waiting on its handler
    release.set()
    slow.join(10)
    assert result == {"r": "slow done"}


# ----- with a cluster secret: CURVE, users and roles

SECRET = bytes(range(32))


@pytest.fixture
def secured():
    """A CURVE-secured RpcServer whose topologies are t-1-aaaaaa and t-2-bbbbbb."""
    security = Security(cluster_secret=SECRET)
    operations = {
        "look": rpc.Operation(lambda: "looked", rpc.READ),
        "change": rpc.Operation(lambda: "changed", rpc.ADMIN),
        "mine": rpc.Operation(lambda topology_id: topology_id, rpc.WORKER),
    }
    stopping = threading.Event()
    srv = rpc.RpcServer("tcp://127.0.0.1:*", operations, stopping, security=security,
                        topology_ids=lambda: {"t-1-aaaaaa", "t-2-bbbbbb"})
    thread = threading.Thread(target=srv.serve, daemon=True)
    thread.start()
    yield srv.endpoint, security
    stopping.set()
    thread.join(5)


def worker_security(security: Security, topology_id: str, tmp_path) -> Security:
    path = tmp_path / f"{topology_id}.json"
    path.write_text(json.dumps(security.worker_credentials(topology_id, "t")))
    return Security.for_worker(path)


def test_each_user_may_call_only_what_its_role_allows(secured, tmp_path):
    address, security = secured
    admin, read, daemon = (security.rpc_client_keys(u) for u in ("admin", "read", "daemon"))
    worker = worker_security(security, "t-1-aaaaaa", tmp_path).rpc_client_keys()
    allowed = [(admin, "look", {}), (admin, "change", {}), (read, "look", {}),
               (daemon, "look", {}), (daemon, "mine", {"topology_id": "t-2-bbbbbb"}),
               (worker, "mine", {"topology_id": "t-1-aaaaaa"})]
    for keys, op, args in allowed:
        rpc.call(address, op, timeout=5, credentials=keys, **args)
    refused = [(read, "change", {}), (daemon, "change", {}), (worker, "change", {}),
               (worker, "look", {}), (worker, "mine", {"topology_id": "t-2-bbbbbb"}),
               (read, "mine", {"topology_id": "t-1-aaaaaa"})]
    for keys, op, args in refused:
        with pytest.raises(rpc.RpcError, match="permission denied"):
            rpc.call(address, op, timeout=5, credentials=keys, **args)


def test_a_request_no_connection_takes_in_time_is_nimbus_unavailable(monkeypatch):
    # What a client sees when the server's refusals keep it without a connection: the send
    # times out. The nimbus client fails over on NimbusUnavailable, not on zmq's Again.
    def no_connection(self, *args, **kwargs):
        raise zmq.Again()

    monkeypatch.setattr(zmq.Socket, "send_multipart", no_connection)
    with pytest.raises(rpc.NimbusUnavailable, match="did not take the request within 0.2s"):
        rpc.call("tcp://127.0.0.1:9", "look", timeout=0.2)


def test_a_client_without_the_clusters_keys_gets_no_service(secured, tmp_path):
    address, _security = secured
    with pytest.raises(rpc.NimbusUnavailable):
        rpc.call(address, "look", timeout=2)    # no CURVE at all
    stranger = Security(cluster_secret=bytes(32))   # another cluster's secret
    with pytest.raises(rpc.RpcError, match="refused this client's credentials"):
        rpc.call(address, "look", timeout=5, credentials=stranger.rpc_client_keys("admin"))
    # A worker of a topology the server does not run is a stranger too.
    gone = worker_security(_security, "t-9-cccccc", tmp_path).rpc_client_keys()
    with pytest.raises(rpc.RpcError, match="refused this client's credentials"):
        rpc.call(address, "mine", timeout=5, credentials=gone, topology_id="t-9-cccccc")


def test_a_failure_looking_up_worker_keys_refuses_that_client_and_no_other():
    """The lookup runs on ZeroMQ's ZAP thread: if it raised out of it, every later handshake
    (an admin's too) would wait forever."""
    security = Security(cluster_secret=SECRET)
    calls = []

    def failing_lookup() -> set[str]:
        calls.append(1)
        raise ConnectionError("ZooKeeper is away")

    stopping = threading.Event()
    srv = rpc.RpcServer("tcp://127.0.0.1:*", {"look": rpc.Operation(lambda: "ok", rpc.READ)},
                        stopping, security=security, topology_ids=failing_lookup)
    thread = threading.Thread(target=srv.serve, daemon=True)
    thread.start()
    try:
        # Knows the server's public key (as every worker does), not a known client key.
        public, secret = zmq.curve_keypair()
        stranger = CurveKeys(security.rpc_client_keys("admin").server_public, public, secret)
        with pytest.raises(rpc.RpcError, match="refused this client's credentials"):
            rpc.call(srv.endpoint, "look", timeout=5, credentials=stranger)
        assert calls
        admin = security.rpc_client_keys("admin")
        assert rpc.call(srv.endpoint, "look", timeout=5, credentials=admin) == "ok"
    finally:
        stopping.set()
        thread.join(5)
