"""Worker introspection from nimbus's side to the node's (introspection_service.py,
node_introspection.py), in this process over real sockets with the cluster secret: nimbus finds
the worker an admin names (HOST:PORT, SUPERVISOR:PORT, a component and task), its supervisor's
node service dumps its stacks, profiles it on a thread of its own (the flame graph kept among
the worker's files) and restarts it; each is recorded as an event with who asked, a failure
too; the node answers the daemons only and refuses a port that does not run the topology.

The worker is a real Python process whose threads are named as a worker's executor threads
(test_worker_introspection.py's target); ZooKeeper's part (the assignment, the supervisors'
registrations) is a stand-in. The whole path on a real cluster: test_cluster_workers.py.
"""

from __future__ import annotations

import threading
import time
import types
from typing import Any, cast

import pytest
from support import wait_until
from test_worker_introspection import needs_py_spy, start_target

from stormlet.cluster import introspection_service as service_module
from stormlet.cluster import rpc
from stormlet.cluster.introspection_service import (
    PROFILE,
    RESTART_ASKED,
    STACK_DUMP,
    IntrospectionService,
    ProfileJobs,
    WorkerSlot,
    locate,
)
from stormlet.cluster.log_files import (
    PROFILE as PROFILE_KIND,
)
from stormlet.cluster.log_files import (
    STACKS_KIND,
    identify,
    logs_dir,
    worker_file_name,
    worker_log_dir,
)
from stormlet.cluster.node_introspection import PROFILES_KEPT, NodeIntrospection, keep_profile
from stormlet.cluster.node_service import NodeService
from stormlet.cluster.security import DAEMON_USER, READ_USER, Security
from stormlet.cluster.zk_state import ClusterState, Executor, FoundTopology

TID = "wc-1764493200-a1b2c3"
BUSY_THREAD = '"wc-1:count:3-3"'   # the target's spinning thread
# count's task 3 and words's task 1 run on port 6700 (the target); count's task 4 on 6701,
# where nothing runs; a second node runs nothing at all.
ASSIGNMENT: dict[str, Any] = {"executors": [["count", [3], "s1", "127.0.0.1", 6700],
                            ["words", [1], "s1", "127.0.0.1", 6700],
                            ["count", [4], "s1", "127.0.0.1", 6701],
                            ["__acker", [2], "s2", "127.0.0.2", 6700]]}


@pytest.fixture
def security(tmp_path) -> Security:
    path = tmp_path / "cluster.secret"
    Security.generate(path)
    return Security.load(path)


class Cluster:
    """A node service with the introspection operations over a target process on port 6700,
    nimbus's service over it, and the events it records."""

    def __init__(self, tmp_path, security: Security):
        self.data = tmp_path / "node"
        self.log_dir = worker_log_dir(self.data, TID, 6700)
        self.log_dir.mkdir(parents=True)
        self.target = start_target(self.log_dir, "answer")
        self.restarts: list[tuple] = []
        workers = {6700: types.SimpleNamespace(topology_id=TID, process=self.target)}
        node_ops = NodeIntrospection(workers.get,
                                     lambda tid, port: worker_log_dir(self.data, tid, port),
                                     self._restart, "127.0.0.1")
        self.node = NodeService(logs_dir(self.data), "127.0.0.1", 0, "127.0.0.1", security)
        for name, operation in node_ops.operations().items():
            self.node.add_operation(name, operation)
        self.node.start()
        self.security = security
        self.events: list[tuple[str, str, str, dict]] = []
        # The two reads of ZooKeeper's state the service makes.
        state = cast(ClusterState, types.SimpleNamespace(
            supervisors=lambda: {"s1": {"host": "127.0.0.1", "service": self.node.address}},
            checked_assignment=lambda tid: ASSIGNMENT if tid == TID else None))
        self.service = IntrospectionService(lambda: state, self._find, security,
                                            lambda *args, **detail: self.events.append(
                                                (*args, detail)))

    def _find(self, name: str) -> FoundTopology:
        if name in ("wc", TID):
            return FoundTopology(TID, {"name": "wc"})
        raise rpc.RpcError(f"no topology named {name!r} is running")

    def _restart(self, topology_id: str, port: int, reason: str, timeout: float) -> dict:
        self.restarts.append((topology_id, port, reason))
        return {"topology_id": topology_id, "port": port, "pid": self.target.pid}

    def close(self) -> None:
        self.node.stop()
        self.target.kill()
        self.target.wait()


@pytest.fixture
def cluster(tmp_path, security):
    made = Cluster(tmp_path, security)
    try:
        yield made
    finally:
        made.close()


def test_the_stacks_of_a_worker_named_by_host_and_port_are_dumped_and_recorded(cluster):
    answer = cluster.service.stacks("wc", worker="127.0.0.1:6700", asked_by="alice@laptop")
    assert answer["pid"] == cluster.target.pid and answer["supervisor"] == "s1"
    assert BUSY_THREAD in answer["text"] and "spin_in_bolt" in answer["text"]
    assert "Written by the process itself on SIGUSR1" in answer["text"]
    [(tid, kind, text, detail)] = cluster.events
    assert (tid, kind) == (TID, STACK_DUMP)
    assert text == (f"stacks of worker 127.0.0.1:6700 (pid {cluster.target.pid}, 4 threads) "
                    f"dumped, asked by alice@laptop")
    assert detail["asked_by"] == "alice@laptop" and detail["port"] == 6700
    # The last dump stays among the worker's files, where the log reading path finds it.
    names = {f["name"]: f["kind"] for f in cluster.node.list_files(TID)}
    assert names[worker_file_name(TID, 6700, "stacks.txt")] == STACKS_KIND


def test_a_component_and_task_name_their_worker_and_a_port_not_running_it_is_refused(cluster):
    answer = cluster.service.stacks(TID, component="words", asked_by="bob")
    assert answer["port"] == 6700 and '"wc-1:words:1-1"' in answer["text"]
    # The assignment places count's task 4 on 6701, where no worker of it runs now.
    with pytest.raises(rpc.RpcError, match=f"127.0.0.1 \\(supervisor s1\\): no worker of {TID} "
                                           f"runs on port 6701 of 127.0.0.1 now"):
        cluster.service.stacks("wc", component="count", task=4, asked_by="bob")
    kind, text, detail = cluster.events[-1][1:]
    assert kind == STACK_DUMP and detail["ok"] is False
    assert text.startswith("stack dump of worker 127.0.0.1:6701 asked by bob failed: ")


def test_a_restart_is_asked_of_the_supervisor_with_the_reason_and_who_asked(cluster):
    answer = cluster.service.restart("wc", worker="s1:6700", reason="stuck\non a lock",
                                     asked_by="alice@laptop")
    assert answer == {"topology_id": TID, "supervisor": "s1", "host": "127.0.0.1",
                      "port": 6700, "pid": cluster.target.pid}
    assert cluster.restarts == [(TID, 6700, "stuck on a lock (asked by alice@laptop)")]
    [(_tid, kind, text, detail)] = cluster.events
    assert kind == RESTART_ASKED == "restart-asked"
    assert text == (f"worker 127.0.0.1:6700 (pid {cluster.target.pid}) restarted, asked by "
                    f"alice@laptop: stuck on a lock")
    assert detail["reason"] == "stuck on a lock"


@needs_py_spy
def test_a_profile_runs_on_its_own_thread_and_its_flame_graph_is_polled_for(cluster):
    started = cluster.service.profile("wc", 1, worker="127.0.0.1:6700", asked_by="alice")
    assert started["seconds"] == 1 and started["profile"].startswith("p-")
    # Answered at once: the profile is under way.
    assert cluster.service.profile_result(started["profile"])["state"] == "running"
    wait_until(lambda: cluster.service.profile_result(started["profile"])["state"] != "running",
               40, "the profile")
    done = cluster.service.profile_result(started["profile"])
    assert done["state"] == "done", done
    assert done["svg"].startswith(b"<?xml") and b"spin_in_bolt" in done["svg"]
    assert BUSY_THREAD.strip('"').encode() in done["svg"]
    assert "svg" not in cluster.service.profile_result(started["profile"], svg=False)
    # Kept among the worker's files: the log reading path lists and reads it.
    kept = [f for f in cluster.node.list_files(TID) if f["kind"] == PROFILE_KIND]
    assert [f["name"] for f in kept] == [done["file"]] and kept[0]["size"] == done["size"]
    read = cluster.node.read_file(done["file"])
    assert read["eof"] and read["data"] == done["svg"] and done["svg"].endswith(b"</svg>\n")
    [(_tid, kind, text, detail)] = cluster.events
    assert kind == PROFILE and text.startswith(
        f"worker 127.0.0.1:6700 (pid {cluster.target.pid}) profiled for 1 s, asked by alice: "
        f"flame graph {done['file']} (")
    assert detail["file"] == done["file"]


def test_a_profiles_bounds_are_checked_before_it_starts(cluster):
    with pytest.raises(rpc.RpcError, match="a profile lasts 1 to 300 whole seconds, not 0"):
        cluster.service.profile("wc", 0, worker="127.0.0.1:6700")
    with pytest.raises(rpc.RpcError, match="samples 1 to 1000 times a second"):
        cluster.service.profile("wc", 5, worker="127.0.0.1:6700", rate=0)
    with pytest.raises(rpc.RpcError, match="no profile 'p-nothing' here"):
        cluster.service.profile_result("p-nothing")
    assert cluster.events == []


def test_the_node_answers_the_daemons_only(cluster, security):
    with pytest.raises(rpc.RpcError, match="permission denied"):
        rpc.call(cluster.node.address, "worker_stacks", timeout=5,
                 credentials=security.rpc_client_keys(READ_USER), topology_id=TID, port=6700)
    answer = rpc.call(cluster.node.address, "worker_stacks", timeout=15,
                      credentials=security.rpc_client_keys(DAEMON_USER), topology_id=TID,
                      port=6700)
    assert BUSY_THREAD in answer["text"]


# ----- finding the worker


def executors() -> list[Executor]:
    return [Executor(*entry) for entry in ASSIGNMENT["executors"]]


def test_a_worker_is_found_by_host_and_port_supervisor_and_port_or_what_it_runs():
    assert locate(TID, executors(), worker="127.0.0.2:6700").supervisor == "s2"
    assert locate(TID, executors(), worker="s1:6701").port == 6701
    assert locate(TID, executors(), supervisor="s2", port=6700).host == "127.0.0.2"
    assert locate(TID, executors(), component="words").port == 6700
    assert locate(TID, executors(), component="count", task=4).port == 6701
    found = locate(TID, executors(), worker="127.0.0.1:6700")
    assert found.executors == (("count", (3,)), ("words", (1,)))


@pytest.mark.parametrize("choice, message", [
    ({}, f"name a worker of {TID} \\(HOST:PORT\\) or a component it runs; its workers: "
         f"127.0.0.1:6700 \\(s1\\), 127.0.0.1:6701 \\(s1\\), 127.0.0.2:6700 \\(s2\\)"),
    ({"worker": "127.0.0.1:6799"}, f"no worker of {TID} is 127.0.0.1:6799; its workers: "),
    ({"worker": "6700"}, "name a worker as HOST:PORT \\(or SUPERVISOR:PORT\\)"),
    ({"component": "count"}, f"count runs on 2 workers of {TID}: 127.0.0.1:6700 \\(tasks 3\\); "
                             f"127.0.0.1:6701 \\(tasks 4\\); name one by HOST:PORT, or a task"),
    ({"component": "nope"}, f"no worker of {TID} runs nope \\(its components: count, words\\)"),
    ({"supervisor": "s1"}, "name a worker by its supervisor and its port, both"),
])
def test_a_worker_named_wrongly_is_refused_saying_what_to_name(choice, message):
    with pytest.raises(rpc.RpcError, match=message):
        locate(TID, executors(), **choice)


# ----- profiles' bookkeeping


def slot(supervisor: str, port: int = 6700) -> WorkerSlot:
    return WorkerSlot(TID, supervisor, "h-" + supervisor, port, ())


def test_one_profile_at_a_time_on_a_node_and_a_failure_is_reported_to_its_poller():
    release, done = threading.Event(), []

    def take(job):
        release.wait(10)
        if job.slot.supervisor == "s2":
            raise rpc.RpcError("h-s2 (supervisor s2): py-spy failed")
        return {"pid": 1, "file": "f.svg", "size": 3, "svg": b"svg"}

    jobs = ProfileJobs(take, done.append)
    first = jobs.start(slot("s1"), 30, "alice", {})
    with pytest.raises(rpc.RpcError, match="h-s1 \\(supervisor s1\\) is profiling worker "
                                           "h-s1:6700 for 30 s \\(30 s left\\): one profile at "
                                           "a time on a node"):
        jobs.start(slot("s1", 6701), 5, "bob", {})
    second = jobs.start(slot("s2"), 5, "bob", {})
    release.set()
    wait_until(lambda: len(done) == 2, 10, "both profiles")
    assert jobs.result(first.id)["state"] == "done" and jobs.result(first.id)["svg"] == b"svg"
    failed = jobs.result(second.id)
    assert failed["state"] == "failed" and failed["error"] == "h-s2 (supervisor s2): py-spy failed"
    jobs.start(slot("s1", 6701), 5, "bob", {})   # the node is free again


def test_finished_profiles_are_forgotten_when_old_or_beyond_the_bytes_kept(monkeypatch):
    jobs = ProfileJobs(lambda job: {"svg": b"x" * 100}, lambda job: None)
    monkeypatch.setattr(service_module, "KEPT_BYTES", 250)
    ids = []
    for n in range(3):
        job = jobs.start(slot(f"s{n}"), 1, "alice", {})
        wait_until(lambda: job.finished is not None, 10, "the profile")
        ids.append(job.id)
    assert jobs.result(ids[2])["state"] == "done"   # each look tidies up first
    with pytest.raises(rpc.RpcError, match="no profile"):
        jobs.result(ids[0])   # the oldest, beyond 250 bytes
    assert jobs.result(ids[1])["state"] == "done"
    monkeypatch.setattr(service_module, "KEEP_SECS", 0.0)
    time.sleep(0.01)
    with pytest.raises(rpc.RpcError, match="no profile"):
        jobs.result(ids[2])


def test_a_worker_keeps_its_newest_profiles_only(tmp_path):
    for n in range(PROFILES_KEPT + 2):
        keep_profile(tmp_path, f"<svg>{n}</svg>".encode(), 1764493200 + n)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert len(kept) == PROFILES_KEPT and kept[0] == "profile-20251130T090002Z.svg"
    again = keep_profile(tmp_path, b"<svg/>", 1764493200 + PROFILES_KEPT + 1)   # same second
    assert again.name == f"profile-20251130T09000{PROFILES_KEPT + 1}Z-1.svg"
    described = identify(f"workers/{TID}/6700/{again.name}")
    assert described is not None and described.kind == PROFILE_KIND and described.port == 6700
    assert identify(f"workers/{TID}/6700/profile-.svg") is None
