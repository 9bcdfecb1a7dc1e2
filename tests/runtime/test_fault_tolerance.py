"""Faulty components in local mode: a bolt that raises on every tuple, a spout whose next_tuple
always raises, a bolt that hangs, an executor that dies. Each is reported with its component and
task, logging stays throttled, and the rest of the topology keeps working."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from support import running, wait_until

from stormlet import Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet.runtime.task_errors import TaskErrors

NAME = "faults"
BASE_CONF = {
    "topology.message.timeout.secs": 5,
    "topology.max.spout.pending": 1000,
    "topology.error.throttle.interval.secs": 1,
}


class Numbers(Spout):
    """Emits 0, 1, 2, ... tracked; records acks and fails."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.task = context.task_id
        self.n = 0
        self.acked = 0
        self.fails: list = []

    def next_tuple(self):
        self.collector.emit([self.n], msg_id=self.n)
        self.n += 1

    def ack(self, msg_id):
        self.acked += 1

    def fail(self, msg_id, reason):
        if len(self.fails) < 1000:
            self.fails.append(reason)


class Explode(Bolt):
    def prepare(self, conf, context, collector):
        self.task = context.task_id

    def execute(self, tup):
        raise ValueError(f"cannot handle {tup['n']}")


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.executed = 0

    def execute(self, tup):
        self.executed += 1
        self.collector.ack(tup)


def healthy_and(builder: TopologyBuilder) -> TopologyBuilder:
    """Adds the healthy path every test watches: spout "good" -> bolt "sink"."""
    builder.set_spout("good", Numbers())
    builder.set_bolt("sink", Sink()).shuffle_grouping("good")
    return builder


def keeps_acking(cluster, seconds: float = 0.0) -> bool:
    """Whether the healthy path acks 100 more tuples, failing none, over at least ``seconds``
    (the scenario's span: a trouble that lasts that long)."""
    (good,) = cluster.instances(NAME, "good")
    before, started = good.acked, time.monotonic()
    wait_until(lambda: good.acked > before + 100 and time.monotonic() - started >= seconds, 30,
               "the healthy path to ack 100 more")
    return not good.fails


def error_logs(caplog, component: str) -> list[logging.LogRecord]:
    """Warnings and errors about ``component``: the throttled ones start "explode task 3: ",
    the watchdog's say "component sleepy task 5 has been in ..."."""
    found = []
    for r in caplog.records:
        message = r.getMessage()
        if r.levelno >= logging.WARNING and (message.startswith(f"{component} task ")
                                             or message.startswith(f"component {component} ")):
            found.append(r)
    return found


@pytest.mark.slow   # waits out several 1 s throttle intervals
def test_a_bolt_raising_on_every_tuple_is_reported_with_throttled_logs(caplog):
    caplog.set_level(logging.INFO, logger="stormlet")
    b = healthy_and(TopologyBuilder())
    b.set_spout("numbers", Numbers())
    b.set_bolt("explode", Explode()).shuffle_grouping("numbers")
    started = time.monotonic()
    with running(b.build(), BASE_CONF, NAME) as cluster:
        cluster.wait_for(lambda: cluster.metrics(NAME)["explode"]["errors"] >= 20_000, timeout=30)
        wait_until(lambda: len([r for r in error_logs(caplog, "explode")
                                if "more like it" in r.getMessage()]) >= 2
                   and cluster.metrics(NAME)["explode"]["errors"] >= 20_000 + 2 * 1000, 30,
                   "two throttled summaries, and 2000 more errors counted")
        assert keeps_acking(cluster)
        metrics = cluster.metrics(NAME)
        elapsed = time.monotonic() - started
        (explode,) = cluster.instances(NAME, "explode")
        (numbers,) = cluster.instances(NAME, "numbers")
        errors = cluster.errors(NAME)

    # Counted, every one of them (executed is counted per batch, after it).
    assert metrics["explode"]["errors"] >= 20_000 + 2 * 1000
    assert 0 <= metrics["explode"]["errors"] - metrics["explode"]["executed"] <= 1000
    assert metrics["numbers"]["failed"] > 10_000 and metrics["numbers"]["acked"] == 0
    # The spout heard why, at once.
    assert numbers.fails and all(r.kind == "error" and r.component == "explode"
                                 and r.message.startswith("ValueError: cannot handle")
                                 for r in numbers.fails)
    # Logged: the first five in full, then about one summary per second.
    logs = error_logs(caplog, "explode")
    full = [r for r in logs if "more like it" not in r.getMessage()]
    summaries = [r for r in logs if "more like it" in r.getMessage()]
    assert len(full) == 5, [r.getMessage()[:120] for r in full]
    assert all(f"explode task {explode.task}: execute raised on Tuple([" in r.getMessage()
               and "Traceback" in r.getMessage() and "in execute" in r.getMessage()
               for r in full)
    # At most one summary a throttle interval (1 s) of the time the topology ran.
    assert 2 <= len(summaries) <= elapsed + 1
    # Recorded: the same, at most 20 per task, with component and task.
    assert 7 <= len(errors) <= 20
    assert {(e.component, e.task) for e in errors} == {("explode", explode.task)}
    assert "ValueError: cannot handle 0" in errors[0].error
    assert "raise ValueError" in errors[0].detail
    summary = next(e for e in errors if "more like it" in e.error)
    more = int(summary.error.split("... and ")[1].split()[0])
    assert more > 1000 and summary.error.endswith("more like it in the last 1 s")


class Broken(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.task = context.task_id
        self.calls = 0

    def next_tuple(self):
        self.calls += 1
        raise ConnectionError("queue broker unreachable")


@pytest.mark.slow   # waits out several 1 s throttle intervals
def test_a_spout_whose_next_tuple_always_raises_is_reported_and_other_spouts_keep_emitting(caplog):
    caplog.set_level(logging.INFO, logger="stormlet")
    b = healthy_and(TopologyBuilder())
    b.set_spout("broken", Broken())
    b.set_bolt("also", Sink()).shuffle_grouping("broken")
    started = time.monotonic()
    with running(b.build(), BASE_CONF, NAME) as cluster:
        (broken,) = cluster.instances(NAME, "broken")
        cluster.wait_for(lambda: broken.calls > 200, timeout=10)
        wait_until(lambda: any("more like it" in r.getMessage()
                               for r in error_logs(caplog, "broken")), 30, "a throttled summary")
        assert keeps_acking(cluster)
        calls = broken.calls
        metrics = cluster.metrics(NAME)
        errors = cluster.errors(NAME)
    elapsed = time.monotonic() - started

    assert metrics["broken"]["errors"] >= calls - 1   # read while it kept calling
    assert metrics["broken"]["emitted"] == 0 and metrics["also"]["executed"] == 0
    assert errors and {(e.component, e.task) for e in errors} == {("broken", broken.task)}
    assert errors[0].error == "next_tuple raised: ConnectionError: queue broker unreachable"
    assert "in next_tuple" in errors[0].detail
    assert any("more like it" in e.error for e in errors)
    # The first five in full, then at most one summary a throttle interval (1 s).
    logs = error_logs(caplog, "broken")
    summaries = [r for r in logs if "more like it" in r.getMessage()]
    assert len(logs) - len(summaries) == 5, [r.getMessage()[:100] for r in logs]
    assert 1 <= len(summaries) <= elapsed + 1, (len(summaries), elapsed)


class Sleepy(Bolt):
    """Hangs on tuple 3 until the test lets it go."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.task_id
        self.release = threading.Event()
        self.waiting = threading.Event()
        self.returned = threading.Event()   # out of its wait: released, or after 30 s

    def execute(self, tup):
        if tup["n"] == 3:
            self.wait_for_the_database()
        self.collector.ack(tup)

    def wait_for_the_database(self):
        self.waiting.set()
        self.release.wait(30)
        self.returned.set()


def test_a_hung_bolt_is_reported_with_its_stack_and_again_when_it_returns(caplog):
    caplog.set_level(logging.INFO, logger="stormlet")
    b = healthy_and(TopologyBuilder())
    b.set_spout("numbers", Numbers())
    b.set_bolt("sleepy", Sleepy()).shuffle_grouping("numbers")
    conf = {**BASE_CONF, "topology.hang.warning.secs": 0.5}
    with running(b.build(), conf, NAME) as cluster:
        (sleepy,) = cluster.instances(NAME, "sleepy")

        def hang_reports():
            return [e for e in cluster.errors(NAME) if "has been in" in e.error]

        cluster.wait_for(hang_reports, timeout=10)
        assert keeps_acking(cluster, 1.5)   # while it hangs, and for several thresholds
        (hang,) = hang_reports()            # once per hang
        assert (hang.component, hang.task) == ("sleepy", sleepy.task)
        assert hang.error.startswith(f"component sleepy task {sleepy.task} has been in execute "
                                     f"for ")
        assert "in wait_for_the_database" in hang.detail
        assert "self.release.wait(30)" in hang.detail
        assert not [e for e in cluster.errors(NAME) if "returned from" in e.error]

        sleepy.release.set()
        cluster.wait_for(lambda: [e for e in cluster.errors(NAME) if "returned from" in e.error],
                         timeout=5)
        (numbers,) = cluster.instances(NAME, "numbers")
        acked = numbers.acked
        cluster.wait_for(lambda: numbers.acked > acked + 100, timeout=10)   # flowing again
        errors = cluster.errors(NAME)
        metrics = cluster.metrics(NAME)

    (back,) = [e for e in errors if "returned from" in e.error]
    assert back.error.startswith(f"component sleepy task {sleepy.task} returned from execute "
                                 f"after about ")
    assert back.time > hang.time
    # The hang is an error; its end is news, not another error. Nobody else was called hung,
    # though the spout feeding it was held back while its inbox was full.
    assert metrics["sleepy"]["errors"] == 1
    assert [e for e in errors if e.component != "sleepy"] == []
    logs = error_logs(caplog, "sleepy")
    assert [r.levelname for r in logs] == ["ERROR", "WARNING"]
    assert "wait_for_the_database" in logs[0].getMessage()


def seconds_to_kill(cluster: LocalCluster, caplog, stuck: list) -> float:
    """How long killing the topology without waiting takes, asserting it ended while the
    ``stuck`` bolts still hung; then they (each with a ``release`` event) are let go, so the
    threads left behind end."""
    started = time.monotonic()
    try:
        with caplog.at_level(logging.ERROR, logger="stormlet.runtime.engine"):
            cluster.kill(NAME, wait_secs=0)
        took = time.monotonic() - started
        assert not any(bolt.returned.is_set() for bolt in stuck), "the kill waited for the bolt"
        return took
    finally:
        for bolt in stuck:
            bolt.release.set()


def test_a_kill_ends_though_a_bolt_is_stuck_and_says_which(monkeypatch, caplog):
    monkeypatch.setattr("stormlet.runtime.engine.EXECUTOR_STOP_SECS", 0.5)
    b = healthy_and(TopologyBuilder())
    b.set_spout("numbers", Numbers())
    b.set_bolt("sleepy", Sleepy()).shuffle_grouping("numbers")
    with LocalCluster() as cluster:
        cluster.submit(NAME, BASE_CONF, b.build())
        (sleepy,) = cluster.instances(NAME, "sleepy")
        cluster.wait_for(sleepy.waiting.is_set, timeout=10)
        seconds_to_kill(cluster, caplog, [sleepy])   # ends while the bolt hangs
    (stuck,) = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    assert f"(in execute of task {sleepy.task} for " in stuck
    assert "the stop goes on without it" in stuck


class Stuck(Bolt):
    """Hangs on its first tuple until the test lets it go."""

    def prepare(self, conf, context, collector):
        self.release = threading.Event()
        self.waiting = threading.Event()
        self.returned = threading.Event()   # out of its wait: released, or after 30 s

    def execute(self, tup):
        self.waiting.set()
        self.release.wait(30)
        self.returned.set()


def test_a_components_stuck_executors_hold_the_kill_up_once_not_once_each(monkeypatch, caplog):
    stop_secs = 2.0
    monkeypatch.setattr("stormlet.runtime.engine.EXECUTOR_STOP_SECS", stop_secs)
    b = healthy_and(TopologyBuilder())
    b.set_spout("numbers", Numbers())
    b.set_bolt("stuck", Stuck(), parallelism=3).shuffle_grouping("numbers")
    with LocalCluster() as cluster:
        cluster.submit(NAME, BASE_CONF, b.build())
        stuck = cluster.instances(NAME, "stuck")
        cluster.wait_for(lambda: all(bolt.waiting.is_set() for bolt in stuck), timeout=10)
        took = seconds_to_kill(cluster, caplog, stuck)
    # One bound for the three: one after another, it took three bounds.
    assert stop_secs <= took < 2 * stop_secs, took
    assert len([r for r in caplog.records if "did not stop" in r.getMessage()]) == 3


class Quitter(Bolt):
    """Calls sys.exit from execute: not an Exception, so it ends the executor's thread."""

    def prepare(self, conf, context, collector):
        self.task = context.task_id

    def execute(self, tup):
        raise SystemExit("bolt asked to quit")


def test_an_executor_that_dies_is_logged_and_counted_with_component_and_task(caplog):
    caplog.set_level(logging.INFO, logger="stormlet")
    b = healthy_and(TopologyBuilder())
    b.set_spout("numbers", Numbers())
    b.set_bolt("quitter", Quitter()).shuffle_grouping("numbers")
    with running(b.build(), BASE_CONF, NAME) as cluster:
        cluster.wait_for(lambda: cluster.metrics(NAME)["quitter"]["errors"], timeout=10)
        assert keeps_acking(cluster)
        (quitter,) = cluster.instances(NAME, "quitter")
        (error,) = [e for e in cluster.errors(NAME) if e.component == "quitter"]
        assert error.task == quitter.task
        assert "died: SystemExit: bolt asked to quit" in error.error
        assert "raise SystemExit" in error.detail
    (critical,) = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert critical.getMessage().startswith(f"component quitter task {quitter.task}: executor ")
    assert "SystemExit: bolt asked to quit" in critical.getMessage()


def test_a_kind_of_error_that_went_quiet_is_logged_in_full_again(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="stormlet")
    clock = [100.0]
    monkeypatch.setattr("stormlet.runtime.task_errors.time.monotonic", lambda: clock[0])
    errors = TaskErrors("c", 7, window_secs=10, per_window=2)
    for i in range(5):
        errors.report("execute raised", ValueError(i))
    errors.report("execute raised", KeyError("other kind"))   # its own allowance
    assert [r.getMessage().split("\n")[0] for r in caplog.records] == [
        "c task 7: execute raised: ValueError: 0", "c task 7: execute raised: ValueError: 1",
        "c task 7: execute raised: KeyError: 'other kind'"]
    clock[0] += 10
    errors.flush()
    assert caplog.records[-1].getMessage() == (
        "c task 7: execute raised: ValueError: 4 ... and 3 more like it in the last 10 s")
    clock[0] += 10
    errors.flush()                     # a whole window without one: forgotten
    errors.report("execute raised", ValueError("back"))
    assert caplog.records[-1].getMessage().startswith("c task 7: execute raised: ValueError: back")
    assert errors.count == 7
    assert len(caplog.records) == 5
