"""Windowed bolts, with Storm 2.x's semantics (its docs/Windowing.md), in processing time.

    from stormlet.windowing import WindowedBolt, Count, Duration

    class Totals(WindowedBolt):
        outputs = ["start", "end", "n"]
        def execute(self, window):
            self.collector.emit([window.start, window.end, len(window.get())])

    builder.set_bolt("totals", Totals().with_tumbling_window(Count(100))).shuffle_grouping("s")
    builder.set_bolt("rate", Rate().with_window(Duration(seconds=10), Duration(seconds=2)))

A window has a length and a sliding interval, each a ``Count`` of tuples or a ``Duration``
(mixed as in Storm); a tumbling window slides by its length. A window fires when its sliding
interval has passed: every N tuples, or every so long (on tick tuples the bolt asks for). It
then holds the last N tuples, or those that arrived in the ``length`` before it fired (from
``end - length`` on; a tuple arriving just as a time window fires goes to the next one);
windows with no tuples do not fire. ``window.get_new()`` are its tuples that arrived
since the previous firing, ``window.get_expired()`` those that left the window since then.

Tuples are acked when they leave the last window that holds them (they show in
``get_expired()``), so a window's length plus its sliding interval must stay below the message
timeout: ``build()`` refuses a bolt whose durations add up to more. Emits in ``execute(window)``
are anchored to every tuple of the window unless ``anchors`` are given. A bolt does not ack its
window's tuples itself (``ack`` does nothing); ``fail(tup)`` fails one, which then leaves the
window. If ``execute(window)`` raises, every tuple of the window is failed (and replayed by its
spout), and the error is reported.

``WindowManager`` is the bookkeeping alone, on explicit timestamps, for tests and reuse;
``WindowedBoltRunner`` is the bolt the topology runs in a ``WindowedBolt``'s place.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from . import config as cfg
from .components import Bolt, OutputFieldsDeclarer
from .errors import TopologyError
from .protocol import DEFAULT_STREAM
from .tuples import Tuple

if TYPE_CHECKING:
    from typing import Self

    from .collectors import OutputCollector
    from .context import TopologyContext

# Ticks per sliding interval: a time window fires at most a quarter of its interval late.
TICKS_PER_SLIDE = 4
MIN_TICK_SECS = 0.01


@dataclass(frozen=True)
class Count:
    """A number of tuples."""

    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise TopologyError(f"Count must be a whole number >= 1, got {self.n!r}")


@dataclass(frozen=True, init=False)
class Duration:
    """A span of time: ``Duration(seconds=10)``, ``Duration(ms=500)`` or both, added."""

    ms: int

    def __init__(self, seconds: float = 0, ms: int = 0):
        try:
            total = round(float(seconds) * 1000) + int(ms)
        except (TypeError, ValueError):
            raise TopologyError(f"Duration takes numbers, got seconds={seconds!r}, "
                                f"ms={ms!r}") from None
        if total < 1:
            raise TopologyError(f"a Duration must be at least 1 ms, got {total} ms")
        object.__setattr__(self, "ms", total)


Length = Count | Duration


class Window:
    """One firing of a window: its tuples, those new since the previous firing, those that left
    it since then, and its bounds in milliseconds since the epoch (``start`` is the oldest
    tuple's arrival for a count-length window)."""

    __slots__ = ("_tuples", "_new", "_expired", "start", "end")

    def __init__(self, tuples: list, new: list, expired: list, start: int, end: int):
        self._tuples = tuples
        self._new = new
        self._expired = expired
        self.start = start
        self.end = end

    def get(self) -> list:
        return self._tuples

    def get_new(self) -> list:
        return self._new

    def get_expired(self) -> list:
        return self._expired

    def __repr__(self) -> str:
        return (f"Window({len(self._tuples)} tuples, {len(self._new)} new, "
                f"{len(self._expired)} expired, {self.start}..{self.end})")


class WindowManager:
    """Which items each window holds, when it fires, and which items leave it, given each
    item's arrival time (ms). ``add`` and ``advance`` return the windows that fired, in order,
    with the items that left in each (the caller acks those)."""

    def __init__(self, length: Length, sliding: Length, start_ms: int):
        self.length = length
        self.sliding = sliding
        self._events: collections.deque[tuple[int, int, Any]] = collections.deque()
        self._serial = 0          # arrival order, to tell new items from old ones
        self._fired_serial = 0    # the first serial not yet in a fired window
        self._added_since_fire = 0
        self._next_fire = (start_ms + sliding.ms) if isinstance(sliding, Duration) else None
        self._expired: list = []  # left by eviction or discard since the previous firing

    def add(self, item: Any, now_ms: int) -> list[tuple[Window, list]]:
        """Fire any time window due by ``now_ms``, then take ``item``; a count-sliding window
        that is due with it fires too."""
        fired = self.advance(now_ms)
        self._events.append((now_ms, self._serial, item))
        self._serial += 1
        self._added_since_fire += 1
        if isinstance(self.sliding, Count) and self._added_since_fire >= self.sliding.n:
            fired += self._fire(now_ms)
        return fired

    def advance(self, now_ms: int) -> list[tuple[Window, list]]:
        """Fire every time window due by ``now_ms``."""
        fired: list[tuple[Window, list]] = []
        while self._next_fire is not None and now_ms >= self._next_fire:
            fired += self._fire(self._next_fire)
            self._next_fire += self.sliding.ms
        return fired

    def discard(self, item: Any) -> bool:
        """Take ``item`` out of the window (it was failed); True if it was there."""
        for index, (_ts, _serial, held) in enumerate(self._events):
            if held is item:
                del self._events[index]
                return True
        return False

    def items(self) -> list:
        return [item for _ts, _serial, item in self._events]

    def _fire(self, at_ms: int) -> list[tuple[Window, list]]:
        self._evict(at_ms)
        self._added_since_fire = 0
        expired, self._expired = self._expired, []
        if not self._events:
            self._fired_serial = self._serial
            return [(None, expired)] if expired else []   # type: ignore[list-item]
        tuples = [item for _ts, _serial, item in self._events]
        new = [item for _ts, serial, item in self._events if serial >= self._fired_serial]
        self._fired_serial = self._serial
        if isinstance(self.length, Duration):
            start = at_ms - self.length.ms
        else:
            start = self._events[0][0]
        return [(Window(tuples, new, list(expired), start, at_ms), expired)]

    def _evict(self, at_ms: int) -> None:
        events = self._events
        if isinstance(self.length, Count):
            while len(events) > self.length.n:
                self._expired.append(events.popleft()[2])
        else:
            while events and events[0][0] < at_ms - self.length.ms:
                self._expired.append(events.popleft()[2])


class WindowedBolt(Bolt):
    """Subclass it and implement ``execute(window)``; configure it with ``with_window`` or
    ``with_tumbling_window`` when adding it to a topology."""

    window_length: Length | None = None
    window_sliding: Length | None = None

    def with_window(self, length: Length, sliding: Length | None = None) -> Self:
        """A window of ``length`` that fires every ``sliding`` (default: ``length``, tumbling)."""
        for what, value in (("length", length), ("sliding interval", sliding)):
            if value is not None and not isinstance(value, (Count, Duration)):
                raise TopologyError(f"a window's {what} must be a Count or a Duration, "
                                    f"got {value!r}")
        self.window_length = length
        self.window_sliding = sliding if sliding is not None else length
        return self

    def with_tumbling_window(self, length: Length) -> Self:
        return self.with_window(length, length)

    def execute(self, window: Window) -> None:   # type: ignore[override]
        raise NotImplementedError


class _WindowCollector:
    """What a windowed bolt's ``self.collector`` is: emits anchored to the current window."""

    def __init__(self, runner: WindowedBoltRunner, collector: OutputCollector):
        self._runner = runner
        self._collector = collector
        self.window: Window | None = None

    def emit(self, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = None,
             stream: str = DEFAULT_STREAM) -> list[int]:
        return self._collector.emit(values, self._anchors(anchors), stream)

    def emit_direct(self, task: int, values: Sequence[Any],
                    anchors: Tuple | Iterable[Tuple] | None = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self._collector.emit_direct(task, values, self._anchors(anchors), stream)

    def _anchors(self, anchors: Tuple | Iterable[Tuple] | None) -> Tuple | Iterable[Tuple]:
        if anchors is not None:
            return anchors
        return self.window.get() if self.window is not None else ()

    def ack(self, tup: Tuple) -> None:
        """Nothing: the window acks its tuples as they leave it."""

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        self._runner.fail(tup, reason)

    def reset_timeout(self, tup: Tuple) -> None:
        self._collector.reset_timeout(tup)

    def report_error(self, error: BaseException | str) -> None:
        self._collector.report_error(error)


class WindowedBoltRunner(Bolt):
    """The bolt a topology runs for a ``WindowedBolt`` (``bolt``): it keeps the window, fires
    it, and acks and fails the window's tuples. ``clock`` gives the time in seconds."""

    def __init__(self, bolt: WindowedBolt):
        self.bolt = bolt
        self.clock = time.time

    @property
    def outputs(self) -> Any:   # type: ignore[override]
        return self.bolt.outputs

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.bolt.declare_output_fields(declarer)

    def get_component_configuration(self) -> dict[str, Any] | None:
        conf = dict(self.bolt.get_component_configuration() or {})
        sliding = self.bolt.window_sliding
        if isinstance(sliding, Duration):
            conf[cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS] = max(
                MIN_TICK_SECS, sliding.ms / 1000 / TICKS_PER_SLIDE)
        return conf

    def problems(self, component_id: str, timeout_secs: float) -> list[str]:
        """What is wrong with the window of bolt ``component_id`` under this message timeout."""
        length, sliding = self.bolt.window_length, self.bolt.window_sliding
        if length is None or sliding is None:
            return [f"windowed bolt {component_id!r} has no window: use with_window(...) or "
                    f"with_tumbling_window(...)"]
        span_ms = sum(x.ms for x in (length, sliding) if isinstance(x, Duration))
        if span_ms > timeout_secs * 1000:
            return [f"windowed bolt {component_id!r}: its window length plus sliding interval "
                    f"({span_ms / 1000:g} s) is longer than the message timeout "
                    f"({timeout_secs:g} s, {cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS}): its tuples "
                    f"would time out before they leave the window"]
        return []

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        problems = self.problems(context.component_id,
                                 float(conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS]))
        if problems:
            raise TopologyError("; ".join(problems))
        self.collector = collector
        self.window_collector = _WindowCollector(self, collector)
        self.manager = WindowManager(self.bolt.window_length, self.bolt.window_sliding,
                                     self._now_ms())
        self.bolt.prepare(conf, context, self.window_collector)   # type: ignore[arg-type]

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            self._fire(self.manager.advance(self._now_ms()))
        else:
            self._fire(self.manager.add(tup, self._now_ms()))

    def _fire(self, fired: list[tuple[Window, list]]) -> None:
        for window, expired in fired:
            if window is not None:
                self._run(window)
            for tup in expired:
                self.collector.ack(tup)

    def _run(self, window: Window) -> None:
        self.window_collector.window = window
        try:
            self.bolt.execute(window)
        except Exception as exc:
            # At least once: what the window held is replayed by its spouts.
            for tup in window.get():
                self.fail(tup, f"windowed bolt raised {type(exc).__name__}: {exc}")
            self.collector.report_error(exc)
        finally:
            self.window_collector.window = None

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        """Fail ``tup`` now; it leaves the window and is not acked later."""
        if self.manager.discard(tup):
            self.collector.fail(tup, reason)

    def cleanup(self) -> None:
        self.bolt.cleanup()
