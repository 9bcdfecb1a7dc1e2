"""The time series nimbus keeps for the charts (``metrics.history``): rates per bucket that are
the counters' true rates however the reports fall, across workers and restarts; buckets shown
only once complete; a whole life held in bounded memory at a resolution that coarsens as it
grows. Synthetic worker snapshots on a clock the test moves."""

from __future__ import annotations

import sys

import pytest
from metrics_feed import LATENCY_BUCKET, TID, Clock, Task, Worker, run

from stormlet.metrics.histogram import upper_edge
from stormlet.metrics.history import (
    COARSE_POINTS,
    HOUR_SECS,
    METRICS,
    STEP_SECS,
    MetricsHistory,
)
from stormlet.metrics.shape import task_row_problem


def values(series: dict, component: str, metric: str) -> list:
    return series["components"][component][metric]


def test_rates_are_the_counters_rates_however_the_reports_fall():
    clock = Clock()
    history = MetricsHistory(clock)
    spout, bolt_a, bolt_b = Task("source", 1), Task("count", 2, "bolt"), Task("count", 3, "bolt")
    bolt_a.busy, bolt_b.busy, bolt_a.throttled = 0.5, 0.2, 0.125
    bolt_b.rate = 30.0
    workers = [Worker(history, clock, 6700, [spout, bolt_a]),
               Worker(history, clock, 6701, [bolt_b])]
    assert task_row_problem(spout.row(0.0)) is None   # the rows are as nimbus accepts them
    run(clock, workers, 600, every=5, jitter=2.0)
    series = history.series(TID, "fine")
    assert series["step"] == STEP_SECS
    assert len(series["times"]) >= 600 / STEP_SECS - 3   # all but the first and incomplete
    assert all(t % STEP_SECS == 0 for t in series["times"])
    inner = slice(2, None)   # from the second full bucket on: workers started mid-bucket
    # Counters are whole tuples: a bucket's rate is off by at most one tuple in its 10 s.
    assert values(series, "source", "emitted")[inner] == pytest.approx(
        [10.0] * len(series["times"][inner]), abs=0.1)
    # A component's rate is its tasks' rates added up, whichever worker runs them.
    assert values(series, "count", "acked")[inner] == pytest.approx(
        [40.0] * len(series["times"][inner]), abs=0.2)
    # Capacity and backpressure are the busiest (most throttled) task's fraction of the time.
    assert values(series, "count", "capacity")[inner] == pytest.approx(
        [0.5] * len(series["times"][inner]), abs=1e-3)
    assert values(series, "count", "backpressure")[inner] == pytest.approx(
        [0.125] * len(series["times"][inner]), abs=1e-3)
    p99 = upper_edge(LATENCY_BUCKET) * 1000
    assert set(values(series, "source", "complete_p99_ms")[inner]) == {round(p99, 3)}
    assert set(values(series, "count", "complete_p50_ms")) == {None}   # bolts complete nothing
    assert series["components"]["source"]["kind"] == "spout"
    assert set(series["components"]["count"]) == {"kind", *METRICS}


def test_a_change_of_rate_shows_in_the_buckets_it_happened_in():
    clock = Clock()
    history = MetricsHistory(clock)
    spout = Task("source", 1)
    worker = Worker(history, clock, 6700, [spout])
    run(clock, [worker], 200 - clock.now % STEP_SECS, every=4)   # up to a bucket's edge
    spout.rate = 50.0
    run(clock, [worker], 200, every=4)
    series = history.series(TID, "fine")
    emitted = dict(zip(series["times"], values(series, "source", "emitted")))
    change = clock.now - 200
    before = [r for t, r in emitted.items() if change - 150 <= t < change]
    after = [r for t, r in emitted.items() if change <= t]
    # A bucket holding a report from each side of the change has both rates, pro rata; every
    # other bucket has its own rate.
    assert before[:-1] == pytest.approx([10.0] * (len(before) - 1), abs=0.002)
    assert after[1:] == pytest.approx([50.0] * (len(after) - 1), abs=0.002)
    assert 10.0 <= before[-1] <= 50.0 and 10.0 <= after[0] <= 50.0


def test_a_restarted_worker_counts_from_zero_without_a_dip_or_a_double_count():
    clock = Clock()
    history = MetricsHistory(clock)
    first = Worker(history, clock, 6700, [Task("source", 1)])
    run(clock, [first], 120)
    # The supervisor restarts it on the same slot: another process, its counters from zero.
    second = Worker(history, clock, 6700, [Task("source", 1)])
    run(clock, [second], 120)
    series = history.series(TID, "fine")
    rates = values(series, "source", "emitted")[1:]
    assert rates == pytest.approx([10.0] * len(rates), abs=0.002)


def test_a_worker_first_heard_of_late_gives_a_base_not_a_spike():
    """A nimbus that has just become leader hears of a worker that ran for an hour: its
    counters since it started lie in no bucket it knows of."""
    clock = Clock()
    spout = Task("source", 1)
    elsewhere = MetricsHistory(clock)
    worker = Worker(elsewhere, clock, 6700, [spout])
    run(clock, [worker], 3600)
    history = worker.history = MetricsHistory(clock)   # the new leader's
    run(clock, [worker], 120)
    rates = values(history.series(TID, "fine"), "source", "emitted")
    assert rates == pytest.approx([10.0] * len(rates), abs=0.002) and len(rates) >= 9


def test_a_bucket_is_answered_once_every_reporting_worker_has_reported_past_it():
    clock = Clock(1_000_000.0)
    history = MetricsHistory(clock)
    a = Worker(history, clock, 6700, [Task("source", 1)])
    b = Worker(history, clock, 6701, [Task("count", 2, "bolt")])
    run(clock, [a, b], 60, every=5)
    shown = history.series(TID, "fine")["times"][-1]
    # Only a reports for a while: b's last report holds the newest buckets back...
    run(clock, [a], 10, every=5)
    assert history.series(TID, "fine")["times"][-1] == shown
    # ... until b has been silent for three of its intervals: a dead worker holds back nothing.
    run(clock, [a], 20, every=5)
    series = history.series(TID, "fine")
    assert series["times"][-1] >= clock.now - 2 * STEP_SECS
    # The buckets b no longer covers have no numbers for its component, rather than zeros.
    assert values(series, "count", "acked")[-1] is None
    assert values(series, "source", "emitted")[-1] == pytest.approx(10.0, abs=0.002)


def test_a_time_no_worker_covered_is_a_gap():
    clock = Clock()
    history = MetricsHistory(clock)
    run(clock, [Worker(history, clock, 6700, [Task("source", 1)])], 100)
    clock.now += 300   # nothing runs: the worker died and no other has started yet
    run(clock, [Worker(history, clock, 6700, [Task("source", 1)])], 100)
    series = history.series(TID, "fine")
    rates = dict(zip(series["times"], values(series, "source", "emitted")))
    gap = [t for t, r in rates.items() if r is None]
    assert len(gap) >= 300 / STEP_SECS - 2
    assert all(rate == pytest.approx(10.0, abs=0.002) for t, rate in rates.items()
               if rate is not None and t + STEP_SECS <= min(gap) - STEP_SECS)


def test_the_fine_series_holds_the_last_hour_and_the_coarse_one_the_whole_life():
    clock = Clock()
    start = clock.now
    history = MetricsHistory(clock)
    run(clock, [Worker(history, clock, 6700, [Task("source", 1)])], 2 * HOUR_SECS, every=5)
    fine, coarse = history.series(TID, "fine"), history.series(TID, "coarse")
    hour_ago = clock.now - HOUR_SECS
    assert hour_ago - STEP_SECS <= fine["times"][0] <= hour_ago + STEP_SECS
    assert len(fine["times"]) <= HOUR_SECS / STEP_SECS + 1
    assert coarse["times"][0] <= start < coarse["times"][0] + coarse["step"]
    rates = values(coarse, "source", "emitted")
    assert rates[1:] == pytest.approx([10.0] * (len(rates) - 1), abs=0.002)
    with pytest.raises(ValueError, match="resolution must be one of fine, coarse"):
        history.series(TID, "daily")


def test_a_long_life_coarsens_the_whole_life_series_and_keeps_its_totals():
    clock = Clock(0.0)
    history = MetricsHistory(clock, step=1, hour=60, coarse_step=5, coarse_points=16)
    spout = Task("source", 1)
    worker = Worker(history, clock, 6700, [spout])
    run(clock, [worker], 100, every=1)
    assert history.series(TID, "coarse")["step"] == 10   # 20 buckets of 5 s: merged in pairs
    run(clock, [worker], 10_000, every=1)
    coarse = history.series(TID, "coarse")
    assert len(coarse["times"]) <= 16
    assert coarse["step"] == 5 * 2 ** 7   # 10,100 s in at most 16 buckets of 5 s * 2^k
    assert all(t % coarse["step"] == 0 for t in coarse["times"])
    rates = values(coarse, "source", "emitted")
    assert rates == pytest.approx([10.0] * len(rates), abs=0.002)
    # The fine series still holds the last minute at one second.
    fine = history.series(TID, "fine")
    assert fine["step"] == 1 and 58 <= len(fine["times"]) <= 61


def deep_size(value, seen=None) -> int:
    """Bytes held by ``value`` and everything it refers to (objects counted once)."""
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, type):
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, (list, tuple, set)):
        size += sum(deep_size(v, seen) for v in value)
    for slot in getattr(type(value), "__slots__", ()):
        if hasattr(value, slot):
            size += deep_size(getattr(value, slot), seen)
    if hasattr(value, "__dict__"):
        size += deep_size(vars(value), seen)
    return size


def test_memory_stays_bounded_however_long_a_topology_runs():
    """Default resolutions, a topology of three components reporting every two minutes (so that
    simulated weeks take seconds), with a worker restart every day: the history after three
    weeks is no larger than it was in its first eight days (when its whole-life series filled
    and merged six times already)."""
    clock = Clock(0.0)
    history = MetricsHistory(clock)
    tasks = [Task("source", 1), Task("split", 2, "bolt"), Task("count", 3, "bolt")]
    sizes = []
    for day in range(21):
        worker = Worker(history, clock, 6700, tasks)
        for t in tasks:
            t.emitted = t.busy_secs = t.throttled_secs = 0.0
        run(clock, [worker], 86_400, every=120)
        if day < 8 or day % 4 == 0:
            sizes.append(deep_size(history))
    coarse = history.series(TID, "coarse")
    assert len(coarse["times"]) <= COARSE_POINTS
    assert coarse["times"][0] == 0 and coarse["times"][-1] >= 20 * 86_400
    assert len(history.series(TID, "fine")["times"]) <= HOUR_SECS / STEP_SECS + 1
    assert max(sizes[8:]) <= 1.05 * max(sizes[:8]), sizes   # days 8, 12, 16, 20


def test_retain_forgets_killed_topologies():
    clock = Clock()
    history = MetricsHistory(clock)
    run(clock, [Worker(history, clock, 6700, [Task("source", 1)])], 60)
    assert history.topologies() == [TID]
    history.retain({"other"})
    assert history.topologies() == []
    assert history.series(TID, "fine") == {"resolution": "fine", "step": STEP_SECS,
                                           "times": [], "components": {}}
