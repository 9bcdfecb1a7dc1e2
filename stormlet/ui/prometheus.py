"""``/metrics``: every topology's metrics snapshots in Prometheus's exposition format.

Built at scrape time from the same snapshots the pages show (nothing is kept between scrapes).
Labels: topology (its name), component, task; per worker: host and port.

    counters (all time)   stormlet_{emitted,transferred,executed,acked,failed}_total,
                          stormlet_failures_total{reason, failed_component},
                          stormlet_{busy,throttled}_seconds_total
    gauges (last 10 min)  stormlet_capacity, stormlet_{execute,process,complete}_latency_seconds
                          {stat=mean|p50|p99}
    gauges (now)          stormlet_queue_depth, stormlet_queue_capacity,
                          stormlet_worker_{cpu_percent,rss_bytes,uptime_seconds},
                          stormlet_user_metric{metric, stat}, stormlet_ui_source_up
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .source import SourceUnavailable, UiSource, UnknownTopology

log = logging.getLogger(__name__)

TASK = ["topology", "component", "task"]
WORKER = ["topology", "host", "port"]
RECENT = "600"   # the window of the gauges, Storm's "10m"
COUNTS = ("transferred", "executed", "acked", "failed")
LATENCIES = ("execute", "process", "complete")
STATS = ("mean", "p50", "p99")


class SourceCollector:
    def __init__(self, source: UiSource):
        self.source = source

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("stormlet_ui_source_up",
                               "1 when the UI could read its cluster (or local topologies)")
        try:
            topologies = list(self._topologies())
        except SourceUnavailable as exc:
            log.warning("metrics scrape: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _families(topologies)

    def _topologies(self) -> Iterator[dict[str, Any]]:
        """Each topology's name and snapshots, all the families need."""
        for row in self.source.topologies():
            try:
                yield {"name": row["name"], "snapshots": self.source.snapshots(row)}
            except UnknownTopology:
                continue   # killed since listed


def _families(topologies: list[dict[str, Any]]) -> Iterator[Metric]:
    emitted = CounterMetricFamily("stormlet_emitted", "tuples emitted, by stream",
                                  labels=[*TASK, "stream"])
    counts = {k: CounterMetricFamily(f"stormlet_{k}", f"tuples {k}", labels=TASK) for k in COUNTS}
    failures = CounterMetricFamily(
        "stormlet_failures", "failed tuple trees by reason (timeout, fail, error) and by the "
        "component that failed or last touched the tuple", labels=[*TASK, "reason",
                                                                   "failed_component"])
    busy = CounterMetricFamily("stormlet_busy_seconds", "time spent executing", labels=TASK)
    throttled = CounterMetricFamily("stormlet_throttled_seconds",
                                    "time spent waiting on backpressure", labels=TASK)
    capacity = GaugeMetricFamily("stormlet_capacity",
                                 "busy fraction over the last 10 minutes", labels=TASK)
    latency = {k: GaugeMetricFamily(f"stormlet_{k}_latency_seconds",
                                    f"{k} latency over the last 10 minutes",
                                    labels=[*TASK, "stat"]) for k in LATENCIES}
    depth = GaugeMetricFamily("stormlet_queue_depth", "tuples waiting in the receive queue",
                              labels=TASK)
    queue_capacity = GaugeMetricFamily("stormlet_queue_capacity", "receive queue size",
                                       labels=TASK)
    user = GaugeMetricFamily("stormlet_user_metric", "metrics registered by components",
                             labels=[*TASK, "metric", "stat"])
    cpu = GaugeMetricFamily("stormlet_worker_cpu_percent", "worker process CPU", labels=WORKER)
    rss = GaugeMetricFamily("stormlet_worker_rss_bytes", "worker resident memory", labels=WORKER)
    uptime = GaugeMetricFamily("stormlet_worker_uptime_seconds", "worker uptime", labels=WORKER)
    unreachable = GaugeMetricFamily("stormlet_worker_peers_unreachable",
                                    "other workers this worker's links to are down",
                                    labels=WORKER)

    for topology in topologies:
        for snapshot in topology["snapshots"]:
            worker = snapshot["worker"]
            # Nimbus's "retired" snapshot holds replaced workers' counts, and is no worker.
            if not snapshot.get("retired"):
                where = [topology["name"], str(worker.get("host") or "local"),
                         str(worker.get("port") or "")]
                cpu.add_metric(where, worker["cpu_percent"])
                rss.add_metric(where, worker["rss_bytes"])
                uptime.add_metric(where, worker["uptime"])
                unreachable.add_metric(where, len(worker.get("peers_unreachable") or ()))
            for task in snapshot["tasks"]:
                labels = [topology["name"], task["component"], str(task["task"])]
                total, recent = task["windows"]["all"], task["windows"][RECENT]
                for stream, n in total["emitted"].items():
                    emitted.add_metric([*labels, stream], n)
                for key in COUNTS:
                    counts[key].add_metric(labels, total[key])
                for reason, failed_component, n in total["fail_reasons"]:
                    failures.add_metric([*labels, reason, failed_component or ""], n)
                busy.add_metric(labels, total["busy_secs"])
                throttled.add_metric(labels, total["throttled_secs"])
                if recent["seconds"] > 0:
                    capacity.add_metric(labels, recent["busy_secs"] / recent["seconds"])
                for key in LATENCIES:
                    for stat in STATS:
                        value = (recent.get(f"{key}_latency_ms") or {}).get(stat)
                        if value is not None:
                            latency[key].add_metric([*labels, stat], value / 1000)
                depth.add_metric(labels, task["queue_depth"])
                queue_capacity.add_metric(labels, task["queue_capacity"])
                for name, value in task.get("user", {}).items():
                    if isinstance(value, dict):
                        for stat, v in value.items():
                            if isinstance(v, (int, float)):
                                user.add_metric([*labels, name, stat], v)
                    elif isinstance(value, (int, float)):
                        user.add_metric([*labels, name, "value"], value)
    yield from (emitted, *counts.values(), failures, busy, throttled, capacity,
                *latency.values(), depth, queue_capacity, user, cpu, rss, uptime, unreachable)
