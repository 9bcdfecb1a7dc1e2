"""The REST API's run-time settings (ui/debug_api.py) over a local topology: log levels set,
shown and cleared (this process's loggers, in local mode), tuple sampling turned on and off for
a component or every one, the samples read back, requests that cannot be refused with 400, and
the access token needed for every change when the UI has one."""

from __future__ import annotations

import logging

import pytest
from ui_support import get, post, request, ui_cluster, wait_until

from stormlet.ui.access import UiAccess

TOKEN = "0123456789abcdef" * 4
LOGGER = "stormlet.test.ui"


@pytest.fixture
def ui():
    with ui_cluster("steady") as (cluster, server):
        yield cluster, server


@pytest.fixture
def logger():
    kept = logging.getLogger(LOGGER).level
    yield logging.getLogger(LOGGER)
    logging.getLogger(LOGGER).setLevel(kept)


def test_a_log_level_is_set_shown_and_cleared(ui, logger):
    _cluster, server = ui
    assert get(server, "/api/v1/topology/steady/logconfig") == {"namedLoggerLevels": {}}
    reply = post(server, "/api/v1/topology/steady/logconfig",
                 {"namedLoggerLevels": {LOGGER: {"target_level": "DEBUG", "timeout": 60},
                                        "ROOT": {"target_level": "warn"}}})
    assert logger.level == logging.DEBUG
    levels = get(server, "/api/v1/topology/steady/logconfig")["namedLoggerLevels"]
    assert {k: v["until"] for k, v in levels.items()} == {
        k: v["until"] for k, v in reply["namedLoggerLevels"].items()}
    assert levels[LOGGER]["target_level"] == "DEBUG" and 55 < levels[LOGGER]["timeout"] <= 60
    assert levels["ROOT"] == {"target_level": "WARNING", "timeout": None, "until": None}
    post(server, "/api/v1/topology/steady/logconfig",
         {"namedLoggerLevels": {LOGGER: {"target_level": None}, "ROOT": {"target_level": "CLEAR"}}})
    assert logger.level == logging.NOTSET
    assert get(server, "/api/v1/topology/steady/logconfig") == {"namedLoggerLevels": {}}


def test_debug_samples_a_component_and_the_samples_are_read_back(ui):
    _cluster, server = ui
    reply = post(server, "/api/v1/topology/steady/component/double/debug/enable/100",
                 {"timeout": 120})
    assert reply["sampling"]["double"]["percent"] == 100.0
    path = "/api/v1/topology/steady/component/double/samples?limit=5"
    wait_until(lambda: len(get(server, path)["samples"]) == 5, 20, "five samples of double")
    page = get(server, path)
    assert all(s["component"] == "double" and len(s["values"]) == 2 for s in page["samples"])
    assert all(s["values"][1] == 2 * s["values"][0] for s in page["samples"])
    assert page["sampling"]["double"]["timeout"] > 100
    assert get(server, "/api/v1/topology/steady/component/numbers/samples")["samples"] == []
    post(server, "/api/v1/topology/steady/component/double/debug/disable/0")
    assert get(server, "/api/v1/topology/steady/debug") == {"sampling": {}}
    # Every component, at the topology's level.
    post(server, "/api/v1/topology/steady/debug/enable/50")
    assert get(server, "/api/v1/topology/steady/debug")["sampling"]["*"]["percent"] == 50.0
    wait_until(lambda: get(server, "/api/v1/topology/steady/component/numbers/samples")[
        "samples"], 20, "the spout's samples")
    post(server, "/api/v1/topology/steady/debug/disable/0")
    assert get(server, "/api/v1/topology/steady/debug") == {"sampling": {}}


@pytest.mark.parametrize("path, body, said", [
    ("logconfig", {"namedLoggerLevels": {"x": {"target_level": "LOUD"}}}, "not a log level"),
    ("logconfig", {"namedLoggerLevels": {"x y": {"target_level": "DEBUG"}}}, "logger name"),
    ("logconfig", {"namedLoggerLevels": {"x": {"target_level": "DEBUG", "timeout": -1}}},
     "lasts 0"),
    ("logconfig", {"levels": {}}, "namedLoggerLevels"),
    ("logconfig", {"namedLoggerLevels": {}}, "at least one logger"),
    ("debug/enable/0", {}, "percentage"),
    ("debug/enable/many", {}, "percentage"),
    ("debug/enable/5", {"timeout": "soon"}, "lasts 0"),
    ("debug/start/5", {}, "enable or disable"),
])
def test_a_setting_that_cannot_be_is_a_400_saying_why(ui, path, body, said):
    _cluster, server = ui
    status, reply = request(server, f"/api/v1/topology/steady/{path}", "POST", body)
    assert status == 400 and said in reply["error"], reply


def test_unknown_topologies_and_components_are_404_or_refused(ui):
    _cluster, server = ui
    assert request(server, "/api/v1/topology/nope/logconfig")[0] == 404
    assert request(server, "/api/v1/topology/nope/debug/enable/5", "POST", {})[0] == 404
    status, reply = request(server, "/api/v1/topology/steady/component/nope/debug/enable/5",
                            "POST", {})
    assert status == 409 and "no component 'nope'" in reply["error"]
    assert request(server, "/api/v1/topology/steady/component/double/samples?limit=0")[0] == 400


def test_with_a_token_every_change_needs_it(logger):
    access = UiAccess.for_host("127.0.0.1", token=TOKEN)
    with ui_cluster("steady", access=access) as (_cluster, server):
        body = {"namedLoggerLevels": {LOGGER: {"target_level": "DEBUG"}}}
        for path, sent in (("logconfig", body), ("debug/enable/5", {}),
                           ("component/double/debug/enable/5", {})):
            status, _reply = request(server, f"/api/v1/topology/steady/{path}", "POST", sent)
            assert status == 401, path
        assert logger.level == logging.NOTSET
        assert get(server, "/api/v1/topology/steady/debug") == {"sampling": {}}
        headers = {"Content-Type": "application/json", "X-Requested-By": "stormlet-ui",
                   "Authorization": f"Bearer {TOKEN}"}
        status, _reply = request(server, "/api/v1/topology/steady/logconfig", "POST", body,
                                 headers=headers)
        assert status == 200 and logger.level == logging.DEBUG
