"""Component lifecycle through a real LocalCluster: tick tuples, activate/deactivate, kill and
clean shutdown, submit/kill errors, and components whose open/next_tuple/prepare raise."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import pytest
import support

from stormlet import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet import config as cfg

MESSAGE_TIMEOUT = "topology.message.timeout.secs"
MAX_SPOUT_PENDING = "topology.max.spout.pending"
TICK_FREQ = "topology.tick.tuple.freq.secs"


def running(topology, conf, name="lifecycle"):
    return support.running(topology, conf, name)


# ----- components


class LifecycleSpout(Spout):
    """Emits up to ``test.count`` tuples ``[id]`` (tracked unless ``test.untracked``), at most one
    every ``test.interval`` seconds, and records every lifecycle call in order, with its thread."""

    outputs = ["id"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.count = int(conf.get("test.count", 10**9))
        self.interval = float(conf.get("test.interval", 0.0))
        self.tracked = not conf.get("test.untracked", False)
        self.calls = []            # (method, thread ident)
        self.threads = {}          # method -> set of thread idents
        self.emitted = []
        self.acks = []
        self.fails = []            # (msg_id, reason)
        self.active = False
        self.calls_while_inactive = 0
        self.verdicts_at_close = None
        self.last_emit = 0.0
        self._record("open")

    def _record(self, what):
        ident = threading.get_ident()
        self.calls.append((what, ident))
        self.threads.setdefault(what, set()).add(ident)

    def activate(self):
        self._record("activate")
        self.active = True

    def deactivate(self):
        self._record("deactivate")
        self.active = False

    def next_tuple(self):
        self.threads.setdefault("next_tuple", set()).add(threading.get_ident())
        if not self.active:
            self.calls_while_inactive += 1
        if len(self.emitted) >= self.count:
            return
        now = time.monotonic()
        if now - self.last_emit < self.interval:
            return
        self.last_emit = now
        msg_id = len(self.emitted)
        self.emitted.append(msg_id)
        self.collector.emit([msg_id], msg_id=msg_id if self.tracked else None)

    def ack(self, msg_id):
        self._record("ack")
        self.acks.append(msg_id)

    def fail(self, msg_id, reason):
        self._record("fail")
        self.fails.append((msg_id, reason))

    def close(self):
        self._record("close")
        self.verdicts_at_close = len(self.acks) + len(self.fails)

    def methods(self):
        return [what for what, _ in self.calls if what not in ("ack", "fail")]


class AckBolt(Bolt):
    """Acks everything after ``test.delay`` seconds; records inputs, ticks and cleanup."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.delay = float(conf.get("test.delay", 0.0))
        self.hold_odd = bool(conf.get("test.hold.odd", False))
        self.data = []
        self.ticks = []            # (monotonic time, tuple)
        self.cleaned_up = []       # thread idents cleanup ran on
        self.threads = set()

    def execute(self, tup):
        self.threads.add(threading.get_ident())
        if tup.is_tick():
            self.ticks.append((time.monotonic(), tup))
            self.collector.ack(tup)
            return
        self.data.append(tup[0])
        if self.hold_odd and tup[0] % 2:
            return  # never acked
        time.sleep(self.delay)
        self.collector.ack(tup)

    def cleanup(self):
        self.cleaned_up.append(threading.get_ident())


# ----- tick tuples


@pytest.mark.slow   # waits for three 1 s ticks
def test_tick_tuples_reach_only_the_configured_bolt_at_its_frequency():
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout())
    b.set_bolt("ticked", AckBolt(), parallelism=2).shuffle_grouping("spout") \
        .add_config(TICK_FREQ, 1)
    b.set_bolt("plain", AckBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 2, "test.count": 5}
    # The runtime schedules a task's k-th tick for k periods after it set the task up, which is
    # after this moment: so tick k comes no earlier than k seconds from here. (Only a lower
    # bound: a busy machine may deliver a tick late, never early.)
    before_submit = time.monotonic()
    with running(b.build(), conf) as cluster:
        ticked = cluster.instances("lifecycle", "ticked")
        plain = cluster.instances("lifecycle", "plain")[0]
        cluster.wait_for(lambda: all(len(t.ticks) >= 3 for t in ticked), timeout=30)
        for task in ticked:  # every task of the bolt gets its own ticks
            ticks = list(task.ticks)
            for k, (at, tup) in enumerate(ticks, 1):
                assert tup.is_tick()
                assert tup.source_component == "__system"
                assert at - before_submit >= k * 1.0, (k, at - before_submit)
        # Data tuples are not ticks, and the other bolt got data but no ticks.
        assert sorted(x for t in ticked for x in t.data) == [0, 1, 2, 3, 4]
        assert sorted(plain.data) == [0, 1, 2, 3, 4]
        assert plain.ticks == []
        spout = cluster.instances("lifecycle", "spout")[0]
        assert sorted(spout.acks) == [0, 1, 2, 3, 4] and spout.fails == []


# ----- activate / deactivate


def test_deactivate_stops_emission_and_activate_resumes_on_the_spout_thread():
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout())
    b.set_bolt("sink", AckBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 2, "test.interval": 0.005}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("lifecycle", "spout")[0]
        cluster.wait_for(lambda: len(spout.emitted) >= 10, timeout=10)
        assert spout.methods() == ["open", "activate"]

        cluster.deactivate("lifecycle")
        cluster.wait_for(lambda: "deactivate" in spout.methods(), timeout=5)
        stopped_at = len(spout.emitted)
        # In-flight tuples still complete while inactive: the spout's thread takes their acks,
        # so it ran its loop while inactive, where it would have called next_tuple.
        cluster.wait_for(lambda: len(spout.acks) == stopped_at, timeout=5)
        assert len(spout.emitted) == stopped_at
        assert spout.calls_while_inactive == 0

        cluster.activate("lifecycle")
        cluster.wait_for(lambda: len(spout.emitted) >= stopped_at + 10, timeout=5)
        assert spout.methods() == ["open", "activate", "deactivate", "activate"]
        assert spout.calls_while_inactive == 0
        (spout_thread,) = spout.threads["next_tuple"]
        assert spout.threads["activate"] == spout.threads["deactivate"] == {spout_thread}
        assert spout_thread != threading.get_ident()


@pytest.mark.parametrize("shared", [True, False], ids=["shared-thread", "own-thread"])
def test_activation_wakes_a_waiting_spout_at_once(monkeypatch, shared):
    """An inactive spout waits INACTIVE_WAIT_SECS between looks; asked to activate (a submit,
    ``activate``) or deactivate, it is woken and acts at once. With the wait made a minute, a
    spout that was not woken would miss every deadline here."""
    from stormlet.runtime import spout_executor
    monkeypatch.setattr(spout_executor, "INACTIVE_WAIT_SECS", 60.0)
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout())
    b.set_bolt("sink", AckBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 30, "test.interval": 0.005,
            cfg.STORMLET_EXECUTOR_SHARED_THREAD: shared}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("lifecycle", "spout")[0]
        cluster.wait_for(lambda: len(spout.emitted) >= 5, timeout=10)
        cluster.deactivate("lifecycle")
        cluster.wait_for(lambda: "deactivate" in spout.methods(), timeout=10)
        # Now the spout waits a minute between looks, unless woken. (The scenario: a moment for
        # it to go to sleep; were it still awake, the test would pass without proving the wake.)
        time.sleep(0.2)
        stopped_at = len(spout.emitted)
        cluster.activate("lifecycle")
        cluster.wait_for(lambda: len(spout.emitted) >= stopped_at + 5, timeout=10)
        assert spout.methods() == ["open", "activate", "deactivate", "activate"]


# ----- kill and clean shutdown


def test_kill_drains_in_flight_tuples_then_closes_and_cleans_up():
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout())
    # A bolt that sleeps keeps a thread of its own, so the spout's stays the one it opened on.
    (b.set_bolt("slow", AckBolt(), parallelism=2).shuffle_grouping("spout")
     .add_config(cfg.STORMLET_EXECUTOR_SHARED_THREAD, False))
    conf = {MESSAGE_TIMEOUT: 2, MAX_SPOUT_PENDING: 10, "test.delay": 0.02}
    with LocalCluster() as cluster:
        cluster.submit("drain", conf, b.build())
        spout = cluster.instances("drain", "spout")[0]
        bolts = cluster.instances("drain", "slow")
        cluster.wait_for(lambda: len(spout.emitted) >= 15, timeout=10)
        started = time.monotonic()
        cluster.kill("drain", wait_secs=30)
        took = time.monotonic() - started
        assert "drain" not in cluster.topologies()
        assert took < 30, f"the kill waited out its limit ({took:.1f} s), not the drain"
        assert spout.methods() == ["open", "activate", "deactivate", "close"]
        (spout_thread,) = spout.threads["next_tuple"]
        assert spout.threads["deactivate"] == spout.threads["close"] == {spout_thread}
        # Drained: everything emitted was acked, once, before close; nothing failed.
        assert spout.fails == []
        assert Counter(spout.acks) == Counter(spout.emitted)
        assert spout.verdicts_at_close == len(spout.emitted)
        for bolt in bolts:
            assert len(bolt.cleaned_up) == 1
            assert bolt.cleaned_up[0] in bolt.threads


def test_kill_fails_tuples_still_in_flight_after_the_wait_with_reason_timeout():
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout())
    b.set_bolt("holder", AckBolt()).shuffle_grouping("spout")
    # The message timeout far beyond the kill's wait: a "timeout" below is the kill's.
    conf = {MESSAGE_TIMEOUT: 60, "test.count": 10, "test.hold.odd": True}
    with LocalCluster() as cluster:
        cluster.submit("hold", conf, b.build())
        spout = cluster.instances("hold", "spout")[0]
        holder = cluster.instances("hold", "holder")[0]
        cluster.wait_for(lambda: len(holder.data) == 10 and len(spout.acks) == 5, timeout=10)
        started = time.monotonic()
        cluster.kill("hold", wait_secs=0.3)
        took = time.monotonic() - started
        assert 0.3 <= took < 60, took   # waited its 0.3 s; failed them, not the timeout
        assert sorted(spout.acks) == [0, 2, 4, 6, 8]
        assert sorted(m for m, _ in spout.fails) == [1, 3, 5, 7, 9]
        assert {r.kind for _, r in spout.fails} == {"timeout"}
        assert spout.verdicts_at_close == 10
        assert spout.methods() == ["open", "activate", "deactivate", "close"]
        assert len(holder.cleaned_up) == 1


def test_submit_duplicate_name_raises_and_kill_unknown_raises():
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout())
    b.set_bolt("sink", AckBolt()).shuffle_grouping("spout")
    topology = b.build()
    conf = {MESSAGE_TIMEOUT: 2, "test.interval": 0.01}
    with running(topology, conf, "dup") as cluster:
        with pytest.raises(ValueError, match="dup"):
            cluster.submit("dup", conf, topology)
        assert cluster.topologies() == ["dup"]
        spout = cluster.instances("dup", "spout")[0]
        before = len(spout.acks)
        cluster.wait_for(lambda: len(spout.acks) > before + 5, timeout=5)  # still running
        with pytest.raises(KeyError, match="nope"):
            cluster.kill("nope")
        assert cluster.topologies() == ["dup"]
        cluster.kill("dup", wait_secs=1)
        assert cluster.topologies() == []
        with pytest.raises(KeyError):
            cluster.kill("dup")


# ----- components that raise


class FlakyNextTupleSpout(LifecycleSpout):
    """Raises on every 10th call of next_tuple that would emit."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.raised = 0
        self.attempts = 0

    def next_tuple(self):
        self.attempts += 1
        if self.attempts % 10 == 3:
            self.raised += 1
            raise RuntimeError(f"kaput #{self.raised}")
        super().next_tuple()


def test_spout_next_tuple_error_is_reported_and_the_topology_keeps_running():
    b = TopologyBuilder()
    b.set_spout("spout", FlakyNextTupleSpout())
    b.set_bolt("sink", AckBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 2, "test.count": 50}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("lifecycle", "spout")[0]
        cluster.wait_for(lambda: len(spout.acks) >= 50, timeout=10)
        assert spout.raised >= 5
        assert spout.fails == []
        errors = cluster.errors("lifecycle")
        mine = [e for e in errors if e.component == "spout"]
        assert mine, errors
        assert all("kaput #" in e.error for e in mine)
        assert any("next_tuple" in e.error for e in mine)
        assert cluster.topologies() == ["lifecycle"]
        assert cluster.metrics("lifecycle")["spout"]["errors"] >= 1


class BrokenPrepareBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.executed = 0
        raise ConnectionError("no database at db:5432")

    def execute(self, tup):
        self.executed += 1
        self.collector.ack(tup)


class BrokenPrepareBasicBolt(BasicBolt):
    def prepare(self, conf, context):
        self.executed = 0
        raise ConnectionError("no database at db:5432")

    def execute(self, tup, collector):
        self.executed += 1


@pytest.mark.parametrize("bolt", [BrokenPrepareBolt, BrokenPrepareBasicBolt])
def test_bolt_whose_prepare_raises_fails_its_inputs_with_reason_error(bolt):
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout())
    b.set_bolt("broken", bolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 2, "test.count": 3}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("lifecycle", "spout")[0]
        cluster.wait_for(lambda: len(spout.fails) >= 3, timeout=1.5)
        assert spout.acks == []
        assert sorted(m for m, _ in spout.fails) == [0, 1, 2]
        for _m, reason in spout.fails:
            assert reason.kind == "error"
            assert reason.component == "broken"
            assert "no database at db:5432" in reason.message
        assert cluster.instances("lifecycle", "broken")[0].executed == 0
        errors = cluster.errors("lifecycle")
        assert any(e.component == "broken" and "no database" in e.error for e in errors)


class ReplayWhileActiveSpout(LifecycleSpout):
    """Replays a failed message, but only while active, as a well-behaved spout does."""

    def fail(self, msg_id, reason):
        super().fail(msg_id, reason)
        if self.active:
            self.emitted.append(msg_id)
            self.collector.emit([msg_id], msg_id=msg_id)


def test_kill_without_waiting_deactivates_the_spout_before_failing_in_flight_tuples():
    # Regression: the spout used to hear fail() for its in-flight tuples before deactivate().
    b = TopologyBuilder()
    b.set_spout("spout", ReplayWhileActiveSpout())
    b.set_bolt("holder", AckBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 2, "test.count": 10, "test.hold.odd": True}
    with LocalCluster() as cluster:
        cluster.submit("nowait", conf, b.build())
        spout = cluster.instances("nowait", "spout")[0]
        holder = cluster.instances("nowait", "holder")[0]
        cluster.wait_for(lambda: len(holder.data) == 10 and len(spout.acks) == 5, timeout=10)
        cluster.kill("nowait", wait_secs=0)
        calls = [what for what, _ in spout.calls]
        assert calls.index("deactivate") < calls.index("fail"), calls
        verdicts = Counter(spout.acks) + Counter(m for m, _ in spout.fails)
        assert verdicts == Counter(spout.emitted)
        assert calls[-1] == "close"


class AlwaysReplaySpout(LifecycleSpout):
    """Emits every failed tuple again, as a spout over a queue does, stopping or not."""

    def fail(self, msg_id, reason):
        super().fail(msg_id, reason)
        self.collector.emit([msg_id], msg_id=msg_id)


def test_emits_refused_while_stopping_are_logged_in_two_lines_not_one_per_tuple(caplog):
    b = TopologyBuilder()
    b.set_spout("spout", AlwaysReplaySpout())
    b.set_bolt("holder", AckBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 30, "test.count": 200, "test.hold.odd": True}
    with LocalCluster() as cluster:
        cluster.submit("replays", conf, b.build())
        spout = cluster.instances("replays", "spout")[0]
        holder = cluster.instances("replays", "holder")[0]
        cluster.wait_for(lambda: len(holder.data) == 200 and len(spout.acks) == 100, timeout=10)
        with caplog.at_level(logging.WARNING, logger="stormlet.runtime.task_collectors"):
            cluster.kill("replays", wait_secs=0)
    assert len(spout.fails) == 100
    lines = [r.getMessage() for r in caplog.records if r.name == "stormlet.runtime.task_collectors"]
    assert len(lines) == 2, lines
    assert "while the topology was stopping" in lines[0] and "not sent" in lines[0]
    task = spout.collector.task
    assert lines[1] == f"spout:{task}: 100 emits were refused while the topology was stopping"


def test_deactivated_topology_is_killed_with_one_deactivate_and_its_name_can_be_reused():
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout())
    b.set_bolt("sink", AckBolt()).shuffle_grouping("spout")
    topology = b.build()
    conf = {MESSAGE_TIMEOUT: 2, "test.interval": 0.01}
    with LocalCluster() as cluster:
        cluster.submit("again", conf, topology)
        first = cluster.instances("again", "spout")[0]
        cluster.wait_for(lambda: len(first.acks) >= 3, timeout=5)
        cluster.deactivate("again")
        cluster.wait_for(lambda: "deactivate" in first.methods(), timeout=5)
        cluster.kill("again", wait_secs=1)
        assert first.methods() == ["open", "activate", "deactivate", "close"]
        assert Counter(first.acks) == Counter(first.emitted) and first.fails == []

        cluster.submit("again", conf, topology)
        second = cluster.instances("again", "spout")[0]
        assert second is not first
        cluster.wait_for(lambda: len(second.acks) >= 3, timeout=5)
        cluster.kill("again", wait_secs=1)
        assert second.methods() == ["open", "activate", "deactivate", "close"]
