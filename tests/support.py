"""Helpers shared by the tests that run topologies in a LocalCluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager

from stormlet import LocalCluster


@contextmanager
def running(topology, conf, name="test"):
    """A LocalCluster running ``topology``; killed without waiting at the end if still running."""
    with LocalCluster() as cluster:
        cluster.submit(name, conf, topology)
        try:
            yield cluster
        finally:
            if name in cluster.topologies():
                cluster.kill(name, wait_secs=0)


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               interval: float = 0.1) -> None:
    """Poll ``condition`` every ``interval`` seconds until it holds; AssertionError after
    ``timeout`` seconds, naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
