"""The REST API's worker introspection (api.py's table lists them): one worker of a topology
looked into or restarted, through nimbus (cluster/introspection_service.py), on a cluster only.

    POST /api/v1/topology/<id>/worker/<host:port>/stacks     every thread's stack now
    POST /api/v1/topology/<id>/worker/<host:port>/profile    body {"seconds": n, "idle": bool}:
                                                             starts a CPU profile (with idle,
                                                             waiting threads' samples too),
                                                             answers its id at once
    GET  /api/v1/topology/<id>/profile/<profile>             its state: running, done, failed
    GET  /api/v1/topology/<id>/profile/<profile>/svg         its flame graph, once done
    POST /api/v1/topology/<id>/worker/<host:port>/restart    body {"reason": text}

The POSTs are actions (the access token with security on, and the action header: api.py);
the two GETs read what an action made, so they need the token as well (``access.may_act``).
Nimbus records each in the topology's events as asked by "the UI, from <the browser's
address>".

The flame graph is py-spy's SVG, which holds the script that makes it interactive: it is sent
as an attachment, so that a browser sent to its address downloads it rather than run that
script with the UI's origin; a page shows it in an ``<img>``, where no script runs.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from ..cluster.worker_introspection import IntrospectionError, check_profile_seconds
from .access import may_act
from .source import UiSource, UnknownTopology


def add_worker_routes(api: Blueprint, source: UiSource, bad_request: type[Exception]) -> None:
    """Add the routes to ``api`` (api.py's blueprint, whose error handlers and action header
    check they share); ``bad_request``: its exception for a 400."""

    @api.post("/topology/<key>/worker/<worker>/stacks")
    def worker_stacks(key: str, worker: str) -> Response:
        answer = source.worker_stacks(key, worker, _asked_by())
        return jsonify(**_place(answer), pid=answer.get("pid"), stacks=answer["text"])

    @api.post("/topology/<key>/worker/<worker>/profile")
    def worker_profile(key: str, worker: str) -> Response:
        body = _body(bad_request)
        try:
            seconds = check_profile_seconds(body.get("seconds"))
        except IntrospectionError as exc:
            raise bad_request(str(exc)) from None
        idle = body.get("idle", False)
        if not isinstance(idle, bool):
            raise bad_request(f"idle must be true or false, not {idle!r}")
        answer = source.worker_profile(key, worker, seconds, idle, _asked_by())
        return jsonify(**_place(answer), profile=answer["profile"], seconds=answer["seconds"])

    @api.get("/topology/<key>/profile/<profile>")
    def profile_state(key: str, profile: str) -> Response | tuple[Response, int]:
        if not may_act():
            return _needs_token()
        state = _profile(source, key, profile, svg=False)
        shown = {**_place(state), "profile": state["profile"], "state": state["state"],
                 "seconds": state["seconds"], "elapsed": state["elapsed"],
                 "pid": state.get("pid"), "file": state.get("file"), "size": state.get("size"),
                 "error": state.get("error")}
        if state["state"] == "done":
            shown["svg"] = f"{request.path}/svg"
        return jsonify(shown)

    @api.get("/topology/<key>/profile/<profile>/svg")
    def profile_svg(key: str, profile: str) -> Response | tuple[Response, int]:
        if not may_act():
            return _needs_token()
        state = _profile(source, key, profile, svg=True)
        if state["state"] != "done":
            raise bad_request(f"profile {profile} is {state['state']}: it has no flame graph"
                              + (f" ({state['error']})" if state.get("error") else ""))
        if state.get("svg") is None:
            raise bad_request(f"the flame graph ({state.get('size')} bytes) is too large to "
                              f"send; it is {state.get('file')} on {state.get('host')}")
        name = (f"{state['topology_id']}-{state['host']}-{state['port']}-"
                f"{str(state.get('file') or 'profile.svg').rsplit('/', 1)[-1]}")
        return Response(state["svg"], mimetype="image/svg+xml",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    @api.post("/topology/<key>/worker/<worker>/restart")
    def worker_restart(key: str, worker: str) -> Response:
        reason = _body(bad_request).get("reason")
        if reason is not None and not isinstance(reason, str):
            raise bad_request(f"reason must be text, not {reason!r}")
        answer = source.worker_restart(key, worker, reason or None, _asked_by())
        return jsonify(**_place(answer), pid=answer.get("pid"), status="success")


def _profile(source: UiSource, key: str, profile: str, svg: bool) -> dict[str, Any]:
    """The state of ``profile``, which must be one of topology ``key``'s (its id or name)."""
    state = source.profile_result(profile, svg)
    topology_id = state["topology_id"]
    if key != topology_id and not topology_id.startswith(f"{key}-"):
        raise UnknownTopology(f"profile {profile} is not one of {key}'s")
    return state


def _body(bad_request: type[Exception]) -> dict[str, Any]:
    body = request.get_json(silent=True)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


def _asked_by() -> str:
    return f"the UI, from {request.remote_addr or 'an unknown address'}"


def _place(answer: dict[str, Any]) -> dict[str, Any]:
    return {"topologyId": answer.get("topology_id"), "supervisor": answer.get("supervisor"),
            "host": answer.get("host"), "port": answer.get("port")}


def _needs_token() -> tuple[Response, int]:
    return jsonify(error="a profile is the admin's: sign in on /login.html with the UI's "
                         "access token, or send 'Authorization: Bearer TOKEN'"), 401
