"""The topology page's worker actions in a real headless browser (Debian's chromium, driven by
Playwright) against a loopback cluster with its secret on (ZooKeeper, nimbus, a supervisor, a
worker) and the UI serving it with its access token: signed in, Stack shows the worker's
threads, Profile shows a flame graph and offers it for download, Restart (confirmed) gives the
slot a new process; each is in the page's event history. Without the token, Stack sends the
browser to sign in. Every test also fails on a JavaScript error in the page's console."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser_support import chromium, require_browser, watched_page
from cluster_support import LEDGER, after_test, serve_cluster, wait_until
from zookeeper_server import zookeeper_available

from stormlet.cluster.nimbus_client import NimbusClient
from stormlet.cluster.security import Security
from stormlet.ui.access import UiAccess
from stormlet.ui.app import serve
from stormlet.ui.source import ClusterSource

require_browser()
if not zookeeper_available():
    pytest.skip("ZooKeeper is not installed: run deploy/zookeeper.sh install",
                allow_module_level=True)

from playwright.sync_api import Page, expect

NAME = "looked"
# The table is drawn again on every refresh: slowly here, so that a click finds its button.
REFRESH = "refresh=3"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("ui-workers")
    secret = base / "cluster.secret"
    Security.generate(secret)
    yield from serve_cluster(base / "cluster", 1, {"s1": 1}, secret)


@pytest.fixture(scope="module")
def topology(cluster, tmp_path_factory):
    """A reliable topology on one worker, each executor on a thread of its own; its data dir."""
    directory = tmp_path_factory.mktemp("ledger")
    cluster.submit(LEDGER, NAME, "topology.workers=1", f"ledger.dir={directory}",
                   "ledger.messages=1000000", "ledger.rate=300",
                   "stormlet.executor.shared.thread=false")
    wait_until(lambda: len(cluster.topology_workers(NAME)) == 1, 60, "its worker")
    return directory


@pytest.fixture(scope="module")
def ui(cluster, topology):
    security = Security.load(cluster.secret_file)
    source = ClusterSource(NimbusClient(cluster.zk.hosts, security=security))
    token = security.ui_token()
    server = serve(source, "127.0.0.1", 0, access=UiAccess.for_host("127.0.0.1", token=token))
    try:
        yield server, token
    finally:
        server.stop()
        source.close()


@pytest.fixture(autouse=True)
def _after(request, cluster):
    yield
    after_test(request, cluster, kill_left=False)


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(browser, ui):
    """A page signed in with the UI's token."""
    server, token = ui
    with watched_page(browser, server.url) as (page, problems):
        page.goto("/login.html")
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/index\.html"))
        yield page
    assert problems == [], f"errors in the page's console: {problems}"


def worker_row(page: Page):
    page.goto(f"/topology.html?id={NAME}&{REFRESH}")
    row = page.locator("#worker-table tr[data-worker]")
    expect(row).to_have_count(1, timeout=30_000)
    return row


def test_stack_shows_the_workers_threads_by_name(page, cluster):
    row = worker_row(page)
    (_slot, beat), = cluster.topology_workers(NAME).items()
    assert row.get_attribute("data-worker").startswith("127.0.0.1:")
    row.locator('button[data-action="stack"]').click()
    stacks = page.locator("#worker-stacks")
    expect(stacks).to_contain_text(re.compile(rf'"{NAME}:relay:\d+-\d+"'), timeout=30_000)
    expect(stacks).to_contain_text("Written by the process itself on SIGUSR1")
    expect(page.locator("#worker-panel-title")).to_contain_text(f"(pid {beat['pid']})")
    expect(page.locator("#events tr[data-kind=stack-dump]")).to_have_count(1, timeout=15_000)


def test_profile_shows_a_flame_graph_and_offers_it_for_download(page):
    row = worker_row(page)
    row.locator('button[data-action="profile"]').click()
    page.fill("#profile-seconds", "2")
    page.check("#profile-idle")   # a worker at this rate waits more than it works
    page.click("#dialog-confirm")
    expect(page.locator("#profile-status")).to_contain_text("profiling")
    graph = page.locator("#profile-flame-graph")
    expect(graph).to_be_visible(timeout=60_000)
    page.wait_for_function("() => document.getElementById('profile-flame-graph').naturalWidth > 0",
                           timeout=15_000)
    with page.expect_download() as download:
        page.click("#profile-download")
    saved = Path(download.value.path()).read_bytes()
    assert saved.startswith(b"<?xml") and f"{NAME}:".encode() in saved
    assert download.value.suggested_filename.endswith(".svg")
    expect(page.locator("#events tr[data-kind=profile]")).to_have_count(1, timeout=15_000)


def test_restart_after_confirmation_gives_the_slot_a_new_worker(page, cluster):
    row = worker_row(page)
    (slot, beat), = cluster.topology_workers(NAME).items()
    row.locator('button[data-action="restart"]').click()
    page.click("#dialog-cancel")   # cancelling does nothing
    row.locator('button[data-action="restart"]').click()
    page.fill("#restart-reason", "from the browser")
    page.click("#dialog-confirm")
    expect(page.locator("#banner")).to_contain_text(f"(pid {beat['pid']} stopped", timeout=60_000)
    wait_until(lambda: cluster.topology_workers(NAME).get(slot, {}).get("pid", beat["pid"])
               != beat["pid"], 60, "a new worker on the slot")
    asked = page.locator("#events tr[data-kind=restart-asked]")
    expect(asked).to_have_count(1, timeout=15_000)
    expect(asked).to_contain_text("asked by the UI, from 127.0.0.1: from the browser")
    new_pid = cluster.topology_workers(NAME)[slot]["pid"]
    expect(page.locator(f'#worker-table td[data-field="pid"][data-value="{new_pid}"]')
           ).to_have_count(1, timeout=30_000)


def test_without_the_token_stack_sends_the_browser_to_sign_in(browser, ui):
    server, _token = ui
    # Its refused request shows in the console as an error: expected here.
    with watched_page(browser, server.url) as (page, _problems):
        worker_row(page).locator('button[data-action="stack"]').click()
        page.wait_for_url(re.compile(r"/login\.html"), timeout=15_000)
