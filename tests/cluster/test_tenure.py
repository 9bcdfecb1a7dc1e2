"""Tenures (issue 51's fencing): each slot of an assignment keeps its standing while it stays in
the assignment and gets a new one when it comes back, and a worker admits frames only from
senders that hold their slot as far as it knows."""

from __future__ import annotations

import json

import pytest

from stormlet.cluster.tenure import Fence, next_assignment, slot_key, slot_tenure, tenures
from stormlet.cluster.zk_state import Executor, valid_assignment


def executors(*slots: tuple[str, int]) -> list[Executor]:
    return [Executor("c", [i], sid, "10.0.0.1", port) for i, (sid, port) in enumerate(slots)]


def stored(assignment: dict) -> dict:
    """An assignment as ZooKeeper gives it back (JSON)."""
    return json.loads(json.dumps(assignment))


def test_a_slot_keeps_its_tenure_while_it_stays_and_gets_a_new_one_when_it_returns():
    first = next_assignment(None, executors(("s1", 1), ("s2", 1)))
    assert first["version"] == 1 and tenures(first) == {"s1:1": 1, "s2:1": 1}
    # s1's supervisor dies: its executor moves to s3; s2 stays and keeps its standing.
    second = next_assignment(stored(first), executors(("s3", 1), ("s2", 1)))
    assert second["version"] == 2 and tenures(second) == {"s2:1": 1, "s3:1": 2}
    # s1 is back and the topology is spread back to it: a new tenure, not its old one.
    third = next_assignment(stored(second), executors(("s3", 1), ("s2", 1), ("s1", 1)))
    assert tenures(third) == {"s1:1": 3, "s2:1": 1, "s3:1": 2}
    assert all(valid_assignment(stored(a)) for a in (first, second, third))


def test_an_assignment_from_before_tenures_keeps_its_workers_at_tenure_zero():
    legacy = stored({"executors": executors(("s1", 1), ("s2", 1)), "version": 7})
    assert slot_tenure(legacy, "s1", 1) == 0
    following = next_assignment(legacy, executors(("s1", 1), ("s3", 1)))
    assert tenures(following) == {"s1:1": 0, "s3:1": 8}
    assert slot_tenure(following, "s2", 1) is None


@pytest.mark.parametrize("bad", [{"s1:1": "1"}, {"s1:1": True}, ["s1:1"], {1: 1}])
def test_malformed_tenures_make_an_assignment_corrupt(bad):
    assert not valid_assignment({"executors": [], "tenures": bad})


def test_a_fence_refuses_an_orphan_and_admits_workers_it_has_not_heard_of_yet():
    fence = Fence()
    assert fence.admits("anyone:1", 0), "before any assignment, or one without tenures"
    first = next_assignment(None, executors(("s1", 1), ("s2", 1)))
    fence.update(first)
    assert fence.admits(slot_key("s1", 1), 1) and fence.admits(slot_key("s2", 1), 1)
    second = next_assignment(first, executors(("s3", 1), ("s2", 1)))
    fence.update(second)
    # s1's worker was cut off and its slot dropped: whatever it sends now is refused.
    assert not fence.admits("s1:1", 1)
    assert "not in the topology's assignment (version 2)" in fence.why_refused("s1:1", 1)
    assert fence.admits("s3:1", 2) and fence.admits("s2:1", 1)
    # A sender that saw a newer assignment than this worker has: admitted.
    assert fence.admits("s4:1", 3)
    third = next_assignment(second, executors(("s3", 1), ("s2", 1), ("s1", 1)))
    fence.update(third)
    # s1's slot was given again: its new worker is admitted, the orphan still refused.
    assert fence.admits("s1:1", 3) and not fence.admits("s1:1", 1)
    assert "given again at assignment version 3" in fence.why_refused("s1:1", 1)


def test_a_version_that_is_no_count_reads_as_zero_everywhere():
    # One reading serves nimbus (the next version), the fence and a worker's state epoch.
    from stormlet.cluster.tenure import assignment_version

    for bad in ({}, {"version": "7"}, {"version": True}, {"version": -3}, None):
        assert assignment_version(bad) == 0
    assert assignment_version({"version": 7}) == 7
    assert next_assignment({"executors": [], "version": "7"}, executors(("s1", 1)))["version"] == 1
    fence = Fence()
    fence.update({"executors": [], "version": "7", "tenures": {"s1:1": 1}})   # no exception
    assert fence.admits("s1:1", 1) and not fence.admits("s2:1", 0)
