"""The UI in a real headless browser (Debian's chromium, driven by Playwright) against a running
local topology: the pages show live numbers that match the REST API, the graph is drawn, the
deactivate button deactivates, and a screenshot of the topology page is neither blank nor an
error. Every test also fails on a JavaScript error in the page's console."""

from __future__ import annotations

import base64
import re

import pytest
from browser_support import chromium, require_browser, watched_page
from ui_support import (
    COMPONENTS,
    LOG_CONF,
    caught_up,
    get,
    log_topology,
    partition_rows,
    ui_cluster,
    wait_until,
    write_log,
)

require_browser()

from playwright.sync_api import Page

ACTIVE = re.compile(r"^active$")   # has_text matches substrings: "inactive" contains "active"
# Pages refresh every second here (?refresh=1), so live numbers change quickly.
REFRESH = "refresh=1"


@pytest.fixture(scope="module")
def ui():
    with ui_cluster("steady") as (cluster, server):
        yield cluster, server


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(browser, ui):
    _cluster, server = ui
    with watched_page(browser, server.url) as (page, problems):
        yield page
        assert problems == [], f"errors in the page's console: {problems}"


def loaded(page: Page) -> str:
    """The page's refresh counter: changes every time the page has fetched and shown new data."""
    return page.locator("body").get_attribute("data-loaded") or ""


def next_refresh(page: Page) -> None:
    before = loaded(page)
    page.wait_for_function(
        "b => document.body.dataset.loaded && document.body.dataset.loaded !== b",
        arg=before, timeout=10_000)


def cell(page: Page, selector: str) -> int:
    return int(str(page.locator(selector).get_attribute("data-value")))


def no_error_shown(page: Page) -> None:
    assert page.locator(".error").count() == 0, page.locator(".error").all_inner_texts()


def rest_component(server, name: str, cid: str) -> dict:
    topology = get(server, f"/api/v1/topology/{name}")
    return next(c for c in topology["spouts"] + topology["bolts"] if c["id"] == cid)


def test_cluster_page_lists_the_running_topology_live(page, ui):
    _cluster, server = ui
    page.goto(f"/index.html?{REFRESH}")
    row = page.locator("#topologies tr[data-topology]")
    row.first.wait_for()
    rest = get(server, "/api/v1/topology/summary")["topologies"]
    assert row.count() == len(rest) == 1
    assert row.locator("td[data-field=name]").inner_text() == "steady"
    assert row.locator("td[data-field=status]").inner_text() == "active"
    assert cell(page, "#topologies td[data-field=executorsTotal]") == rest[0]["executorsTotal"]
    assert page.locator("#mode").inner_text().startswith("local")
    uptime = float(row.locator("td[data-field=uptimeSeconds]").get_attribute("data-value"))
    next_refresh(page)
    next_refresh(page)
    later = float(row.locator("td[data-field=uptimeSeconds]").get_attribute("data-value"))
    assert later > uptime
    no_error_shown(page)


def test_topology_page_shows_live_numbers_matching_the_api_and_draws_the_graph(page, ui):
    _cluster, server = ui
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    emitted = "#spouts tr[data-component=numbers] td[data-field=emitted]"
    page.locator(emitted).wait_for()
    assert page.locator("#status").inner_text() == "active"
    first = cell(page, emitted)
    # Between two REST reads bracketing one refresh, the page shows a number in between.
    before = rest_component(server, "steady", "numbers")["emitted"]
    next_refresh(page)
    shown = cell(page, emitted)
    after = rest_component(server, "steady", "numbers")["emitted"]
    assert first < shown and before <= shown <= after
    executed = cell(page, "#bolts tr[data-component=sink] td[data-field=executed]")
    assert 0 < executed <= rest_component(server, "steady", "sink")["executed"]

    nodes = page.locator("svg#graph g.node")
    assert sorted(nodes.evaluate_all("ns => ns.map(n => n.dataset.component)")) \
        == sorted(COMPONENTS)
    edges = page.locator("svg#graph g.edge")
    assert edges.evaluate_all("es => es.map(e => [e.dataset.from, e.dataset.to])") \
        == [["numbers", "double"], ["double", "sink"]]
    labels = page.locator("svg#graph .edge-label").all_text_contents()
    assert all(label.endswith("/s") for label in labels) and len(labels) == 2
    no_error_shown(page)


def test_component_page_has_a_row_per_task(page, ui):
    _cluster, server = ui
    page.goto(f"/component.html?id=steady&component=double&{REFRESH}")
    rows = page.locator("#task-table tr[data-task]")
    rows.first.wait_for()
    rest = get(server, "/api/v1/topology/steady/component/double")
    assert sorted(int(t) for t in rows.evaluate_all("rs => rs.map(r => r.dataset.task)")) \
        == sorted(t["task"] for t in rest["tasks"])
    assert rows.count() == 2
    assert page.locator("#name").inner_text() == "double"
    no_error_shown(page)



def test_an_offset_spouts_component_page_shows_its_partitions(page, ui, tmp_path):
    cluster, server = ui
    write_log(tmp_path / "log")
    cluster.submit("logged", LOG_CONF, log_topology(tmp_path / "log"))
    try:
        wait_until(lambda: caught_up(server, "logged"), 20, "every partition committed")
        page.goto(f"/component.html?id=logged&component=reader&{REFRESH}")
        rows = page.locator("#partitions tr[data-partition]")
        rows.first.wait_for()
        assert page.locator("#partition-section").is_visible()
        fields = ("task", "partition", "lag", "committed", "acked")
        shown = [[int(row.locator(f"td[data-field={f}]").get_attribute("data-value"))
                  for f in fields] for row in rows.all()]
        rest = partition_rows(server, "logged")   # by partition
        assert sorted(shown, key=lambda row: row[1]) == [[r[f] for f in fields] for r in rest]
        assert len(shown) == 3
        no_error_shown(page)
    finally:
        cluster.kill("logged", wait_secs=0)

def test_the_deactivate_button_deactivates_after_confirmation(page, ui):
    _cluster, server = ui
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    page.locator("#status", has_text=ACTIVE).wait_for()
    page.click("#deactivate")
    dialog = page.locator("#dialog")
    assert dialog.is_visible() and "Deactivate steady" in dialog.inner_text()
    page.click("#dialog-cancel")   # cancelling does nothing
    assert not dialog.is_visible()
    assert get(server, "/api/v1/topology/steady")["status"] == "active"

    page.click("#deactivate")
    page.click("#dialog-confirm")
    page.locator("#status", has_text="inactive").wait_for(timeout=10_000)
    assert get(server, "/api/v1/topology/steady")["status"] == "inactive"
    stopped = [-1]

    def emission_stopped() -> bool:
        now = rest_component(server, "steady", "numbers")["emitted"]
        same, stopped[0] = now == stopped[0], now
        return same

    wait_until(emission_stopped, 10, "emission to stop", interval=0.5)
    assert page.locator("#activate").is_enabled() and page.locator("#deactivate").is_disabled()

    page.click("#activate")
    page.click("#dialog-confirm")
    page.locator("#status", has_text=ACTIVE).wait_for(timeout=10_000)
    wait_until(lambda: rest_component(server, "steady", "numbers")["emitted"] > stopped[0], 10,
               "emission to resume")
    no_error_shown(page)


# Counts the distinct colours of a PNG (given as base64) by drawing it on a canvas.
DISTINCT_COLOURS = """async png => {
  const image = new Image();
  image.src = "data:image/png;base64," + png;
  await image.decode();
  const canvas = document.createElement("canvas");
  canvas.width = image.width; canvas.height = image.height;
  const context = canvas.getContext("2d");
  context.drawImage(image, 0, 0);
  const data = context.getImageData(0, 0, image.width, image.height).data;
  const colours = new Set();
  for (let i = 0; i < data.length; i += 4 * 7) colours.add(`${data[i]},${data[i+1]},${data[i+2]}`);
  return colours.size;
}"""


def test_screenshot_of_the_topology_page_is_neither_blank_nor_an_error(page, ui, tmp_path):
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    page.locator("svg#graph g.node").first.wait_for()
    next_refresh(page)
    path = tmp_path / "topology.png"
    png = page.screenshot(path=str(path), full_page=True)
    no_error_shown(page)
    assert page.locator("#spouts tr[data-component=numbers]").is_visible()
    page.goto(f"/component.html?id=steady&component=numbers&{REFRESH}")
    page.locator("#task-table tr[data-task]").first.wait_for()
    page.screenshot(path=str(tmp_path / "component.png"), full_page=True)
    colours = page.evaluate(DISTINCT_COLOURS, base64.b64encode(png).decode())
    assert colours > 20, f"the screenshot ({path}) has {colours} colours: blank?"
    no_error_shown(page)
