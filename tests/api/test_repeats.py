"""Repeats: a condition found on every pass of a loop is logged once per interval."""

from __future__ import annotations

import logging

from stormlet.repeats import Repeats

log = logging.getLogger("test_repeats")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test_repeats"]


def test_a_condition_found_every_second_gives_one_line_a_minute_with_a_count(caplog):
    clock = Clock()
    repeats = Repeats(log, interval_secs=60, clock=clock)
    with caplog.at_level(logging.WARNING):
        for _ in range(150):      # every second for 150 s
            repeats.warning("k", "topology %s is stuck", "t1")
            clock.now += 1
    assert {r.filename for r in caplog.records} == {"test_repeats.py"}   # the caller's line
    assert lines(caplog) == ["topology t1 is stuck",
                             "topology t1 is stuck (still so: found 59 more times in 60 s)",
                             "topology t1 is stuck (still so: found 59 more times in 60 s)"]


def test_a_changed_text_or_a_return_after_clearing_is_logged_at_once(caplog):
    clock = Clock()
    repeats = Repeats(log, interval_secs=60, clock=clock)
    with caplog.at_level(logging.WARNING):
        repeats.warning("k", "stuck: %s", "no slots")
        repeats.warning("k", "stuck: %s", "no slots")
        repeats.warning("k", "stuck: %s", "no supervisors")
        assert repeats.clear("k") and not repeats.clear("k")
        repeats.warning("k", "stuck: %s", "no supervisors")
        repeats.warning("other", "stuck: %s", "no supervisors")
    assert lines(caplog) == ["stuck: no slots", "stuck: no supervisors", "stuck: no supervisors",
                             "stuck: no supervisors"]


def test_retain_forgets_the_conditions_of_things_that_are_gone(caplog):
    repeats = Repeats(log, interval_secs=60, clock=Clock())
    with caplog.at_level(logging.WARNING):
        repeats.warning(("stuck", "t1"), "t1 stuck")
        repeats.warning(("stuck", "t2"), "t2 stuck")
        repeats.retain(lambda key: key[1] != "t1")
        repeats.warning(("stuck", "t1"), "t1 stuck")
        repeats.warning(("stuck", "t2"), "t2 stuck")
    assert lines(caplog) == ["t1 stuck", "t2 stuck", "t1 stuck"]
