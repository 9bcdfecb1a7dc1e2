"""Run-time log levels and tuple sampling without a cluster: parsing and checking what an
operator asks for, how a change and the clock change a record's entries, a process's loggers
set and put back (by a worker's settings on its own clock too), the samples' shape and bounds,
and nimbus's operations on a topology's record."""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time

import pytest
from click.testing import CliRunner
from support import wait_until

from stormlet.cli import main
from stormlet.cli.debug import log_level_lines, sample_lines, sampling_lines
from stormlet.cluster import rpc
from stormlet.cluster.runtime_settings import RuntimeSettings
from stormlet.cluster.zk_state import FoundTopology
from stormlet.runtime import live_settings as live
from stormlet.runtime.log_levels import LogLevels, check_level, check_logger, parse_setting
from stormlet.runtime.sampling import (
    CUT_NOTE,
    VALUES_CHARS,
    Sampler,
    SampleSink,
    shown_roots,
    shown_values,
)

# ----- what an operator types


def test_settings_parse_as_storms_set_log_level_takes_them():
    assert parse_setting("ROOT=DEBUG:30") == ("ROOT", "DEBUG", 30.0)
    assert parse_setting("=info") == ("ROOT", "INFO", None)
    assert parse_setting("root=WARN:0") == ("ROOT", "WARNING", None)   # 0: until cleared
    assert parse_setting("my.pkg-x.bolts=fatal:1.5") == ("my.pkg-x.bolts", "CRITICAL", 1.5)
    assert parse_setting("my.pkg=CLEAR") == ("my.pkg", None, None)


@pytest.mark.parametrize("text, said", [
    ("ROOT", "LOGGER=LEVEL"), ("ROOT=LOUD", "not a log level"), ("ROOT=DEBUG:soon", "soon"),
    ("ROOT=DEBUG:-1", "lasts 0"), ("ROOT=DEBUG:nan", "lasts 0"), ("ROOT=DEBUG:1e9", "lasts 0"),
    ("a b=DEBUG", "not a logger name"), ("x=CLEAR:5", "takes no seconds"),
    ("1x=DEBUG", "not a logger name")])
def test_a_setting_that_cannot_be_is_refused_saying_why(text, said):
    with pytest.raises(ValueError, match=said):
        parse_setting(text)


def test_level_and_logger_names_are_checked():
    assert check_level(" warn ") == "WARNING" and check_level("TRACE") == "DEBUG"
    for bad in (None, 10, "VERBOSE"):
        with pytest.raises(ValueError, match="DEBUG, INFO"):
            check_level(bad)
    assert check_logger("") == check_logger("Root") == "ROOT"
    with pytest.raises(ValueError):
        check_logger(["x"])


def test_a_requests_changes_are_checked_and_made_into_entries_with_their_end():
    changes = live.log_level_changes({"root": {"level": "debug", "seconds": 30},
                                      "a.b": None, "c": {"level": "CLEAR"},
                                      "d": {"level": "ERROR"}})
    assert changes == {"ROOT": ("DEBUG", 30.0), "a.b": (None, None), "c": (None, None),
                       "d": ("ERROR", None)}
    before = {"a.b": {"level": "INFO", "until": None}, "old": {"level": "INFO", "until": 99.0},
              "e": {"level": "INFO", "until": 500.0}}
    assert live.with_log_levels(before, changes, now=100.0) == {
        "ROOT": {"level": "DEBUG", "until": 130.0}, "d": {"level": "ERROR", "until": None},
        "e": {"level": "INFO", "until": 500.0}}   # "old" ran out; "a.b" and "c" cleared
    for bad in ({}, None, {"x": "DEBUG"}, {"x": {"level": "LOUD"}},
                {"x": {"level": "DEBUG", "seconds": -5}}):
        with pytest.raises(ValueError):
            live.log_level_changes(bad)
    many = live.log_level_changes({f"l{i}": {"level": "INFO"} for i in range(live.MAX_LOGGERS + 1)})
    with pytest.raises(ValueError, match="at most"):
        live.with_log_levels({}, many, now=0.0)


def test_sampling_entries_per_component_and_for_every_one():
    on = live.with_sampling({}, None, 1, None, now=10.0)
    assert on == {"*": {"percent": 1.0, "until": None}}
    both = live.with_sampling(on, "split", 50, 20, now=10.0)
    assert both["split"] == {"percent": 50.0, "until": 30.0}
    assert live.sampling_percent(both, "split") == 50.0
    assert live.sampling_percent(both, "count") == 1.0   # "*" covers the others
    assert live.sampling_percent(live.in_force(both, 31.0), "split") == 1.0
    assert live.with_sampling(both, "split", None, None, now=11.0) == on
    assert live.with_sampling(both, None, None, None, now=11.0) == {}   # all off
    for percent in (0, -1, 101, math.nan, True, "5"):
        with pytest.raises(ValueError, match="percentage"):
            live.with_sampling({}, None, percent, None, now=0.0)
    assert live.next_expiry(both, {"x": {"until": 12.0}}) == 12.0
    assert live.in_force({"x": "junk", "y": {"until": "soon"}, "z": {}}, 0.0) == {"z": {}}
    assert not live.is_sampled_component("__acker") and live.is_sampled_component("split")


# ----- loggers set and put back


@pytest.fixture
def loggers():
    """Test loggers, put back as they were afterwards."""
    names = ["lt.parent", "lt.parent.child", "lt.own"]
    kept = {name: logging.getLogger(name).level for name in names}
    logging.getLogger("lt.own").setLevel(logging.ERROR)
    yield {name: logging.getLogger(name) for name in names}
    for name, level in kept.items():
        logging.getLogger(name).setLevel(level)


def test_a_level_reaches_child_loggers_and_each_goes_back_to_its_own(loggers):
    levels = LogLevels()
    child = loggers["lt.parent.child"]
    assert not child.isEnabledFor(logging.DEBUG)
    levels.apply({"lt.parent": "DEBUG", "lt.own": "INFO"})
    assert child.isEnabledFor(logging.DEBUG)   # inherited, as in log4j
    assert loggers["lt.own"].level == logging.INFO
    # Set twice: what it goes back to is its level before the first.
    levels.apply({"lt.parent": "DEBUG", "lt.own": "WARNING"})
    assert levels.changed() == {"lt.parent": logging.NOTSET, "lt.own": logging.ERROR}
    levels.apply({"lt.parent": "DEBUG"})
    assert loggers["lt.own"].level == logging.ERROR
    levels.apply({})
    assert loggers["lt.parent"].level == logging.NOTSET and not child.isEnabledFor(logging.DEBUG)
    assert levels.changed() == {}


def test_the_root_logger_is_set_and_put_back():
    root = logging.getLogger()
    kept = root.level
    levels = LogLevels()
    try:
        levels.apply({"ROOT": "CRITICAL"})
        assert root.level == logging.CRITICAL
        levels.apply({})
        assert root.level == kept
    finally:
        root.setLevel(kept)


class NoExecutors:
    """A runtime with nothing to sample: what LiveSettings needs for log levels alone."""

    def all_executors(self) -> list:
        return []


def test_a_worker_puts_a_level_back_on_its_own_clock_without_a_new_record(loggers):
    settings = live.LiveSettings(NoExecutors()).start()
    try:
        settings.follow({"log_levels": {"lt.parent": {"level": "DEBUG",
                                                      "until": time.time() + 0.6}}})
        assert loggers["lt.parent"].level == logging.DEBUG
        wait_until(lambda: loggers["lt.parent"].level == logging.NOTSET, 5,
                   "the level to be put back", interval=0.05)
        assert settings.record() == {"log_levels": {}, "sampling": {}}
    finally:
        settings.close()


def test_a_worker_started_later_applies_only_what_is_still_in_force(loggers):
    now = time.time()
    record = {"log_levels": {"lt.parent": {"level": "DEBUG", "until": now + 60},
                             "lt.own": {"level": "DEBUG", "until": now - 1}}}
    settings = live.LiveSettings(NoExecutors())
    settings.follow(record)
    assert loggers["lt.parent"].level == logging.DEBUG
    assert loggers["lt.own"].level == logging.ERROR   # its time ran out before this worker
    settings.close()   # a local topology killed: its loggers go back
    assert loggers["lt.parent"].level == logging.NOTSET


# ----- samples


def test_each_emit_is_sampled_with_the_percentages_probability():
    sink = SampleSink()
    sampler = Sampler(5.0, "split", 3, sink, random.Random(7))
    gaps = [sampler.gap() for _ in range(20_000)]
    assert min(gaps) >= 1
    mean = sum(gaps) / len(gaps)   # geometric: 1 / p = 20, sd of the mean ~0.14
    assert 19.3 < mean < 20.7
    assert Sampler(100.0, "split", 3, sink).gap() == 1


def test_a_sample_is_a_copy_json_holds_cut_to_size():
    values = [b"\x00\x01", float("nan"), {"k": [1, 2.5, None, True]}, object(), "x" * 5000]
    shown, note = shown_values(values)
    json.dumps(shown, allow_nan=False)
    assert len(json.dumps(shown)) < VALUES_CHARS + 200
    assert shown[:3] == ["b'\\x00\\x01'", "nan", {"k": [1, 2.5, None, True]}]
    assert shown[4].startswith("xxx") and shown[4].endswith("...")
    assert CUT_NOTE in note and "bytes" in note
    assert shown_values(["a", 1, 2.5]) == (("a", 1, 2.5), None)
    values = ["word"]
    shown, _ = shown_values(values)
    values.append("later")
    assert shown == ("word",)


def test_a_sampler_records_what_it_is_given_and_the_sink_keeps_the_newest(tmp_path):
    sink = SampleSink(tmp_path / "w" / "samples.jsonl", keep=3, written_per_sec=None)
    sampler = Sampler(100.0, "spout", 1, sink)
    for i in range(5):
        assert sampler.take([i], "default", [4, 5], msg_id=i, roots=[2**64 - 1 - i]) == 1
    latest = sink.latest("spout")
    assert [s["values"] for s in latest] == [[2], [3], [4]]
    assert latest[-1]["msg_id"] == 4 and latest[-1]["roots"] == [2**64 - 5]
    assert shown_roots(latest[-1])["roots"] == ["fffffffffffffffb"]
    assert latest[-1]["to_tasks"] == [4, 5] and latest[-1]["task"] == 1
    assert sink.latest("spout", limit=1) == latest[-1:] and sink.latest("nope") == []
    assert sink.write() == 5 and sink.write() == 0
    lines = (tmp_path / "w" / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line)["values"] for line in lines] == [[i] for i in range(5)]


def test_the_samples_file_is_rotated_past_its_size_keeping_one_old_file(tmp_path):
    path = tmp_path / "samples.jsonl"
    sink = SampleSink(path, max_file_bytes=2000, written_per_sec=None)
    sampler = Sampler(100.0, "c", 1, sink)
    for round_ in range(6):
        for i in range(20):
            sampler.take([round_, "y" * 50], "default", [], None, None)
        sink.write()
    assert path.stat().st_size < 2000 + 20 * 200
    old = path.with_name("samples.jsonl.1")
    assert old.is_file() and not path.with_name("samples.jsonl.2").exists()
    rounds = {json.loads(line)["values"][0] for line in path.read_text().splitlines()}
    assert max(rounds) == 5


def test_the_file_takes_at_most_its_rate_and_memory_takes_every_sample(tmp_path, caplog):
    before_sink = time.monotonic()
    sink = SampleSink(tmp_path / "samples.jsonl", written_per_sec=100)
    after_sink = time.monotonic()
    sampler = Sampler(100.0, "c", 1, sink)
    for i in range(1000):
        sampler.take([i], "default", [], None, None)
    assert sink.write() == 100 and sink.thinned == 900   # a second's room to start with
    time.sleep(0.2)   # the scenario: time for room to grow (measured below, not assumed)
    before_grant = time.monotonic()
    sink.write()   # grants room for what the time since the sink began allows
    after_grant = time.monotonic()
    for i in range(1000, 1100):
        sampler.take([i], "default", [], None, None)
    # 100 a second of the time between the sink's start and the grant, at most a second's.
    low, high = 100 * (before_grant - after_sink), 100 * (after_grant - before_sink)
    assert low - 1 <= sink.write() <= min(100, high + 1)
    lines = [json.loads(line)["values"][0]
             for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert lines[:100] == list(range(100)) and lines[100] == 1000
    assert [s["values"][0] for s in sink.latest("c")] == list(range(1000, 1100))
    assert "beyond 100 a second" in caplog.text


def test_an_unwritable_file_loses_the_samples_but_never_the_sink(tmp_path, caplog):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the directory should be")
    sink = SampleSink(blocker / "samples.jsonl")
    Sampler(100.0, "c", 1, sink).take([1], "default", [], None, None)
    assert sink.write() == 0 and sink.dropped == 1
    assert sink.latest("c") and "could not write tuple samples" in caplog.text


# ----- nimbus's operations on a record


class Records:
    """The part of ClusterState nimbus's settings use, over a dict."""

    def __init__(self, records: dict):
        self.records = records
        self.writes = 0

    def set_topology(self, tid: str, record: dict) -> None:
        self.records[tid] = json.loads(json.dumps(record))
        self.writes += 1


def nimbus_settings(records: Records, clock=lambda: 1000.0, snapshots=None, leader=True):
    events: list[tuple] = []

    def find(name: str):
        for tid, record in records.records.items():
            if name in (tid, record["name"]):
                return FoundTopology(tid, json.loads(json.dumps(record)))
        raise rpc.RpcError(f"no topology named {name!r} is running")

    def require_leader():
        if not leader:
            raise rpc.RpcError(rpc.NOT_LEADER)

    settings = RuntimeSettings(lambda: records, require_leader, threading.Lock(), find,
                               lambda tid, kind, text, **detail: events.append(
                                   (tid, kind, text, detail)),
                               snapshots or (lambda tid: []), clock=clock)
    return settings, events


def record(**extra) -> dict:
    return {"name": "wc", "status": "active", "summary": {"split": {}, "count": {}}, **extra}


def test_nimbus_writes_checked_changes_into_the_record_and_records_each():
    records = Records({"wc-1-abc": record()})
    settings, events = nimbus_settings(records)
    shown = settings.set_log_levels("wc", {"ROOT": {"level": "debug", "seconds": 30},
                                           "my.pkg": {"level": "INFO"}})
    assert shown["log_levels"] == {"ROOT": {"level": "DEBUG", "until": 1030.0},
                                   "my.pkg": {"level": "INFO", "until": None}}
    assert records.records["wc-1-abc"]["log_levels"] == shown["log_levels"]
    assert [e[2] for e in events] == ["log level of ROOT set to DEBUG for 30 s",
                                      "log level of my.pkg set to INFO until cleared"]
    assert events[0][:2] == ("wc-1-abc", "log-level")
    settings.debug("wc-1-abc", 1.0, component="split", seconds=60)
    assert records.records["wc-1-abc"]["sampling"] == {"split": {"percent": 1.0, "until": 1060.0}}
    assert events[-1][2] == "tuple sampling of component split at 1% for 60 s"
    assert settings.live_settings("wc")["sampling"] == records.records["wc-1-abc"]["sampling"]
    settings.debug("wc", None)
    assert records.records["wc-1-abc"]["sampling"] == {}
    assert events[-1][2] == "tuple sampling of every component turned off"


@pytest.mark.parametrize("call, said", [
    (lambda s: s.set_log_levels("wc", {"ROOT": {"level": "LOUD"}}), "not a log level"),
    (lambda s: s.set_log_levels("wc", {}), "at least one logger"),
    (lambda s: s.debug("wc", 0), "percentage"),
    (lambda s: s.debug("wc", 5, seconds=-1), "lasts 0"),
    (lambda s: s.debug("wc", 5, component="nope"), "no component 'nope'"),
    (lambda s: s.debug("other", 5), "no topology named"),
    (lambda s: s.samples("wc", limit=0), "limit")])
def test_nimbus_refuses_what_cannot_be_and_changes_nothing(call, said):
    records = Records({"wc-1-abc": record()})
    settings, events = nimbus_settings(records)
    with pytest.raises(rpc.RpcError, match=said):
        call(settings)
    assert records.writes == 0 and events == []


def test_only_the_leader_changes_and_a_killed_topology_takes_no_change():
    records = Records({"wc-1-abc": record(status="killed")})
    with pytest.raises(rpc.RpcError, match="being killed"):
        nimbus_settings(records)[0].debug("wc", 5)
    with pytest.raises(rpc.RpcError, match="standby"):
        nimbus_settings(Records({"wc-1-abc": record()}), leader=False)[0].debug("wc", 5)


def test_nimbus_removes_what_ran_out_and_records_it():
    now = [1000.0]
    records = Records({"wc-1-abc": record()})
    settings, events = nimbus_settings(records, clock=lambda: now[0])
    settings.set_log_levels("wc", {"ROOT": {"level": "DEBUG", "seconds": 5},
                                   "kept": {"level": "INFO"}})
    settings.debug("wc", 10, seconds=5)
    events.clear()
    settings.expire("wc-1-abc", records.records["wc-1-abc"])
    assert events == [] and records.writes == 2   # nothing ran out yet: no write
    now[0] = 1006.0
    settings.expire("wc-1-abc", records.records["wc-1-abc"])
    assert records.records["wc-1-abc"]["log_levels"] == {"kept": {"level": "INFO",
                                                                  "until": None}}
    assert records.records["wc-1-abc"]["sampling"] == {}
    assert [e[2] for e in events] == ["log level of ROOT expired: back to its own",
                                      "tuple sampling of every component expired"]


def test_nimbus_answers_samples_from_the_workers_reports_newest_last():
    def snapshots(tid):
        return [{"worker": {"host": "h1", "port": 6700},
                 "samples": [{"time": 3.0, "component": "split", "values": ["c"]},
                             {"time": 1.0, "component": "count", "values": ["a"]}, "junk"]},
                {"worker": {"host": "h2", "port": 6701},
                 "samples": [{"time": 2.0, "component": "split", "values": ["b"]}]},
                {"worker": {"host": "h3", "port": 6702}}]

    settings, _ = nimbus_settings(Records({"wc-1-abc": record()}), snapshots=snapshots)
    rows = settings.samples("wc")
    assert [(r["values"], r["host"], r["port"]) for r in rows] == [
        (["a"], "h1", 6700), (["b"], "h2", 6701), (["c"], "h1", 6700)]
    assert [r["values"] for r in settings.samples("wc", "split", limit=1)] == [["c"]]


# ----- the command line


def test_the_commands_print_what_is_in_force_and_the_samples():
    assert log_level_lines("wc", {}, 0.0) == ["no log levels set for wc: every logger has its own"]
    lines = log_level_lines("wc", {"a": {"level": "INFO", "until": None},
                                   "ROOT": {"level": "DEBUG", "until": 40.0}}, 10.0)
    assert lines[0].startswith("ROOT") and "for 30 s more" in lines[0]
    assert "until cleared" in lines[1]
    assert sampling_lines("wc", {}, 0.0) == ["tuple sampling of wc is off"]
    assert "every component" in sampling_lines("wc", {"*": {"percent": 1.0, "until": None}},
                                               0.0)[0]
    sample = {"time": 0.5, "component": "split", "task": 3, "stream": "default",
              "values": ["a"], "to_tasks": [4], "msg_id": 7, "roots": ["00ff"], "note": "cut"}
    [line] = sample_lines([sample], as_json=False)
    assert "split:3" in line and '["a"] -> [4]' in line and "msg_id=7" in line and "(cut)" in line
    assert json.loads(sample_lines([sample], as_json=True)[0]) == sample
    assert "no samples" in sample_lines([], as_json=False)[0]


@pytest.mark.parametrize("args, said", [
    (["set-log-level", "wc", "ROOT=LOUD"], "not a log level"),
    (["debug", "wc"], "one of --sampling"),
    (["debug", "wc", "--sampling", "5", "--off"], "one of --sampling"),
    (["debug", "wc", "--off", "--seconds", "5"], "--seconds goes with --sampling"),
    (["debug", "wc", "--sampling", "0"], "0<x<=100")])
def test_the_commands_refuse_what_cannot_be_before_calling_nimbus(args, said):
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and said in result.output, result.output
