"""Errors on their way from workers to `stormlet errors`, without a cluster: what a supervisor
keeps and reports (including a dead worker's last errors), how big the report may get, and how
nimbus reads one topology's errors back."""

from __future__ import annotations

import json
import types

from kazoo.protocol.states import KazooState

from stormlet.cluster.error_reports import (
    PER_WORKER,
    REPORT_TEXT,
    cap_report,
    report_errors,
    topology_error_summary,
    topology_errors,
)
from stormlet.cluster.supervisor import Supervisor, WorkerProcess


def error(t: float, text: str = "execute raised: ValueError: x", component: str = "bolt",
          task: int = 3, detail: str = "Traceback ...") -> dict:
    return {"component": component, "task": task, "time": t, "error": text, "detail": detail}


def test_a_worker_s_newest_errors_are_kept_shortened_and_malformed_ones_skipped():
    beat = [error(float(t)) for t in range(30)]
    beat[5] = {"component": "bolt", "task": "three", "time": 5.0, "error": "x"}
    beat.append("garbage")
    beat.append(error(99.0, text="y" * 5000, detail="frame\n" * 1000))
    kept = report_errors(beat)
    assert len(kept) == PER_WORKER
    assert [e["time"] for e in kept] == [21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 99.0]
    assert len(kept[-1]["error"]) == REPORT_TEXT and kept[-1]["error"].endswith("...")
    assert kept[-1]["detail"].startswith("...") and kept[-1]["detail"].endswith("frame\n")
    assert report_errors({"not": "a list"}) == [] and report_errors(None) == []


def test_a_report_keeps_the_newest_errors_that_fit_its_size_limit():
    a = {"errors": [error(float(t), text="a" * 200) for t in range(0, 40, 2)]}
    b = {"errors": [error(float(t), text="b" * 200) for t in range(1, 40, 2)]}
    one = len(json.dumps(a["errors"][-1])) + 2
    cap_report([a, b], limit=one * 7)
    times = sorted(e["time"] for e in a["errors"] + b["errors"])
    assert times == [33.0, 34.0, 35.0, 36.0, 37.0, 38.0, 39.0]


def report(host: str, **groups: dict) -> dict:
    return {"time": 1.0, "host": host, **groups}


def test_nimbus_reads_one_topology_s_errors_newest_first_with_host_and_port():
    reports = {
        "s1": report("10.0.0.1", workers={
            "6700": {"topology_id": "t-1", "errors": [error(10.0), error(30.0, task=4)],
                     "metrics": {"bolt": {"errors": 5000}, "spout": {"errors": 0}}},
            "6701": {"topology_id": "other-2", "errors": [error(40.0)],
                     "metrics": {"bolt": {"errors": 7}}}},
            exited={"6702": {"topology_id": "t-1", "exit": "1",
                             "errors": [error(20.0, text="executor died: SystemExit: bye")],
                             "metrics": {"bolt": {"errors": 1}}}}),
        "s2": report("10.0.0.2", workers={
            "6700": {"topology_id": "t-1", "errors": [error(25.0, component="spout"), "junk"],
                     "metrics": "junk"}}),
        "s3": "not a report",
        "s4": report("10.0.0.4", workers=["not", "a", "dict"]),
    }
    found = topology_errors(reports, "t-1", limit=10)
    assert [(e["time"], e["component"], e["task"], e["host"], e["port"]) for e in found] == [
        (30.0, "bolt", 4, "10.0.0.1", 6700), (25.0, "spout", 3, "10.0.0.2", 6700),
        (20.0, "bolt", 3, "10.0.0.1", 6702), (10.0, "bolt", 3, "10.0.0.1", 6700)]
    assert [e["time"] for e in topology_errors(reports, "t-1", limit=2)] == [30.0, 25.0]
    assert topology_error_summary(reports, "t-1") == {"errors": 5001, "last_error": 30.0}
    assert topology_error_summary(reports, "nope") == {"errors": 0, "last_error": None}


class Recorder:
    def __init__(self):
        self.reports = {}

    def set_heartbeat(self, supervisor_id, value):
        self.reports[supervisor_id] = json.loads(json.dumps(value))


def test_a_supervisor_keeps_the_last_errors_of_a_worker_that_exited(tmp_path):
    supervisor = Supervisor("127.0.0.1:1", [6700], data_dir=tmp_path, supervisor_id="s1")
    supervisor.client = types.SimpleNamespace(state=KazooState.CONNECTED)
    supervisor.state = Recorder()
    beat_file = tmp_path / "6700.json"
    died = error(50.0, text="executor t:bolt:3-3 died: SystemExit: bye")
    beat_file.write_text(json.dumps({"time": 51.0, "pid": 4242, "errors": [error(40.0), died],
                                     "metrics": {"bolt": {"errors": 12}}}))
    worker = WorkerProcess("t-1", [], types.SimpleNamespace(pid=4242), beat_file)

    words = supervisor._keep_last_words(6700, worker, 1)
    assert words == "; its last error: bolt task 3: executor t:bolt:3-3 died: SystemExit: bye"
    beat_file.unlink()   # what the next worker's start does
    supervisor._report()
    reported = supervisor.state.reports["s1"]
    assert reported["host"] == "127.0.0.1" and reported["workers"] == {}
    assert [e["error"] for e in topology_errors({"s1": reported}, "t-1", 10)] == [
        died["error"], "execute raised: ValueError: x"]
    assert topology_error_summary({"s1": reported}, "t-1")["errors"] == 12

    # A worker that knew why it stopped (an executor died) said so in its last heartbeat.
    beat_file.write_text(json.dumps({"time": 52.0, "errors": [error(40.0)],
                                     "stopping": "component bolt task 3: executor died: X"}))
    assert supervisor._keep_last_words(6700, worker, 1) == (
        "; it said: component bolt task 3: executor died: X")

    # Forgotten once the topology is gone from this node.
    supervisor._assignments = {}
    supervisor._remove_unused_code()
    assert supervisor.exited == {}
