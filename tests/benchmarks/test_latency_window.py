"""The cluster benchmarks' complete latency over a window (benchmarks/cluster_wordcount.py's
``latency_window``, which scaling.py uses too): the difference of each spout task's cumulative
histogram at the window's two ends, read from nimbus's metrics reports, so that a stall at the
topology's start, which sets the percentiles since the start, does not set the window's."""

import pytest
from support import benchmark_module

from stormlet.metrics.histogram import bucket_of, upper_edge
from stormlet.metrics.shape import task_row_problem
from stormlet.metrics.windows import ALL_TIME
from stormlet.runtime.metrics import TaskMetrics, window_stats

STALL, FAST, SLOWER = 0.4, 0.001, 0.005   # seconds


cw = benchmark_module("cluster_wordcount", "cw")


def record(metrics: TaskMetrics, seconds: float, n: int) -> None:
    for _ in range(n):
        metrics.complete_latency.record(seconds)


def ms(seconds: float) -> float:
    """A percentile as the summaries give it: its bucket's upper edge, in ms."""
    return round(upper_edge(bucket_of(seconds)) * 1000, 3)


def report(port: int, when: float, tasks: list[TaskMetrics]) -> dict:
    """One worker's report as nimbus answers ``metrics`` with it: per task, the cumulative
    counters in the "all" window (``TopologyRuntime.metrics_snapshot``'s shape)."""
    rows = [{"component": m.component, "task": m.task,
             "kind": "spout" if m.component == "events" else "bolt", "executor": [m.task, m.task],
             "queue_depth": 0, "queue_capacity": 1024, "user": {},
             "windows": {ALL_TIME: window_stats(when, m.sample())}} for m in tasks]
    for row in rows:
        assert task_row_problem(row, windows=(ALL_TIME,)) is None
    return {"topology_id": "scaling0-1-abcd", "name": "scaling0", "time": when,
            "worker": {"host": "127.0.0.1", "port": port}, "tasks": rows}


def test_a_window_s_percentiles_leave_out_a_stall_before_it(cw):
    spout_a, spout_b, bolt = TaskMetrics("events", 1), TaskMetrics("events", 2), TaskMetrics(
        "sum", 3)
    record(spout_a, STALL, 200)   # the start-up's stall: 2 % of every latency in the end
    record(spout_a, FAST, 800)
    record(bolt, STALL, 1000)     # not the spout's: not counted
    before = [report(6700, 10.0, [spout_a, bolt]), report(6701, 12.0, [spout_b])]
    record(spout_a, FAST, 5000)
    record(spout_b, FAST, 4000)
    record(spout_b, SLOWER, 100)   # the window's slowest 1 %, in one worker
    after = [report(6700, 18.5, [spout_a, bolt]), report(6701, 21.0, [spout_b])]

    latency = cw.latency_window(before, after, "events")

    window, since_start = latency["window"], latency["since_start"]
    assert window["count"] == 9100 and since_start["count"] == 10100
    assert window["p50"] == ms(FAST) and window["p99"] == ms(SLOWER)
    assert since_start["p99"] == ms(STALL)   # what the heartbeats showed: the stall's
    workers = latency["workers"]
    assert list(workers) == ["127.0.0.1:6700", "127.0.0.1:6701"]
    assert workers["127.0.0.1:6700"]["window"]["p99"] == ms(FAST)
    assert workers["127.0.0.1:6700"]["since_start"]["p99"] == ms(STALL)
    assert workers["127.0.0.1:6701"]["window"] == workers["127.0.0.1:6701"]["since_start"]
    assert latency["seconds"] == (8.5, 9.0)
    lines = cw.latency_lines(latency).splitlines()
    assert lines[0].startswith("  complete latency over the window (8.5–9.0 s of reports): "
                               f"p50 {ms(FAST)} ms, p99 {ms(SLOWER)} ms of 9,100")
    assert f"p99 {ms(STALL)} ms of 10,100 (per worker p99 {ms(STALL)}, {ms(SLOWER)}" in lines[1]


def test_a_task_first_reported_within_the_window_counts_whole(cw):
    spout = TaskMetrics("events", 1)
    record(spout, FAST, 10)
    window = cw.histogram_window(None, window_stats(1.0, spout.sample())["histograms"]["complete"])
    assert window["count"] == 10 and window["buckets"] == [[bucket_of(FAST), 10]]


def test_readings_that_go_back_are_refused(cw):
    spout = TaskMetrics("events", 1)
    record(spout, FAST, 10)
    earlier = window_stats(1.0, spout.sample())["histograms"]["complete"]
    record(spout, SLOWER, 5)
    later = window_stats(2.0, spout.sample())["histograms"]["complete"]
    assert cw.histogram_window(earlier, later)["buckets"] == [[bucket_of(SLOWER), 5]]
    with pytest.raises(ValueError, match="went back"):
        cw.histogram_window(later, earlier)
