"""The acker ledger (``stormlet.runtime.acker.Acker``) and the rotating map it and the spouts expire
with.

Unit tests pin each operation; property-based tests build random tuple DAGs with the runtime's
own collectors (tests/ledger_model.py checks every emit, ack and fail they make against a model of
the XOR protocol), deliver the acker messages they sent in a random order, and check every root
gets exactly the one verdict its tree deserves, never early, and that nothing stays in the ledger
after rotations.
"""

from __future__ import annotations

import random
from array import array
from collections import defaultdict

import pytest
import support
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_model import COMPONENT_OF, N_ACKERS, Run

from stormlet import Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet.cluster.wire import decode_acks, encode_acks
from stormlet.fail_reason import ERROR, FAIL, TIMEOUT
from stormlet.runtime.acker import Acker, Notifications, _FailedEarly
from stormlet.runtime.int_map import IntMap
from stormlet.runtime.protocol import AckFail, AckInit, SpoutFail, records
from stormlet.runtime.rotating_map import RotatingMap

SPOUT = 1  # component numbers used in unit tests
BOLT_A = 2
BOLT_B = 3


def A(*flat: int) -> array:
    """An ack batch as the acker takes it: (root, value) pairs (see protocol.ack_pairs)."""
    return array("Q", flat)


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


def test_rotating_map_take_put_new_and_drain():
    m = RotatingMap(3)
    m.put("old", 1)
    m.rotate()
    m.put_new("new", 2)
    assert m.take("old") == 1 and m.take("old") is None and "old" not in m
    m.put_new("old", 1)  # back in the newest bucket: it now expires with "new"
    m.rotate()
    m.rotate()
    assert sorted(m) == ["new", "old"]
    assert m.rotate() == {"new": 2, "old": 1}
    m.put("a", 1)
    m.rotate()
    m.put("b", 2)
    assert m.drain() == [2, 1] and len(m) == 0  # newest first
    assert m.rotate() == {}


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
    acker.acks(A(100, e1 ^ e3), BOLT_A, acked)  # e1 acked, e3 anchored to it
    assert acked == {} and len(acker) == 1
    acker.acks(A(100, e2), BOLT_A, acked)
    assert acked == {} and len(acker) == 1
    acker.acks(A(100, e3), BOLT_B, acked)
    assert acked == {5: [100]}
    assert failed == {} and len(acker) == 0


def test_acks_before_init_are_folded_in():
    acker, acked, failed = fresh()
    acker.acks(A(7, 0xAB), BOLT_A, acked)
    acker.acks(A(7, 0xCD), BOLT_B, acked)
    assert acked == {} and len(acker) == 1
    acker.inits([7, 0xAB ^ 0xCD, 3], SPOUT, acked, failed)
    assert acked == {3: [7]} and failed == {} and len(acker) == 0


def test_acks_before_init_that_cancel_out_wait_for_the_init():
    # Without the init the spout task is unknown, so even a zero must not be reported.
    acker, acked, failed = fresh()
    acker.acks(A(7, 0xAB), BOLT_A, acked)
    acker.acks(A(7, 0xAB), BOLT_B, acked)
    assert acked == {} and len(acker) == 1
    acker.inits([7, 0x55, 3], SPOUT, acked, failed)
    assert acked == {} and len(acker) == 1
    acker.acks(A(7, 0x55), BOLT_A, acked)
    assert acked == {3: [7]} and len(acker) == 0


@pytest.mark.parametrize("batch", [[5, 6], {5: 6}, bytes(16), array("q", [5, 6]), None])
def test_acks_in_any_other_form_are_refused(batch):
    # An array("Q") of (root, value) pairs: nothing else is read, compiled or interpreted alike.
    acker, acked, _failed = fresh()
    with pytest.raises(TypeError, match=r"array\('Q'\) of \(root, value\) pairs"):
        acker.acks(batch, BOLT_A, acked)
    assert acked == {} and len(acker) == 0


def test_init_with_zero_is_acked_at_once():
    acker, acked, failed = fresh()
    acker.inits([9, 0, 4], SPOUT, acked, failed)  # a spout tuple nobody subscribed to
    assert acked == {4: [9]} and len(acker) == 0


def test_batches_hold_many_roots_for_many_spout_tasks():
    acker, acked, failed = fresh()
    acker.inits([1, 0x10, 2, 2, 0x20, 3, 3, 0x30, 2], SPOUT, acked, failed)
    acker.acks(A(3, 0x30, 1, 0x10, 2, 0x21), BOLT_A, acked)
    assert acked == {2: [3, 1]}
    assert len(acker) == 1
    acker.acks(A(2, 0x01), BOLT_A, acked)
    assert acked == {2: [3, 1], 3: [2]} and len(acker) == 0


def test_fail_after_init_is_reported_once():
    acker, acked, failed = fresh()
    acker.inits([50, 0x5, 6], SPOUT, acked, failed)
    acker.fails([50, FAIL, "bad input"], BOLT_B, failed)
    assert failed == {6: [50, FAIL, BOLT_B, "bad input"]}
    assert len(acker) == 0
    # A late ack of the same tree produces no second verdict (and expires later).
    acker.acks(A(50, 0x5), BOLT_A, acked)
    assert acked == {}
    for _ in range(3):
        acker.rotate()
    assert len(acker) == 0


def test_fail_before_init_is_held_until_the_init():
    acker, acked, failed = fresh()
    acker.acks(A(60, 0x9), BOLT_A, acked)
    acker.fails([60, "error", "ValueError: x"], BOLT_B, failed)
    acker.fails([60, FAIL, "second"], BOLT_A, failed)  # the first failure is the one reported
    acker.acks(A(60, 0x3), BOLT_A, acked)
    assert failed == {} and acked == {}
    assert isinstance(acker.failed_early.get(60), _FailedEarly)
    acker.inits([60, 0x9 ^ 0x3, 8], SPOUT, acked, failed)
    assert failed == {8: [60, "error", BOLT_B, "ValueError: x"]}
    assert acked == {} and len(acker) == 0


def test_timeouts_report_the_last_component_and_forget():
    acker, acked, failed = fresh()
    acker.inits([1, 0x1, 5, 2, 0x2, 5, 3, 0x3, 5], SPOUT, acked, failed)
    acker.acks(A(2, 0x2 ^ 0x40), BOLT_A, acked)
    acker.acks(A(3, 0x3 ^ 0x80), BOLT_A, acked)
    acker.acks(A(3, 0x80 ^ 0x100), BOLT_B, acked)
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
    acker.acks(A(1, 0x7), BOLT_B, acked)
    acker.inits([1, 0x1, 5], SPOUT, acked, failed)
    acker.timeouts([1], 5, failed)
    assert failed == {5: [1, TIMEOUT, BOLT_B, None]}


def test_resets_touch_and_notify_only_known_spout_tasks():
    acker, acked, failed = fresh()
    acker.inits([1, 0x1, 5], SPOUT, acked, failed)
    acker.acks(A(2, 0x2), BOLT_A, acked)  # no init yet: no spout task to tell
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
    acker.acks(A(2, 0x2 ^ 0x4), BOLT_A, acked)  # an update moves 2 to the newest bucket
    assert acker.rotate() == 0
    assert acker.rotate() == 1  # root 1 is gone, silently
    assert 1 not in acker and 2 in acker
    assert acked == {} and failed == {}
    acker.acks(A(2, 0x4), BOLT_A, acked)
    assert acked == {5: [2]} and len(acker) == 0


def test_entry_packing_keeps_64_bit_values_and_16_bit_tasks():
    acker, acked, failed = fresh()
    big = (1 << 64) - 1
    acker.inits([(1 << 64) - 5, big, 0xFFFF], 0xFFFF, acked, failed)
    acker.acks(A((1 << 64) - 5, big ^ 1), 0xFFFE, acked)
    assert acked == {}
    acker.timeouts([(1 << 64) - 5], 0xFFFF, failed)
    assert failed == {0xFFFF: [(1 << 64) - 5, TIMEOUT, 0xFFFE, None]}


def test_both_builds_keep_roots_in_the_same_bucket_type():
    # One ledger: the compiled and the interpreted build run the same code on IntMap buckets,
    # so the tests of either build test the ledger the other runs.
    acker, acked, failed = fresh()
    acker.inits([7, 0x1, 5], SPOUT, acked, failed)
    buckets = acker.pending.buckets()
    assert [type(bucket) for bucket in buckets] == [IntMap] * 3
    assert buckets[0].take_u64(7) == (True, 0x1, SPOUT << 16 | 5)


def test_a_root_outside_64_bits_is_refused_in_both_builds():
    acker, acked, failed = fresh()
    with pytest.raises(OverflowError):
        acker.inits([1 << 64, 0x1, 5], SPOUT, acked, failed)


# =========================================================================== property tests
#
# tests/ledger_model.py's small topology: spout component 1 has tasks 1-2; bolt components 2, 3,
# 4 have tasks 3-4, 5-6, 7-8; there are two ackers, and root r belongs to acker r % 2.

class Delivery:
    """Feeds messages to one Acker per acker task and checks every verdict as it appears."""

    def __init__(self, model: Run, packed_acks: bool = False):
        self.model = model
        # Acks as they come from another worker: packed (root, value) pairs, as wire.py sends
        # and decodes them, instead of the map a bolt in the same process hands over.
        self.packed_acks = packed_acks
        self.ackers = [Acker() for _ in range(N_ACKERS)]
        self.verdicts: dict[int, list] = defaultdict(list)
        self.init_seen: set[int] = set()
        self.acks_seen: dict[int, int] = defaultdict(int)      # root -> tuple acks delivered
        self.last_ack_component: dict[int, int] = {}
        self.first_fail: dict[int, tuple] = {}   # root -> (kind, component, message)

    def deliver(self, message) -> None:
        kind, i, batch, src, counts = message
        acker = self.ackers[i]
        component = COMPONENT_OF[src]
        acked: Notifications = {}
        failed: Notifications = {}
        reset: Notifications = {}
        if kind == "init":
            for root, _xor, spout_task in records(AckInit, batch):
                assert spout_task == src == self.model.root_task[root]
                self.init_seen.add(root)
            acker.inits(batch, component, acked, failed)
        elif kind == "ack":
            for root, n in counts.items():
                self.acks_seen[root] += n
                self.last_ack_component[root] = component
            if self.packed_acks:
                batch = decode_acks(encode_acks(batch))
            acker.acks(batch, component, acked)
        elif kind == "fail":
            for root, fail_kind, message in records(AckFail, batch):
                self.first_fail.setdefault(root, (fail_kind, component, message))
            acker.fails(batch, component, failed)
        else:
            acker.resets(batch, reset)
        self.check(acked, failed, reset)

    def check(self, acked, failed, reset) -> None:
        model = self.model
        for task, roots in acked.items():
            for root in roots:
                assert model.root_task[root] == task
                assert not self.verdicts[root], "second verdict"
                self.verdicts[root].append("ack")
                assert model.due(root) == "ack", "ack verdict for a tree that cannot complete"
                # Never early: the init and every tuple's ack were delivered already.
                assert root in self.init_seen
                assert self.acks_seen[root] == model.acked_count(root), "ack verdict too early"
        for task, flat in failed.items():
            for root, kind, component, message in records(SpoutFail, flat):
                assert model.root_task[root] == task
                assert not self.verdicts[root], "second verdict"
                self.verdicts[root].append("fail")
                assert model.due(root) == "fail"
                assert root in self.init_seen and root in self.first_fail
                assert (kind, component, message) == self.first_fail[root]
        for task, roots in reset.items():
            for root in roots:
                assert model.root_task[root] == task
                assert root in self.init_seen and not self.verdicts[root]

    def last_component(self, root: int) -> int:
        return self.last_ack_component.get(root, COMPONENT_OF[self.model.root_task[root]])


def simulate(rnd: random.Random, seed: int) -> tuple[Run, Delivery]:
    model = Run(rnd, seed)
    model.generate()
    assert all(node.fate != "pending" for node in model.nodes)
    order = list(model.messages)
    rnd.shuffle(order)  # any order: acks and fails may overtake their init
    delivery = Delivery(model, packed_acks=rnd.random() < 0.5)
    # Up to two rotations while delivering: nothing may expire (entries live 2 to 3 rotations).
    rotations = sorted(rnd.randint(0, len(order)) for _ in range(rnd.randint(0, 2)))
    for position, message in enumerate(order):
        while rotations and rotations[0] == position:
            rotations.pop(0)
            assert [a.rotate() for a in delivery.ackers] == [0] * N_ACKERS
        delivery.deliver(message)
    for root in model.root_task:
        due = model.due(root)
        assert delivery.verdicts[root] == ([] if due is None else [due]), (
            f"root due {due!r} got {delivery.verdicts[root]}")
    return model, delivery


SEEDS = st.integers(0, 2**32 - 1)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=True), seed=SEEDS)
def test_every_root_gets_exactly_the_verdict_its_tree_deserves(rnd, seed):
    model, delivery = simulate(rnd, seed)
    # With nothing timed out, what is left is the unfinished trees plus stale entries made by
    # messages that arrived after their root's fail verdict; three rotations clear them all.
    left = sum(len(a) for a in delivery.ackers)
    unfinished = [r for r in model.root_task if model.due(r) is None]
    assert left >= len(unfinished)
    dropped = sum(a.rotate() for _ in range(3) for a in delivery.ackers)
    assert dropped == left
    assert all(len(a) == 0 for a in delivery.ackers)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=True), seed=SEEDS)
def test_timeouts_fail_unfinished_trees_and_leave_nothing_behind(rnd, seed):
    model, delivery = simulate(rnd, seed)
    unfinished = [r for r in model.root_task if not delivery.verdicts[r]]
    # The spout times out the unfinished roots and, racing their verdicts, some finished ones.
    finished = [r for r in model.root_task if delivery.verdicts[r]]
    late = rnd.sample(finished, rnd.randint(0, len(finished)))
    for root in unfinished + late:
        task = model.root_task[root]
        failed = {}
        delivery.ackers[root % N_ACKERS].timeouts([root], task, failed)
        assert list(failed) == [task]
        r, kind, component, message = failed[task]
        assert r == root
        if root in unfinished:
            assert (kind, component, message) == (TIMEOUT, delivery.last_component(root), None)
    # Left: only stale entries of failed trees (late acks/fails after the verdict).
    stale = {r for r in model.root_task if model.due(r) == "fail" and r not in late}
    assert sum(len(a) for a in delivery.ackers) <= len(stale)
    for _ in range(3):
        for a in delivery.ackers:
            a.rotate()
    assert all(len(a) == 0 for a in delivery.ackers)


@settings(max_examples=200, deadline=None)
@given(rnd=st.randoms(use_true_random=True), seed=SEEDS,
       ops=st.lists(st.sampled_from(["init", "ack", "fail", "timeout", "rotate", "reset"]),
                    max_size=40))
def test_ledger_never_reports_a_root_twice_under_arbitrary_messages(rnd, seed, ops):
    """Arbitrary, even protocol-breaking, message sequences on a few roots: a root is reported to
    its spout at most once per init, and three rotations always empty the ledger."""
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
            acker.acks(A(root, rnd.choice(values)), BOLT_A, acked)
        elif op == "fail":
            acker.fails([root, rnd.choice([FAIL, ERROR]), None], BOLT_B, failed)
        elif op == "timeout":
            timed_out = {}
            acker.timeouts([root], 7, timed_out)
            assert list(timed_out) == [7] and timed_out[7][0] == root
            assert root not in acker
        elif op == "reset":
            reset = {}
            acker.resets([root], reset)
            assert set(reset) <= {7}
        else:
            acker.rotate()
        assert set(acked) | set(failed) <= {7}
        for r in acked.get(7, []):
            reports[r] += 1
        for j in range(0, len(failed.get(7, [])), 4):
            reports[failed[7][j]] += 1
        for r in roots:
            assert reports[r] <= inits[r]
        assert len(acker) <= len(roots)
    for _ in range(3):
        acker.rotate()
    assert len(acker) == 0


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=True), seed=SEEDS)
def test_collectors_send_exactly_the_xor_traffic_the_model_expects(rnd, seed):
    """Random anchorings through the real collectors: every emit's edges, and every ack, fail
    and reset message, as the model has them (Run checks each as it happens)."""
    run = Run(rnd, seed)
    run.generate()
    # Every ack the model expected reached a flushed message (and matched it: see on_control).
    assert not any(acks for per_task in run.expected_acks.values() for acks in per_task)


@pytest.mark.parametrize("form", ["tuple", "list", "tuple-of", "generator", "none", "basic"])
@pytest.mark.parametrize("parents", ["one root", "two trees", "same parent twice", "untracked"])
def test_each_anchoring_form_sends_the_model_traffic(form, parents):
    rnd = random.Random(f"{form}/{parents}")
    run = Run(rnd, 1)
    run.targets = [3, 5]
    run.spout_emit(1, tracked=parents != "untracked")
    run.spout_emit(2, tracked=parents != "untracked")
    a, b = run.nodes[0], run.nodes[2]
    chosen = {"one root": [a], "two trees": [a, b], "same parent twice": [a, a],
              "untracked": [a, b]}[parents]
    if form in ("tuple", "basic"):
        chosen = chosen[:1]
    run.targets = [7, 8]
    run.bolt_emit(a.task, chosen, "tuple" if form == "basic" else form, basic=form == "basic")
    children = run.nodes[4:]
    assert len(children) == 2
    tracked = form != "none" and parents != "untracked"
    assert all(bool(child.own) == tracked for child in children)
    for node in run.nodes:
        node.fate = "ack"
        run.ack(node)
    for task in run.transfers:
        run.flush(task)
    delivery = Delivery(run)
    for message in run.messages:
        delivery.deliver(message)
    # Every tree is complete now: each root is acked, once.
    assert len(run.root_task) == (0 if parents == "untracked" else 2)
    assert all(delivery.verdicts[root] == ["ack"] for root in run.root_task)


# =========================================================================== anchoring, end to end
#
# The ledger can only be as right as the edges the collectors give it. One end-to-end check of
# the anchoring it relies on: a tuple a bolt still holds keeps its whole tree open.


class OneTupleSpout(Spout):
    """Emits one tracked tuple on a stream with the given fields."""

    def __init__(self, fields):
        self.outputs = list(fields)

    def open(self, conf, context, collector):
        self.collector = collector
        self.done = False
        self.calls = 0
        self.acked = []
        self.failed = []

    def next_tuple(self):
        self.calls += 1
        if not self.done:
            self.done = True
            self.collector.emit(["v"] * len(self.outputs), msg_id="m")

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        self.failed.append((msg_id, reason))


class AnchorAndAck(Bolt):
    outputs = ["x"]

    def execute(self, tup):
        self.collector.emit(["child"], anchors=tup)
        self.collector.ack(tup)


class Holder(Bolt):
    """Keeps every tuple it gets, acking none: their trees must stay open."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.held = []

    def execute(self, tup):
        self.held.append(tup)


@pytest.mark.parametrize("fields", [
    ["word"],
    [],
])
def test_a_held_child_keeps_the_tree_open(fields):
    b = TopologyBuilder()
    b.set_spout("spout", OneTupleSpout(fields))
    b.set_bolt("anchor", AnchorAndAck()).shuffle_grouping("spout")
    b.set_bolt("hold", Holder()).shuffle_grouping("anchor")
    with LocalCluster() as cluster:
        cluster.submit("held", {"topology.message.timeout.secs": 10}, b.build())
        (spout,) = cluster.instances("held", "spout")
        (holder,) = cluster.instances("held", "hold")
        cluster.wait_for(lambda: holder.held, timeout=10)
        assert holder.held[0].roots, "the child was emitted untracked"
        cluster.wait_for(lambda: cluster.metrics("held")["anchor"]["acked"] == 1, timeout=10)
        # An early verdict would now have reached the spout: the acker took the spout's init
        # and the anchor's ack and sent what they decided (none of its verdicts wait unsent),
        # and the spout, which reads its inbox before each next_tuple, has stepped on since.
        (acker,) = [e for e in cluster.runtime("held").all_executors() if hasattr(e, "ledger")]
        support.wait_until(lambda: cluster.metrics("held")["__acker"]["executed"] == 2
                           and not acker.acked and not acker.failed, 10,
                           "the acker to take and answer both messages")
        calls = spout.calls
        support.wait_until(lambda: spout.calls > calls + 1, 10, "the spout's next steps")
        assert spout.acked == [] and spout.failed == []
        assert cluster.in_flight("held") == 1
        cluster.kill("held", wait_secs=0)
    assert [m for m, _r in spout.failed] == ["m"]
