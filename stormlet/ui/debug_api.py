"""The REST API's run-time settings of a topology: its loggers' levels (Storm's ``logconfig``)
and tuple sampling (Storm's ``debug``), and the samples (see api.py for the whole table):

    GET  /api/v1/topology/<id>/logconfig       {"namedLoggerLevels": {logger: {"target_level",
                                               "timeout" (seconds left, null: until cleared),
                                               "until" (epoch seconds, null)}}}
    POST /api/v1/topology/<id>/logconfig       body {"namedLoggerLevels": {logger:
                                               {"target_level": "DEBUG", "timeout": 30}}};
                                               target_level null or "CLEAR" clears it
    GET  /api/v1/topology/<id>/debug           {"sampling": {component or "*": {"percent",
                                               "timeout", "until"}}}
    POST /api/v1/topology/<id>[/component/<c>]/debug/<action>/<spct>
                                               action "enable" (sample spct percent) or
                                               "disable"; body {"timeout": seconds} optional
    GET  /api/v1/topology/<id>/component/<c>/samples?limit=N
                                               {"samples": [...], oldest first (roots as hex
                                               text), "sampling"}

The checks are the ones nimbus and local mode make (runtime/live_settings.py): a request they
refuse is a 400 here before it is sent.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Response, jsonify, request

from ..runtime import live_settings as live
from ..runtime.log_levels import check_seconds
from ..runtime.sampling import shown_roots
from .source import UiSource

# The most samples one request answers.
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100


class BadSetting(ValueError):
    """The request asks for a setting that cannot be (HTTP 400)."""


def add_debug_routes(api: Blueprint, source: UiSource) -> None:
    """Add the routes above to ``api`` (the REST API's blueprint)."""

    @api.errorhandler(BadSetting)
    def bad_setting(exc: BadSetting) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 400

    @api.get("/topology/<key>/logconfig")
    def log_config(key: str) -> Response:
        return jsonify(namedLoggerLevels=_log_levels(source.live_settings(key)))

    @api.post("/topology/<key>/logconfig")
    def set_log_config(key: str) -> Response:
        body = request.get_json(silent=True)
        named = body.get("namedLoggerLevels") if isinstance(body, dict) else None
        if not isinstance(named, dict):
            raise BadSetting('the body must be {"namedLoggerLevels": {"LOGGER": '
                             '{"target_level": "DEBUG", "timeout": 30}}}')
        levels: dict[str, Any] = {}
        for logger, entry in named.items():
            if not isinstance(entry, dict):
                raise BadSetting(f"logger {logger!r}: give {{\"target_level\", \"timeout\"}}")
            level = entry.get("target_level")
            levels[logger] = None if level is None else {"level": level,
                                                         "seconds": entry.get("timeout")}
        try:
            live.log_level_changes(levels)
        except ValueError as exc:
            raise BadSetting(str(exc)) from None
        settings = source.set_log_levels(key, levels)
        return jsonify(namedLoggerLevels=_log_levels(settings))

    @api.get("/topology/<key>/debug")
    def sampling(key: str) -> Response:
        return jsonify(sampling=_sampling(source.live_settings(key)))

    @api.post("/topology/<key>/debug/<action>/<percent>")
    def debug_topology(key: str, action: str, percent: str) -> Response:
        return _debug(source, key, None, action, percent)

    @api.post("/topology/<key>/component/<component>/debug/<action>/<percent>")
    def debug_component(key: str, component: str, action: str, percent: str) -> Response:
        return _debug(source, key, component, action, percent)

    @api.get("/topology/<key>/component/<component>/samples")
    def samples(key: str, component: str) -> Response:
        try:
            limit = int(request.args.get("limit", DEFAULT_LIMIT))
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_LIMIT:
            raise BadSetting(f"limit must be a whole number from 1 to {MAX_LIMIT}")
        return jsonify(samples=[shown_roots(s) for s in source.samples(key, component, limit)],
                       sampling=_sampling(source.live_settings(key)))


def _debug(source: UiSource, key: str, component: str | None, action: str,
           percent_text: str) -> Response:
    if action not in ("enable", "disable"):
        raise BadSetting(f"the action is enable or disable, got {action!r}")
    body = request.get_json(silent=True)
    timeout = body.get("timeout") if isinstance(body, dict) else None
    percent = None
    if action == "enable":
        try:
            try:
                percent = float(percent_text)
            except ValueError:
                raise ValueError(f"the sampling percentage must be a number more than 0 and at "
                                 f"most 100, got {percent_text!r}") from None
            percent = live.check_percent(percent)
            seconds = check_seconds(timeout, "sampling")
        except ValueError as exc:
            raise BadSetting(str(exc)) from None
    else:
        seconds = None
    settings = source.debug(key, component, percent, seconds)
    return jsonify(topologyOperation="debug", topologyId=key, component=component,
                   status="success", sampling=_sampling(settings))


def _log_levels(settings: dict) -> dict[str, dict]:
    now = time.time()
    return {logger: {"target_level": entry.get("level"), **_timeout(entry, now)}
            for logger, entry in sorted(settings.get(live.LOG_LEVELS, {}).items())}


def _sampling(settings: dict) -> dict[str, dict]:
    now = time.time()
    return {key: {"percent": entry.get("percent"), **_timeout(entry, now)}
            for key, entry in sorted(settings.get(live.SAMPLING, {}).items())}


def _timeout(entry: dict, now: float) -> dict[str, Any]:
    until = entry.get("until")
    return {"timeout": None if until is None else max(0.0, until - now), "until": until}
