"""Bolts that feed each other in a cycle keep running under backpressure.

Storm's backpressure can deadlock such a topology (STORM-3637): a bolt waiting for room in a full
inbox of the cycle waits, in the end, on itself. With inboxes of one batch, before the edges that
close a cycle were exempted, the two bolts feeding each other stopped for good within a second,
tracked or not, and so did a bolt of two tasks reading its own stream.
"""

from __future__ import annotations

import time

import pytest
import support
from cluster_topologies import cycle
from cluster_topologies.cycle import (
    FAN_OUT,
    LAPS,
    Back,
    Countdown,
    FanOut,
    Numbers,
    laps_of_fan_out,
    loop_topology,
)

from stormlet import TopologyBuilder

N = 3000


class SlowBack(Back):
    """The back bolt, with 0.2 ms of work a tuple: slower than the rest of the cycle."""

    def onward(self, n, laps):
        time.sleep(0.0002)
        return super().onward(n, laps)


def executed(cluster, component: str) -> int:
    return sum(bolt.executed for bolt in cluster.instances("test", component))


def conf(**extra):
    return {**cycle.config, "test.count": N, **extra}


# ----- which edges close a cycle


def test_feeding_back_names_the_readers_that_reach_the_component_again():
    b = TopologyBuilder()
    b.set_spout("s", Numbers())
    b.set_bolt("a", FanOut()).shuffle_grouping("s").shuffle_grouping("c")
    b.set_bolt("b", Back()).shuffle_grouping("a")
    b.set_bolt("c", Back()).shuffle_grouping("b")
    b.set_bolt("out", Back()).shuffle_grouping("b")      # reads the cycle, is not in it
    b.set_bolt("self", Countdown()).shuffle_grouping("out").shuffle_grouping("self")
    topology = b.build()
    assert topology.feeding_back("a") == {"b"}
    assert topology.feeding_back("b") == {"c"}           # not "out"
    assert topology.feeding_back("c") == {"a"}
    assert topology.feeding_back("s") == set()
    assert topology.feeding_back("out") == set()
    assert topology.feeding_back("self") == {"self"}


def test_a_cycle_on_several_workers_without_max_spout_pending_is_warned_about_at_submit():
    # A worker's gate holds back only what enters the cycle from its own executors.
    topology = loop_topology()
    two = {"topology.workers": 2}
    for unbounded in (two, {**two, "topology.max.spout.pending": 100,
                            "topology.acker.executors": 0}):
        warned = topology.config_warnings(unbounded)
        assert len(warned) == 1 and warned[0].startswith("bolts back, fan-out feed each other "
                                                         "in a cycle"), warned
    assert topology.config_warnings({**two, "topology.max.spout.pending": 100}) == []
    assert topology.config_warnings({"topology.acker.executors": 0}) == []   # one worker


def test_a_topology_without_cycles_has_no_edges_exempt_from_backpressure():
    b = TopologyBuilder()
    b.set_spout("s", Numbers())
    b.set_bolt("a", FanOut()).shuffle_grouping("s")
    b.set_bolt("b", Back()).shuffle_grouping("a").shuffle_grouping("s")
    topology = b.build()
    assert all(topology.feeding_back(cid) == set() for cid in topology.components)


# ----- running


def test_bolts_feeding_each_other_complete_every_tree_with_one_batch_inboxes():
    with support.running(loop_topology(), conf()) as cluster:
        spout, = cluster.instances("test", "numbers")
        support.wait_until(lambda: spout.acked >= N or spout.failures, 60,
                           "every number acked, or a failure")
        assert spout.failures == [] and spout.acked == N
        assert executed(cluster, "fan-out") == N * laps_of_fan_out()


def test_an_untracked_cycle_runs_to_the_end():
    with support.running(loop_topology(), conf(**{"topology.acker.executors": 0,
                                                  "test.untracked": True})) as cluster:
        every = N * laps_of_fan_out()
        support.wait_until(lambda: executed(cluster, "back") >= FAN_OUT * every, 60,
                           "every number to go round the cycle")
        assert executed(cluster, "fan-out") == every
        assert executed(cluster, "back") == FAN_OUT * every


@pytest.mark.parametrize("tasks", [1, 2])
def test_a_bolt_reading_its_own_stream_completes_every_tree(tasks):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("countdown", Countdown(), parallelism=tasks) \
        .shuffle_grouping("numbers").shuffle_grouping("countdown")
    with support.running(b.build(), conf()) as cluster:
        spout, = cluster.instances("test", "numbers")
        support.wait_until(lambda: spout.acked >= N or spout.failures, 60,
                           "every number acked, or a failure")
        assert spout.failures == [] and spout.acked == N
        assert executed(cluster, "countdown") == N * (LAPS * FAN_OUT + 1)


def test_a_slow_bolt_anywhere_in_a_cycle_slows_what_enters_it():
    # The spout feeds the fan-out bolt, whose inbox has room; the slow bolt is the back bolt,
    # whose inbox the fan-out bolt fills without waiting. Without the cycle's gate nothing
    # slowed the spout, and the back bolt's inbox grew by hundreds of batches a second.
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("fan-out", FanOut()).shuffle_grouping("numbers").shuffle_grouping("back")
    b.set_bolt("back", SlowBack()).shuffle_grouping("fan-out")
    unbounded = conf(**{"test.count": 10**9, "topology.acker.executors": 0,
                        "test.untracked": True})
    deepest = 0
    with support.running(b.build(), unbounded) as cluster:
        for _ in range(20):
            time.sleep(0.1)
            depths = [row["queue_depth"] for row in cluster.metrics_snapshot("test")["tasks"]
                      if row["component"] == "back"]
            deepest = max(deepest, *depths)
        spout, = cluster.instances("test", "numbers")
        assert spout.emitted > 0 and executed(cluster, "back") > 0
    assert deepest <= 10, f"the slow bolt's inbox held {deepest} batches (capacity 1)"
