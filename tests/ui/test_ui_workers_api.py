"""The UI's worker introspection endpoints (ui/workers_api.py) over a stand-in for a cluster's
nimbus: a stack dump, a profile started then polled and its flame graph sent as an attachment,
a restart with its reason; the token for each (the reads of a profile too); a bad length is the
request's fault; and a local topology's answer that these are for a cluster."""

from __future__ import annotations

import pytest
from ui_support import request, ui_cluster

from stormlet.ui.access import UiAccess
from stormlet.ui.app import create_app
from stormlet.ui.source import ActionRefused

TOKEN = "0123456789abcdef" * 4
TID = "wc-1764493200-a1b2c3"
ACTION = {"X-Requested-By": "stormlet-ui", "Content-Type": "application/json"}
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
SVG = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"></svg>'


class Nimbus:
    """What ClusterSource would get from nimbus, and what it was asked."""

    mode = "cluster"

    def __init__(self):
        self.asked: list[tuple] = []
        self.profile_done = False

    def _place(self, worker: str) -> dict:
        host, port = worker.rsplit(":", 1)
        if port != "6700":
            raise ActionRefused(f"no worker of {TID} is {worker}")
        return {"topology_id": TID, "supervisor": "s1", "host": host, "port": int(port)}

    def worker_stacks(self, key, worker, asked_by):
        self.asked.append(("stacks", key, worker, asked_by))
        return {**self._place(worker), "pid": 42, "text": 'Thread 7: "wc:split:3-3"\n'}

    def worker_profile(self, key, worker, seconds, idle, asked_by):
        self.asked.append(("profile", key, worker, seconds, idle, asked_by))
        return {**self._place(worker), "profile": "p-1", "seconds": seconds}

    def profile_result(self, profile, svg):
        if profile != "p-1":
            raise ActionRefused(f"no profile {profile!r} here")
        state = {**self._place("10.0.0.5:6700"), "profile": profile, "seconds": 2,
                 "elapsed": 1.5, "state": "done" if self.profile_done else "running"}
        if self.profile_done:
            state.update(pid=42, size=len(SVG),
                         file=f"workers/{TID}/6700/profile-20261130T100000Z.svg")
            if svg:
                state["svg"] = SVG
        return state

    def worker_restart(self, key, worker, reason, asked_by):
        self.asked.append(("restart", key, worker, reason, asked_by))
        return {**self._place(worker), "pid": 42}


@pytest.fixture
def nimbus() -> Nimbus:
    return Nimbus()


@pytest.fixture
def client(nimbus):
    app = create_app(nimbus, UiAccess(token=TOKEN))
    return app.test_client()


def test_a_stack_dump_needs_the_token_and_says_who_asked(client, nimbus):
    path = "/api/v1/topology/wc/worker/10.0.0.5:6700/stacks"
    assert client.post(path, headers=ACTION, json={}).status_code == 401
    answer = client.post(path, headers={**ACTION, **ADMIN}, json={})
    assert answer.status_code == 200
    assert answer.json == {"topologyId": TID, "supervisor": "s1", "host": "10.0.0.5",
                           "port": 6700, "pid": 42, "stacks": 'Thread 7: "wc:split:3-3"\n'}
    assert nimbus.asked == [("stacks", "wc", "10.0.0.5:6700", "the UI, from 127.0.0.1")]
    # A worker nimbus does not know: its refusal, as the action's.
    refused = client.post("/api/v1/topology/wc/worker/10.0.0.5:1/stacks",
                          headers={**ACTION, **ADMIN}, json={})
    assert refused.status_code == 409 and "no worker of" in refused.json["error"]


def test_a_profile_is_started_polled_and_its_flame_graph_downloaded(client, nimbus):
    base = "/api/v1/topology/wc/worker/10.0.0.5:6700/profile"
    bad = client.post(base, headers={**ACTION, **ADMIN}, json={"seconds": 0})
    assert bad.status_code == 400 and "1 to 300 whole seconds" in bad.json["error"]
    started = client.post(base, headers={**ACTION, **ADMIN}, json={"seconds": 2, "idle": True})
    assert started.status_code == 200 and started.json["profile"] == "p-1"
    assert nimbus.asked == [("profile", "wc", "10.0.0.5:6700", 2, True,
                             "the UI, from 127.0.0.1")]

    state = "/api/v1/topology/wc/profile/p-1"
    assert client.get(state).status_code == 401   # an action's result: the token's too
    assert client.get(state, headers=ADMIN).json["state"] == "running"
    nimbus.profile_done = True
    done = client.get(state, headers=ADMIN).json
    assert done["state"] == "done" and done["svg"] == f"{state}/svg" and done["pid"] == 42
    assert client.get(done["svg"]).status_code == 401
    svg = client.get(done["svg"], headers=ADMIN)
    assert svg.status_code == 200 and svg.data == SVG and svg.mimetype == "image/svg+xml"
    # Downloaded, never shown with the UI's origin (its script would run there).
    assert svg.headers["Content-Disposition"] == (
        f'attachment; filename="{TID}-10.0.0.5-6700-profile-20261130T100000Z.svg"')
    # Only under its own topology.
    assert client.get("/api/v1/topology/other/profile/p-1", headers=ADMIN).status_code == 404


def test_a_restart_carries_its_reason(client, nimbus):
    answer = client.post("/api/v1/topology/wc/worker/10.0.0.5:6700/restart",
                         headers={**ACTION, **ADMIN}, json={"reason": "stuck"})
    assert answer.status_code == 200 and answer.json["pid"] == 42
    assert nimbus.asked == [("restart", "wc", "10.0.0.5:6700", "stuck", "the UI, from 127.0.0.1")]
    bad = client.post("/api/v1/topology/wc/worker/10.0.0.5:6700/restart",
                      headers={**ACTION, **ADMIN}, json={"reason": 3})
    assert bad.status_code == 400


def test_a_local_topology_says_these_are_for_a_cluster():
    with ui_cluster("steady") as (_cluster, server):
        for action, body in (("stacks", {}), ("profile", {"seconds": 2}),
                             ("restart", {"reason": "x"})):
            status, answer = request(server, f"/api/v1/topology/steady/worker/local:0/{action}",
                                     "POST", body)
            assert status == 409, answer
            assert answer["error"].startswith("worker stacks, profiles and restarts are for a "
                                              "cluster's workers: a local topology runs in this "
                                              "process (pid ")
