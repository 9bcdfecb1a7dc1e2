"""Load-aware shuffle (Storm 2's LoadAwareShuffleGrouping; stormlet/runtime/load_aware.py):
which tasks a shuffle picks, given their places and loads.

Unit tests drive a ``Balancer`` with made-up scopes and loads, one refresh at a time, and read
the ring it hands its chooser; a local-mode test slows one of two tasks and sees its share
fall. The cluster form (traffic kept in the worker until a task's queue passes the bound,
counted in tuples crossing between workers) is tests/cluster/test_cluster_load_aware.py.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from stormlet import Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet import groupings as g
from stormlet.groupings import Grouping
from stormlet.runtime import choosers
from stormlet.runtime.choosers import LoadAwareChooser, ShuffleChooser, make_chooser
from stormlet.runtime.inbox import Inbox
from stormlet.runtime.load_aware import (
    EVERYTHING,
    HOST_LOCAL,
    MAX_WEIGHT,
    RACK_LOCAL,
    WORKER_LOCAL,
    Balancer,
    LoadAwareness,
    LoadSampler,
    ring_capacity,
    scope_of,
)

TASKS = [3, 4, 5, 6]
# Tasks 3 and 4 run in the sender's worker, 5 and 6 in another worker on its host.
SCOPES = {3: WORKER_LOCAL, 4: WORKER_LOCAL, 5: HOST_LOCAL, 6: HOST_LOCAL}


def load_aware(tasks=TASKS, local=frozenset({3, 4}), kind=g.SHUFFLE, seed=1):
    chooser = make_chooser(Grouping(kind), ["n"], list(tasks), source_task=1,
                           local_tasks=set(local), rng=random.Random(seed), load_aware=True)
    assert isinstance(chooser, LoadAwareChooser)
    return chooser


def balancer(chooser, higher=0.8, lower=0.2):
    return Balancer(chooser, higher, lower, random.Random(7))


def picks(chooser, n):
    return [chooser.choose([i])[0] for i in range(n)]


def share(chooser) -> Counter:
    """How many slots of the ring each task holds."""
    return Counter(single[0] for single in chooser.ring)


def loads(**by_task):
    """A load function: ``t5=0.9`` gives task 5 a load of 0.9, the others 0."""
    table = {int(key[1:]): value for key, value in by_task.items()}
    return lambda task: table.get(task, 0.0)


# --------------------------------------------------------------------------- make_chooser


def test_shuffle_is_load_aware_when_asked_and_starts_with_the_local_tasks():
    chooser = load_aware()
    assert set(picks(chooser, 100)) == {3, 4}
    assert Counter(picks(chooser, 100)) == {3: 50, 4: 50}


def test_with_no_local_task_it_starts_with_every_task_evenly():
    chooser = load_aware(local=frozenset())
    got = picks(chooser, 400)
    for start in range(0, 400, 4):
        assert sorted(got[start:start + 4]) == TASKS


def test_disabled_or_onto_one_task_it_is_plain():
    plain = make_chooser(Grouping(g.SHUFFLE), ["n"], TASKS, source_task=1, load_aware=False)
    assert isinstance(plain, ShuffleChooser)
    one = make_chooser(Grouping(g.SHUFFLE), ["n"], [5], source_task=1, load_aware=True)
    assert type(one) is choosers.Always and one.tasks == [5]
    none = make_chooser(Grouping(g.NONE), ["n"], TASKS, source_task=1, load_aware=True)
    assert isinstance(none, ShuffleChooser)


def test_local_or_shuffle_is_load_aware_among_the_local_tasks_only():
    chooser = load_aware(kind=g.LOCAL_OR_SHUFFLE)
    assert [single[0] for single in chooser.singles] == [3, 4]
    # No local task: every task, as Storm's.
    assert len(load_aware(kind=g.LOCAL_OR_SHUFFLE, local=frozenset()).singles) == 4


def test_a_new_ring_is_taken_whole_at_the_next_choice():
    chooser = load_aware()
    chooser.choose([0])
    chooser.use([[6]] * 3)
    assert picks(chooser, 10) == [6] * 10


# --------------------------------------------------------------------------- the balancer


def test_it_keeps_to_the_worker_while_the_local_tasks_are_under_the_bound():
    chooser = load_aware()
    b = balancer(chooser)
    b.refresh(SCOPES, None)
    for _ in range(5):
        b.refresh(SCOPES, loads(t3=0.7, t4=0.7))
    assert b.scope == WORKER_LOCAL
    assert set(share(chooser)) == {3, 4}


def test_equal_weights_make_a_ring_of_shuffled_passes():
    chooser = load_aware()
    b = balancer(chooser)
    b.refresh({task: WORKER_LOCAL for task in TASKS}, loads())
    got = picks(chooser, 2000)
    for start in range(0, 2000, 4):
        assert sorted(got[start:start + 4]) == TASKS
    assert len(chooser.ring) >= ring_capacity(len(TASKS)) - len(TASKS)


def test_it_widens_when_the_local_mean_load_passes_the_higher_bound():
    chooser = load_aware()
    b = balancer(chooser)
    b.refresh(SCOPES, None)
    b.refresh(SCOPES, loads(t3=1.0, t4=0.7))   # mean 0.85 > 0.8
    assert b.scope == HOST_LOCAL
    assert set(share(chooser)) == set(TASKS)
    # Reset on the change, then weighed as every refresh: the loaded tasks lose 10.
    assert b.weights == {3: MAX_WEIGHT - 10, 4: MAX_WEIGHT - 10, 5: MAX_WEIGHT, 6: MAX_WEIGHT}


def test_in_a_wider_scope_loaded_tasks_lose_weight_fast_and_win_it_back_slowly():
    chooser = load_aware()
    b = balancer(chooser)
    b.refresh(SCOPES, None)
    congested = loads(t3=1.0, t4=1.0)
    b.refresh(SCOPES, congested)
    assert b.scope == HOST_LOCAL
    # The worker's tasks stay above the lower bound (mean 1.0): the scope stays wide.
    for _ in range(3):
        b.refresh(SCOPES, congested)
    assert b.weights == {3: MAX_WEIGHT - 40, 4: MAX_WEIGHT - 40, 5: MAX_WEIGHT, 6: MAX_WEIGHT}
    ring = share(chooser)
    assert ring[5] > ring[3] and ring[6] > ring[4]
    assert ring[3] == pytest.approx(ring[5] * 60 / 100, abs=2)
    for _ in range(10):
        b.refresh(SCOPES, congested)
    assert b.weights[3] == b.weights[4] == 0
    assert set(share(chooser)) == {5, 6}
    # Not congested any more, but not under the lower bound either: back a step a refresh.
    half = loads(t3=0.3, t4=0.3, t5=0.3, t6=0.3)
    b.refresh(SCOPES, half)
    assert b.scope == HOST_LOCAL and b.weights[3] == 1


def test_it_narrows_when_the_nearer_scope_falls_under_the_lower_bound():
    chooser = load_aware()
    b = balancer(chooser)
    b.refresh(SCOPES, None)
    b.refresh(SCOPES, loads(t3=0.9, t4=0.9))
    assert b.scope == HOST_LOCAL
    b.refresh(SCOPES, loads(t3=0.1, t4=0.1, t5=0.5, t6=0.5))
    assert b.scope == WORKER_LOCAL
    assert set(share(chooser)) == {3, 4}


def test_it_widens_one_scope_a_refresh_up_to_everything():
    chooser = load_aware(tasks=[3, 4, 5, 6, 7])
    b = balancer(chooser)
    scopes = {3: WORKER_LOCAL, 4: HOST_LOCAL, 5: RACK_LOCAL, 6: RACK_LOCAL}   # 7: no route
    b.refresh(scopes, None)
    full = loads(t3=1.0, t4=1.0, t5=1.0, t6=1.0, t7=1.0)
    seen = []
    for _ in range(4):
        b.refresh(scopes, full)
        seen.append(b.scope)
    assert seen == [HOST_LOCAL, RACK_LOCAL, EVERYTHING, EVERYTHING]
    assert set(share(chooser)) == {3, 4, 5, 6, 7}


def test_an_empty_scope_is_passed_at_once():
    chooser = load_aware(local=frozenset())
    b = balancer(chooser)
    remote = {task: RACK_LOCAL for task in TASKS}
    b.refresh(remote, None)
    assert b.scope == RACK_LOCAL and set(share(chooser)) == set(TASKS)


def test_a_ring_is_handed_over_only_when_it_changes():
    chooser = load_aware()
    b = balancer(chooser)
    b.refresh(SCOPES, None)
    first = chooser.ring
    b.refresh(SCOPES, loads(t3=0.3, t4=0.3))   # both within the slack of the least: at most
    assert chooser.ring is first


def test_the_bounds_come_from_the_settings():
    chooser = load_aware()
    b = balancer(chooser, higher=0.5, lower=0.1)
    b.refresh(SCOPES, None)
    b.refresh(SCOPES, loads(t3=0.6, t4=0.6))
    assert b.scope == HOST_LOCAL


# --------------------------------------------------------------------------- loads and scopes


class FakeRemote:
    def __init__(self, host, load=0.0):
        self.host = host
        self._load = load

    def load(self, task):
        return self._load


def test_scopes_come_from_the_routes():
    inbox = Inbox(2)
    assert scope_of(inbox, "h1") == WORKER_LOCAL
    assert scope_of(FakeRemote("h1"), "h1") == HOST_LOCAL
    assert scope_of(FakeRemote("h2"), "h1") == RACK_LOCAL
    assert scope_of(None, "h1") == EVERYTHING


def test_the_sampler_averages_how_full_each_inbox_was():
    inbox = Inbox(2)
    sampler = LoadSampler()
    sampler.look({3: inbox})
    inbox.put(("data",))
    sampler.look({3: inbox})
    for _ in range(5):   # data from another worker may overfill it: counted as full
        inbox.put(("data",))
    sampler.look({3: inbox})
    sampler.look({3: inbox})
    assert sampler.loads() == {3: pytest.approx((0 + 0.5 + 1 + 1) / 4)}
    assert sampler.loads() == {}


def test_the_runtime_side_refreshes_from_inboxes_and_routes():
    chooser = load_aware()
    awareness = LoadAwareness(0.8, 0.2, host="h1")
    awareness.add(1, [chooser])
    full, idle = Inbox(2), Inbox(2)
    for _ in range(2):
        full.put(("data",))
    routes = [None, None, None, full, idle, FakeRemote("h1"), FakeRemote("h2", 1.0)]
    inboxes = {3: full, 4: idle}
    awareness.tick(0.0, routes, inboxes)   # the first refresh: no loads yet
    assert set(share(chooser)) == {3, 4}
    awareness.tick(1.0, routes, inboxes)   # task 3 full, task 4 idle: mean 0.5
    assert awareness.balancers[1][0].scope == WORKER_LOCAL
    for _ in range(2):
        idle.put(("data",))
    awareness.tick(2.0, routes, inboxes)   # both full
    balancer_ = awareness.balancers[1][0]
    assert balancer_.scope == HOST_LOCAL
    assert set(share(chooser)) == {3, 4, 5}   # 6 is on another host: a scope further
    awareness.drop({1})
    assert awareness.due() is None


# --------------------------------------------------------------------------- local mode


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.i = 0

    def next_tuple(self):
        self.collector.emit([self.i])
        self.i += 1


SEEN: dict[int, int] = {}
SEEN_LOCK = threading.Lock()


class Sink(Bolt):
    """Counts what each task gets; the first task sleeps a millisecond a tuple."""

    def prepare(self, conf, context, collector):
        self.task = context.task_id
        self.slow = context.this_task_index == 0

    def execute(self, tup):
        if self.slow:
            time.sleep(0.001)
        with SEEN_LOCK:
            SEEN[self.task] = SEEN.get(self.task, 0) + 1


@pytest.mark.parametrize("disabled", [False, True])
def test_in_local_mode_a_slowed_task_gets_less_only_when_load_aware(disabled):
    SEEN.clear()
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("sink", Sink(), parallelism=2).shuffle_grouping("numbers")
    conf = {"topology.acker.executors": 0,
            "topology.disable.loadaware.messaging": disabled}
    with LocalCluster() as cluster:
        cluster.submit("loads", conf, b.build())
        cluster.wait_for(lambda: sum(SEEN.values()) > 4000 and len(SEEN) == 2, timeout=60)
        if not disabled:
            # The slow task's inbox stays full: its weight falls 10 a second (from 100), so
            # the fast task's share grows second by second.
            cluster.wait_for(lambda: max(SEEN.values()) > 1.5 * min(SEEN.values()), timeout=60)
        counts = dict(SEEN)
    if disabled:
        # Plain shuffle: the spout waits on the slow task's full inbox, turn about.
        assert max(counts.values()) <= 1.1 * min(counts.values()) + 600, counts
