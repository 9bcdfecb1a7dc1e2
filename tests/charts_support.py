"""A LocalCluster and the UI for the charts' tests: the history's buckets are a second long and
topologies report twice a second, so that a chart has points within seconds.

``waves`` is a topology whose numbers move, for charts worth looking at (the README's
screenshot): its spout's rate rises and falls over a minute, its bolt works a millisecond a
tuple (capacity follows the rate), and its sink fails one tuple in fifty, once (its replay is
acked).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ui_support import FINITE, STEADY, topology

from stormlet import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet.metrics.history import MetricsHistory
from stormlet.ui.app import serve
from stormlet.ui.source import LocalSource

STEP = 1.0            # seconds a fine bucket holds here
COARSE_STEP = 2.0     # and a coarse one, at first
REPORT = {"topology.metrics.report.secs": 0.5}
WAVE_SECS = 60.0      # the period of the waves spout's rate


class Waves(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.started = time.monotonic()
        self.sent = 0.0
        self.n = context.this_task_index * 1_000_000

    def next_tuple(self):
        ran = time.monotonic() - self.started
        # Tuples due by now at 150 ± 100 a second, rising and falling over WAVE_SECS.
        phase = 2 * math.pi * ran / WAVE_SECS
        due = 150 * ran + 100 * WAVE_SECS / (2 * math.pi) * (1 - math.cos(phase))
        if self.sent >= due:
            time.sleep(0.002)
            return
        self.sent += 1
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)

    def fail(self, msg_id, reason):
        self.collector.emit([msg_id], msg_id=msg_id)


class Work(BasicBolt):
    outputs = ["n"]

    def execute(self, tup, collector):
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
        collector.emit([tup[0]])


class FailSome(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.failed_once = set()

    def execute(self, tup):
        if tup[0] % 50 == 0 and tup[0] not in self.failed_once:   # its replay is acked
            self.failed_once.add(tup[0])
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def waves():
    builder = TopologyBuilder()
    builder.set_spout("waves", Waves(), parallelism=1)
    builder.set_bolt("work", Work(), parallelism=2).shuffle_grouping("waves")
    builder.set_bolt("sink", FailSome(), parallelism=1).shuffle_grouping("work")
    return builder.build()


TOPOLOGIES: dict[str, tuple[dict[str, Any], Any]] = {
              "finite": (FINITE, topology), "steady": (STEADY, topology),
              "waves": ({"topology.message.timeout.secs": 10}, waves)}


@contextmanager
def charts_cluster(*names: str, step: float = STEP,
                   **serve_options: Any) -> Iterator[tuple[LocalCluster, Any]]:
    """The named topologies (of ``TOPOLOGIES``) on a LocalCluster, reporting every half second
    to a history of ``step``-second buckets, and the UI serving them; all stopped at the end."""
    with LocalCluster() as cluster:
        for name in names:
            conf, build = TOPOLOGIES[name]
            cluster.submit(name, {**conf, **REPORT}, build())
        source = LocalSource(cluster, MetricsHistory(step=step, coarse_step=COARSE_STEP * step))
        server = serve(source, "127.0.0.1", 0, **serve_options)
        try:
            yield cluster, server
        finally:
            server.stop()
            source.charts.close()
            for name in cluster.topologies():
                cluster.kill(name, wait_secs=0)
