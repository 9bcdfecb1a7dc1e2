"""The REST API under ``/api/v1/``, with Storm UI's resource names and windows.

    GET  /api/v1/cluster/summary                  slots, supervisors, topologies, executors
    GET  /api/v1/nimbus/summary                   {"nimbuses": [{host, port, status, uptime}]}
    GET  /api/v1/supervisor/summary               {"supervisors": [...]}
    GET  /api/v1/topology/summary                 {"topologies": [...]}
    GET  /api/v1/topology/<id>?window=W           one topology: stats, components, graph, errors
    GET  /api/v1/topology/<id>/component/<c>?window=W    one component: per task rows, partitions
    GET  /api/v1/topology/<id>/events?limit=N&since=S&kind=K   its event history, oldest first:
                                                  the newest N (default 50) after seq S, of kind K
                                                  (kept a while after a kill: cluster/events.py)
    GET  /api/v1/topology/<id>/history?resolution=R      metrics over time, per component
    GET  /api/v1/topology/<id>/logs               its workers' log files: host, port, executors,
                                                  files and sizes (ui/log_viewer.py, as the next)
    GET  /api/v1/topology/<id>/logs/page?supervisor=S&file=F&start=N|before=N&length=L&inode=I
         &grep=RE&component=C&task=T              a page of one: its last, from N on, or up to N
    GET  /api/v1/topology/<id>/logs/download?supervisor=S&file=F   the whole file (its last
                                                  DOWNLOAD_MAX_BYTES at most), an attachment
    POST /api/v1/topology/<id>/activate | /deactivate
    POST /api/v1/topology/<id>/rebalance/<wait>   body {"workers": n, "executors": {comp: n}}
    POST /api/v1/topology/<id>/kill/<wait>
    POST /api/v1/topology/<id>/worker/<host:port>/stacks    every thread's stack of one worker
    POST /api/v1/topology/<id>/worker/<host:port>/profile   body {"seconds": n, "idle": bool}:
                                                  starts a CPU profile; {"profile": id} at once
    GET  /api/v1/topology/<id>/profile/<profile>[/svg]      its state; its flame graph (SVG)
    POST /api/v1/topology/<id>/worker/<host:port>/restart   body {"reason": text}
                                                  (these four: a cluster's workers only, the
                                                  admin's: workers_api.py)
    GET  /api/v1/topology/<id>/logconfig           log levels set while it runs (debug_api.py)
    POST /api/v1/topology/<id>/logconfig           body {"namedLoggerLevels": {logger:
                                                   {"target_level": "DEBUG", "timeout": 30}}}
    GET  /api/v1/topology/<id>/debug               tuple sampling in force
    POST /api/v1/topology/<id>[/component/<c>]/debug/<enable|disable>/<percent>
                                                   body {"timeout": seconds}
    GET  /api/v1/topology/<id>/component/<c>/samples?limit=N    sampled tuples, oldest first

Every POST must carry the header ``X-Requested-By: stormlet-ui`` (403 without it): a browser
sends no custom header cross-origin without a CORS preflight, which this server never grants,
so another site's form or script cannot act on a topology through a visitor's browser.

A topology's ``configuration``, its errors' text, its events' text and detail and its log
lines have their credentials redacted (redaction.py) unless the request presented the UI's
access token (access.py): a page or script that may only read, or any reader of a UI without a
token, sees ``<redacted>`` in their place.

``<id>`` is a topology's id or name. ``W`` is 600, 10800, 86400 or ``:all-time`` (the default)
as in Storm. ``R`` is ``fine`` (the default: the last hour) or ``coarse`` (the topology's whole
life, at a resolution that coarsens as it ages); the answer is ``metrics.history``'s series:
``{"topologyId", "topologyName", "resolution", "step", "times": [epoch seconds], "components":
{c: {"kind", "emitted", "executed", "acked", "failed" (per second), "complete_p50_ms",
"complete_p99_ms", "capacity", "backpressure": [value or null per time]}}}``. Errors are
``{"error": message}`` with 400 (bad request), 403 (POST without the header), 404 (unknown
topology or component, or a log file gone), 409 (action refused) or 503 (nimbus unavailable).
"""

from __future__ import annotations

import math
from typing import Any

from flask import Blueprint, Response, jsonify, request

from ..cluster.events import DEFAULT_READ, check_query, redact_events
from ..metrics.history import FINE, RESOLUTIONS
from ..metrics.views import component_stats, edge_rates, topology_stats, worker_stats
from ..redaction import redact_config, redact_errors
from .access import holds_admin_token
from .debug_api import add_debug_routes
from .log_viewer import add_log_routes
from .source import ActionRefused, SourceUnavailable, UiSource, UnknownTopology
from .workers_api import add_worker_routes

# Storm's ?window= values, and the snapshot's window keys they map to.
WINDOWS = {"600": "600", "10800": "10800", "86400": "86400", ":all-time": "all", "all": "all"}
WINDOW_HINTS = {"600": "10m 0s", "10800": "3h 0m 0s", "86400": "1d 0h 0m 0s", "all": "All time"}
DEFAULT_WINDOW = ":all-time"
# The header (and value) every POST must send: see the module docstring.
ACTION_HEADER, ACTION_HEADER_VALUE = "X-Requested-By", "stormlet-ui"


class BadRequest(ValueError):
    """The request itself is wrong (HTTP 400)."""


ERROR_STATUS = {BadRequest: 400, UnknownTopology: 404, ActionRefused: 409, SourceUnavailable: 503}


def api_blueprint(source: UiSource) -> Blueprint:
    api = Blueprint("api", __name__, url_prefix="/api/v1")

    @api.errorhandler(BadRequest)
    @api.errorhandler(UnknownTopology)
    @api.errorhandler(ActionRefused)
    @api.errorhandler(SourceUnavailable)
    def refused(exc: Exception) -> tuple[Response, int]:
        return jsonify(error=str(exc)), ERROR_STATUS[type(exc)]

    @api.before_request
    def same_origin_actions_only() -> tuple[Response, int] | None:
        if request.method == "POST" and \
                request.headers.get(ACTION_HEADER) != ACTION_HEADER_VALUE:
            return jsonify(error=f"refused: an action must send the header "
                                 f"'{ACTION_HEADER}: {ACTION_HEADER_VALUE}' (a guard against "
                                 f"cross-site requests)"), 403
        return None

    @api.get("/cluster/summary")
    def cluster_summary() -> Response:
        summary = source.cluster_summary()
        topologies = source.topologies()
        total = sum(s["slots"] for s in summary["supervisors"])
        used = sum(s["used_slots"] for s in summary["supervisors"])
        return jsonify(mode=summary["mode"], process=summary.get("process"),
                       supervisors=len(summary["supervisors"]), topologies=len(topologies),
                       slotsTotal=total, slotsUsed=used, slotsFree=total - used,
                       executorsTotal=sum(t["executors"] for t in topologies),
                       tasksTotal=sum(t.get("tasks") or 0 for t in topologies))

    @api.get("/nimbus/summary")
    def nimbus_summary() -> Response:
        nimbuses = [{"host": n["host"], "port": n["port"],
                     "status": "Leader" if n["leader"] else "Not a Leader",
                     "uptimeSeconds": n["uptime"]} for n in source.cluster_summary()["nimbuses"]]
        return jsonify(nimbuses=nimbuses)

    @api.get("/supervisor/summary")
    def supervisor_summary() -> Response:
        rows = [{"id": s["id"], "host": s["host"], "uptimeSeconds": s["uptime"],
                 "slotsTotal": s["slots"], "slotsUsed": s["used_slots"],
                 "slotsFree": s["slots"] - s["used_slots"]}
                for s in source.cluster_summary()["supervisors"]]
        return jsonify(supervisors=rows)

    @api.get("/topology/summary")
    def topology_summary() -> Response:
        return jsonify(topologies=[_summary_row(t) for t in source.topologies()])

    @api.get("/topology/<key>")
    def topology(key: str) -> Response:
        window = _window()
        data = source.topology(key)
        structure, snapshots = data["structure"], data["snapshots"]
        components = component_stats(structure, snapshots, window)
        spouts: list[dict] = []
        bolts: list[dict] = []
        for cid, spec in structure["components"].items():
            row = {"id": cid, "type": spec["kind"], **_without_tasks(components.get(cid, {}))}
            (spouts if spec["kind"] == "spout" else bolts).append(row)
        return jsonify({**_summary_row(data), "mode": source.mode, "window": _storm_window(window),
                      "windowHint": WINDOW_HINTS[window],
                      "topologyStats": topology_stats(structure, snapshots, window),
                      "spouts": spouts, "bolts": bolts,
                      "graph": {"components": structure["components"],
                                "edges": edge_rates(structure, snapshots, window)},
                      "workers": _with_restarts(worker_stats(snapshots),
                                                data.get("worker_slots", [])),
                      "errors": _shown_errors(data["recent_errors"]),
                      "assignment": data.get("assignment"),
                      "configuration": _plain(_shown_config(source, data))})

    @api.get("/topology/<key>/component/<component>")
    def component(key: str, component: str) -> Response:
        window = _window()
        data = source.topology(key)
        structure = data["structure"]
        spec = structure["components"].get(component)
        if spec is None:
            raise UnknownTopology(f"topology {data['name']!r} has no component {component!r} "
                                  f"(it has: {', '.join(sorted(structure['components']))})")
        stats = component_stats(structure, data["snapshots"], window)[component]
        edges = edge_rates(structure, data["snapshots"], window)
        return jsonify({"topologyId": data["id"], "topologyName": data["name"], "id": component,
                      "type": spec["kind"], "window": _storm_window(window),
                      "windowHint": WINDOW_HINTS[window], "stats": _without_tasks(stats),
                      "tasks": stats["task_rows"], "partitions": stats.get("partitions", []),
                      "inputs": [e for e in edges if e["to"] == component],
                      "outputs": [e for e in edges if e["from"] == component],
                      "errors": _shown_errors([e for e in data["recent_errors"]
                                               if e["component"] == component])})

    @api.get("/topology/<key>/events")
    def events(key: str) -> Response:
        limit, since = _whole("limit", DEFAULT_READ), _whole("since", None)
        kind = request.args.get("kind") or None
        try:
            check_query(limit, since, kind)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        assert limit is not None   # it has a default
        history = source.events(key, limit, since, kind)
        shown = history["events"] if holds_admin_token() else redact_events(history["events"])
        return jsonify(topologyId=history["id"], topologyName=history["name"],
                       status=history["status"], removed=history["removed"], events=shown)
    @api.get("/topology/<key>/history")
    def history(key: str) -> Response:
        resolution = request.args.get("resolution", FINE)
        if resolution not in RESOLUTIONS:
            raise BadRequest(f"resolution must be one of {', '.join(RESOLUTIONS)}; "
                             f"got {resolution!r}")
        series = source.history(key, resolution)
        return jsonify({"topologyId": series["id"], "topologyName": series["name"],
                        **{k: series[k] for k in ("resolution", "step", "times", "components")}})

    add_log_routes(api, source)

    @api.post("/topology/<key>/activate")
    def activate(key: str) -> Response:
        source.activate(key)
        return _done(key, "activate")

    @api.post("/topology/<key>/deactivate")
    def deactivate(key: str) -> Response:
        source.deactivate(key)
        return _done(key, "deactivate")

    @api.post("/topology/<key>/rebalance/<wait>")
    def rebalance(key: str, wait: str) -> Response:
        body = request.get_json(silent=True)
        body = {} if body is None else body
        if not isinstance(body, dict):
            raise BadRequest("the rebalance body must be a JSON object like "
                             '{"workers": 2, "executors": {"split": 4}}')
        workers = body.get("workers")
        executors = body.get("executors") or {}
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise BadRequest(f"workers must be a whole number >= 1, got {workers!r}")
        if not isinstance(executors, dict) or not all(
                isinstance(n, int) and n >= 1 for n in executors.values()):
            raise BadRequest(f"executors must map components to whole numbers >= 1, "
                             f"got {executors!r}")
        source.rebalance(key, _wait(wait), workers, executors)
        return _done(key, "rebalance")

    @api.post("/topology/<key>/kill/<wait>")
    def kill(key: str, wait: str) -> Response:
        source.kill(key, _wait(wait))
        return _done(key, "kill")

    add_worker_routes(api, source, BadRequest)
    add_debug_routes(api, source)
    return api


def _window() -> str:
    value = request.args.get("window", DEFAULT_WINDOW)
    if value not in WINDOWS:
        raise BadRequest(f"window must be one of 600, 10800, 86400 or :all-time; got {value!r}")
    return WINDOWS[value]


def _whole(name: str, default: int | None) -> int | None:
    """The query parameter ``name`` as a whole number, or ``default`` when it is not given."""
    text = request.args.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {text!r}") from None


def _storm_window(window: str) -> str:
    return ":all-time" if window == "all" else window


def _wait(text: str) -> float:
    try:
        wait = float(text)
    except ValueError:
        wait = -1.0
    if not 0 <= wait < math.inf:
        raise BadRequest(f"the wait time must be a number of seconds >= 0, got {text!r}")
    return wait


def _summary_row(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "status": row["status"],
            "uptimeSeconds": row["uptime"], "workersTotal": row["workers"],
            "workersAsked": row.get("workers_asked"),
            "executorsTotal": row["executors"], "tasksTotal": row.get("tasks"),
            "errors": row.get("errors", 0)}


def _without_tasks(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k not in ("task_rows", "partitions")}


def _with_restarts(workers: list[dict], slots: list[dict]) -> list[dict]:
    """Worker rows with their slot's restart count, which supervisors report (on a cluster)."""
    restarts = {(s["host"], s["port"]): s.get("restarts") for s in slots}
    return [{**w, "restarts": restarts.get((w["host"], w["port"]))} for w in workers]


def _done(key: str, action: str) -> Response:
    return jsonify(topologyOperation=action, topologyId=key, status="success")


def _shown_config(source: UiSource, data: dict[str, Any]) -> dict[str, Any]:
    """The topology's config as this request may see it: with its credentials to a holder of
    the access token, redacted to anyone else."""
    if holds_admin_token():
        try:
            return source.config(data["id"])
        except ActionRefused:
            pass   # a nimbus without topology_conf, or a UI holding read-only credentials
    return redact_config(data["conf"])


def _shown_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Errors as this request may see them: an error's text can quote a credential (a
    connection URL with its password), so it is redacted unless the request holds the token."""
    if holds_admin_token():
        return errors
    return redact_errors(errors)


def _plain(conf: dict[str, Any]) -> dict[str, Any]:
    """The configuration as JSON can hold it (a user's conf may carry any object)."""
    plain = (str, int, float, bool, type(None))
    return {str(k): v if isinstance(v, plain) else repr(v) for k, v in sorted(conf.items())}

