"""Local mode runs a process's executor threads on one CPU (stormlet/runtime/cpu_affinity.py):
seen from inside the spouts and bolts themselves, with the caller's own thread left alone."""

from __future__ import annotations

import logging
import os
import threading

import pytest
from support import running, wait_until

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.runtime import cpu_affinity
from stormlet.runtime.cpu_affinity import current_cpu, local_executor_cpu, usable_cpus
from stormlet.topology import TopologyError

needs_two_cpus = pytest.mark.skipif(len(usable_cpus()) < 2,
                                    reason="pinning to one CPU needs a process that may use two")


class AffinitySpout(Spout):
    """Emits one tuple, noting the CPUs its thread may use in open and in next_tuple."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.seen = {"open": sorted(os.sched_getaffinity(0))}

    def next_tuple(self):
        if "next_tuple" not in self.seen:
            self.seen["next_tuple"] = sorted(os.sched_getaffinity(0))
            self.collector.emit([1])


class AffinityBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = {}

    def execute(self, tup):
        self.seen["execute"] = sorted(os.sched_getaffinity(0))
        self.collector.ack(tup)


def topology():
    builder = TopologyBuilder()
    builder.set_spout("spout", AffinitySpout())
    builder.set_bolt("bolt", AffinityBolt()).shuffle_grouping("spout")
    return builder.build()


def cpus_seen(cluster, name="test"):
    """Every CPU set the topology's spout and bolt saw, once the bolt has executed."""
    (spout,) = cluster.instances(name, "spout")
    (bolt,) = cluster.instances(name, "bolt")
    wait_until(lambda: "execute" in bolt.seen, 10, "the bolt to execute")
    return [*spout.seen.values(), *bolt.seen.values()]


@needs_two_cpus
def test_every_executor_runs_on_one_cpu_and_the_callers_thread_is_left_alone():
    before = sorted(os.sched_getaffinity(0))
    with running(topology(), {}) as cluster:
        seen = cpus_seen(cluster)
    cpu = local_executor_cpu()
    assert seen == [[cpu]] * 3
    assert sorted(os.sched_getaffinity(0)) == before


@needs_two_cpus
def test_two_topologies_of_a_process_share_the_cpu():
    with (running(topology(), {}, name="one") as first,
          running(topology(), {}, name="two") as second):
        assert cpus_seen(first, "one") == cpus_seen(second, "two") == [[local_executor_cpu()]] * 3


@needs_two_cpus
def test_turned_off_the_executors_may_run_on_every_cpu():
    with running(topology(), {"stormlet.local.one.cpu": False}) as cluster:
        assert cpus_seen(cluster) == [usable_cpus()] * 3


@needs_two_cpus
def test_a_cpu_that_cannot_be_used_is_logged_and_the_topology_runs_unpinned(monkeypatch, caplog):
    unusable = max(usable_cpus()) + 4096
    monkeypatch.setattr(cpu_affinity, "usable_cpus", lambda: [*usable_cpus(), unusable])
    monkeypatch.setattr(cpu_affinity, "_local_cpu", unusable)
    with caplog.at_level(logging.WARNING), running(topology(), {}) as cluster:
        assert cpus_seen(cluster) == [sorted(os.sched_getaffinity(0))] * 3
    assert "could not be pinned" in caplog.text and "running unpinned" in caplog.text


def test_the_local_cpu_is_one_the_process_may_use_and_stays_chosen():
    cpu = local_executor_cpu()
    if len(usable_cpus()) < 2:
        assert cpu is None   # one CPU already: nothing to choose
        return
    assert cpu in usable_cpus()
    results = []
    threads = [threading.Thread(target=lambda: results.append(local_executor_cpu()))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [cpu] * 4


@needs_two_cpus
def test_the_current_cpu_is_the_one_a_thread_is_pinned_to():
    seen = {}

    def pinned_on(cpu):
        cpu_affinity.pin_current_thread(cpu)
        seen[cpu] = current_cpu()

    for cpu in usable_cpus()[:2]:
        thread = threading.Thread(target=pinned_on, args=(cpu,))
        thread.start()
        thread.join()
    assert seen == {cpu: cpu for cpu in usable_cpus()[:2]}


def test_a_setting_that_is_not_true_or_false_is_refused_at_submit():
    with pytest.raises(TopologyError,
                       match="stormlet.local.one.cpu must be true or false, not 'no'"):
        with running(topology(), {"stormlet.local.one.cpu": "no"}):
            pass
