"""The per-partition offset ledger and the retry policy, without a source or a topology."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stormlet.sources.partition_offsets import PartitionOffsets
from stormlet.sources.retry import RetryPolicy
from stormlet.sources.source import Record


def rec(offset: int, partition: int = 0) -> Record:
    return Record(partition, offset, None, f"m{offset}")


def emit_range(state: PartitionOffsets, start: int, end: int) -> None:
    for offset in range(start, end):
        state.emitted(rec(offset))


def test_backoff_grows_by_the_multiplier_up_to_the_cap():
    policy = RetryPolicy(initial_delay=0.5, multiplier=2.0, max_delay=3.0, max_attempts=4)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.delay(10_000) == 3.0
    assert not policy.exhausted(3) and policy.exhausted(4)
    assert not RetryPolicy(max_attempts=None).exhausted(10**9)


@pytest.mark.parametrize("kwargs", [{"initial_delay": -1}, {"multiplier": 0.5},
                                    {"max_attempts": 0}, {"max_delay": -2}])
def test_a_nonsense_retry_policy_is_refused(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_commit_point_is_the_lowest_unfinished_offset():
    state = PartitionOffsets(0, 10, RetryPolicy())
    assert state.committable() == 10
    emit_range(state, 10, 15)
    for offset in (10, 11, 13, 14):
        state.acked(offset)
    assert state.committable() == 12
    state.acked(12)
    assert state.committable() == 15
    assert state.uncommitted() == 0


def test_offsets_the_source_skipped_are_passed_over():
    state = PartitionOffsets(0, 0, RetryPolicy())
    for offset in (0, 5, 9):          # compaction removed the others
        state.emitted(rec(offset))
    state.acked(0)
    assert state.committable() == 5
    state.acked(5)
    state.acked(9)
    assert state.committable() == 10


def test_a_failed_offset_waits_its_backoff_then_flies_again():
    state = PartitionOffsets(0, 0, RetryPolicy(initial_delay=1.0, multiplier=2.0))
    emit_range(state, 0, 3)
    assert state.failed(1, now=100.0) is None
    assert state.committable() == 0 and 1 in state.retrying and 1 not in state.in_flight
    assert state.due_retries(100.5) == []
    assert [r.offset for r in state.due_retries(101.0)] == [1]
    assert 1 in state.in_flight and not state.retrying
    state.failed(1, now=102.0)
    assert state.due_retries(103.9) == []          # second failure waits 2 s
    assert [r.offset for r in state.due_retries(104.0)] == [1]
    assert state.attempts(1) == 2


def test_a_poison_message_is_dead_lettered_and_the_partition_moves_on():
    state = PartitionOffsets(0, 0, RetryPolicy(initial_delay=0, max_attempts=3))
    emit_range(state, 0, 5)
    for offset in (0, 2, 3, 4):
        state.acked(offset)
    letter = None
    for attempt in range(3):
        letter = state.failed(1, now=float(attempt), reason="boom")
        if letter is None:
            assert [r.offset for r in state.due_retries(float(attempt))] == [1]
    assert letter is not None
    assert (letter.record.offset, letter.attempts, letter.first_failed_at,
            letter.last_failed_at, letter.reason) == (1, 3, 0.0, 2.0, "boom")
    assert state.committable() == 5
    assert state.outstanding() == 0 and state.dead_lettered == 1


def test_a_message_failed_far_behind_the_window_neither_sticks_commits_nor_leaks_memory():
    """storm-kafka's PartitionManager: a fail for an offset more than maxOffsetBehind behind
    the emit point was dropped while the offset stayed pending for ever, so commits stopped and
    the pending set grew. Here a fail always leads to a retry or a dead letter."""
    state = PartitionOffsets(0, 0, RetryPolicy(initial_delay=0, max_attempts=2))
    state.emitted(rec(0))
    emit_range(state, 1, 200_000)
    for offset in range(1, 200_000):
        state.acked(offset)
    assert state.committable() == 0
    assert state.failed(0, now=1.0) is None
    state.due_retries(1.0)
    assert state.failed(0, now=2.0) is not None
    assert state.committable() == 200_000
    state.committable()
    assert len(state._outstanding) == 0 and not state._failures and not state._due


def test_acks_and_fails_for_offsets_not_in_flight_are_ignored():
    state = PartitionOffsets(0, 0, RetryPolicy())
    emit_range(state, 0, 2)
    assert state.acked(0) and not state.acked(0)    # a second ack
    assert state.failed(0, now=1.0) is None and state.outstanding() == 1
    assert not state.acked(7)


def test_restart_at_returns_what_was_outstanding_and_clears_it():
    state = PartitionOffsets(0, 0, RetryPolicy(initial_delay=5))
    emit_range(state, 0, 4)
    state.acked(2)
    state.failed(1, now=0.0)
    dropped = state.restart_at(100)
    assert [r.offset for r in dropped] == [0, 1, 3]
    assert state.committable() == 100 and state.emitted_to == 100
    assert state.due_retries(1e9) == [] and state.outstanding() == 0


operations = st.lists(st.tuples(st.sampled_from(["emit", "ack", "fail", "retry"]),
                                st.integers(0, 40)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_every_emitted_offset_is_in_exactly_one_state(ops):
    policy = RetryPolicy(initial_delay=1.0, multiplier=1.0, max_attempts=3)
    state = PartitionOffsets(0, 0, policy)
    done: set[int] = set()
    now = 0.0
    for op, n in ops:
        now += 0.5
        if op == "emit":
            state.emitted(rec(state.emitted_to + n % 3))   # sometimes with gaps
        elif op == "ack" and state.in_flight:
            offset = sorted(state.in_flight)[n % len(state.in_flight)]
            state.acked(offset)
            done.add(offset)
        elif op == "fail" and state.in_flight:
            offset = sorted(state.in_flight)[n % len(state.in_flight)]
            if state.failed(offset, now) is not None:
                done.add(offset)
        elif op == "retry":
            state.due_retries(now)
        in_flight, retrying = set(state.in_flight), set(state.retrying)
        assert not in_flight & retrying and not (in_flight | retrying) & done
        outstanding = in_flight | retrying
        committable = state.committable()
        assert committable == (min(outstanding) if outstanding else state.emitted_to)
        assert len(state._outstanding) <= state.emitted_to - committable
