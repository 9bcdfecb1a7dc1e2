"""What a supervisor records in its topologies' event histories (cluster/events.py) when a worker
ends, without a cluster: a worker killed by a signal, and each reason the supervisor itself stops
one (no heartbeat, over its memory limit, moved off its slot, its slot fenced by a new tenure,
its topology killed), each with the worker's name and the way it ended. The workers are real
processes; the recorder is a stand-in that keeps what it is given."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import types

import pytest
from kazoo.protocol.states import KazooState

from stormlet.cluster import events
from stormlet.cluster.supervisor import Supervisor, WorkerProcess

TID = "t-1700000000-abcdef"


class Kept:
    """Stands in for the supervisor's EventRecorder."""

    def __init__(self):
        self.events: list[tuple[str, str, str, dict]] = []

    def record(self, topology_id, kind, text, **detail):
        self.events.append((topology_id, kind, text, detail))
        return len(self.events)


class NoRecords:
    """A ZooKeeper state with no topology records (a worker being restarted finds none, and
    starts nothing)."""

    def topology(self, _tid):
        return None


def sleeper(mb: int = 0) -> subprocess.Popen:
    """A process standing in for a worker; holding ``mb`` MB in RAM."""
    code = (f"import sys, time; held = b'x' * ({mb} * 1024 * 1024); print('up', flush=True); "
            f"time.sleep(120)")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "up"
    return process


@pytest.fixture
def sup(tmp_path):
    supervisor = Supervisor("127.0.0.1:1", [6700, 6701], data_dir=tmp_path / "supervisor",
                            supervisor_id="s1", pin_workers=False)
    supervisor.client = types.SimpleNamespace(state=KazooState.CONNECTED)
    supervisor.state = NoRecords()
    supervisor._events = Kept()
    yield supervisor
    for worker in supervisor.workers.values():
        worker.process.kill()
        worker.process.wait()


def assignment(port: int, tenure: int) -> dict:
    return {"executors": [["spout", [1], "s1", "127.0.0.1", port]], "version": tenure,
            "tenures": {f"s1:{port}": tenure}}


def run(sup, tmp_path, port: int = 6700, tenure: int = 1, mb: int = 0) -> WorkerProcess:
    worker = WorkerProcess(TID, tenure, sleeper(mb), tmp_path / f"{port}.json")
    sup.workers[port] = worker
    return worker


def only(sup) -> tuple[str, str, dict]:
    [(tid, kind, text, detail)] = sup._events.events
    assert tid == TID
    return kind, text, detail


def test_a_worker_killed_by_a_signal_is_recorded_with_the_signal(sup, tmp_path):
    sup._assignments = {TID: assignment(6700, 1)}
    worker = run(sup, tmp_path)
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait()
    sup._sync()
    kind, text, detail = only(sup)
    assert kind == events.WORKER_EXITED
    assert text.startswith("worker 127.0.0.1:6700 was killed by signal 9 (SIGKILL) after ")
    assert text.endswith("; restarting at once")
    assert detail["exit_code"] == -9 and detail["port"] == 6700 and detail["supervisor"] == "s1"
    assert detail["pid"] == worker.process.pid


def test_a_worker_that_exits_young_is_restarted_later_and_says_so(sup, tmp_path):
    sup._assignments = {TID: assignment(6700, 1)}
    worker = run(sup, tmp_path)
    worker.process.send_signal(signal.SIGTERM)
    worker.process.wait()
    sup._sync()
    kind, text, _detail = only(sup)
    assert kind == events.WORKER_EXITED
    assert "was killed by signal 15 (SIGTERM)" in text and text.endswith("; restarting in 2 s")


@pytest.mark.parametrize("assigned, cause, reason", [
    ({}, events.UNASSIGNED, "its topology is no longer assigned (killed)"),
    ({TID: assignment(6701, 1)}, events.MOVED,
     "the topology's new assignment moved it off this slot"),
    ({TID: assignment(6700, 2)}, events.FENCED, "its slot left the assignment and was given again"),
])
def test_a_worker_stopped_for_a_new_assignment_says_why(sup, tmp_path, assigned, cause, reason):
    sup._assignments = assigned
    sup.not_before = {6700: time.monotonic() + 60, 6701: time.monotonic() + 60}   # no start
    run(sup, tmp_path)
    sup._sync()
    kind, text, detail = only(sup)
    assert kind == events.WORKER_STOPPED and detail["cause"] == cause
    assert text.startswith(f"worker 127.0.0.1:6700 stopped by its supervisor: {reason}")
    assert text.endswith("(was killed by signal 15 (SIGTERM))")


def test_a_worker_without_a_heartbeat_is_stopped_and_that_is_recorded(sup, tmp_path):
    sup._assignments = {TID: assignment(6700, 1)}
    worker = run(sup, tmp_path)
    worker.started -= sup.worker_start_timeout + 1   # never wrote a heartbeat
    sup._sync()
    kind, text, detail = only(sup)
    assert kind == events.WORKER_STOPPED and detail["cause"] == events.HEARTBEAT
    assert "no heartbeat for 30 s" in text and "(was killed by signal 9 (SIGKILL))" in text


def test_a_worker_over_its_memory_limit_is_stopped_and_that_is_recorded(sup, tmp_path):
    worker = run(sup, tmp_path, mb=150)
    worker.memory_limit_mb = 100
    sup._check_memory(6700, worker)
    kind, text, detail = only(sup)
    assert kind == events.WORKER_STOPPED and detail["cause"] == events.MEMORY
    assert "over its memory limit of 100 MB (topology.worker.max.heap.size.mb)" in text
    assert text.endswith("restarting it in 2 s (was killed by signal 9 (SIGKILL))")


def test_exit_texts_name_the_code_or_the_signal():
    assert events.exit_text(0) == "exited with code 0"
    assert events.exit_text(3) == "exited with code 3"
    assert events.exit_text(-11) == "was killed by signal 11 (SIGSEGV)"
    assert events.exit_text(-200) == "was killed by signal 200 (an unknown signal)"
    assert events.exit_text(None) == "is still running"
