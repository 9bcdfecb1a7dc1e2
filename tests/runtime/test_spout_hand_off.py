"""When a spout in a worker hands the interpreter lock to the worker's other threads after a burst
(``time.sleep(0)`` in runtime/spout_executor.py): on a thread of its own, or taking turns on a
shared thread below its peak (a burst ran dry); never taking turns at full speed, where the
rounds do that work and a hand-off only costs context switches.

Each test runs a real topology in this process with a partial plan, as a worker does (the sink
runs "elsewhere": a ``Parking`` route), and counts the spout executor's zero-second sleeps."""

from __future__ import annotations

import time
import types

import pytest
from support import wait_until
from test_runtime_live import BASE_CONF, Parking, plan_without

from stormlet import BasicBolt, Spout, TopologyBuilder
from stormlet import config as cfg
from stormlet.runtime import spout_executor
from stormlet.runtime.engine import TopologyRuntime


class Endless(Spout):
    """Emits a tracked tuple on every call: its bursts end on max pending, never dry."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.emits = 0

    def next_tuple(self):
        self.collector.emit([self.emits], msg_id=self.emits)
        self.emits += 1


class OneACall(Endless):
    """Emits one tuple every other call: each burst runs dry after its first emit."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.calls = 0

    def next_tuple(self):
        self.calls += 1
        if self.calls % 2:
            super().next_tuple()


class Sink(BasicBolt):
    outputs = []

    def process(self, tup):
        pass


@pytest.fixture
def hand_offs(monkeypatch):
    """The zero-second sleeps the spout executor makes, counted (its ``time``, replaced)."""
    counted = {"hand_offs": 0}

    def sleep(seconds: float) -> None:
        if seconds == 0:
            counted["hand_offs"] += 1
        time.sleep(seconds)

    monkeypatch.setattr(spout_executor, "time",
                        types.SimpleNamespace(monotonic=time.monotonic, sleep=sleep))
    return counted


def run_spanning_workers(spout: Spout, shared: bool) -> tuple[Spout, TopologyRuntime]:
    """``spout`` emitting to a bolt that runs in another worker, started; its instance."""
    conf = {**BASE_CONF, cfg.STORMLET_EXECUTOR_SHARED_THREAD: shared,
            cfg.TOPOLOGY_MAX_SPOUT_PENDING: 50}
    b = TopologyBuilder()
    b.set_spout("source", spout)
    b.set_bolt("sink", Sink()).shuffle_grouping("source")
    topology = b.build()
    plan, elsewhere = plan_without(topology, conf, "sink", 0)
    runtime = TopologyRuntime("hand-off", topology, conf, plan=plan,
                              remote_routes={task: Parking() for task in elsewhere})
    runtime.start()
    (instance,) = runtime.instances("source")
    return instance, runtime


@pytest.mark.parametrize("spout, shared, hands_off", [
    (Endless(), True, False),
    (OneACall(), True, True),
    (Endless(), False, True),
], ids=["shared-at-full-speed-keeps-it", "shared-running-dry-hands-off",
        "own-thread-hands-off"])
def test_a_spout_hands_the_lock_off_unless_taking_turns_at_full_speed(hand_offs, spout, shared,
                                                                      hands_off):
    # The sink runs elsewhere and never acks: the bursts up to max pending (50) are counted.
    instance, runtime = run_spanning_workers(spout, shared)
    try:
        wait_until(lambda: instance.emits >= 50, 10, "the spout to reach max pending")
        time.sleep(0.2)
    finally:
        runtime.stop(wait_secs=0)
    if hands_off:
        assert hand_offs["hand_offs"] > 0
    else:
        assert hand_offs["hand_offs"] == 0
