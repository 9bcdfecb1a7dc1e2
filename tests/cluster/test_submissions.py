"""Submissions nimbus prepares in the background (``stormlet submit --no-wait``,
stormlet/cluster/submissions.py): their ``list`` and ``errors`` lines, their ZooKeeper record,
and the leader's ``Preparer`` against an in-memory cluster state (the real thing runs in
tests/cluster/test_cluster_submit_no_wait.py)."""

from __future__ import annotations

import threading
import time

import pytest
from support import wait_until

from stormlet.cli import cluster as cluster_cli
from stormlet.cluster import rpc
from stormlet.cluster.error_reports import SUBMIT_COMPONENT
from stormlet.cluster.submissions import (
    PREPARING,
    REFUSAL_KEEP_SECS,
    REFUSED,
    Preparer,
    Submission,
    accepted,
    error_rows,
    headline,
    list_row,
    redact_rows,
    refused,
)
from stormlet.redaction import REDACTED

NOW = 1_700_000_000.0
PIP_REFUSAL = ("the topology's Python dependencies could not be installed (on nimbus's node, to "
               "inspect it): pip could not install stormlet-nope==9.9; its last lines:\n"
               "Looking in links: /wheels\n"
               "ERROR: Could not find a version that satisfies the requirement "
               "stormlet-nope==9.9 (from versions: none)\n"
               "ERROR: No matching distribution found for stormlet-nope==9.9")


def submission(name: str = "three", conf: dict | None = None) -> Submission:
    return accepted(f"{name}-1700000000-abcdef", name, conf or {}, "0" * 64, NOW - 12)


# ----- what list and errors show


def test_a_submission_being_prepared_lists_as_preparing_with_its_seconds_and_pip_s_last_line():
    row = list_row(submission(), NOW, building="Processing ./wheels/stormlet_testdep-1.0.whl")
    assert row["status"] == PREPARING and row["uptime"] == 12.0
    header, line = cluster_cli.list_lines([row], NOW)
    assert line.split()[:7] == ["three", "preparing", "-", "-", "-", "0m12s", "0"]
    assert line.endswith("building its environment: Processing ./wheels/"
                         "stormlet_testdep-1.0.whl")
    # Inspecting (or waiting for another daemon's build): no pip line.
    assert cluster_cli.list_lines([list_row(submission(), NOW)], NOW)[1].endswith(" 0  -")


def test_a_refused_submission_lists_pip_s_reason_and_where_to_read_all_of_it():
    row = list_row(refused(submission(), PIP_REFUSAL, "10.0.0.1", 6627, NOW - 65), NOW)
    assert (row["status"], row["errors"], row["last_error"]) == (REFUSED, 1, NOW - 65)
    line = cluster_cli.list_lines([row], NOW)[1]
    assert line.split()[:7] == ["three", "refused", "-", "-", "-", "-", "1"]
    assert line.endswith("1m05s ago: ERROR: No matching distribution found for "
                         "stormlet-nope==9.9 (stormlet errors three)")


def test_a_refusal_shows_whole_in_errors_against_submit_and_the_nimbus_that_refused_it():
    rows = error_rows(refused(submission(), PIP_REFUSAL, "10.0.0.1", 6627, NOW))
    assert [(r["component"], r["host"], r["port"]) for r in rows] == \
        [(SUBMIT_COMPONENT, "10.0.0.1", 6627)]
    lines = cluster_cli.error_lines("three", rows, stack=False, secrets=True)
    assert lines[1].split()[2:5] == [SUBMIT_COMPONENT, "-1", "10.0.0.1:6627"]
    assert lines[1].endswith("pip could not install stormlet-nope==9.9; its last lines:")
    # pip's own lines follow, indented under it.
    assert lines[2:] == ["    Looking in links: /wheels",
                         "    ERROR: Could not find a version that satisfies the requirement "
                         "stormlet-nope==9.9 (from versions: none)",
                         "    ERROR: No matching distribution found for stormlet-nope==9.9"]
    assert error_rows(submission()) == []   # being prepared: nothing wrong yet


def test_an_inspection_s_refusal_is_its_own_line():
    why = "component 'report': no component 'nowhere' to subscribe to"
    assert headline(why) == why
    row = list_row(refused(submission(), why, "h", 1, NOW), NOW)
    assert cluster_cli.list_lines([row], NOW)[1].endswith(f"0m00s ago: {why} "
                                                          f"(stormlet errors three)")


def test_a_credential_a_refusal_quotes_is_redacted_unless_the_admin_asks():
    why = "could not reach redis://app:hunter2@cache:6379/0"
    row = list_row(refused(submission(), why, "h", 1, NOW), NOW)
    assert "hunter2" not in redact_rows([row])[0]["refusal"]
    assert "hunter2" not in cluster_cli.list_lines([row], NOW)[1]
    assert REDACTED in cluster_cli.list_lines([row], NOW)[1]
    assert "hunter2" in cluster_cli.list_lines([row], NOW, secrets=True)[1]


def test_submit_without_waiting_says_how_to_follow_it():
    lines = cluster_cli.no_wait_lines("three", "three-1-abc", declares_dependencies=True)
    assert lines[0] == ("submitted three (three-1-abc) without waiting: nimbus builds its "
                        "environment (or finds it built) and inspects it in the background")
    assert "`stormlet list`" in lines[1] and "`stormlet errors three`" in lines[1]


# ----- the record in ZooKeeper


def test_a_submission_node_round_trips_and_a_bad_one_is_skipped():
    done = refused(submission(conf={"topology.workers": 2}), "why", "h", 6627, NOW)
    assert Submission.of("/p", done.record()) == done
    for bad in ({**done.record(), "id": "../../etc"}, {**done.record(), "status": "running"},
                {"name": "x"}, {**done.record(), "conf": "x"}):
        assert Submission.of("/p", bad) is None


# ----- the leader's preparations, against an in-memory state


class State:
    """The part of ClusterState a Preparer uses."""

    def __init__(self):
        self.nodes: dict[str, Submission] = {}
        self.topologies: dict[str, dict] = {}

    def set_submission(self, s: Submission) -> None:
        self.nodes[s.id] = s

    def submission(self, tid: str) -> Submission | None:
        return self.nodes.get(tid)

    def submissions(self) -> dict[str, Submission]:
        return dict(self.nodes)

    def remove_submission(self, tid: str) -> None:
        self.nodes.pop(tid, None)

    def topology(self, tid: str) -> dict | None:
        return self.topologies.get(tid)


class Leader:
    """A Preparer whose inspection waits for ``release`` and then returns, or raises what
    ``failure`` holds; it records into ``state.topologies``."""

    def __init__(self):
        self.state = State()
        self.lock = threading.Lock()
        self.leads = threading.Event()
        self.leads.set()
        self.release = threading.Event()
        self.failure: Exception | None = None
        self.dropped: list[str] = []
        self.inspecting = threading.Event()
        self.preparer = Preparer(lambda: self.state, self.lock, self.leads, "10.0.0.1", 6627,
                                 inspect=self.inspect, record=self.record,
                                 code=lambda s: b"code", drop_code=self.dropped.append,
                                 building=lambda: [{"key": "k1", "last": "Collecting x"}])

    def inspect(self, code, conf, preparation):
        preparation.environment = "k1"
        self.inspecting.set()
        assert self.release.wait(10)
        if self.failure is not None:
            raise self.failure
        return {"components": {}}

    def record(self, name, tid, code, conf, summary):
        assert self.lock.locked()
        self.state.topologies[tid] = {"name": name}

    def accept(self, s: Submission) -> None:
        with self.lock:
            self.preparer.accept(s)

    def settled(self, tid: str) -> bool:
        node = self.state.submission(tid)
        return (node is None or node.status == REFUSED) and \
            self.preparer.progress(tid) is None and tid not in self.preparer._preparing


@pytest.fixture
def leader():
    leader = Leader()
    yield leader
    leader.release.set()


def test_a_prepared_submission_is_recorded_and_its_node_removed(leader):
    s = submission()
    leader.accept(s)
    assert leader.inspecting.wait(10)
    assert leader.state.submission(s.id).status == PREPARING
    assert leader.preparer.progress(s.id) == "Collecting x"   # its build's last pip line
    leader.release.set()
    wait_until(lambda: leader.settled(s.id), 10, "the preparation to end")
    assert s.id in leader.state.topologies and leader.state.submission(s.id) is None


def test_a_failed_preparation_is_refused_with_its_message_and_its_code_dropped(leader):
    s = submission()
    leader.failure = rpc.RpcError(PIP_REFUSAL)
    leader.release.set()
    leader.accept(s)
    wait_until(lambda: leader.settled(s.id), 10, "the preparation to end")
    node = leader.state.submission(s.id)
    assert (node.status, node.refusal, node.host, node.port) == \
        (REFUSED, PIP_REFUSAL, "10.0.0.1", 6627)
    assert leader.dropped == [s.id] and leader.state.topologies == {}


@pytest.mark.parametrize("meanwhile", ["killed", "lost the lead"])
def test_a_preparation_killed_or_no_longer_led_is_dropped_unrecorded(leader, meanwhile):
    s = submission()
    leader.accept(s)
    assert leader.inspecting.wait(10)
    if meanwhile == "killed":
        leader.state.remove_submission(s.id)
    else:
        leader.leads.clear()
    leader.release.set()
    wait_until(lambda: s.id not in leader.preparer._preparing, 10, "the preparation to end")
    assert leader.state.topologies == {}
    if meanwhile == "lost the lead":   # left for the new leader to prepare
        assert leader.state.submission(s.id).status == PREPARING


def test_a_new_leader_prepares_what_nobody_prepares_and_forgets_old_refusals(leader):
    taken_over = submission("orphan")
    recorded = submission("recorded")
    old = refused(submission("old"), "why", "h", 1, time.time() - REFUSAL_KEEP_SECS - 1)
    recent = refused(submission("recent"), "why", "h", 1, time.time() - 60)
    for s in (taken_over, recorded, old, recent):
        leader.state.set_submission(s)
    leader.state.topologies[recorded.id] = {"name": "recorded"}   # its node was left behind
    with leader.lock:
        leader.preparer.tend(dict(leader.state.topologies))
    assert set(leader.state.nodes) == {taken_over.id, recent.id}
    assert leader.inspecting.wait(10)   # taken_over's preparation started
    with leader.lock:
        leader.preparer.tend(dict(leader.state.topologies))   # not started twice
    assert list(leader.preparer._preparing) == [taken_over.id]
    leader.release.set()
    wait_until(lambda: leader.settled(taken_over.id), 10, "the preparation to end")
    assert taken_over.id in leader.state.topologies
