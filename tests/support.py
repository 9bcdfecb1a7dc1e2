"""Helpers shared by the tests that run topologies in a LocalCluster."""

from __future__ import annotations

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
