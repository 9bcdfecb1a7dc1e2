"""The UI's log pages in a real headless browser against a real cluster with its secret on:
ZooKeeper, nimbus, a supervisor and two workers on loopback, the talker topology's bolts
logging known lines, and the UI serving it with its access token. A worker's page is reached
from the topology page's worker row and shows its file; a search runs on the node, with the
credentials in a line redacted until the reader signs in; Older pages back through a file
larger than a page, each page joining the next, and Newer comes forward again; a component's
page, reached from the component page, shows that component's lines only; Follow shows a line
logged after the page opened; Download is the file. Every test also fails on a JavaScript
error in the page's console."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser_support import chromium, require_browser, watched_page
from cluster_support import after_test, new_secret_file, serve_cluster, wait_until
from ui_support import ui_cluster
from zookeeper_server import zookeeper_available

from stormlet.cluster.log_files import worker_log_dir, worker_log_file
from stormlet.cluster.nimbus_client import NimbusClient
from stormlet.cluster.security import Security
from stormlet.redaction import redact_text
from stormlet.ui.access import UiAccess
from stormlet.ui.app import serve
from stormlet.ui.source import ClusterSource

require_browser()
pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

from playwright.sync_api import Page  # noqa: E402

TALKER = Path(__file__).resolve().parents[1] / "cluster_topologies" / "talker.py"
# Words a second the spout emits: each talker task logs one line in 50 it hears, so a worker's
# log grows by a few lines a second, past several pages within the tests.
RATE = 200
# Bytes a page spans on the pages opened here (?page=): a file soon holds many.
PAGE = 2048
MARKER = "first words password=hunter2"
REFRESH = "refresh=1"


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory) -> Path:
    return new_secret_file(tmp_path_factory.mktemp("secret"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, secret_file):
    yield from serve_cluster(tmp_path_factory.mktemp("logsui"), 1, {"s1": 2}, secret_file)


@pytest.fixture(autouse=True)
def _after(request, cluster):
    yield
    after_test(request, cluster, kill_left=False)


def say(talk: dict, text: str) -> None:
    (talk["dir"] / "say.part").write_text(text)
    (talk["dir"] / "say.part").replace(talk["dir"] / "say")


def log_path(cluster, talk: dict, port: int) -> Path:
    return worker_log_file(worker_log_dir(cluster.base / "s1", talk["id"], port))


@pytest.fixture(scope="module")
def talk(cluster, tmp_path_factory) -> dict:
    """The talker topology on two workers, each bolt task having said MARKER; its directory,
    id, and the port of a worker running shout."""
    directory = tmp_path_factory.mktemp("talker")
    cluster.submit(TALKER, "talk", f"talker.dir={directory}", "topology.workers=2",
                   f"talker.rate={RATE}", "topology.metrics.report.secs=1")
    wait_until(lambda: len(cluster.topology_workers("talk")) == 2, 60, "both workers")
    tid = next(iter(cluster.topology_workers("talk").values()))["topology_id"]
    talk = {"dir": directory, "id": tid}
    say(talk, MARKER)
    ports = [port for _sid, port in cluster.topology_workers("talk")]

    def said() -> list[int]:
        return [port for port in ports
                if f"said: {MARKER}" in log_path(cluster, talk, port).read_text()]

    # shout has two tasks and quiet one: the line is in both workers' logs, or all in one.
    wait_until(lambda: sum(log_path(cluster, talk, p).read_text().count(f"said: {MARKER}")
                           for p in ports) == 3, 60, "every talker task to say the marker")
    shouting = [p for p in said() if " shout " in _said_lines(log_path(cluster, talk, p))]
    return {**talk, "shout_port": shouting[0]}


def _said_lines(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(keepends=True)
                   if f"said: {MARKER}" in line)


@pytest.fixture(scope="module")
def server(cluster):
    """The UI as `stormlet ui` serves a cluster with a secret: as its admin, with its token."""
    security = Security.load(cluster.secret_file)
    source = ClusterSource(NimbusClient(cluster.zk.hosts, security=security))
    server = serve(source, "127.0.0.1", 0,
                   access=UiAccess.for_host("127.0.0.1", token=security.ui_token()))
    try:
        yield server
    finally:
        server.stop()
        source.close()


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(browser, server, talk):
    with watched_page(browser, server.url) as (page, problems):
        yield page
        assert problems == [], f"errors in the page's console: {problems}"


def records(page: Page) -> list[str]:
    return page.locator("#log .record").all_text_contents()


def shown(page: Page, attribute: str) -> str:
    return page.locator("#log").get_attribute(f"data-{attribute}") or ""


def changed(page: Page, attribute: str, before: str) -> None:
    """Wait until the page shows another part of the file than ``before`` said."""
    page.wait_for_function("([a, b]) => (document.getElementById('log').dataset[a] || '') !== b",
                           arg=[attribute, before], timeout=30_000)


def no_problem_shown(page: Page) -> None:
    assert page.locator(".banner.error").count() == 0, page.locator(".banner").inner_text()


def sign_in(page: Page, cluster) -> None:
    page.goto("/login.html")
    token = Security.load(cluster.secret_file).ui_token()
    assert token is not None, "the cluster has a secret"
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url("**/index.html")


def test_a_workers_page_from_the_topology_page_finds_a_line_by_search(page, cluster, talk):
    port = talk["shout_port"]
    page.goto(f"/topology.html?id=talk&{REFRESH}")
    link = page.locator(f"#worker-table tr[data-worker='127.0.0.1:{port}'] a", has_text="logs")
    link.wait_for(timeout=30_000)
    link.click()
    page.wait_for_url(re.compile(r"/logs\.html\?"))
    page.locator("#log .record").first.wait_for()
    assert page.locator("#title").inner_text() == f"Logs of 127.0.0.1:{port}"
    assert "shout" in page.locator("#executors").inner_text()
    assert page.locator("#file").input_value().endswith(f"/{port}/worker.log")
    # Searched on the node: the marker's lines, and nothing else.
    page.fill("#grep", r"said: first \w+")
    page.click("#search-button")
    page.locator("#log mark").first.wait_for()
    lines = records(page)
    assert lines and all(re.search(r"said: first \w+", line) for line in lines), lines
    assert page.locator("#log mark").first.inner_text() == "said: first words"
    assert all(f"{talk['id']} " in line for line in lines)
    # Not signed in: the password in the line is hidden, and said to be.
    assert all("hunter2" not in line and "password=<redacted>" in line for line in lines)
    assert page.locator("#redacted").is_visible()
    # Signed in with the UI's token, the same search (kept in the URL) shows it.
    url = page.url
    sign_in(page, cluster)
    page.goto(url)
    page.locator("#log mark").first.wait_for()
    assert all("password=hunter2" in line for line in records(page))
    assert not page.locator("#redacted").is_visible()
    no_problem_shown(page)


def test_older_pages_go_back_through_a_file_larger_than_a_page(page, cluster, talk):
    port = talk["shout_port"]
    path = log_path(cluster, talk, port)
    marker_at = path.read_bytes().index(f"said: {MARKER}".encode())
    wait_until(lambda: path.stat().st_size > marker_at + 4 * PAGE, 60,
               "the log to grow several pages past the marker")
    page.goto(f"/logs.html?id=talk&supervisor=s1&port={port}&page={PAGE}")
    page.locator("#log .record").first.wait_for()
    assert not any("said: first words" in line for line in records(page))
    assert page.locator("#newer").is_disabled()   # the newest page
    pages = [(int(shown(page, "start")), int(shown(page, "next")), "".join(records(page)))]
    while not any("said: first words" in line for line in records(page)):
        assert len(pages) < 60, "the marker was not found going back"
        page.click("#older")
        changed(page, "start", str(pages[-1][0]))
        start, next_ = int(shown(page, "start")), int(shown(page, "next"))
        assert next_ == pages[-1][0], "an older page ends where the one after it begins"
        assert 0 < next_ - start <= PAGE
        pages.append((start, next_, "".join(records(page))))
    assert len(pages) >= 3
    # Each page is the bytes of the file it says it is (the file grows at its end only), as a
    # reader without the token sees them.
    content = path.read_bytes()
    assert "".join(text for _start, _next, text in reversed(pages)) \
        == redact_text(content[pages[-1][0]:pages[0][1]].decode())
    # Newer comes forward again, to the page after.
    page.click("#newer")
    changed(page, "start", str(pages[-1][0]))
    assert int(shown(page, "start")) == pages[-1][1]
    assert redact_text(content[pages[-1][1]:].decode()).startswith("".join(records(page)))
    no_problem_shown(page)


def test_a_components_page_shows_its_lines_only(page, talk):
    page.goto(f"/component.html?id=talk&component=quiet&{REFRESH}")
    page.locator("#logs-link[href*='logs.html']").wait_for()
    page.click("#logs-link")
    page.wait_for_url(re.compile(r"component=quiet"))
    page.locator("#log .record").first.wait_for()
    assert page.locator("#title").inner_text() == "Logs of quiet"
    components = page.locator("#log .record").evaluate_all(
        "rs => rs.map(r => r.dataset.component)")
    assert components and set(components) == {"quiet"}, set(components)
    assert not any(" shout " in line for line in records(page))
    # Its lines of every worker running it, each prefixed with where, as the page's search
    # finds them: quiet said the marker once.
    page.fill("#grep", "said: first")
    page.click("#search-button")
    page.wait_for_function("() => document.querySelectorAll('#log .record').length === 1 && "
                           "document.querySelector('#log mark')", timeout=30_000)
    [line] = records(page)
    assert " quiet " in line and "said: first words" in line
    no_problem_shown(page)


def test_follow_shows_a_line_logged_after_the_page_opened(page, talk):
    port = talk["shout_port"]
    page.goto(f"/logs.html?id=talk&supervisor=s1&port={port}&only=shout&{REFRESH}")
    page.locator("#log .record").first.wait_for()
    page.check("#follow")
    say(talk, "while following")
    page.locator("#log .record", has_text="said: while following").first.wait_for(timeout=30_000)
    # Only shout's lines came, as the page's component filter says.
    components = page.locator("#log .record").evaluate_all(
        "rs => rs.map(r => r.dataset.component)")
    assert set(components) == {"shout"}, set(components)
    page.uncheck("#follow")
    no_problem_shown(page)


def test_download_is_the_workers_file(page, cluster, talk):
    port = talk["shout_port"]
    page.goto(f"/logs.html?id=talk&supervisor=s1&port={port}")
    page.locator("#log .record").first.wait_for()
    with page.expect_download() as download:
        page.click("#download")
    assert download.value.suggested_filename == f"talk-127.0.0.1-{port}-worker.log"
    text = Path(download.value.path()).read_text()
    on_disk = log_path(cluster, talk, port).read_text()
    # The file as it was when asked (it grows meanwhile), redacted: not signed in.
    assert redact_text(on_disk).startswith(text)
    assert len(text) > PAGE and "said: first words password=<redacted>" in text
    no_problem_shown(page)


def test_in_local_mode_the_page_says_where_the_logs_are(browser):
    with ui_cluster("steady") as (_cluster, server), \
            watched_page(browser, server.url) as (page, problems):
        page.goto(f"/topology.html?id=steady&{REFRESH}")
        page.locator("#worker-table a", has_text="logs").first.click()
        page.locator(".banner.notice", has_text="local mode").wait_for()
        assert "cluster" in page.locator(".banner").inner_text()
        assert not page.locator("#viewer").is_visible()
        assert not page.locator("#choices").is_visible()
        assert page.locator("#title").inner_text() == "Logs"
        assert problems == [], f"errors in the page's console: {problems}"
