"""The topology page's charts in a real headless browser (Debian's chromium, driven by
Playwright) against running local topologies: a chart per metric, a line per component, drawn
on its canvas from the same numbers the history API serves; the whole-life toggle; every test
fails on a JavaScript error in the page's console."""

from __future__ import annotations

import pytest
from browser_support import chromium, require_browser, watched_page
from charts_support import STEP, charts_cluster
from ui_support import get

require_browser()

from playwright.sync_api import Page

REFRESH = "refresh=1"
CHARTS = ["emitted", "executed", "acked", "failed", "complete_latency", "capacity", "backpressure"]
# The first component's colour in charts.js (Charts.COLOURS[0]), as red, green, blue.
FIRST_COLOUR = (0x2F, 0x6F, 0xDB)


@pytest.fixture(scope="module")
def ui():
    with charts_cluster("steady") as (cluster, server):
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


def drawn_with(page: Page, points: int) -> None:
    """Wait until the emitted chart shows at least ``points`` points."""
    page.wait_for_function(
        "n => Number(document.querySelector('.chart[data-metric=emitted]')?.dataset.points) >= n",
        arg=points, timeout=30_000)


# How many pixels of a chart's canvas are within 40 of a colour on every channel: its line's.
PIXELS_OF = """([metric, rgb]) => {
  const canvas = document.querySelector(`.chart[data-metric=${metric}] canvas`);
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] > 200 && Math.abs(data[i] - rgb[0]) < 40 && Math.abs(data[i + 1] - rgb[1]) < 40
        && Math.abs(data[i + 2] - rgb[2]) < 40) n++;
  }
  return n;
}"""


def test_the_topology_page_charts_each_metric_with_a_line_per_component(page, ui):
    _cluster, server = ui
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    drawn_with(page, 4)
    boxes = page.locator("#charts .chart")
    assert boxes.evaluate_all("bs => bs.map(b => b.dataset.metric)") == CHARTS
    series = {m: page.locator(f".chart[data-metric={m}]").get_attribute("data-series")
              for m in CHARTS}
    assert series["emitted"] == "numbers,double,sink"
    assert series["executed"] == series["capacity"] == "double,sink"   # bolts only
    assert series["complete_latency"] == "numbers p50,numbers p99"    # spouts only
    # The chart holds the history the API serves, point for point.
    shown = page.evaluate("() => ({times: Charts.plots.emitted.data[0],"
                          " numbers: Charts.plots.emitted.data[1]})")
    served = get(server, "/api/v1/topology/steady/history")
    at = dict(zip(served["times"], served["components"]["numbers"]["emitted"]))
    common = [t for t in shown["times"] if t in at]
    assert len(common) >= 3
    assert [shown["numbers"][shown["times"].index(t)] for t in common] == [at[t] for t in common]
    assert all(b - a == STEP for a, b in zip(shown["times"], shown["times"][1:]))
    assert min(shown["numbers"][1:]) > 0
    # Drawn: the first component's (the spout's) lines are on the complete latency chart's canvas
    # (on the emitted chart, the bolt "double" emits as much, and its line may hide the spout's),
    # and not on the executed chart's, which has no line of the spout.
    assert page.evaluate(PIXELS_OF, ["complete_latency", list(FIRST_COLOUR)]) > 20
    assert page.evaluate(PIXELS_OF, ["executed", list(FIRST_COLOUR)]) < 5
    hint = page.locator("#charts-hint").inner_text()
    assert hint.startswith(f"one point each {STEP:g} s")
    # The legend names every component.
    legend = page.locator(".chart[data-metric=emitted] .u-legend").inner_text()
    assert all(cid in legend for cid in ("numbers", "double", "sink"))


def test_the_charts_move_on_as_the_topology_runs(page, ui):
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    drawn_with(page, 2)
    last = page.evaluate("() => Charts.plots.emitted.data[0].at(-1)")
    page.wait_for_function("t => Charts.plots.emitted.data[0].at(-1) > t", arg=last,
                           timeout=15_000)


def test_whole_life_shows_the_coarse_series_and_stays_in_the_url(page, ui):
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    drawn_with(page, 1)
    page.click("#charts-resolution button[data-resolution=coarse]")
    page.wait_for_function("() => Charts.latest && Charts.latest.resolution === 'coarse'",
                           timeout=10_000)
    assert "resolution=coarse" in page.url
    assert page.locator("#charts-resolution button.on").inner_text() == "Whole life"
    page.wait_for_function("() => Charts.plots.emitted.data[0].length >= 1", timeout=20_000)
    page.reload()
    page.wait_for_function("() => Charts.latest && Charts.latest.resolution === 'coarse'",
                           timeout=10_000)
    assert page.locator("#charts-resolution button.on").inner_text() == "Whole life"


def test_a_history_without_points_yet_says_so_instead_of_empty_charts(page, ui):
    page.goto(f"/topology.html?id=steady&{REFRESH}")
    drawn_with(page, 1)
    # What a topology whose workers have not reported twice yet gets from the API.
    page.evaluate("() => { Charts.load = async () => {};"   # no more answers from the API
                  " Charts.draw({times: [], step: 10, components: {}}); }")
    assert page.locator("#charts-empty").is_visible()
    assert page.locator("#charts").is_hidden()
    assert page.locator("#charts-hint").inner_text() == ""
