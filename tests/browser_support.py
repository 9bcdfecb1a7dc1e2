"""Debian's chromium driven by Playwright, for the UI's browser tests and for the screenshots the
docs show: where the browser is, how it is started, and a page that records every error its
console shows (a test fails on any).

Importing this in a test module skips the module when chromium is missing, unless
STORMLET_REQUIRE_BROWSER=1 makes that a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}


def require_browser() -> None:
    """Skip the calling test module when chromium is missing (see the module docstring)."""
    if not CHROMIUM.exists() and os.environ.get("STORMLET_REQUIRE_BROWSER") != "1":
        pytest.skip(f"{CHROMIUM} is missing: run deploy/chromium.sh (or set "
                    f"STORMLET_REQUIRE_BROWSER=1 to make this a failure)", allow_module_level=True)


@contextmanager
def chromium() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def watched_page(browser, base_url: str, viewport: dict | None = None) -> Iterator:
    """A page at ``base_url`` in a context of its own; yields (page, problems), problems being
    every error the page's console showed."""
    context = browser.new_context(base_url=base_url, viewport=viewport or VIEWPORT)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    try:
        yield page, problems
    finally:
        context.close()
