"""The acker ledger (``stormlet.acker.Acker``) and the rotating map it and the spouts expire with.

Unit tests pin each operation; property-based tests build random tuple DAGs with the real
collectors (so edge ids, anchoring and ack values are computed exactly as at run time), deliver
the resulting acker messages in a random order, and check every root gets exactly the one verdict
its tree deserves, never early, and that nothing stays in the ledger after rotations.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stormlet.acker import Acker, _FailedEarly
from stormlet.fail_reason import FAIL, TIMEOUT
from stormlet.rotating_map import RotatingMap
from stormlet.runtime.collector import BoltCollector, SpoutCollector
from stormlet.runtime.metrics import TaskMetrics
from stormlet.runtime.routing import StreamRoute
from stormlet.runtime.transfer import Transfer
from stormlet.tuples import StreamInfo

SPOUT = 1  # component numbers used in unit tests
BOLT_A = 2
BOLT_B = 3


# =========================================================================== RotatingMap


def test_rotating_map_needs_two_buckets():
    with pytest.raises(ValueError):
        RotatingMap(1)
    RotatingMap(2)


def test_rotating_map_basic_operations():
    m: RotatingMap[str, object] = RotatingMap(3)
    assert len(m) == 0 and "a" not in m and m.get("a") is None and m.get("a", 7) == 7
    m.put("a", 1)
    m.put("b", None)
    assert len(m) == 2 and "a" in m and "b" in m
    assert m.get("a") == 1
    assert m.get("b", "default") is None  # a stored None is a value, not a miss
    assert sorted(m) == ["a", "b"]
    assert m.pop("b", "default") is None
    assert m.pop("b", "default") == "default"
    assert m.pop("zz") is None
    m.put("a", 2)  # replace, never duplicate
    assert len(m) == 1 and m.get("a") == 2


@pytest.mark.parametrize("buckets", [2, 3, 5])
def test_rotating_map_expires_after_buckets_rotations(buckets):
    # Rotated every T, an entry put just before a rotation expires after T*(b-1); put just after
    # one, after T*b. In rotations: it survives b-1 and is dropped by the b-th.
    m = RotatingMap(buckets)
    m.put("k", "v")
    for _ in range(buckets - 1):
        assert m.rotate() == {}
        assert m.get("k") == "v"
    assert m.rotate() == {"k": "v"}
    assert "k" not in m and len(m) == 0
    assert m.rotate() == {}


@pytest.mark.parametrize("buckets", [2, 3])
def test_rotating_map_put_and_touch_move_to_newest(buckets):
    m = RotatingMap(buckets)
    m.put("put", 1)
    m.put("touched", 2)
    m.put("left", 3)
    for _ in range(buckets - 1):
        m.rotate()
    m.put("put", 10)
    assert m.touch("touched") is True
    assert m.touch("missing") is False
    assert "missing" not in m
    assert m.rotate() == {"left": 3}
    for _ in range(buckets - 2):
        assert m.rotate() == {}
    assert m.get("put") == 10 and m.get("touched") == 2 and len(m) == 2
    assert m.rotate() == {"put": 10, "touched": 2}
    assert len(m) == 0


def test_rotating_map_bucket_order():
    m = RotatingMap(3)
    m.put("old", 1)
    m.rotate()
    m.put("new", 2)
    assert m.buckets[0] == {"new": 2} and m.buckets[1] == {"old": 1} and m.buckets[2] == {}
    m.touch("old")
    assert m.buckets[0] == {"new": 2, "old": 1} and m.buckets[1] == {}


@settings(max_examples=150, deadline=None)
@given(buckets=st.integers(2, 4),
       ops=st.lists(st.tuples(st.sampled_from(["put", "touch", "pop", "rotate", "get"]),
                              st.integers(0, 5), st.integers()), max_size=60))
def test_rotating_map_matches_a_timestamp_model(buckets, ops):
    """Against a model that stores, per key, the rotation count at its last put/touch: a key is
    present exactly while fewer than ``buckets`` rotations have happened since."""
    m = RotatingMap(buckets)
    model: dict[int, tuple[int, int]] = {}  # key -> (value, rotation at last put/touch)
    now = 0
    for op, key, value in ops:
        if op == "put":
            m.put(key, value)
            model[key] = (value, now)
        elif op == "touch":
            assert m.touch(key) == (key in model)
            if key in model:
                model[key] = (model[key][0], now)
        elif op == "pop":
            expected = model.pop(key, (None,))[0]
            assert m.pop(key) == expected
        elif op == "get":
            assert m.get(key, "miss") == model.get(key, ("miss",))[0]
        else:
            now += 1
            expired = {k: v for k, (v, t) in model.items() if now - t >= buckets}
            for k in expired:
                del model[k]
            assert m.rotate() == expired
        assert len(m) == len(model)
        assert sorted(m) == sorted(model)


# =========================================================================== Acker units


def fresh():
    return Acker(), {}, {}


def test_init_then_acks_complete_the_tree():
    acker, acked, failed = fresh()
    e1, e2, e3 = 0x1111, 0x2222_0000_0000_0001, 0xFFFF_FFFF_FFFF_FFFF
    acker.inits([100, e1 ^ e2, 5], SPOUT, acked, failed)
    assert len(acker) == 1 and acked == {}
    acker.acks([100, e1 ^ e3], BOLT_A, acked)  # e1 acked, e3 anchored to it
    assert acked == {} and len(acker) == 1
    acker.acks([100, e2], BOLT_A, acked)
    assert acked == {} and len(acker) == 1
    acker.acks([100, e3], BOLT_B, acked)
    assert acked == {5: [100]}
    assert failed == {} and len(acker) == 0


def test_acks_before_init_are_folded_in():
    acker, acked, failed = fresh()
    acker.acks([7, 0xAB], BOLT_A, acked)
    acker.acks([7, 0xCD], BOLT_B, acked)
    assert acked == {} and len(acker) == 1
    acker.inits([7, 0xAB ^ 0xCD, 3], SPOUT, acked, failed)
    assert acked == {3: [7]} and failed == {} and len(acker) == 0


def test_acks_before_init_that_cancel_out_wait_for_the_init():
    # Without the init the spout task is unknown, so even a zero must not be reported.
    acker, acked, failed = fresh()
    acker.acks([7, 0xAB], BOLT_A, acked)
    acker.acks([7, 0xAB], BOLT_B, acked)
    assert acked == {} and len(acker) == 1
    acker.inits([7, 0x55, 3], SPOUT, acked, failed)
    assert acked == {} and len(acker) == 1
    acker.acks([7, 0x55], BOLT_A, acked)
    assert acked == {3: [7]} and len(acker) == 0


def test_init_with_zero_is_acked_at_once():
    acker, acked, failed = fresh()
    acker.inits([9, 0, 4], SPOUT, acked, failed)  # a spout tuple nobody subscribed to
    assert acked == {4: [9]} and len(acker) == 0


def test_batches_hold_many_roots_for_many_spout_tasks():
    acker, acked, failed = fresh()
    acker.inits([1, 0x10, 2, 2, 0x20, 3, 3, 0x30, 2], SPOUT, acked, failed)
    acker.acks([3, 0x30, 1, 0x10, 2, 0x21], BOLT_A, acked)
    assert acked == {2: [3, 1]}
    assert len(acker) == 1
    acker.acks([2, 0x01], BOLT_A, acked)
    assert acked == {2: [3, 1], 3: [2]} and len(acker) == 0


def test_fail_after_init_is_reported_once():
    acker, acked, failed = fresh()
    acker.inits([50, 0x5, 6], SPOUT, acked, failed)
    acker.fails([50, FAIL, "bad input"], BOLT_B, failed)
    assert failed == {6: [50, FAIL, BOLT_B, "bad input"]}
    assert len(acker) == 0
    # A late ack of the same tree produces no second verdict (and expires later).
    acker.acks([50, 0x5], BOLT_A, acked)
    assert acked == {}
    for _ in range(3):
        acker.rotate()
    assert len(acker) == 0


def test_fail_before_init_is_held_until_the_init():
    acker, acked, failed = fresh()
    acker.acks([60, 0x9], BOLT_A, acked)
    acker.fails([60, "error", "ValueError: x"], BOLT_B, failed)
    acker.fails([60, FAIL, "second"], BOLT_A, failed)  # the first failure is the one reported
    acker.acks([60, 0x3], BOLT_A, acked)
    assert failed == {} and acked == {}
    assert isinstance(acker.pending.get(60), _FailedEarly)
    acker.inits([60, 0x9 ^ 0x3, 8], SPOUT, acked, failed)
    assert failed == {8: [60, "error", BOLT_B, "ValueError: x"]}
    assert acked == {} and len(acker) == 0


def test_timeouts_report_the_last_component_and_forget():
    acker, acked, failed = fresh()
    acker.inits([1, 0x1, 5, 2, 0x2, 5, 3, 0x3, 5], SPOUT, acked, failed)
    acker.acks([2, 0x2 ^ 0x40], BOLT_A, acked)
    acker.acks([3, 0x3 ^ 0x80], BOLT_A, acked)
    acker.acks([3, 0x80 ^ 0x100], BOLT_B, acked)
    acker.fails([4, FAIL, None], BOLT_B, failed)  # never inited
    acker.timeouts([1, 2, 3, 4, 99], 5, failed)
    assert failed == {5: [1, TIMEOUT, SPOUT, None,
                          2, TIMEOUT, BOLT_A, None,
                          3, TIMEOUT, BOLT_B, None,
                          4, FAIL, BOLT_B, None,
                          99, TIMEOUT, 0, None]}
    assert len(acker) == 0 and acked == {}


def test_ack_before_init_keeps_the_acking_component():
    acker, acked, failed = fresh()
    acker.acks([1, 0x7], BOLT_B, acked)
    acker.inits([1, 0x1, 5], SPOUT, acked, failed)
    acker.timeouts([1], 5, failed)
    assert failed == {5: [1, TIMEOUT, BOLT_B, None]}


def test_resets_touch_and_notify_only_known_spout_tasks():
    acker, acked, failed = fresh()
    acker.inits([1, 0x1, 5], SPOUT, acked, failed)
    acker.acks([2, 0x2], BOLT_A, acked)  # no init yet: no spout task to tell
    acker.rotate()
    acker.rotate()
    reset = {}
    acker.resets([1, 2, 3], reset)
    assert reset == {5: [1]}
    assert acker.rotate() == 0  # both touched, so both survive another two rotations
    assert acker.rotate() == 0
    assert len(acker) == 2
    assert acker.rotate() == 2
    assert len(acker) == 0


def test_rotate_drops_untouched_entries_after_three_rotations():
    acker, acked, failed = fresh()
    acker.inits([1, 0x1, 5, 2, 0x2, 5], SPOUT, acked, failed)
    assert acker.rotate() == 0
    acker.acks([2, 0x2 ^ 0x4], BOLT_A, acked)  # an update moves 2 to the newest bucket
    assert acker.rotate() == 0
    assert acker.rotate() == 1  # root 1 is gone, silently
    assert 1 not in acker.pending and 2 in acker.pending
    assert acked == {} and failed == {}
    acker.acks([2, 0x4], BOLT_A, acked)
    assert acked == {5: [2]} and len(acker) == 0


def test_entry_packing_keeps_64_bit_values_and_16_bit_tasks():
    acker, acked, failed = fresh()
    big = (1 << 64) - 1
    acker.inits([(1 << 64) - 5, big, 0xFFFF], 0xFFFF, acked, failed)
    acker.acks([(1 << 64) - 5, big ^ 1], 0xFFFE, acked)
    assert acked == {}
    acker.timeouts([(1 << 64) - 5], 0xFFFF, failed)
    assert failed == {0xFFFF: [(1 << 64) - 5, TIMEOUT, 0xFFFE, None]}


# =========================================================================== property tests
#
# A small "cluster" of task ids, as the runtime numbers them:
#   spout component 1: tasks 1, 2
#   bolt components 2, 3, 4: tasks 3-4, 5-6, 7-8
#   acker tasks 9, 10
# Real SpoutCollector / BoltCollector objects write into real Transfer buffers, which the test
# drains into single-root acker messages instead of flushing them.

SPOUT_TASKS = [1, 2]
BOLT_TASKS = [3, 4, 5, 6, 7, 8]
ACKER_TASKS = [9, 10]
COMPONENT_OF = {1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3, 7: 4, 8: 4}
NAMES = {1: "spout", 2: "a", 3: "b", 4: "c"}
MAX_TUPLES = 40


class Emitter:
    """One task's collector, with a chooser that sends to whatever ``targets`` says."""

    def __init__(self, task: int, ids: random.Random):
        self.task = task
        self.targets: list[int] = []
        component = NAMES[COMPONENT_OF[task]]
        route = StreamRoute(StreamInfo(component, "default", ["v"]), False)
        route.choosers.append(lambda values: self.targets)
        self.transfer = Transfer(task, [None] * 11, BOLT_TASKS, ACKER_TASKS, threading.Event())
        metrics = TaskMetrics(component, task)
        if task in SPOUT_TASKS:
            self.collector = SpoutCollector(component, task, {"default": route}, self.transfer,
                                            True, metrics, pending=RotatingMap(2))
        else:
            self.collector = BoltCollector(component, task, {"default": route}, self.transfer,
                                           True, metrics)
        # Real 64-bit ids, reproducible per example (hypothesis' own Random shrinks towards
        # small numbers, which would make edge ids collide).
        self.collector._rb = ids.getrandbits

    def emit(self, targets: list[int], **kwargs):
        self.targets = list(targets)
        before = {t: len(self.transfer.data[t]) for t in set(targets)}
        self.collector.emit([0], **kwargs)
        new = []
        for t in sorted(set(targets)):
            new += self.transfer.data[t][before[t]:]
        assert len(new) == len(targets)
        return new

    def drain(self, out: list) -> None:
        """Move acker traffic into ``out`` as (kind, acker index, payload, src task) messages,
        one per root, and check each went to the acker ``root % n`` as the runtime routes it."""
        tr = self.transfer
        for kind, buffers, step in (("init", tr.inits, 3), ("ack", tr.acks, 2),
                                    ("fail", tr.fails, 3), ("reset", tr.resets, 1)):
            for i, buf in enumerate(buffers):
                for j in range(0, len(buf), step):
                    payload = buf[j:j + step]
                    assert payload[0] % len(ACKER_TASKS) == i
                    out.append((kind, i, payload, self.task))
                buf.clear()


class Sim:
    """Builds a random forest of tuple trees (a DAG, with multi-anchoring) and records the acker
    messages it produces and what each root's verdict must be."""

    def __init__(self, rnd: random.Random, ids: random.Random):
        self.rnd = rnd
        self.emitters = {t: Emitter(t, ids) for t in SPOUT_TASKS + BOLT_TASKS}
        self.messages: list[tuple] = []
        self.root_task: dict[int, int] = {}          # root -> spout task
        self.tree: dict[int, list[int]] = defaultdict(list)  # root -> tuple indexes in its tree
        self.fate: list[str] = []                    # per tuple: ack / fail / drop
        self.tuples: list = []
        self.pool: list[int] = []                    # unresolved tuple indexes

    def add(self, tuples) -> None:
        for tup in tuples:
            index = len(self.tuples)
            self.tuples.append(tup)
            self.fate.append("pending")
            self.pool.append(index)
            for root in tup.roots or ():
                self.tree[root].append(index)

    def drain(self) -> None:
        for emitter in self.emitters.values():
            emitter.drain(self.messages)

    def spout_emits(self) -> None:
        rnd = self.rnd
        for _ in range(rnd.randint(1, 6)):
            task = rnd.choice(SPOUT_TASKS)
            targets = [rnd.choice(BOLT_TASKS) for _ in range(rnd.choice([0, 1, 1, 2, 3]))]
            tracked = rnd.random() < 0.9
            emitter = self.emitters[task]
            if tracked:
                # Find the new root from the init it produced.
                before = [len(b) for b in emitter.transfer.inits]
                tuples = emitter.emit(targets, msg_id=len(self.root_task))
                (root,) = [b[n] for b, n in zip(emitter.transfer.inits, before) if len(b) > n]
                assert root not in self.root_task
                self.root_task[root] = task
                self.tree.setdefault(root, [])
                for tup in tuples:
                    assert set(tup.roots) == {root}
            else:
                tuples = emitter.emit(targets)
                assert all(t.roots is None for t in tuples)
            self.add(tuples)
            self.drain()

    def process(self) -> None:
        rnd = self.rnd
        while self.pool:
            index = rnd.choice(self.pool)
            tup = self.tuples[index]
            bolt = self.emitters[tup.dest_task].collector
            action = rnd.random()
            if action < 0.45 and len(self.tuples) < MAX_TUPLES:
                others = [i for i in self.pool if i != index]
                extra = rnd.sample(others, min(len(others), rnd.choice([0, 0, 1, 2])))
                anchors = [tup] + [self.tuples[i] for i in extra]
                rnd.shuffle(anchors)
                targets = [rnd.choice(BOLT_TASKS) for _ in range(rnd.choice([1, 1, 2]))]
                self.add(self.emitters[tup.dest_task].emit(targets, anchors=anchors))
            elif action < 0.52:
                bolt.reset_timeout(tup)
            else:
                self.pool.remove(index)
                fate = rnd.choices(["ack", "fail", "drop"], weights=[75, 10, 15])[0]
                self.fate[index] = fate
                if fate == "ack":
                    bolt.ack(tup)
                elif fate == "fail":
                    bolt.fail(tup, f"reason-{index}")
            self.drain()

    def expected(self, root: int) -> str | None:
        fates = [self.fate[i] for i in self.tree[root]]
        if "fail" in fates:
            return "fail"
        if all(f == "ack" for f in fates):
            return "ack"
        return None


class Delivery:
    """Feeds messages to one Acker per acker task and checks every verdict as it appears."""

    def __init__(self, sim: Sim):
        self.sim = sim
        self.ackers = [Acker() for _ in ACKER_TASKS]
        self.verdicts: dict[int, list] = defaultdict(list)
        self.delivered: dict[int, list] = defaultdict(list)  # root -> messages delivered so far
        self.total: dict[int, int] = defaultdict(int)       # root -> init/ack messages made
        for kind, _i, payload, _src in sim.messages:
            if kind in ("init", "ack"):
                self.total[payload[0]] += 1

    def deliver(self, message) -> None:
        kind, i, payload, src = message
        acker = self.ackers[i]
        component = COMPONENT_OF[src]
        acked, failed, reset = {}, {}, {}
        root = payload[0]
        self.delivered[root].append((kind, payload, component))
        if kind == "init":
            assert payload[2] == src == self.sim.root_task[root]
            acker.inits(payload, component, acked, failed)
        elif kind == "ack":
            acker.acks(payload, component, acked)
        elif kind == "fail":
            acker.fails(payload, component, failed)
        else:
            acker.resets(payload, reset)
        self.check(acked, failed, reset)

    def check(self, acked, failed, reset) -> None:
        for task, roots in acked.items():
            for root in roots:
                assert self.sim.root_task[root] == task
                assert not self.verdicts[root], "second verdict"
                self.verdicts[root].append(("ack",))
                assert self.sim.expected(root) == "ack"
                # Never early: every init and ack message of the tree was already delivered.
                seen = sum(1 for k, _p, _c in self.delivered[root] if k in ("init", "ack"))
                assert seen == self.total[root]
        for task, flat in failed.items():
            for j in range(0, len(flat), 4):
                root, kind, component, message = flat[j:j + 4]
                assert self.sim.root_task[root] == task
                assert not self.verdicts[root], "second verdict"
                self.verdicts[root].append(("fail", kind, component, message))
                assert self.sim.expected(root) == "fail"
                kinds = [k for k, _p, _c in self.delivered[root]]
                assert "init" in kinds
                first_fail = next((p, c) for k, p, c in self.delivered[root] if k == "fail")
                assert kind == FAIL
                assert (component, message) == (first_fail[1], first_fail[0][2])
        for task, roots in reset.items():
            for root in roots:
                assert self.sim.root_task[root] == task
                assert not self.verdicts[root]
                assert any(k == "init" for k, _p, _c in self.delivered[root])

    def last_component(self, root: int) -> int:
        acks = [c for k, _p, c in self.delivered[root] if k == "ack"]
        return acks[-1] if acks else COMPONENT_OF[self.sim.root_task[root]]


def simulate(rnd: random.Random, seed: int) -> tuple[Sim, Delivery]:
    sim = Sim(rnd, random.Random(seed))
    sim.spout_emits()
    sim.process()
    assert not any(f == "pending" for f in sim.fate)
    order = list(sim.messages)
    rnd.shuffle(order)  # any order: acks and fails may overtake their init
    delivery = Delivery(sim)
    # Up to two rotations while delivering: nothing may expire (entries live 2-3 rotations).
    rotations = sorted(rnd.randint(0, len(order)) for _ in range(rnd.randint(0, 2)))
    for position, message in enumerate(order):
        while rotations and rotations[0] == position:
            rotations.pop(0)
            assert all(a.rotate() == 0 for a in delivery.ackers)
        delivery.deliver(message)
    for root in sim.root_task:
        expected = sim.expected(root)
        verdicts = delivery.verdicts[root]
        if expected is None:
            assert verdicts == [], "verdict for a tree with an unacked tuple"
        else:
            assert [v[0] for v in verdicts] == [expected]
    return sim, delivery


SEEDS = st.integers(0, 2**32 - 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), seed=SEEDS)
def test_every_root_gets_exactly_the_verdict_its_tree_deserves(rnd, seed):
    sim, delivery = simulate(rnd, seed)
    # With nothing timed out, what is left is trees with dropped tuples plus stale entries made
    # by messages that arrived after their root's fail verdict; three rotations clear them all.
    left = sum(len(a) for a in delivery.ackers)
    unfinished = [r for r in sim.root_task if sim.expected(r) is None]
    assert left >= len(unfinished)
    dropped = sum(a.rotate() for _ in range(3) for a in delivery.ackers)
    assert dropped == left
    assert all(len(a) == 0 for a in delivery.ackers)
    assert all(len(delivery.verdicts[r]) <= 1 for r in sim.root_task)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), seed=SEEDS)
def test_timeouts_fail_unfinished_trees_and_leave_nothing_behind(rnd, seed):
    sim, delivery = simulate(rnd, seed)
    n = len(ACKER_TASKS)
    unfinished = [r for r in sim.root_task if not delivery.verdicts[r]]
    # The spout times out the unfinished roots, and (racing their verdicts) some finished ones.
    finished = [r for r in sim.root_task if delivery.verdicts[r]]
    late = rnd.sample(finished, rnd.randint(0, len(finished)))
    for root in unfinished + late:
        task = sim.root_task[root]
        failed = {}
        delivery.ackers[root % n].timeouts([root], task, failed)
        ((to, (r, kind, component, message)),) = [(t, v) for t, v in failed.items()]
        assert to == task and r == root
        if root in unfinished:
            assert (kind, component, message) == (TIMEOUT, delivery.last_component(root), None)
    remaining = sum(len(a) for a in delivery.ackers)
    # The ledger now holds only stale entries from late messages of failed trees.
    stale_roots = {r for r in sim.root_task if sim.expected(r) == "fail" and r not in late}
    assert remaining <= len(stale_roots)
    for _ in range(3):
        for a in delivery.ackers:
            a.rotate()
    assert all(len(a) == 0 for a in delivery.ackers)


@settings(max_examples=200, deadline=None)
@given(rnd=st.randoms(use_true_random=False), seed=SEEDS,
       ops=st.lists(st.sampled_from(["init", "ack", "fail", "timeout", "rotate", "reset"]),
                    max_size=40))
def test_ledger_never_reports_a_root_twice_under_arbitrary_messages(rnd, seed, ops):
    """Arbitrary, even protocol-breaking, sequences of messages on a few roots: each root is
    reported to its spout at most once per init, and three rotations always empty the ledger."""
    ids = random.Random(seed)
    roots = [ids.getrandbits(64) or 1 for _ in range(3)]
    values = [ids.getrandbits(64) or 1 for _ in range(4)]
    acker = Acker()
    inits = defaultdict(int)
    reports = defaultdict(int)
    for op in ops:
        root = rnd.choice(roots)
        acked, failed = {}, {}
        if op == "init":
            inits[root] += 1
            acker.inits([root, rnd.choice(values + [0]), 7], SPOUT, acked, failed)
        elif op == "ack":
            acker.acks([root, rnd.choice(values)], BOLT_A, acked)
        elif op == "fail":
            acker.fails([root, FAIL, None], BOLT_B, failed)
        elif op == "timeout":
            acker.timeouts([root], 7, {})
        elif op == "reset":
            reset = {}
            acker.resets([root], reset)
            assert set(reset) <= {7}
        else:
            acker.rotate()
        for r in acked.get(7, []):
            reports[r] += 1
        for j in range(0, len(failed.get(7, [])), 4):
            reports[failed[7][j]] += 1
        assert set(acked) | set(failed) <= {7}
        for r in roots:
            assert reports[r] <= inits[r]
        assert len(acker) <= len(roots)
    for _ in range(3):
        acker.rotate()
    assert len(acker) == 0
