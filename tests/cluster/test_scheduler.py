"""Nimbus's placement decisions, without processes: even spread, and repair after a node dies."""

from __future__ import annotations

from collections import Counter

import pytest

from stormlet.cluster.scheduler import (
    SchedulingError,
    even_schedule,
    pick_slots,
    plan_from_summary,
    repair,
    spread_back,
)

SUMMARY = {"components": {
    "spout": {"spout": True, "tasks": 2, "executors": 2},
    "split": {"spout": False, "tasks": 4, "executors": 2},
    "count": {"spout": False, "tasks": 4, "executors": 4},
}}


def test_plan_numbers_tasks_like_local_mode_and_honours_rebalance_overrides():
    plan = plan_from_summary(SUMMARY, n_ackers=2)
    # Task ids from 1 in component-id order: __acker 1-2, count 3-6, split 7-10, spout 11-12.
    assert plan == [("spout", [11]), ("spout", [12]), ("count", [3]), ("count", [4]),
                    ("count", [5]), ("count", [6]), ("split", [7, 8]), ("split", [9, 10]),
                    ("__acker", [1]), ("__acker", [2])]
    rebalanced = plan_from_summary(SUMMARY, n_ackers=2, executors={"split": 4, "count": 9})
    assert [tasks for c, tasks in rebalanced if c == "split"] == [[7], [8], [9], [10]]
    assert len([1 for c, _ in rebalanced if c == "count"]) == 4  # capped by its 4 tasks


def test_slots_are_spread_over_supervisors():
    free = [("a", "h", 1), ("a", "h", 2), ("a", "h", 3), ("b", "h", 4)]
    picked = pick_slots(free, 2)
    assert {slot[0] for slot in picked} == {"a", "b"}
    assert len(pick_slots(free, 10)) == 4


def test_even_schedule_gives_each_worker_an_even_share_of_each_component():
    plan = plan_from_summary(SUMMARY, n_ackers=2)
    slots = [("a", "h", 1), ("b", "h", 2)]
    assignment = even_schedule(plan, slots)
    per_worker = Counter((e[0], e[4]) for e in assignment)
    for component in ("spout", "count", "split", "__acker"):
        assert per_worker[(component, 1)] == per_worker[(component, 2)]
    with pytest.raises(SchedulingError):
        even_schedule(plan, [])


def test_repair_moves_only_the_dead_supervisors_executors():
    plan = plan_from_summary(SUMMARY, n_ackers=2)
    assignment = even_schedule(plan, [("a", "h", 1), ("b", "h", 2)])
    assert repair(assignment, live={"a", "b"}, free=[("c", "h", 3)]) is None
    repaired = repair(assignment, live={"a", "c"}, free=[("a", "h", 1), ("c", "h", 3)])
    assert [e[:2] for e in repaired] == [e[:2] for e in assignment]
    for before, after in zip(assignment, repaired):
        if before[2] == "a":
            assert after == before  # survivors stay put
        else:
            assert after.slot == ("c", "h", 3)  # the free slot, not the survivor's own


def test_repair_without_free_slots_piles_onto_survivors_and_fails_with_none_left():
    assignment = even_schedule(plan_from_summary(SUMMARY, 2), [("a", "h", 1), ("b", "h", 2)])
    repaired = repair(assignment, live={"a"}, free=[])
    assert {tuple(e[2:]) for e in repaired} == {("a", "h", 1)}
    with pytest.raises(SchedulingError):
        repair(assignment, live=set(), free=[])


def test_spreading_back_fills_new_workers_from_the_busiest_and_leaves_the_rest_in_place():
    # Four workers asked for; a host with two of them was lost and repair piled their executors
    # onto the two left. Once two slots are free again, each new worker takes its even share,
    # taken from the busiest workers; every other executor stays where it runs.
    slots = [("a", "h", 1), ("a", "h", 2), ("b", "h", 3), ("b", "h", 4)]
    assignment = even_schedule(plan_from_summary(SUMMARY, 2), slots)
    piled = repair(assignment, live={"a"}, free=[])
    assert len({e.slot for e in piled}) == 2
    spread = spread_back(piled, asked=4, free=[("c", "h", 5), ("c", "h", 6)])
    loads = Counter(e.slot for e in spread)
    assert set(loads) == {("a", "h", 1), ("a", "h", 2), ("c", "h", 5), ("c", "h", 6)}
    assert max(loads.values()) - min(loads.values()) <= 1, loads
    assert [e[:2] for e in spread] == [e[:2] for e in piled]   # the same executors
    moved = [after for before, after in zip(piled, spread) if before != after]
    assert {e.slot for e in moved} == {("c", "h", 5), ("c", "h", 6)}, "only into the new slots"
    assert len(moved) == loads[("c", "h", 5)] + loads[("c", "h", 6)]


def test_spreading_back_does_nothing_without_a_free_slot_or_a_missing_worker():
    slots = [("a", "h", 1), ("b", "h", 2)]
    assignment = even_schedule(plan_from_summary(SUMMARY, 2), slots)
    assert spread_back(assignment, asked=2, free=[("c", "h", 3)]) is None
    assert spread_back(assignment, asked=3, free=[("a", "h", 1)]) is None   # its own slot
    assert spread_back(assignment, asked=3, free=[]) is None
    grown = spread_back(assignment, asked=3, free=[("c", "h", 3)])
    assert len({e.slot for e in grown}) == 3
    # Never more workers than executors.
    two = [e for e in assignment if e.component == "spout"]
    assert spread_back(two, asked=5, free=[("c", "h", 3)]) is None
