"""Event histories without a cluster: local mode's (LocalCluster, in memory, in the shape nimbus
answers), the REST API's /topology/<id>/events over it (redacted unless the request holds the
UI's token), and the lines `stormlet events` prints."""

from __future__ import annotations

import json

import pytest
from ui_support import STEADY, get, post, request, topology, ui_cluster, wait_until

from stormlet import LocalCluster
from stormlet.cli.events import event_lines, heading, last_seq
from stormlet.cluster import events
from stormlet.cluster.events import MemoryEvents
from stormlet.local import UnknownTopologyError
from stormlet.ui.access import UiAccess

TOKEN = "0123456789abcdef" * 4


def kinds(history: dict) -> list[str]:
    return [e["kind"] for e in history["events"]]


def test_local_mode_keeps_each_topology_s_events_in_order_and_after_its_kill():
    with LocalCluster() as cluster:
        cluster.submit("steady", STEADY, topology())
        cluster.deactivate("steady")
        cluster.activate("steady")
        history = cluster.events("steady")
        assert kinds(history) == ["submitted", "deactivated", "activated"]
        assert (history["name"], history["status"], history["removed"]) == (
            "steady", "active", None)
        first = history["events"][0]
        assert set(first) == set(events.Event._fields)
        assert first["writer"].startswith("local:") and first["text"].startswith("submitted")
        seqs = [e["seq"] for e in history["events"]]
        assert seqs == sorted(seqs)

        tid = history["id"]
        cluster.kill("steady", wait_secs=0)
        killed = cluster.events("steady")
        assert kinds(killed) == ["submitted", "deactivated", "activated", "killed", "removed"]
        assert killed["status"] == "removed" and killed["removed"] is not None
        assert cluster.events(tid)["id"] == tid
        assert kinds(cluster.events("steady", since=seqs[-1], kind="removed")) == ["removed"]
        assert kinds(cluster.events("steady", limit=2)) == ["killed", "removed"]

        # Submitted again under its name: the running one's history is read first.
        cluster.submit("steady", STEADY, topology())
        again = cluster.events("steady")
        assert again["id"] != tid and kinds(again) == ["submitted"]
        with pytest.raises(UnknownTopologyError, match="no topology named 'nope'"):
            cluster.events("nope")
        with pytest.raises(ValueError, match="limit must be"):
            cluster.events("steady", limit=0)


def test_local_histories_are_bounded_and_few_killed_ones_are_kept():
    memory = MemoryEvents("local:h", kept=2)
    memory.open("t-1", "t", {"topology.events.max": 3})
    for i in range(10):
        memory.record("t-1", "activated", f"a{i}")
    assert [e["text"] for e in memory.history("t")["events"]] == ["a7", "a8", "a9"]
    for i in range(2, 6):
        memory.open(f"t-{i}", f"t{i}", {})
        memory.removed(f"t-{i}", "removed")
    memory.removed("t-1", "removed")
    with pytest.raises(events.NoHistory):
        memory.history("t2")
    assert memory.history("t5")["status"] == "removed"
    assert memory.record("nope", "activated", "x") is None   # no history: dropped


def test_the_rest_api_serves_a_topology_s_events_and_its_actions_appear():
    with ui_cluster("steady") as (_cluster, server):
        post(server, "/api/v1/topology/steady/deactivate")
        post(server, "/api/v1/topology/steady/activate")
        body = get(server, "/api/v1/topology/steady/events")
        assert (body["topologyName"], body["status"]) == ("steady", "active")
        assert kinds(body) == ["submitted", "deactivated", "activated"]
        newest = body["events"][-1]["seq"]
        assert get(server, f"/api/v1/topology/steady/events?since={newest}")["events"] == []
        assert kinds(get(server, "/api/v1/topology/steady/events?kind=deactivated&limit=1")) == [
            "deactivated"]
        by_id = get(server, f"/api/v1/topology/{body['topologyId']}/events")
        assert kinds(by_id) == kinds(body)
        for query in ("limit=0", "limit=x", "since=-1", "kind=Not%20a%20kind"):
            status, reply = request(server, f"/api/v1/topology/steady/events?{query}")
            assert status == 400, (query, reply)
        status, reply = request(server, "/api/v1/topology/nope/events")
        assert status == 404 and "nope" in reply["error"]

        # Killed from the UI: its history stays readable.
        post(server, "/api/v1/topology/steady/kill/0")
        wait_until(lambda: "removed" in kinds(get(server, "/api/v1/topology/steady/events")),
                   10, "the kill to be done")
        after = get(server, "/api/v1/topology/steady/events")
        assert kinds(after)[-2:] == ["killed", "removed"] and after["status"] == "removed"


@pytest.mark.parametrize("token, shown", [(None, False), (TOKEN, True)])
def test_event_credentials_are_shown_only_with_the_ui_s_token(token, shown):
    with ui_cluster("finite", access=UiAccess.for_host("127.0.0.1", token=TOKEN)) as (
            cluster, server):
        tid = cluster.events("finite")["id"]
        cluster._events.record(tid, "worker-exited", "exited: redis://app:hunter2@cache/0",
                               password="hunter2")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        status, body = request(server, "/api/v1/topology/finite/events", headers=headers)
        assert status == 200
        assert ("hunter2" in json.dumps(body)) is shown
        if not shown:
            assert body["events"][-1]["detail"] == {"password": "<redacted>"}


def test_the_cli_prints_one_line_an_event_redacted_without_the_secret():
    rows = [{"seq": 1, "time": 1_700_000_000.0, "kind": "submitted", "text": "submitted wc",
             "writer": "nimbus:n1", "detail": {}},
            {"seq": 4, "time": 1_700_000_060.0, "kind": "worker-exited",
             "text": "worker 10.0.0.5:6700 was killed by signal 9 (SIGKILL); its last error: "
                     "password=hunter2", "writer": "supervisor:s1@10.0.0.5", "detail": {}}]
    lines = event_lines(rows, secrets=False)
    assert lines[0].split() == ["time", "kind", "writer", "event"]
    assert "worker-exited" in lines[2] and "supervisor:s1@10.0.0.5" in lines[2]
    assert "hunter2" not in lines[2] and "password=<redacted>" in lines[2]
    assert "hunter2" in event_lines(rows, secrets=True)[2]
    assert event_lines([], secrets=False) == ["no events recorded"]
    assert event_lines([], secrets=False, header=False) == []
    assert last_seq(rows, None) == 4 and last_seq([], 7) == 7
    assert heading({"id": "wc-1", "name": "wc", "status": "active"}) == (
        "events of wc (wc-1), active:")
    assert heading({"id": "wc-1", "name": "wc", "status": "removed", "removed": None}) == (
        "events of wc (wc-1), removed:")
