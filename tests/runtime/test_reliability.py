"""Guaranteed processing through a real LocalCluster.

Every test runs a small topology end to end and checks what the spout hears: each tracked
message gets exactly one ``ack`` or ``fail``, with the right ``FailReason``, on the spout's own
thread, at the right time. Components are module-level (they are deep-copied per task) and keep
their records on the instance, read back through ``cluster.instances``.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest
import support

from stormlet import BasicBolt, Bolt, FailReason, Spout, TopologyBuilder
from stormlet import config as cfg
from stormlet.cluster.wire import encode_frame
from stormlet.runtime.protocol import ACK_FAIL

MESSAGE_TIMEOUT = "topology.message.timeout.secs"
MAX_SPOUT_PENDING = "topology.max.spout.pending"
ACKER_EXECUTORS = "topology.acker.executors"


def running(topology, conf, name="reliability"):
    return support.running(topology, conf, name)


def verdicts_final(cluster, name="reliability"):
    """Wait until no tracked tuple is in flight. A spout's executor takes a root's entry as it
    delivers the root's verdict and drops any verdict for a root it no longer holds (the first
    verdict stands), so from then on no late or duplicate verdict can reach the spout."""
    support.wait_until(lambda: cluster.in_flight(name) == 0, 10, f"no tuple of {name} in flight")


# ----- components


class TrackedSpout(Spout):
    """Emits ``test.count`` tracked tuples ``[msg_id]``, one per ``next_tuple`` call, and records
    every emit, ack and fail (with times) and the thread each method ran on. With ``test.replay``
    a failed message is emitted again under the same id."""

    outputs: list[str] | dict[str, list[str]] | None = ["id"]   # a subclass declares streams

    def open(self, conf, context, collector):
        self.collector = collector
        self.count = int(conf.get("test.count", 5))
        self.replay = bool(conf.get("test.replay", False))
        self.interval = float(conf.get("test.interval", 0.0))  # seconds between first emits
        self.started = time.monotonic()
        self.index = context.this_task_index
        self.next_i = 0
        self.emits = []        # (msg_id, monotonic time)
        self.acks = []         # (msg_id, monotonic time)
        self.fails = []        # (msg_id, reason, monotonic time)
        self.outstanding = 0
        self.max_outstanding = 0
        self.threads = {}      # method name -> set of thread idents
        self._thread("open")

    def _thread(self, what):
        self.threads.setdefault(what, set()).add(threading.get_ident())

    def make_id(self, i):
        return f"{self.index}:{i}"

    def values(self, msg_id):
        return [msg_id]

    def emit(self, msg_id):
        self.emits.append((msg_id, time.monotonic()))
        self.outstanding += 1
        self.max_outstanding = max(self.max_outstanding, self.outstanding)
        self.collector.emit(self.values(msg_id), msg_id=msg_id)

    def next_tuple(self):
        self._thread("next_tuple")
        if self.next_i < self.count:
            if time.monotonic() - self.started < self.interval * (self.next_i + 1):
                return
            msg_id = self.make_id(self.next_i)
            self.next_i += 1
            self.emit(msg_id)

    def ack(self, msg_id):
        self._thread("ack")
        self.acks.append((msg_id, time.monotonic()))
        self.outstanding -= 1

    def fail(self, msg_id, reason):
        self._thread("fail")
        self.fails.append((msg_id, reason, time.monotonic()))
        self.outstanding -= 1
        if self.replay:
            self.emit(msg_id)


def spout_records(cluster, name, component="spout"):
    """All emits, acks and fails of every task of a TrackedSpout."""
    spouts = cluster.instances(name, component)
    emits = [e for s in spouts for e in list(getattr(s, "emits", []))]
    acks = [a for s in spouts for a in list(getattr(s, "acks", []))]
    fails = [f for s in spouts for f in list(getattr(s, "fails", []))]
    return emits, acks, fails


class Relay(Bolt):
    """Emits each input anchored to it, then acks it."""

    outputs = ["id"]

    def execute(self, tup):
        self.collector.emit([tup[0]], anchors=[tup])
        self.collector.ack(tup)


class BasicRelay(BasicBolt):
    outputs = ["id"]

    def execute(self, tup, collector):
        collector.emit([tup[0]])


class SlowAckSink(Bolt):
    """Sleeps ``test.sink.delay`` seconds, records the id, acks."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.delay = float(conf.get("test.sink.delay", 0.0))
        self.seen = []

    def execute(self, tup):
        time.sleep(self.delay)
        self.seen.append(tup[0])
        self.collector.ack(tup)


class FailingBolt(Bolt):
    def execute(self, tup):
        self.collector.fail(tup, "bad")


class RaisingBasicBolt(BasicBolt):
    def execute(self, tup, collector):
        raise ValueError(f"boom on {tup[0]}")


class UndecodableNameBolt(BasicBolt):
    """Raises with a file name as Python decodes a name that is not UTF-8: a lone surrogate."""

    def execute(self, tup, collector):
        raise ValueError("cannot read " + os.fsdecode(b"/data/\xff.log"))


class DroppingBolt(Bolt):
    """Receives and never acks nor fails."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = []

    def execute(self, tup):
        self.seen.append(tup[0])


# ----- (1) ack through a chain, complete latency


def test_chain_acks_each_message_exactly_once_with_complete_latency():
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("a", Relay()).shuffle_grouping("spout")
    b.set_bolt("b", BasicRelay(), parallelism=2).shuffle_grouping("a")
    b.set_bolt("sink", SlowAckSink()).shuffle_grouping("b")
    conf = {MESSAGE_TIMEOUT: 2, "test.count": 5, "test.sink.delay": 0.05}
    with running(b.build(), conf) as cluster:
        cluster.wait_for(lambda: len(spout_records(cluster, "reliability")[1]) >= 5, timeout=10)
        verdicts_final(cluster)
        emits, acks, fails = spout_records(cluster, "reliability")
        assert sorted(m for m, _ in acks) == sorted(m for m, _ in emits)
        assert Counter(m for m, _ in acks) == Counter({f"0:{i}": 1 for i in range(5)})
        assert fails == []
        # The ack came only after the sink (which sleeps 50 ms per tuple) had the tuple.
        assert sorted(cluster.instances("reliability", "sink")[0].seen) == sorted(
            m for m, _ in emits)
        metrics = cluster.metrics("reliability")["spout"]
        assert metrics["acked"] == 5 and metrics["failed"] == 0
        latency = metrics["complete_latency_ms"]
        assert latency["mean"] is not None and latency["p99"] is not None
        assert 50 <= latency["mean"] < 2000
        assert latency["p99"] >= 50


# ----- (2) a bolt calls fail(t, "bad")


def test_bolt_fail_reaches_spout_with_reason_fail_component_and_message():
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("relay", Relay()).shuffle_grouping("spout")
    b.set_bolt("failer", FailingBolt(), parallelism=2).shuffle_grouping("relay")
    with running(b.build(), {MESSAGE_TIMEOUT: 2, "test.count": 4}) as cluster:
        cluster.wait_for(lambda: len(spout_records(cluster, "reliability")[2]) >= 4, timeout=10)
        verdicts_final(cluster)
        emits, acks, fails = spout_records(cluster, "reliability")
        assert acks == []
        assert Counter(m for m, _, _ in fails) == Counter(m for m, _ in emits)
        assert len(fails) == 4
        for _msg_id, reason, _t in fails:
            assert isinstance(reason, FailReason)
            assert reason.kind == "fail"
            assert reason.component == "failer"
            assert reason.message == "bad"
        assert cluster.metrics("reliability")["spout"]["fail_reasons"] == {"fail": 4}


# ----- (3) a basic bolt raises


def test_basic_bolt_exception_fails_with_reason_error():
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("relay", BasicRelay()).shuffle_grouping("spout")
    b.set_bolt("exploder", RaisingBasicBolt()).shuffle_grouping("relay")
    with running(b.build(), {MESSAGE_TIMEOUT: 2, "test.count": 3}) as cluster:
        cluster.wait_for(lambda: len(spout_records(cluster, "reliability")[2]) >= 3, timeout=10)
        verdicts_final(cluster)
        emits, acks, fails = spout_records(cluster, "reliability")
        assert acks == []
        assert sorted(m for m, _, _ in fails) == sorted(m for m, _ in emits)
        for msg_id, reason, _t in fails:
            assert reason.kind == "error"
            assert reason.component == "exploder"
            assert f"boom on {msg_id}" in reason.message
        errors = cluster.errors("reliability")
        assert any(e.component == "exploder" and "boom on" in e.error for e in errors)


class SometimesRaisingBolt(Bolt):
    """Records every tuple it is given; raises on every third, acks the others."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = []

    def execute(self, tup):
        self.seen.append(tup[0])
        if len(self.seen) % 3 == 0:
            raise ValueError(f"boom on {tup[0]}")
        self.collector.ack(tup)


def test_an_exception_mid_batch_fails_that_tuple_and_the_batch_goes_on_in_order():
    # The spout emits all 30 in one burst, so they reach the bolt as one batch: each tuple is
    # executed once, in order, and only those that raised are failed.
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("sometimes", SometimesRaisingBolt()).shuffle_grouping("spout")
    with running(b.build(), {MESSAGE_TIMEOUT: 5, "test.count": 30}) as cluster:
        cluster.wait_for(lambda: sum(map(len, spout_records(cluster, "reliability")[1:])) >= 30,
                         timeout=10)
        verdicts_final(cluster)
        emits, acks, fails = spout_records(cluster, "reliability")
        bolt, = cluster.instances("reliability", "sometimes")
    emitted = [m for m, _ in emits]
    assert bolt.seen == emitted
    raised = emitted[2::3]
    assert sorted(m for m, _, _ in fails) == sorted(raised)
    assert all(reason.kind == "error" and f"boom on {m}" in reason.message
               for m, reason, _ in fails)
    assert sorted(m for m, _ in acks) == sorted(set(emitted) - set(raised))


def test_a_fail_message_utf8_cannot_carry_reaches_the_spout_escaped():
    # The message crosses between workers, and into the failed-message log, as UTF-8: a lone
    # surrogate would not encode there (a frame that does not pack is dropped whole).
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("reader", UndecodableNameBolt()).shuffle_grouping("spout")
    with running(b.build(), {MESSAGE_TIMEOUT: 2, "test.count": 2}) as cluster:
        cluster.wait_for(lambda: len(spout_records(cluster, "reliability")[2]) >= 2, timeout=10)
        _emits, _acks, fails = spout_records(cluster, "reliability")
    for _msg_id, reason, _t in fails:
        assert reason.message == "ValueError: cannot read /data/\\udcff.log"
        encode_frame([(ACK_FAIL, 1, 1, [1, reason.kind, reason.message])])


# ----- (4) a dropped tuple times out, naming the last component that acked


def test_dropped_tuple_times_out_between_T_and_2T_naming_last_acker():
    timeout = 1.0
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("a", Relay()).shuffle_grouping("spout")
    b.set_bolt("b", DroppingBolt()).shuffle_grouping("a")
    # Emits spread over one timeout period, so they land at different phases of the rotation.
    conf = {MESSAGE_TIMEOUT: timeout, "test.count": 3, "test.interval": 0.3}
    with running(b.build(), conf) as cluster:
        cluster.wait_for(lambda: len(spout_records(cluster, "reliability")[2]) >= 3, timeout=10)
        verdicts_final(cluster)
        emits, acks, fails = spout_records(cluster, "reliability")
        assert acks == []
        assert len(fails) == 3
        assert sorted(cluster.instances("reliability", "b")[0].seen) == sorted(
            m for m, _ in emits)
        emitted_at = dict(emits)
        for msg_id, reason, failed_at in fails:
            assert reason.kind == "timeout"
            assert reason.component == "a"
            waited = failed_at - emitted_at[msg_id]
            assert timeout - 0.05 <= waited <= 2 * timeout + 0.5, waited
        assert cluster.metrics("reliability")["spout"]["fail_reasons"] == {"timeout": 3}


# ----- (5) reset_timeout keeps a held tuple alive


class HeartbeatSpout(TrackedSpout):
    """One tracked tuple on "data", then an untracked "beat" every 0.1 s."""

    outputs = {"data": ["id"], "beats": ["n"]}

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.beats = 0
        self.last_beat = 0.0

    def next_tuple(self):
        if not self.emits:
            self.emits.append(("held", time.monotonic()))
            self.collector.emit(["held"], msg_id="held", stream="data")
            return
        now = time.monotonic()
        if now - self.last_beat >= 0.1:
            self.last_beat = now
            self.beats += 1
            self.collector.emit([self.beats], stream="beats")


class HoldingBolt(Bolt):
    """Holds the data tuple for ``test.hold`` seconds, acking it on the first beat after that;
    with ``test.reset`` it calls ``reset_timeout`` on every beat until then."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.hold = float(conf["test.hold"])
        self.reset = bool(conf["test.reset"])
        self.held = None
        self.held_at = 0.0
        self.resets = 0
        self.acked_held_at = None

    def execute(self, tup):
        if tup.stream == "data":
            self.held, self.held_at = tup, time.monotonic()
            return
        self.collector.ack(tup)
        if self.held is None:
            return
        if time.monotonic() - self.held_at >= self.hold:
            self.collector.ack(self.held)
            self.held = None
            self.acked_held_at = time.monotonic()
        elif self.reset:
            self.collector.reset_timeout(self.held)
            self.resets += 1


def _held_topology():
    b = TopologyBuilder()
    b.set_spout("spout", HeartbeatSpout())
    b.set_bolt("holder", HoldingBolt()).shuffle_grouping("spout", "data") \
        .shuffle_grouping("spout", "beats")
    return b.build()


def test_reset_timeout_keeps_a_held_tuple_alive_past_the_timeout():
    timeout = 1.0
    conf = {MESSAGE_TIMEOUT: timeout, "test.hold": 2.5 * timeout, "test.reset": True}
    with running(_held_topology(), conf) as cluster:
        spout = cluster.instances("reliability", "spout")[0]
        cluster.wait_for(lambda: spout.acks or spout.fails, timeout=10)
        verdicts_final(cluster)
        holder = cluster.instances("reliability", "holder")[0]
        assert holder.resets > 5
        assert spout.fails == []
        assert [m for m, _ in spout.acks] == ["held"]
        held_for = spout.acks[0][1] - spout.emits[0][1]
        assert held_for >= 2.5 * timeout


def test_without_reset_timeout_the_same_held_tuple_times_out():
    timeout = 1.0
    conf = {MESSAGE_TIMEOUT: timeout, "test.hold": 2.5 * timeout, "test.reset": False}
    with running(_held_topology(), conf) as cluster:
        spout = cluster.instances("reliability", "spout")[0]
        holder = cluster.instances("reliability", "holder")[0]
        cluster.wait_for(lambda: holder.acked_held_at is not None, timeout=10)
        # A bounded window, as the behaviour is one: the late ack reaches the acker after the
        # timeout's verdict, and nothing observable marks that it has been dropped; a wrongly
        # resurrected message would be acked within it.
        time.sleep(0.3)
        assert spout.acks == []  # the late ack does not resurrect a timed-out message
        assert [(m, r.kind) for m, r, _ in spout.fails] == [("held", "timeout")]
        waited = spout.fails[0][2] - spout.emits[0][1]
        assert timeout - 0.05 <= waited <= 2 * timeout + 0.5


# ----- (6) max spout pending


class BatchingBolt(Bolt):
    """Holds tuples and acks them all once it holds ``test.batch`` of them or the oldest has
    waited 0.2 s (checked when tuples or ticks arrive)."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.batch = int(conf["test.batch"])
        self.held = []
        self.first_at = 0.0

    def execute(self, tup):
        if not tup.is_tick():
            if not self.held:
                self.first_at = time.monotonic()
            self.held.append(tup)
        if self.held and (len(self.held) >= self.batch
                          or time.monotonic() - self.first_at >= 0.2):
            for held in self.held:
                self.collector.ack(held)
            self.held = []


# A config file or `-c topology.max.spout.pending=4.0` gives a float: the bound is the same.
@pytest.mark.parametrize("k", [4, 4.0], ids=["int", "float"])
def test_max_spout_pending_bounds_tuples_in_flight_per_spout_task(k):
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout(), parallelism=2)
    b.set_bolt("batcher", BatchingBolt()).shuffle_grouping("spout") \
        .add_config("topology.tick.tuple.freq.secs", 1)
    conf = {MESSAGE_TIMEOUT: 2, MAX_SPOUT_PENDING: k, "test.count": 40, "test.batch": k}
    with running(b.build(), conf) as cluster:
        samples = []

        def done():
            samples.append(cluster.in_flight("reliability"))
            return len(spout_records(cluster, "reliability")[1]) >= 80

        cluster.wait_for(done, timeout=20, interval=0.002)
        spouts = cluster.instances("reliability", "spout")
        assert [s.max_outstanding for s in spouts] == [k, k]
        assert max(samples) <= 2 * k
        _emits, acks, fails = spout_records(cluster, "reliability")
        assert fails == [] and len(acks) == 80


# ----- (7) acker executors = 0, and untracked emits


def test_no_ackers_acks_at_emit_even_if_bolts_never_ack():
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("drop", DroppingBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 1, ACKER_EXECUTORS: 0, "test.count": 10}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("reliability", "spout")[0]
        cluster.wait_for(lambda: len(spout.acks) >= 10, timeout=10)
        emitted_at = dict(spout.emits)
        for msg_id, acked_at in spout.acks:
            assert acked_at - emitted_at[msg_id] < 0.5
        assert Counter(m for m, _ in spout.acks) == Counter(m for m, _ in spout.emits)
        # Nothing is left for a timeout to fail later, nor to ack twice: the spout's executor
        # holds no entry for any message once the bolt has them all.
        drop = cluster.instances("reliability", "drop")[0]
        cluster.wait_for(lambda: len(drop.seen) >= 10, timeout=5)
        verdicts_final(cluster)
        assert spout.fails == []
        assert len(spout.acks) == 10
        assert spout.threads["ack"] == spout.threads["next_tuple"]


class UntrackedSpout(Spout):
    outputs = ["id"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        self.calls = 0
        self.acks = []
        self.fails = []

    def next_tuple(self):
        self.calls += 1
        if self.n < 20:
            self.collector.emit([str(self.n)])
            self.n += 1

    def ack(self, msg_id):
        self.acks.append(msg_id)

    def fail(self, msg_id, reason):
        self.fails.append((msg_id, reason))


class AckOrFailBolt(Bolt):
    """Acks even ids, fails odd ones."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = 0

    def execute(self, tup):
        self.seen += 1
        if int(tup[0]) % 2:
            self.collector.fail(tup, "odd")
        else:
            self.collector.ack(tup)


@pytest.mark.parametrize("ackers", [1, 0])
def test_untracked_emits_never_call_ack_or_fail(ackers):
    b = TopologyBuilder()
    b.set_spout("spout", UntrackedSpout())
    b.set_bolt("relay", Relay()).shuffle_grouping("spout")
    b.set_bolt("judge", AckOrFailBolt()).shuffle_grouping("relay")
    with running(b.build(), {MESSAGE_TIMEOUT: 1, ACKER_EXECUTORS: ackers}) as cluster:
        judge = cluster.instances("reliability", "judge")[0]
        cluster.wait_for(lambda: judge.seen >= 20, timeout=10)
        spout = cluster.instances("reliability", "spout")[0]
        # A tracked emit would now have its verdict coming: without ackers, the spout's step
        # after the emit's acks it; with one, the judge's ack or fail, or at last the timeout.
        calls = spout.calls
        support.wait_until(lambda: spout.calls > calls + 1, 10, "the spout's next steps")
        verdicts_final(cluster)
        assert spout.acks == [] and spout.fails == []
        metrics = cluster.metrics("reliability")["spout"]
        assert metrics["emitted"] == 20 and metrics["acked"] == 0 and metrics["failed"] == 0


# ----- (8) multi-anchoring


class PairSpout(TrackedSpout):
    """For key k emits two tracked tuples, msg ids "k:L" and "k:R", with fields (key, side)."""

    outputs = ["key", "side"]

    def next_tuple(self):
        self._thread("next_tuple")
        if self.next_i < 2 * self.count:
            key, side = divmod(self.next_i, 2)
            self.next_i += 1
            self.emit(f"{key}:{'LR'[side]}")

    def values(self, msg_id):
        key, side = msg_id.split(":")
        return [int(key), side]


class JoinBolt(Bolt):
    """Holds the first tuple of each key; on the second emits one tuple anchored to both and
    acks both at once."""

    outputs = ["key"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.waiting = {}

    def execute(self, tup):
        key = tup["key"]
        other = self.waiting.pop(key, None)
        if other is None:
            self.waiting[key] = tup
            return
        self.collector.emit([key], anchors=[other, tup])
        self.collector.ack(other)
        self.collector.ack(tup)


class JoinedSink(Bolt):
    """Sleeps 0.15 s, then acks even keys and fails odd ones, recording when."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.done_at = {}

    def execute(self, tup):
        time.sleep(0.15)
        key = tup[0]
        self.done_at[key] = time.monotonic()
        if key % 2:
            self.collector.fail(tup, "odd join")
        else:
            self.collector.ack(tup)


def test_multi_anchored_join_acks_or_fails_both_roots_after_the_joined_tree():
    pairs = 4
    b = TopologyBuilder()
    b.set_spout("spout", PairSpout())
    b.set_bolt("join", JoinBolt(), parallelism=2).fields_grouping("spout", ["key"])
    # The relay re-emits the two-root joined tuple, so its child carries both roots too.
    b.set_bolt("relay", Relay()).shuffle_grouping("join")
    b.set_bolt("sink", JoinedSink()).shuffle_grouping("relay")
    conf = {MESSAGE_TIMEOUT: 2, "test.count": pairs}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("reliability", "spout")[0]
        cluster.wait_for(lambda: len(spout.acks) + len(spout.fails) >= 2 * pairs, timeout=10)
        verdicts_final(cluster)
        done_at = cluster.instances("reliability", "sink")[0].done_at
        assert sorted(done_at) == list(range(pairs))
        acked = {m: t for m, t in spout.acks}
        failed = {m: (r, t) for m, r, t in spout.fails}
        assert len(spout.acks) + len(spout.fails) == 2 * pairs
        for key in range(pairs):
            for side in "LR":
                msg_id = f"{key}:{side}"
                if key % 2 == 0:
                    assert msg_id in acked, msg_id
                    assert acked[msg_id] >= done_at[key]
                else:
                    assert msg_id in failed, msg_id
                    reason, failed_at = failed[msg_id]
                    assert (reason.kind, reason.component, reason.message) == (
                        "fail", "sink", "odd join")
                    assert failed_at >= done_at[key]


# ----- (9) ack and fail on the spout's own thread


class ThreadRecordingBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.threads = set()

    def execute(self, tup):
        self.threads.add(threading.get_ident())
        if tup[0].endswith(("1", "3", "5", "7", "9")):
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


@pytest.mark.parametrize("shared", [True, False])
def test_ack_and_fail_run_on_the_spout_thread(shared, monkeypatch):
    monkeypatch.setattr("stormlet.runtime.threads.BLOCKED_SECS", 5.0)   # no hand-off on a slow turn
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("judge", ThreadRecordingBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 2, "test.count": 10, cfg.STORMLET_EXECUTOR_SHARED_THREAD: shared}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("reliability", "spout")[0]
        cluster.wait_for(lambda: len(spout.acks) + len(spout.fails) >= 10, timeout=10)
        assert len(spout.acks) == 5 and len(spout.fails) == 5
        threads = spout.threads
        assert len(threads["next_tuple"]) == 1
        (spout_thread,) = threads["next_tuple"]
        assert threads["ack"] == {spout_thread}
        assert threads["fail"] == {spout_thread}
        assert threads["open"] == {spout_thread}
        assert spout_thread != threading.get_ident()
        bolt = cluster.instances("reliability", "judge")[0]
        # Taking turns on one thread, or each on its own.
        assert (spout_thread in bolt.threads) == shared


# ----- (10) fan-out trees with random failures and replay


class FanOutBolt(Bolt):
    """Emits ``test.fanout`` children [msg, j] anchored to the input, then acks it."""

    outputs = ["msg", "part"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.fanout = int(conf["test.fanout"])

    def execute(self, tup):
        for j in range(self.fanout):
            self.collector.emit([tup[0], str(j)], anchors=[tup])
        self.collector.ack(tup)


class FlakyBolt(Bolt):
    """Fails about 20% of its inputs; otherwise emits two anchored children and acks."""

    outputs = ["msg", "part", "leaf"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.rng = random.Random(1000 + context.task_id)
        self.failed = 0

    def execute(self, tup):
        if self.rng.random() < 0.2:
            self.failed += 1
            self.collector.fail(tup, "flaky")
            return
        for leaf in ("x", "y"):
            self.collector.emit([tup["msg"], tup["part"], leaf], anchors=[tup])
        self.collector.ack(tup)


class LeafSink(BasicBolt):
    def prepare(self, conf, context):
        self.leaves = set()

    def execute(self, tup, collector):
        self.leaves.add((tup["msg"], tup["part"], tup["leaf"]))


def test_fan_out_trees_with_random_failures_and_replay_ack_every_message_exactly_once():
    per_task, fanout = 60, 4
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout(), parallelism=2)
    b.set_bolt("fan", FanOutBolt(), parallelism=3).shuffle_grouping("spout")
    b.set_bolt("flaky", FlakyBolt(), parallelism=3).fields_grouping("fan", ["part"])
    b.set_bolt("leaf", LeafSink(), parallelism=2).fields_grouping("flaky", ["msg"])
    conf = {MESSAGE_TIMEOUT: 2, ACKER_EXECUTORS: 2, MAX_SPOUT_PENDING: 20,
            "test.count": per_task, "test.replay": True, "test.fanout": fanout}
    name = "reliability"
    expected_ids = {f"{t}:{i}" for t in range(2) for i in range(per_task)}
    with running(b.build(), conf, name) as cluster:
        def all_acked():
            return {m for m, _ in spout_records(cluster, name)[1]} >= expected_ids

        cluster.wait_for(all_acked, timeout=20)
        verdicts_final(cluster, name)
        emits, acks, fails = spout_records(cluster, name)
        ack_counts = Counter(m for m, _ in acks)
        fail_counts = Counter(m for m, _, _ in fails)
        emit_counts = Counter(m for m, _ in emits)
        assert set(ack_counts) == expected_ids
        assert set(ack_counts.values()) == {1}, "a message was acked more than once"
        for msg_id in expected_ids:
            # Every emission (first or replay) got exactly one verdict; the last one an ack.
            assert emit_counts[msg_id] == 1 + fail_counts[msg_id], msg_id
        assert sum(fail_counts.values()) > 0, "the flaky bolt should have failed some trees"
        assert {(r.kind, r.component, r.message) for _, r, _ in fails} == {
            ("fail", "flaky", "flaky")}
        flaky_failed = sum(f.failed for f in cluster.instances(name, "flaky"))
        assert sum(fail_counts.values()) <= flaky_failed
        leaves = set().union(*(s.leaves for s in cluster.instances(name, "leaf")))
        for msg_id in expected_ids:
            for part in range(fanout):
                for leaf in ("x", "y"):
                    assert (msg_id, str(part), leaf) in leaves
        assert cluster.in_flight(name) == 0


# ----- complete latency is measured from each emission, wherever the spout emits it
# (regression: emits from open(), ack() and fail() used to carry a stale timestamp)


class FailFirstAttemptBolt(Bolt):
    """Holds each message's first attempt for 0.4 s and fails it; acks later attempts at once."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.attempts = Counter()

    def execute(self, tup):
        self.attempts[tup[0]] += 1
        if self.attempts[tup[0]] == 1:
            time.sleep(0.4)
            self.collector.fail(tup, "first attempt")
        else:
            self.collector.ack(tup)


def test_complete_latency_of_a_replay_is_measured_from_the_replay():
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("judge", FailFirstAttemptBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: 2, MAX_SPOUT_PENDING: 1, "test.count": 1, "test.replay": True}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("reliability", "spout")[0]
        cluster.wait_for(lambda: spout.acks, timeout=10)
        assert [m for m, _, _ in spout.fails] == ["0:0"]
        # The acked attempt (the replay) was acked within milliseconds of being emitted.
        replayed_at = spout.emits[-1][1]
        assert spout.acks[0][1] - replayed_at < 0.2
        latency = cluster.metrics("reliability")["spout"]["complete_latency_ms"]
        assert latency["mean"] < 200, latency


class EmitInOpenSpout(TrackedSpout):
    """Emits its only tracked tuple from ``open``."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.next_i = self.count
        self.emit("from-open")


def test_complete_latency_of_a_tuple_emitted_in_open():
    b = TopologyBuilder()
    b.set_spout("spout", EmitInOpenSpout())
    b.set_bolt("sink", SlowAckSink()).shuffle_grouping("spout")
    with running(b.build(), {MESSAGE_TIMEOUT: 2}) as cluster:
        spout = cluster.instances("reliability", "spout")[0]
        cluster.wait_for(lambda: spout.acks, timeout=10)
        assert [m for m, _ in spout.acks] == ["from-open"]
        latency = cluster.metrics("reliability")["spout"]["complete_latency_ms"]
        assert latency["mean"] < 1000, latency


# ----- a timed-out tuple frees its max.spout.pending slot


class DropFirstBolt(Bolt):
    """Drops the first ``test.drop`` tuples it gets (never acks them), acks the rest."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.drop = int(conf["test.drop"])
        self.seen = 0

    def execute(self, tup):
        self.seen += 1
        if self.seen > self.drop:
            self.collector.ack(tup)


def test_timeouts_free_max_spout_pending_slots_so_the_spout_does_not_stall():
    timeout = 1.0
    b = TopologyBuilder()
    b.set_spout("spout", TrackedSpout())
    b.set_bolt("dropper", DropFirstBolt()).shuffle_grouping("spout")
    conf = {MESSAGE_TIMEOUT: timeout, MAX_SPOUT_PENDING: 2, "test.count": 6, "test.drop": 2}
    with running(b.build(), conf) as cluster:
        spout = cluster.instances("reliability", "spout")[0]
        dropper = cluster.instances("reliability", "dropper")[0]
        cluster.wait_for(lambda: dropper.seen >= 2, timeout=5)
        assert len(spout.emits) == 2  # both slots held by dropped tuples (and below: until the
        # first timeout frees one, no third emit)
        cluster.wait_for(lambda: len(spout.acks) == 4, timeout=2 * timeout + 2)
        assert sorted(m for m, _, _ in spout.fails) == ["0:0", "0:1"]
        assert {r.kind for _, r, _ in spout.fails} == {"timeout"}
        assert spout.max_outstanding == 2
        # Nothing was emitted before a slot was freed by a timeout.
        assert spout.emits[2][1] >= min(t for _, _, t in spout.fails)
