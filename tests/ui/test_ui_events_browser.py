"""The topology page's event table in a real headless browser (Debian's chromium, driven by
Playwright), over a local topology: it shows the history the REST API serves, newest first, an
action taken on the page appears in it, and after a kill it still says how the topology ended.
Every test also fails on a JavaScript error in the page's console."""

from __future__ import annotations

import re

import pytest
from browser_support import chromium, require_browser, watched_page
from ui_support import get, ui_cluster, wait_until

require_browser()

from playwright.sync_api import Page

REFRESH = "refresh=1"   # the page reads the API every second


@pytest.fixture
def ui():
    with ui_cluster("steady", "finite") as (cluster, server):
        yield cluster, server


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


# The one request of the page that may fail: the topology's own, once it is gone (topology.js
# then says "no longer running"). Chromium logs it as a console error without its address, so
# failed responses are checked by address instead.
# The page's other readers of the topology (debug.js's sampling and log levels) get the same
# 404 once it is gone.
GONE_TOPOLOGY = re.compile(r"/api/v1/topology/[^/?]+(\?window=|/debug$|/logconfig$)")
FAILED_LOAD = "Failed to load resource: the server responded with a status of 404"


@pytest.fixture
def page(browser, ui):
    _cluster, server = ui
    with watched_page(browser, server.url) as (page, problems):
        failed: list[str] = []
        page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400
                else None)
        yield page
    unexpected = [f for f in failed if not (f.startswith("404 ") and GONE_TOPOLOGY.search(f))]
    assert unexpected == [], f"requests of the page that failed: {unexpected}"
    problems = [p for p in problems if not (p.startswith(FAILED_LOAD) and failed)]
    assert problems == [], f"errors in the page's console: {problems}"


def shown(page: Page) -> list[tuple[int, str | None, str]]:
    """The event table's rows as (seq, kind, text), top to bottom."""
    rows = page.locator("#events tbody tr[data-seq]")
    return [(int(str(row.get_attribute("data-seq"))), row.get_attribute("data-kind"),
             row.locator("td[data-field=text]").inner_text()) for row in rows.all()]


def rest(server, name: str) -> list[tuple[int, str, str]]:
    """The REST API's events of ``name``, newest first as the page shows them."""
    body = get(server, f"/api/v1/topology/{name}/events")
    return [(e["seq"], e["kind"], e["text"]) for e in reversed(body["events"])]


def next_events_refresh(page: Page) -> None:
    before = page.locator("#events").get_attribute("data-loaded") or ""
    page.wait_for_function(
        "b => (document.getElementById('events').dataset.loaded || '') !== b",
        arg=before, timeout=10_000)


def test_the_topology_page_shows_its_events_as_the_api_serves_them(page, ui):
    _cluster, server = ui
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    page.locator("#events tr[data-kind=submitted]").wait_for()
    assert shown(page) == rest(server, "steady")
    row = page.locator("#events tr[data-kind=submitted]")
    assert row.locator("td[data-field=writer]").inner_text().startswith("local:")
    assert (row.locator("td[data-field=text]").inner_text()
            == "submitted steady in this process, active")
    # Only this topology's: "finite" runs beside it.
    assert [kind for _seq, kind, _text in shown(page)] == ["submitted"]
    assert page.locator("#events-problem").inner_text() == ""


def test_an_action_on_the_page_appears_in_its_events_newest_first(page, ui):
    _cluster, server = ui
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    page.locator("#events tr[data-kind=submitted]").wait_for()
    page.click("#deactivate")
    page.click("#dialog-confirm")
    page.locator("#events tr[data-kind=deactivated]").wait_for(timeout=10_000)
    page.click("#activate")
    page.click("#dialog-confirm")
    page.locator("#events tr[data-kind=activated]").wait_for(timeout=10_000)
    rows = shown(page)
    assert [kind for _seq, kind, _text in rows] == ["activated", "deactivated", "submitted"]
    assert [seq for seq, _kind, _text in rows] == sorted((s for s, _k, _t in rows), reverse=True)
    assert rows == rest(server, "steady")


def test_after_a_kill_the_events_still_say_how_the_topology_ended(page, ui):
    _cluster, server = ui
    page.goto(f"/topology.html?id=finite&{REFRESH}&events=2")
    page.locator("#events tr[data-kind=submitted]").wait_for()
    page.click("#kill")
    page.fill("#kill-wait", "0")
    page.click("#dialog-confirm")
    page.locator("#events tr[data-kind=removed]").wait_for(timeout=15_000)
    wait_until(lambda: "no longer running" in page.locator("#banner").inner_text(), 10,
               "the page to say the topology is gone")
    next_events_refresh(page)
    # ?events=2: the newest two, the kill and the removal.
    assert [kind for _seq, kind, _text in shown(page)] == ["removed", "killed"]
    assert get(server, "/api/v1/topology/finite/events")["status"] == "removed"
    killed = page.locator("#events tr[data-kind=killed] td[data-field=kind]")
    assert "warn" in (killed.get_attribute("class") or "")
