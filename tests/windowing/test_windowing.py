"""Windowed bolts (stormlet/windowing.py): window contents pinned exactly on explicit clocks for
each kind, then real topologies in a LocalCluster: acked as tuples leave their last window,
anchored emits, failures replayed, and windows longer than the message timeout refused."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support import running, wait_until

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.errors import TopologyError
from stormlet.windowing import (
    Count,
    Duration,
    EventTimeWindowManager,
    WindowedBolt,
    WindowManager,
)


def fire_log(fired):
    """Each fired window as (items, new, expired, start, end); a firing with nothing in its
    window but items leaving it as (None, expired)."""
    out = []
    for window, expired in fired:
        if window is None:
            out.append((None, expired))
        else:
            assert window.get_expired() == expired
            out.append((window.get(), window.get_new(), expired, window.start, window.end))
    return out


# ----- the bookkeeping, exactly

def test_count_sliding_window():
    manager = WindowManager(Count(3), Count(2), start_ms=0)
    log = []
    for i in range(1, 8):
        log += fire_log(manager.add(i, now_ms=i * 10))
    assert log == [([1, 2], [1, 2], [], 10, 20),
                   ([2, 3, 4], [3, 4], [1], 20, 40),
                   ([4, 5, 6], [5, 6], [2, 3], 40, 60)]
    assert manager.items() == [4, 5, 6, 7]


def test_count_tumbling_window():
    manager = WindowManager(Count(3), Count(3), start_ms=0)
    log = []
    for i in range(1, 10):
        log += fire_log(manager.add(i, now_ms=i))
    assert [entry[0] for entry in log] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [entry[2] for entry in log] == [[], [1, 2, 3], [4, 5, 6]]


def test_duration_tumbling_window_on_a_controlled_clock():
    manager = WindowManager(Duration(seconds=1), Duration(seconds=1), start_ms=0)
    log = []
    for item, at in (("a", 100), ("b", 500), ("c", 999), ("d", 1000), ("e", 1500)):
        log += fire_log(manager.add(item, at))
    log += fire_log(manager.advance(2000))
    log += fire_log(manager.advance(3000))    # nothing arrived: e leaves, no window fires
    log += fire_log(manager.advance(4000))    # nothing at all
    assert log == [(["a", "b", "c"], ["a", "b", "c"], [], 0, 1000),
                   (["d", "e"], ["d", "e"], ["a", "b", "c"], 1000, 2000),
                   (None, ["d", "e"])]


def test_duration_sliding_window_fires_each_interval_with_the_last_length_of_tuples():
    manager = WindowManager(Duration(ms=300), Duration(ms=100), start_ms=0)
    log = []
    for item, at in (("a", 50), ("b", 150), ("c", 250), ("d", 350)):
        log += fire_log(manager.add(item, at))
    log += fire_log(manager.advance(450))   # fires at 400: a left at 300
    assert [(e[0], e[2], e[3], e[4]) for e in log] == [
        (["a"], [], -200, 100), (["a", "b"], [], -100, 200), (["a", "b", "c"], [], 0, 300),
        (["b", "c", "d"], ["a"], 100, 400)]


def test_count_length_with_duration_sliding_and_duration_length_with_count_sliding():
    by_time = WindowManager(Count(2), Duration(ms=100), start_ms=0)
    log = []
    for item, at in (("a", 10), ("b", 20), ("c", 30), ("d", 150)):
        log += fire_log(by_time.add(item, at))
    log += fire_log(by_time.advance(200))
    assert [(e[0], e[2]) for e in log] == [(["b", "c"], ["a"]), (["c", "d"], ["b"])]

    by_count = WindowManager(Duration(ms=100), Count(2), start_ms=0)
    log = []
    for item, at in (("a", 10), ("b", 20), ("c", 130), ("d", 140)):
        log += fire_log(by_count.add(item, at))
    assert [(e[0], e[2], e[3], e[4]) for e in log] == [
        (["a", "b"], [], -80, 20), (["c", "d"], ["a", "b"], 40, 140)]


def test_a_discarded_item_leaves_the_window_and_is_not_expired():
    manager = WindowManager(Count(2), Count(2), start_ms=0)
    manager.add("a", 1)
    assert manager.discard("a") and not manager.discard("a")
    # It still counted as an arrival: the window fires on the second, holding only b.
    (window, expired), = manager.add("b", 2)
    assert window.get() == ["b"] and window.get_new() == ["b"] and expired == []


def test_event_time_windows_follow_timestamps_out_of_order_and_call_old_ones_late():
    manager = EventTimeWindowManager(Duration(ms=100), Duration(ms=100), lag_ms=20,
                                     sources={1, 2})
    log = []
    for item, ts, source in (("a", 1010, 1), ("b", 1050, 1), ("c", 1030, 2)):
        manager.add(item, ts, source)
    log += fire_log(manager.advance())      # watermark min(1050, 1030) - 20 = 1010: no end yet
    assert manager.watermark == 1010
    for item, ts, source in (("d", 1120, 1), ("e", 1090, 2), ("f", 1125, 2)):
        manager.add(item, ts, source)       # e arrives after d but belongs to the first window
    log += fire_log(manager.advance())      # watermark 1120 - 20 = 1100: [1000, 1100) fires
    assert manager.watermark == 1100
    assert manager.is_late(1099) and not manager.is_late(1100)
    for item, ts, source in (("g", 1230, 1), ("h", 1260, 2)):
        manager.add(item, ts, source)
    log += fire_log(manager.advance())      # watermark 1210: [1100, 1200) fires, a..e leave
    assert log == [(["a", "c", "b", "e"], ["a", "c", "b", "e"], [], 1000, 1100),
                   (["d", "f"], ["d", "f"], ["a", "c", "b", "e"], 1100, 1200)]


def test_event_time_sliding_windows_and_a_silent_input_holding_the_watermark():
    manager = EventTimeWindowManager(Duration(ms=200), Duration(ms=100), lag_ms=0,
                                     sources={1, 2})
    manager.add("a", 50, 1)
    manager.add("b", 150, 1)
    assert manager.advance() == [] and manager.watermark is None   # task 2 has sent nothing
    manager.add("c", 310, 2)
    manager.add("d", 320, 1)
    log = fire_log(manager.advance())       # watermark 310: ends 100, 200, 300
    assert [(e[0], e[2], e[3], e[4]) for e in log] == [
        (["a"], [], -100, 100), (["a", "b"], [], 0, 200), (["b"], ["a"], 100, 300)]


@pytest.mark.parametrize("bad", [lambda: Count(0), lambda: Count(1.5),  # type: ignore[arg-type]
                                 lambda: Duration(ms=-1),
                                 lambda: Duration(seconds="x"),  # type: ignore[arg-type]
                                 lambda: Totals().with_window(10)])  # type: ignore[arg-type]
def test_bad_window_sizes_are_refused(bad):
    with pytest.raises(TopologyError):
        bad()


# ----- in a topology

class Numbers(Spout):
    """Emits 0..count-1 tracked; records acks and fails."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.count = int(conf["test.count"])
        self.next_n = 0
        self.acked, self.failed = [], []
        self.lock = threading.Lock()

    def next_tuple(self):
        if self.next_n < self.count:
            self.collector.emit([self.next_n], msg_id=self.next_n)
            self.next_n += 1
        else:
            time.sleep(0.001)

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        self.failed.append((msg_id, reason.kind))


class Totals(WindowedBolt):
    outputs = ["numbers"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.boom_once = conf.get("test.boom_once")

    def execute(self, window):
        numbers = [t[0] for t in window.get()]
        if self.boom_once is not None and self.boom_once in numbers:
            self.boom_once = None
            raise RuntimeError("boom")
        self.collector.emit([numbers])


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.windows = []

    def execute(self, tup):
        self.windows.append(tup[0])
        self.collector.ack(tup)


def windowed_topology(window_bolt):
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("totals", window_bolt).global_grouping("numbers")
    builder.set_bolt("sink", Sink()).global_grouping("totals")
    return builder.build()


def test_a_tumbling_time_window_sees_every_tuple_once_and_acks_each_when_it_leaves():
    topology = windowed_topology(Totals().with_tumbling_window(Duration(ms=200)))
    with running(topology, {"test.count": 300, "topology.message.timeout.secs": 10}) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        wait_until(lambda: len(spout.acked) == 300, 20, "every number to be acked")
        sink = cluster.instances("test", "sink")[0]
        assert sorted(n for window in sink.windows for n in window) == list(range(300))
        assert spout.failed == []
        runner = cluster.instances("test", "totals")[0]
        assert runner.manager.items() == []


@pytest.mark.slow   # waits out windows (and timeouts) by design
def test_a_count_sliding_window_holds_the_last_n_and_emits_anchored_to_them():
    topology = windowed_topology(Totals().with_window(Count(4), Count(2)))
    with running(topology, {"test.count": 10, "topology.message.timeout.secs": 3}) as cluster:
        sink = cluster.instances("test", "sink")[0]
        wait_until(lambda: len(sink.windows) == 5, 10, "five windows")
        assert sink.windows == [[0, 1], [0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]]
        spout = cluster.instances("test", "numbers")[0]
        # 0..5 left their last window; 6..9 are still in one, so unacked: anchored to the
        # windows' output, they would only complete once those tuples are acked too.
        wait_until(lambda: sorted(spout.acked) == list(range(6)), 5, "0..5 to be acked")
        # The last four never leave (nothing follows them): they time out, as in Storm.
        wait_until(lambda: len(spout.failed) == 4, 15, "6..9 to time out")
        assert sorted(n for n, kind in spout.failed) == [6, 7, 8, 9]
        assert {kind for _, kind in spout.failed} == {"timeout"}


def test_a_window_whose_bolt_raises_fails_its_tuples_for_replay():
    topology = windowed_topology(Totals().with_tumbling_window(Count(5)))
    conf = {"test.count": 20, "test.boom_once": 7, "topology.message.timeout.secs": 10}
    with running(topology, conf) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        wait_until(lambda: len(spout.failed) == 5, 10, "the window holding 7 to fail")
        assert sorted(n for n, _ in spout.failed) == [5, 6, 7, 8, 9]
        assert {kind for _, kind in spout.failed} == {"fail"}
        wait_until(lambda: sorted(spout.acked) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14], 10,
                   "the windows before and after to be acked")
        assert cluster.metrics("test")["totals"]["errors"] >= 1


def test_a_window_longer_than_the_message_timeout_is_refused_naming_the_bolt():
    with pytest.raises(TopologyError, match="windowed bolt 'totals'.*35 s.*30 s"):
        windowed_topology(Totals().with_window(Duration(seconds=20), Duration(seconds=15)))
    topology = windowed_topology(Totals().with_tumbling_window(Duration(seconds=4)))
    from stormlet import LocalCluster
    with LocalCluster() as cluster:
        with pytest.raises(TopologyError, match="windowed bolt 'totals'.*8 s.*5 s"):
            cluster.submit("short", {"topology.message.timeout.secs": 5}, topology)
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("totals", Totals()).global_grouping("numbers")
    with pytest.raises(TopologyError, match="windowed bolt 'totals' has no window"):
        builder.build()
    with pytest.raises(TopologyError, match="event-time windows take a Duration"):
        windowed_topology(Totals().with_tumbling_window(Count(5)).with_timestamp_field("n"))
    with pytest.raises(TopologyError, match="late-tuple stream but has no event time"):
        windowed_topology(Totals().with_tumbling_window(Count(5)).with_late_tuple_stream("x"))
    with pytest.raises(TopologyError, match="lag and watermark interval.*31 s"):
        windowed_topology(Totals().with_tumbling_window(Duration(seconds=10))
                          .with_timestamp_field("n").with_lag(Duration(seconds=10)))


@pytest.mark.slow   # waits out windows (and timeouts) by design
def test_the_top_words_example_reports_each_second_and_acks_what_left_its_windows():
    from stormlet.loader import load_topology_file

    topology, config = load_topology_file(
        str(Path(__file__).resolve().parents[2] / "topologies" / "top_words.py"))
    with running(topology, {**config, "top_words.rate": 200}, name="top") as cluster:
        report = cluster.instances("top", "top")[0]
        wait_until(lambda: cluster.metrics("top")["report"]["executed"] >= 3, 15,
                   "three reports")
        # Sentences older than the 6 s window (plus the 1 s slide) are complete.
        wait_until(lambda: cluster.metrics("top")["sentences"]["acked"] > 0, 15,
                   "the first sentences to leave their last window")
        assert cluster.metrics("top")["sentences"]["failed"] == 0
        assert report.manager.items()


class Stamped(Spout):
    """Emits ``test.events`` ([n, ts] pairs) tracked, in order, one every 150 ms (three
    watermark intervals: the watermark sees each in turn), then nothing."""

    outputs = ["n", "ts"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.events = list(conf["test.events"])
        self.acked, self.failed = [], []
        self.last = 0.0

    def next_tuple(self):
        if self.events and time.monotonic() - self.last >= 0.15:
            self.last = time.monotonic()
            n, ts = self.events.pop(0)
            self.collector.emit([n, ts], msg_id=n)
        else:
            time.sleep(0.001)

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        self.failed.append(msg_id)


class EventTotals(WindowedBolt):
    outputs = ["start", "end", "numbers"]

    def execute(self, window):
        self.collector.emit([window.start, window.end, sorted(t[0] for t in window.get())])


class Collect(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = {}

    def execute(self, tup):
        self.seen.setdefault(tup.stream, []).append(list(tup.values))
        self.collector.ack(tup)


def test_an_event_time_window_sends_late_tuples_to_their_stream_with_their_values():
    base = 1_700_000_000_000
    events = [(0, base + 10), (1, base + 500), (2, base + 300),    # out of order, in lag
              (3, base + 1200), (4, base + 400),                   # 4 is late by then
              (5, base + 2600), (6, base + 3900)]
    bolt = (EventTotals().with_tumbling_window(Duration(seconds=1)).with_timestamp_field("ts")
            .with_lag(Duration(ms=300)).with_watermark_interval(Duration(ms=50))
            .with_late_tuple_stream("late"))
    builder = TopologyBuilder()
    builder.set_spout("stamped", Stamped())
    builder.set_bolt("totals", bolt).global_grouping("stamped")
    builder.set_bolt("collect", Collect()).global_grouping("totals").global_grouping(
        "totals", "late")
    conf = {"test.events": events, "topology.message.timeout.secs": 10}
    with running(builder.build(), conf) as cluster:
        collect = cluster.instances("test", "collect")[0]
        # 5 (at 2600) moves the watermark to 2300, 6 (at 3900) to 3600.
        wait_until(lambda: len(collect.seen.get("default", [])) == 3, 15, "three windows")
        windows = collect.seen["default"]
        assert windows == [[base, base + 1000, [0, 1, 2]], [base + 1000, base + 2000, [3]],
                           [base + 2000, base + 3000, [5]]]
        assert collect.seen.get("late") == [[[4, base + 400]]]
        spout = cluster.instances("test", "stamped")[0]
        # 0..3 left their windows as the watermark passed 3000; 4 was acked as late; 5 and 6
        # wait for a watermark that no later tuple brings.
        wait_until(lambda: sorted(spout.acked) == [0, 1, 2, 3, 4], 10, "0..4 to be acked")
        assert spout.failed == []


def test_without_a_late_stream_late_tuples_are_counted_and_acked():
    base = 1_700_000_000_000
    events = [(0, base + 1500), (1, base + 100), (2, base + 3000)]   # 1 is late by 1500 ms
    bolt = (EventTotals().with_tumbling_window(Duration(seconds=1)).with_timestamp_field("ts")
            .with_watermark_interval(Duration(ms=50)))
    builder = TopologyBuilder()
    builder.set_spout("stamped", Stamped())
    builder.set_bolt("totals", bolt).global_grouping("stamped")
    with running(builder.build(), {"test.events": events}) as cluster:
        spout = cluster.instances("test", "stamped")[0]
        wait_until(lambda: 1 in spout.acked, 10, "the late tuple to be acked")
        def dropped():
            rows = cluster.metrics_snapshot("test")["tasks"]
            return sum(row["user"].get("late_tuples_dropped", 0) for row in rows
                       if row["component"] == "totals")
        wait_until(lambda: dropped() == 1, 10, "the late tuple to be counted")
