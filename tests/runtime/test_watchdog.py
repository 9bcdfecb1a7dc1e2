"""The watchdog reads an executor's ``Busy`` record by name: a hang is reported once, with the
call and task it names, and its end once when the executor moves on to another call."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from stormlet.runtime.executor import Busy
from stormlet.runtime.watchdog import Watchdog


class Errors:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str, **_kwargs) -> None:
        self.notes.append(text)

    def flush(self, _now: float) -> None:
        pass


class Executor:
    """What the watchdog reads of an executor (held as a dict key, so hashable)."""
    busy: Busy | None = None
    hang_secs = 2.0
    ident = None


def test_a_hang_and_its_end_are_reported_from_the_busy_record():
    errors = Errors()
    task = SimpleNamespace(component_id="split", task_id=4, metrics=SimpleNamespace(errors=errors))
    executor = Executor()
    watchdog = Watchdog("test", [executor], [], threading.Event())
    executor.busy = Busy(since=100.0, task=task, call="execute")
    watchdog.check(101.0)
    assert errors.notes == []                       # under the threshold
    watchdog.check(103.0)
    watchdog.check(104.0)                           # reported once
    assert errors.notes == ["component split task 4 has been in execute for 3 s "
                            "(threshold 2 s); its stack:"]
    executor.busy = Busy(since=105.0, task=task, call="execute")   # the next call
    watchdog.check(105.5)
    assert errors.notes[1:] == ["component split task 4 returned from execute after about 6 s"]
