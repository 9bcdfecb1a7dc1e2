"""Makes the README's screenshot of the topology page's charts (docs/images/topology-charts.png):
the ``waves`` topology (charts_support.py) runs for a few minutes in local mode, then chromium
shows its topology page and the top of it, down to the end of the charts, is saved.

    flock /tmp/stormlet-slow.lock python tests/charts_screenshot.py docs/images/topology-charts.png

Options: --seconds (how long it runs first, default 180), --step (the history's bucket, default
2 s: the charts of a few minutes at nimbus's 10 s would have a handful of points).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from browser_support import chromium, watched_page  # noqa: E402
from charts_support import charts_cluster  # noqa: E402

VIEWPORT = {"width": 1280, "height": 1000}


def screenshot(path: Path, seconds: float, step: float) -> int:
    """Saves the screenshot at ``path``; returns its size in bytes."""
    with charts_cluster("waves", step=step) as (_cluster, server):
        time.sleep(seconds)
        with chromium() as browser, watched_page(browser, server.url, VIEWPORT) as (page,
                                                                                   problems):
            page.goto("/topology.html?id=waves")
            page.wait_for_function("() => Number(document.querySelector("
                                   "'.chart[data-metric=emitted]')?.dataset.points) > 2",
                                   timeout=30_000)
            page.locator("svg#graph g.node").first.wait_for()
            page.wait_for_timeout(500)   # the tables' and charts' first refresh settles
            bottom = page.evaluate("() => { const r = document.getElementById('charts-section')"
                                   ".getBoundingClientRect(); return r.bottom + window.scrollY; }")
            # The page's top (name, status, stats, graph) and its charts, not the tables below.
            path.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(path), full_page=True,
                            clip={"x": 0, "y": 0, "width": VIEWPORT["width"],
                                  "height": bottom + 16})
            if problems:
                raise SystemExit(f"errors in the page's console: {problems}")
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--step", type=float, default=2.0)
    args = parser.parse_args()
    size = screenshot(args.path, args.seconds, args.step)
    print(f"{args.path}: {size // 1024} KB")


if __name__ == "__main__":
    main()
