"""FailReason: what a spout's fail is told, compared and hashed consistently."""

from stormlet import FailReason
from stormlet.fail_reason import ERROR, FAIL, TIMEOUT


def test_equal_reasons_hash_alike_and_a_reason_equals_its_kind():
    a = FailReason(TIMEOUT, "count", None)
    b = FailReason(TIMEOUT, "count", None)
    other = FailReason(TIMEOUT, "split", None)
    assert a == b and hash(a) == hash(b)
    assert a != other
    assert a == TIMEOUT and hash(a) == hash(TIMEOUT)
    assert other == TIMEOUT and hash(other) == hash(TIMEOUT)
    assert FailReason(ERROR, "split", "boom") != FAIL
    # Usable as dict keys and in sets the way equality says.
    assert {a: 1}[b] == 1
    assert len({a, b, other}) == 2
    assert TIMEOUT in {a}


def test_a_reason_reads_well():
    assert str(FailReason(TIMEOUT, "count")) == "timeout (last acked by 'count')"
    assert str(FailReason(TIMEOUT)) == "timeout (no acker reported progress)"
    assert str(FailReason(ERROR, "split", "ValueError: x")) == "error in 'split': ValueError: x"
    assert str(FailReason(FAIL, "count", "bad")) == "failed by 'count': bad"
