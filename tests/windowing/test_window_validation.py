"""The windowing API's checks against Storm's (BaseWindowedBolt, WindowedBoltExecutor.validate,
Duration, Count): what Storm accepts is accepted, what it refuses is refused, with the
component named."""

from __future__ import annotations

import pytest

from stormlet import Spout, TopologyBuilder
from stormlet.errors import TopologyError
from stormlet.windowing import Count, Duration, WindowedBolt


class Source(Spout):
    outputs = ["ts"]

    def next_tuple(self) -> None:
        pass


class Sums(WindowedBolt):
    outputs = ["n"]

    def execute(self, window) -> None:
        pass


def topology(bolt: WindowedBolt):
    builder = TopologyBuilder()
    builder.set_spout("source", Source())
    builder.set_bolt("sums", bolt).shuffle_grouping("source")
    return builder.build()


def test_a_zero_duration_is_a_duration_and_a_lag_of_zero_builds():
    # Storm's Duration.of(0) is valid, and withLag(Duration.of(0)) is "no lateness allowed".
    assert Duration() == Duration(ms=0) == Duration(seconds=0)
    bolt = Sums().with_tumbling_window(Duration(seconds=1)).with_timestamp_field("ts")
    assert topology(bolt.with_lag(Duration(ms=0))).components["sums"] is not None
    with pytest.raises(TopologyError, match="cannot be negative, got -1 ms"):
        Duration(ms=-1)


@pytest.mark.parametrize("window", [
    lambda bolt: bolt.with_window(Duration()),
    lambda bolt: bolt.with_window(Duration(seconds=1), Duration()),
    lambda bolt: bolt.with_tumbling_window(Duration(ms=0)),
])
def test_a_zero_window_length_or_sliding_interval_is_refused(window):
    # Storm: "Window length must be positive", "Sliding interval must be positive".
    with pytest.raises(TopologyError, match="must be a positive Count or Duration"):
        window(Sums())


def test_a_zero_watermark_interval_is_refused():
    # Storm's config validator: topology.bolts.watermark.event.interval.ms is positive.
    with pytest.raises(TopologyError, match="watermark interval must be a positive Duration"):
        Sums().with_watermark_interval(Duration())


def test_a_window_with_only_a_length_slides_on_every_tuple():
    # Storm's withWindow(length) slides by Count(1), it does not tumble.
    bolt = Sums().with_window(Duration(seconds=2))
    assert (bolt.window_length, bolt.window_sliding) == (Duration(seconds=2), Count(1))
    assert Sums().with_window(Count(5)).window_sliding == Count(1)


@pytest.mark.parametrize("first, second", [
    ("with_timestamp_field", "with_timestamp_extractor"),
    ("with_timestamp_field", "with_timestamp_field"),
    ("with_timestamp_extractor", "with_timestamp_field"),
])
def test_a_second_timestamp_source_is_refused(first, second):
    # Storm's withTimestampExtractor: "Window is already configured with a timestamp extractor".
    arg = {"with_timestamp_field": "ts", "with_timestamp_extractor": lambda t: 0}
    bolt = getattr(Sums(), first)(arg[first])
    with pytest.raises(TopologyError, match="Sums already has a timestamp"):
        getattr(bolt, second)(arg[second])


def test_a_window_equal_to_the_message_timeout_builds_and_a_longer_one_is_refused():
    # Storm refuses length + sliding > timeout, accepts equal.
    ok = topology(Sums().with_window(Duration(seconds=20), Duration(seconds=10)))
    assert ok.config_problems({"topology.message.timeout.secs": 30}) == []
    assert "longer than the message timeout" in " ".join(
        ok.config_problems({"topology.message.timeout.secs": 29}))


def test_a_count_window_larger_than_max_spout_pending_is_refused():
    # Storm's ensureCountLessThanMaxPending: length + sliding count <= max spout pending, else
    # the spouts stop before the window fills and nothing is ever acked.
    built = topology(Sums().with_window(Count(80), Count(20)))
    assert built.config_problems({"topology.max.spout.pending": 100}) == []
    assert built.config_problems({}) == []   # no limit
    assert built.config_problems({"topology.max.spout.pending": 99}) == [
        "windowed bolt 'sums': its window count (length plus sliding interval, 100) is more "
        "than topology.max.spout.pending (99): its spouts would stop before the window fills"]
    # The count part only of a mixed window, as Storm.
    mixed = topology(Sums().with_window(Count(80), Duration(seconds=1)))
    assert mixed.config_problems({"topology.max.spout.pending": 80}) == []
