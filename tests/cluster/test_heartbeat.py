"""The worker's heartbeat file (cluster/heartbeat.py): written as JSON with the keys it always
had, read back as a ``Heartbeat`` whose damaged or missing fields read as empty."""

from __future__ import annotations

import json

from stormlet.cluster.heartbeat import Heartbeat, read_heartbeat, write_heartbeat


def test_a_beat_reads_back_as_written_and_its_json_keeps_its_keys(tmp_path):
    path = tmp_path / "6700.json"
    errors = [{"component": "bolt", "task": 3, "time": 1.0, "error": "x", "detail": ""}]
    write_heartbeat(path, topology_id="wc-1", port=6700, started=5.0,
                    metrics={"bolt": {"errors": 1}}, errors=errors, tasks=[3, 4])
    assert set(json.loads(path.read_text())) == {"time", "pid", "started", "topology_id", "port",
                                                 "tasks", "metrics", "errors"}
    beat = read_heartbeat(path)
    assert isinstance(beat, Heartbeat)
    assert (beat.topology_id, beat.port, beat.started, beat.stopping) == ("wc-1", 6700, 5.0, None)
    assert beat.metrics == {"bolt": {"errors": 1}} and beat.errors == errors
    assert beat.tasks == [3, 4]
    assert isinstance(beat.pid, int) and isinstance(beat.time, float)

    write_heartbeat(path, topology_id="wc-1", port=6700, started=5.0, metrics={}, errors=[],
                    stopping="executor died")
    assert json.loads(path.read_text())["stopping"] == "executor died"
    assert read_heartbeat(path).stopping == "executor died"


def test_no_beat_or_a_damaged_one_reads_as_none_or_as_empty_fields(tmp_path):
    path = tmp_path / "6700.json"
    assert read_heartbeat(path) is None                     # no file
    for text in ("{not json", "[1, 2]", "{}"):
        path.write_text(text)
        assert read_heartbeat(path) is None, text
    path.write_text(json.dumps({"time": "soon", "pid": True, "metrics": [1], "errors": "boom",
                                "stopping": 7}))
    assert read_heartbeat(path) == Heartbeat(time=None, pid=None, started=None, topology_id=None,
                                             port=None, metrics={}, tasks=[], errors=[],
                                             stopping=None)
