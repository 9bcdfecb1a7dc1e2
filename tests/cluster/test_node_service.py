"""A supervisor's node service (stormlet/cluster/node_service.py) on loopback with the cluster
secret: it answers the daemons only, serves only regular files under its logs directory and
says why it refuses a name; a follower keeps its place across a rotation. Nimbus's log
operations (log_service.py) over several nodes: one that does not answer is reported, the
others are served."""

from __future__ import annotations

import json
import os
import time

import pytest
from zookeeper_server import free_port

from stormlet.cluster import log_service, rpc
from stormlet.cluster.log_files import (
    daemon_log_file,
    logs_dir,
    worker_file_name,
    worker_log_dir,
    worker_log_file,
    worker_out_file,
)
from stormlet.cluster.log_service import LogService, shown_to_readers
from stormlet.cluster.node_service import NodeService, NodeServiceError
from stormlet.cluster.security import ADMIN_USER, DAEMON_USER, READ_USER, Security
from stormlet.cluster.zk_state import FoundTopology

TID = "wc-1764493200-a1b2c3"
OTHER = "other-1764493200-d4e5f6"


def line(seconds: int, component: str, text: str) -> str:
    return f"2026-11-30T10:00:{seconds:02d}.000+00:00 INFO [{TID} {component} 3] app: {text}\n"


@pytest.fixture
def security(tmp_path) -> Security:
    path = tmp_path / "cluster.secret"
    Security.generate(path)
    return Security.load(path)


@pytest.fixture
def node(tmp_path, security):
    """A node's data directory with a worker's log, and its service."""
    data = tmp_path / "node"
    directory = worker_log_dir(data, TID, 6700)
    directory.mkdir(parents=True)
    worker_log_file(directory).write_text(line(1, "split", "hello") + line(2, "count", "10")
                                          + line(3, "split", "password=hunter2 in a url"))
    worker_out_file(directory).write_text("")
    daemon_log_file(data, "supervisor").write_text("supervisor's own\n")
    (tmp_path / "secret.txt").write_text("the cluster secret\n")
    service = NodeService(logs_dir(data), "127.0.0.1", 0, "127.0.0.1", security)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def call(node: NodeService, security: Security, op: str, user: str = DAEMON_USER, **args):
    assert node.address is not None   # started
    return rpc.call(node.address, op, timeout=5, credentials=security.rpc_client_keys(user),
                    **args)


def test_a_daemon_lists_and_reads_the_nodes_files(node, security):
    names = {f["name"] for f in call(node, security, "list_files", topology_id=TID)}
    assert names == {worker_file_name(TID, 6700), worker_file_name(TID, 6700, "worker.out")}
    assert call(node, security, "list_files", topology_id=OTHER) == []
    answer = call(node, security, "read_file", file=worker_file_name(TID, 6700))
    assert answer["data"].decode().count("\n") == 3 and answer["eof"]
    assert answer["next"] == answer["size"] and answer["file"] == worker_file_name(TID, 6700)
    split = call(node, security, "read_file", file=worker_file_name(TID, 6700),
                 component="split", grep="hello|url")
    assert split["data"].decode() == line(1, "split", "hello") + line(
        3, "split", "password=hunter2 in a url")


@pytest.mark.parametrize("name, why", [
    ("../secret.txt", "'..' leads out of the logs directory"),
    (f"workers/{TID}/../../../secret.txt", "'..' leads out"),
    ("/etc/passwd", "an absolute path"),
    ("worker.link", "worker.link is a symbolic link"),
    ("missing.log", "no such file"),
    (f"workers/{TID}", "not a regular file"),
])
def test_names_that_are_no_file_of_its_logs_directory_are_refused_with_the_reason(
        node, security, name, why):
    (node.logs_dir / "worker.link").symlink_to(node.logs_dir.parent.parent / "secret.txt")
    with pytest.raises(rpc.RpcError, match=why):
        call(node, security, "read_file", file=name)
    with pytest.raises(rpc.RpcError, match="invalid topology id"):
        call(node, security, "list_files", topology_id="../..")


def test_only_daemons_may_ask(node, security, tmp_path):
    with pytest.raises(rpc.RpcError, match="permission denied: read may not call read_file"):
        call(node, security, "read_file", user=READ_USER, file=worker_file_name(TID, 6700))
    # The admin holds the secret, and may do what a daemon does.
    assert call(node, security, "list_files", user=ADMIN_USER)
    # A worker's credentials, and another cluster's, get no further than the handshake.
    credentials = tmp_path / "worker.json"
    credentials.write_text(json.dumps(security.worker_credentials(TID, "wc")))
    worker = Security.for_worker(credentials)
    other = tmp_path / "other.secret"
    Security.generate(other)
    for stranger in (worker, Security.load(other)):
        with pytest.raises(rpc.RpcError, match="refused this client's credentials|did not"):
            rpc.call(node.address, "list_files", timeout=2,
                     credentials=stranger.rpc_client_keys(DAEMON_USER))


def test_a_follower_reads_the_rest_of_a_rotated_file_then_the_new_one(node, security):
    name = worker_file_name(TID, 6700)
    first = call(node, security, "read_file", file=name)
    path = node.logs_dir / name
    with open(path, "a") as f:
        f.write(line(4, "split", "written before the rotation"))
    os.replace(path, path.with_name("worker.log.1"))
    path.write_text(line(5, "split", "after the rotation"))
    rest = call(node, security, "read_file", file=name, offset=first["next"],
                inode=first["inode"])
    assert rest["file"] == name + ".1" and rest["eof"] and not rest["restarted"]
    assert rest["data"].decode() == line(4, "split", "written before the rotation")
    new = call(node, security, "read_file", file=name)
    assert new["data"].decode() == line(5, "split", "after the rotation")
    # Cut shorter than the follower's place (a worker's raw output is cut in place): afresh.
    cut = call(node, security, "read_file", file=name, offset=10_000, inode=new["inode"])
    assert cut["restarted"] and cut["data"].decode() == line(5, "split", "after the rotation")
    # Its file rotated out of reach: the current one from its start.
    path.with_name("worker.log.1").unlink()
    again = call(node, security, "read_file", file=name, offset=10, inode=first["inode"])
    assert again["restarted"] and again["file"] == name and again["start"] == 0


def test_a_page_from_the_end_and_the_one_before_it(node, security):
    name = worker_file_name(TID, 6700)
    last = call(node, security, "read_file", file=name, length=100, from_end=True)
    assert last["data"].decode() == line(3, "split", "password=hunter2 in a url")
    before = call(node, security, "read_file", file=name, length=200, from_end=True,
                  offset=last["size"] - last["start"])
    assert before["data"].decode() == line(1, "split", "hello") + line(2, "count", "10")


# ----- nimbus's operations over several nodes


class FakeState:
    """What LogService reads of ZooKeeper: live supervisors and an assignment."""

    def __init__(self, nodes: dict[str, dict], executors: list[list]):
        self.nodes = nodes
        self.executors = executors

    def supervisors(self) -> dict[str, dict]:
        return self.nodes

    def checked_assignment(self, topology_id: str) -> dict:
        return {"executors": self.executors}


def test_nimbus_lists_across_nodes_and_reports_the_one_that_does_not_answer(
        node, security, monkeypatch):
    monkeypatch.setattr(log_service, "NODE_TIMEOUT_SECS", 0.5)
    silent = f"tcp://127.0.0.1:{free_port()}"   # nothing listens there
    state = FakeState(
        {"s1": {"host": "h1", "service": node.address}, "s2": {"host": "h2", "service": silent},
         "s3": {"host": "h3"}},
        [["split", [3, 4], "s1", "h1", 6700], ["count", [5], "s2", "h2", 6700],
         ["sink", [6], "s9", "h9", 6700]])

    def find(name):
        if name not in ("wc", TID):
            raise rpc.RpcError(f"no topology named {name!r} is running")
        return FoundTopology(TID, {})

    logs = LogService(lambda: state, find, security)
    started = time.monotonic()
    answer = logs.list("wc")
    assert time.monotonic() - started < 3   # the nodes are asked at once
    assert answer["topology_id"] == TID
    assert {(f["supervisor"], f["host"], f["name"]) for f in answer["files"]} == {
        ("s1", "h1", worker_file_name(TID, 6700)),
        ("s1", "h1", worker_file_name(TID, 6700, "worker.out"))}
    assert all(f["executors"] == [["split", [3, 4]]] for f in answer["files"])
    unanswered = "\n".join(answer["unanswered"])
    assert "h2 (supervisor s2) did not answer within 0.5 s" in unanswered
    assert "h3 (supervisor s3) runs no node service" in unanswered
    assert "supervisor s9 (h9), assigned workers of" in unanswered and "is not running" in \
        unanswered

    read = logs.read("wc", "s1", worker_file_name(TID, 6700), component="count")
    assert read["data"].decode() == line(2, "count", "10")
    assert (read["supervisor"], read["host"], read["port"]) == ("s1", "h1", 6700)
    with pytest.raises(rpc.RpcError, match="h2 \\(supervisor s2\\) did not answer"):
        logs.read("wc", "s2", worker_file_name(TID, 6700))
    with pytest.raises(rpc.RpcError, match="is not a file of .*'s workers"):
        logs.read("wc", "s1", "supervisor.log")
    with pytest.raises(rpc.RpcError, match="is not a file of"):
        logs.read("wc", "s1", worker_file_name(OTHER, 6700))
    with pytest.raises(rpc.RpcError, match="is not a file of"):
        logs.read("wc", "s1", f"workers/{TID}/6700/../../../../secret.txt")
    with pytest.raises(rpc.RpcError, match="supervisor 'nope' is not running"):
        logs.read("wc", "nope", worker_file_name(TID, 6700))
    # A reader without admin access gets the credentials in the text redacted.
    shown = shown_to_readers(logs.read("wc", "s1", worker_file_name(TID, 6700)))["data"]
    assert b"hunter2" not in shown and b"password=<redacted>" in shown
    # And its search is matched against that redacted text: no pattern probes the password.
    probe = worker_file_name(TID, 6700)
    assert b"hunter2" in logs.read("wc", "s1", probe, grep="password=hunt")["data"]
    assert logs.read("wc", "s1", probe, grep="password=hunt", redacted=True)["data"] == b""
    assert b"<redacted>" in shown_to_readers(logs.read("wc", "s1", probe, grep="password=<red",
                                                       redacted=True))["data"]


def test_a_caller_but_the_admin_gets_the_arguments_the_operation_imposes():
    seen = []

    def handler(**arguments):
        seen.append(arguments)
        return "result"

    operation = rpc.Operation(handler, shown_to_others=lambda r: f"shown {r}",
                              others_arguments={"redacted": True})
    others = rpc._shown_to_others(operation)
    assert others.handler(grep="x", redacted=False) == "shown result"
    assert seen == [{"grep": "x", "redacted": True}]   # the caller's own False is overruled


def test_a_taken_port_is_refused_saying_what_to_do(node, security, tmp_path):
    port = int(node.address.rsplit(":", 1)[1])
    second = NodeService(tmp_path / "other", "127.0.0.1", port, "127.0.0.1", security)
    with pytest.raises(NodeServiceError, match=f"cannot listen on 127.0.0.1:{port}: .*choose "
                                               f"another --service-port"):
        second.start()


def test_a_killed_topologys_logs_are_read_by_its_id(node, security):
    """Its record is gone from ZooKeeper; its workers' files are still on the node."""
    state = FakeState({"s1": {"host": "h1", "service": node.address}}, [])

    def find(name):
        raise rpc.RpcError(f"no topology named {name!r} is running")

    logs = LogService(lambda: state, find, security)
    assert {f["name"] for f in logs.list(TID)["files"]} == {
        worker_file_name(TID, 6700), worker_file_name(TID, 6700, "worker.out")}
    assert b"hello" in logs.read(TID, "s1", worker_file_name(TID, 6700))["data"]
    with pytest.raises(rpc.RpcError, match="no topology named 'wc' is running"):
        logs.list("wc")


def test_a_line_being_written_ends_a_read_without_holding_the_reader(node, security):
    """A reader stops at a line still being written (eof) and gets it once it is complete,
    with the record it held back before it."""
    name = worker_file_name(TID, 6700)
    path = node.logs_dir / name
    with open(path, "a") as f:
        f.write("2026-11-30T10:00:09.000+00:00 INFO [x split 3] app: half a li")
    first = call(node, security, "read_file", file=name, component="split")
    assert first["eof"] and b"half" not in first["data"]
    assert first["data"].decode() == line(1, "split", "hello")   # the last whole one waits too
    with open(path, "a") as f:
        f.write("ne\n")
    rest = call(node, security, "read_file", file=name, offset=first["next"],
                inode=first["inode"], component="split")
    assert rest["eof"] and rest["data"].decode().endswith("app: half a line\n")
    assert "password" in rest["data"].decode()


def test_the_supervisor_may_add_operations_before_it_starts(tmp_path, security):
    service = NodeService(tmp_path, "127.0.0.1", 0, "127.0.0.1", security)
    service.add_operation("stack", rpc.Operation(lambda port: f"stack of {port}", rpc.DAEMON))
    service.start()
    try:
        assert call(service, security, "stack", port=6700) == "stack of 6700"
        with pytest.raises(rpc.RpcError, match="permission denied"):
            call(service, security, "stack", user=READ_USER, port=6700)
        with pytest.raises(RuntimeError, match="before the node service starts"):
            service.add_operation("late", rpc.Operation(lambda: 1, rpc.DAEMON))
    finally:
        service.stop()
