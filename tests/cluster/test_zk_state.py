"""The ZooKeeper layout (cluster/zk_state.py) without a server: the offsets paths the offset
store uses, and assignments read through their check, so that a corrupt node is no assignment
(logged) for every reader, nimbus's ``metrics`` and ``topology_info`` included."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
from kazoo.exceptions import BadVersionError, NoNodeError

from stormlet.cluster.nimbus import Nimbus
from stormlet.cluster.zk_state import ClusterState, offset_path, offsets_path, spout_offsets_path
from stormlet.sources.offset_store import OffsetStoreUnavailable, ZooKeeperOffsetStore


class FakeZooKeeper:
    """The few KazooClient calls ClusterState and ZooKeeperOffsetStore make, over a dict."""

    def __init__(self):
        self.nodes: dict[str, bytes] = {}
        self.versions: dict[str, int] = {}

    def ensure_path(self, path: str) -> None:
        self.nodes.setdefault(path, b"")

    def get(self, path: str):
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], SimpleNamespace(version=self.versions.get(path, 0))

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        if path not in self.nodes:
            raise NoNodeError(path)
        if version not in (-1, self.versions.get(path, 0)):
            raise BadVersionError(path)
        self.nodes[path] = data
        self.versions[path] = self.versions.get(path, 0) + 1

    def create(self, path: str, data: bytes, makepath: bool = False, **_) -> None:
        self.nodes[path] = data

    def get_children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        children = {p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)}
        if not children and path not in self.nodes:
            raise NoNodeError(path)
        return sorted(children)

    # ZooKeeperOffsetStore's side: it asks whether it is connected, and waits for answers
    # with a timeout.
    # With ``answering`` False, a request waits out its timeout, as one sent just before the
    # connection dropped.
    connected = True
    answering = True
    handler = SimpleNamespace(timeout_exception=TimeoutError)

    def get_async(self, path: str):
        return _Answer(self, self.get, path)

    def set_async(self, path: str, data: bytes, version: int = -1):
        return _Answer(self, self.set, path, data, version)

    def create_async(self, path: str, data: bytes, **kwargs):
        return _Answer(self, self.create, path, data, **kwargs)

    def get_children_async(self, path: str):
        return _Answer(self, self.get_children, path)


class _Answer:
    """A kazoo asynchronous result: answered at once, or never."""

    def __init__(self, zk: FakeZooKeeper, call, *args, **kwargs):
        self.zk, self.call, self.args, self.kwargs = zk, call, args, kwargs

    def get(self, timeout=None):
        if not self.zk.answering:
            raise self.zk.handler.timeout_exception()
        return self.call(*self.args, **self.kwargs)


def test_offset_paths_are_storm_kafkas_layout_under_the_cluster_root():
    assert offsets_path("/stormlet/") == "/stormlet/offsets"
    assert spout_offsets_path("/stormlet/offsets/", "events") == "/stormlet/offsets/events"
    assert offset_path("/stormlet/offsets", "events", 3) == "/stormlet/offsets/events/3"

    store = ZooKeeperOffsetStore("unused:2181", offsets_path("/c"))
    store._client = FakeZooKeeper()
    store.save("events", 3, {"offset": 7})
    assert json.loads(store._client.nodes["/c/offsets/events/3"]) == {"offset": 7}
    assert store.load("events", 3) == {"offset": 7}
    assert store.all() == {"events": {3: {"offset": 7}}}


def test_the_offset_store_refuses_at_once_while_disconnected_and_stops_waiting_in_time():
    store = ZooKeeperOffsetStore("unused:2181", offsets_path("/c"), request_timeout=0.5)
    zk = store._client = FakeZooKeeper()
    store.save("events", 3, {"offset": 7})
    zk.connected = False   # kazoo would queue these until the connection came back
    with pytest.raises(OffsetStoreUnavailable, match="not connected to ZooKeeper at unused:2181"):
        store.save("events", 3, {"offset": 8})
    with pytest.raises(OffsetStoreUnavailable, match="not connected"):
        store.all()
    assert store.load("events", 3) == {"offset": 7}   # a start offset is waited for
    zk.connected, zk.answering = True, False
    with pytest.raises(OffsetStoreUnavailable,
                       match="did not answer a (read|write) of /c/offsets/events/3 within 0.5s"):
        store.save("events", 3, {"offset": 8})
    zk.answering = True
    store.save("events", 3, {"offset": 8})
    assert store.all() == {"events": {3: {"offset": 8}}}


GOOD = {"executors": [["spout", [1], "s1", "127.0.0.1", 6700]]}


@pytest.mark.parametrize("data", [b"\xff not json",
                                  json.dumps({"executors": [["spout", 1]]}).encode(),
                                  json.dumps({"executors": "none"}).encode()])
def test_a_corrupt_assignment_reads_as_none_and_is_logged_with_its_path(data, caplog):
    zk = FakeZooKeeper()
    state = ClusterState(zk, "/c")
    assert state.checked_assignment("t-1") is None            # no node at all
    state.set_assignment("t-1", GOOD)
    assert state.checked_assignment("t-1") == GOOD
    zk.nodes[state.assignment_path("t-1")] = data
    with caplog.at_level(logging.WARNING, logger="stormlet.cluster.zk_state"):
        assert state.checked_assignment("t-1") is None
    assert [r.getMessage() for r in caplog.records if "/c/assignments/t-1" in r.getMessage()]
    assert state.checked_assignments() == ({}, {"t-1"})


def test_nimbus_takes_a_corrupt_assignment_for_none_in_metrics_and_topology_info(tmp_path):
    zk = FakeZooKeeper()
    nimbus = Nimbus("unused:2181", data_dir=tmp_path)
    nimbus.state = ClusterState(zk, "/c")
    nimbus.is_leader.set()
    nimbus.state.set_topology("t-1", {"name": "t", "status": "active", "conf": {},
                                      "launched": 1.0})
    nimbus.state.set_assignment("t-1", GOOD)
    assert nimbus.topology_info("t")["executors"] == 1
    # Five fields expected: assigned_executors would raise TypeError on this one.
    zk.nodes[nimbus.state.assignment_path("t-1")] = json.dumps(
        {"executors": [["spout", [1], "s1"]]}).encode()
    info = nimbus.topology_info("t")
    assert (info["executors"], info["workers"], info["assignment"], info["worker_slots"]) == (
        0, 0, [], [])
    assert nimbus.metrics("t") == []


def test_a_commit_never_moves_back_one_of_the_same_topology_instance():
    """Issue 51's split brain: a worker cut off from ZooKeeper while its tasks moved commits
    its partitions as it closes, after the heal. Its older offset overwrote its successor's
    newer one (the checker then waited for commits that never came, and a restart would replay
    what was done). Within one topology instance a commit only moves forward; a new instance
    (a resubmission starting over) may move it back."""
    from stormlet.sources.offset_store import StaleCommit

    def record(offset: int, task: int, instance: str = "t-1") -> dict:
        return {"offset": offset, "task": task, "topology": {"id": instance, "name": "t"}}

    zk = FakeZooKeeper()
    orphan = ZooKeeperOffsetStore("unused:2181", offsets_path("/c"))
    successor = ZooKeeperOffsetStore("unused:2181", offsets_path("/c"))
    orphan._client = successor._client = zk
    orphan.save("events", 0, record(10, 3))
    successor.save("events", 0, record(50, 3))
    with pytest.raises(StaleCommit, match="holds offset 50"):
        orphan.save("events", 0, record(20, 3))
    assert successor.load("events", 0)["offset"] == 50
    successor.save("events", 0, record(60, 3))
    orphan.save("events", 0, record(5, 3, instance="t-2"))     # a new instance starts over
    assert successor.load("events", 0)["offset"] == 5
