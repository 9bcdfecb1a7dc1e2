"""Windowed bolts, with Storm 2.x's semantics (its docs/Windowing.md).

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

**Event time.** With ``with_timestamp_field("ts")`` (milliseconds since the epoch) or
``with_timestamp_extractor(fn)``, windows follow the tuples' own times, not their arrival.
Every watermark interval (``with_watermark_interval``, default 1 s) the watermark moves to the
smallest, over the bolt's input tasks, of the largest timestamp each has sent, less the lag
(``with_lag``, default 0): until every input task has sent a tuple it does not move. Each window
ending at or before the watermark fires, holding the tuples with timestamps in
``[end - length, end)``; windows end at multiples of the sliding interval, and both must be
``Duration``s. A tuple older than the watermark is late: it goes, anchored, to the stream
named by ``with_late_tuple_stream`` as one field, ``tuple``, holding its values, or is
counted (the ``late_tuples_dropped`` metric) and acked if no stream is named.

``WindowManager`` and ``EventTimeWindowManager`` are the bookkeeping alone, on explicit
timestamps, for tests and reuse; ``WindowedBoltRunner`` is the bolt the topology runs in a
``WindowedBolt``'s place.
"""

from __future__ import annotations

import bisect
import collections
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from . import config as cfg
from .collectors import AnchoringCollector
from .components import Bolt, OutputFieldsDeclarer
from .errors import TopologyError
from .tuples import Tuple

if TYPE_CHECKING:
    from typing import Self

    from .collectors import OutputCollector
    from .context import TopologyContext

# Ticks per sliding interval: a time window fires at most a quarter of its interval late.
TICKS_PER_SLIDE = 4
MIN_TICK_SECS = 0.01
DEFAULT_WATERMARK_INTERVAL_MS = 1000
# The one field of a late-tuple stream: the late tuple's values.
LATE_TUPLE_FIELD = "tuple"
LATE_DROPPED_METRIC = "late_tuples_dropped"


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
        if total < 0:   # Storm's Duration: any non-negative value (a lag of 0, say)
            raise TopologyError(f"a Duration cannot be negative, got {total} ms")
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


# One firing: the window (None when nothing was in it) and the items that left since the
# previous firing (the caller acks those).
Firing = tuple[Window | None, list]


def _keep(fired: list[Firing], firing: Firing) -> None:
    """Add ``firing`` to ``fired`` unless nothing happened in it."""
    if firing[0] is not None or firing[1]:
        fired.append(firing)


class _HeldItems:
    """What both window managers hold: ``(time, arrival serial, item)``, oldest first."""

    _events: Any

    def items(self) -> list:
        return [item for _ts, _serial, item in self._events]

    def discard(self, item: Any) -> bool:
        """Take ``item`` out of the window (it was failed); True if it was there."""
        for index, (_ts, serial, held) in enumerate(self._events):
            if held is item:
                del self._events[index]
                self._forget(serial)
                return True
        return False

    def _forget(self, serial: int) -> None:
        """What else the manager keeps of a discarded item's serial."""


class WindowManager(_HeldItems):
    """Which items each window holds, when it fires, and which items leave it, given each
    item's arrival time (ms). ``add`` and ``advance`` return the firings, in order."""

    def __init__(self, length: Length, sliding: Length, start_ms: int):
        self.length = length
        self.sliding = sliding
        self._events: collections.deque[tuple[int, int, Any]] = collections.deque()
        self._serial = 0          # arrival order, to tell new items from old ones
        self._fired_serial = 0    # the first serial not yet in a fired window
        self._added_since_fire = 0
        self._next_fire = (start_ms + sliding.ms) if isinstance(sliding, Duration) else None
        self._expired: list = []  # left by eviction or discard since the previous firing

    def add(self, item: Any, now_ms: int) -> list[Firing]:
        """Fire any time window due by ``now_ms``, then take ``item``; a count-sliding window
        that is due with it fires too."""
        fired = self.advance(now_ms)
        self._events.append((now_ms, self._serial, item))
        self._serial += 1
        self._added_since_fire += 1
        if isinstance(self.sliding, Count) and self._added_since_fire >= self.sliding.n:
            _keep(fired, self._fire(now_ms))
        return fired

    def advance(self, now_ms: int) -> list[Firing]:
        """Fire every time window due by ``now_ms``."""
        fired: list[Firing] = []
        while self._next_fire is not None and now_ms >= self._next_fire:
            _keep(fired, self._fire(self._next_fire))
            self._next_fire += self.sliding.ms
        return fired

    def _fire(self, at_ms: int) -> Firing:
        self._evict(at_ms)
        self._added_since_fire = 0
        expired, self._expired = self._expired, []
        if not self._events:
            self._fired_serial = self._serial
            return None, expired
        tuples = [item for _ts, _serial, item in self._events]
        new = [item for _ts, serial, item in self._events if serial >= self._fired_serial]
        self._fired_serial = self._serial
        if isinstance(self.length, Duration):
            start = at_ms - self.length.ms
        else:
            start = self._events[0][0]
        return Window(tuples, new, list(expired), start, at_ms), expired

    def _evict(self, at_ms: int) -> None:
        events = self._events
        if isinstance(self.length, Count):
            while len(events) > self.length.n:
                self._expired.append(events.popleft()[2])
        else:
            while events and events[0][0] < at_ms - self.length.ms:
                self._expired.append(events.popleft()[2])


class EventTimeWindowManager(_HeldItems):
    """Windows by the items' own timestamps (ms), fired as the watermark passes their ends. The
    watermark is the smallest, over ``sources``, of the largest timestamp each has sent, less
    ``lag_ms``; it moves only when ``advance`` is called (every watermark interval)."""

    def __init__(self, length: Duration, sliding: Duration, lag_ms: int, sources: set):
        self.length = length.ms
        self.sliding = sliding.ms
        self.lag = lag_ms
        self.sources = set(sources)
        self.watermark: int | None = None
        self._latest: dict[Any, int] = {}    # source -> the largest timestamp it has sent
        self._events: list[tuple[int, int, Any]] = []   # (timestamp, arrival serial, item)
        self._serial = 0
        self._shown: set[int] = set()       # serials already in a fired window
        self._next_end: int | None = None

    def is_late(self, timestamp: int) -> bool:
        return self.watermark is not None and timestamp < self.watermark

    def add(self, item: Any, timestamp: int, source: Any) -> None:
        """Take an item that is not late (see ``is_late``)."""
        bisect.insort(self._events, (timestamp, self._serial, item))
        self._serial += 1
        if timestamp > self._latest.get(source, timestamp - 1):
            self._latest[source] = timestamp

    def advance(self) -> list[Firing]:
        """Move the watermark if it can, and fire every window it has passed."""
        if not self.sources or not self.sources <= set(self._latest):
            return []   # an input task has sent nothing yet
        candidate = min(self._latest[s] for s in self.sources) - self.lag
        if self.watermark is not None and candidate <= self.watermark:
            return []
        self.watermark = candidate
        fired: list[Firing] = []
        while self._events:
            if self._next_end is None or self._events[0][0] >= self._next_end:
                # Past an empty stretch: the first window end after the earliest item.
                earliest = self._events[0][0]
                self._next_end = max(self._next_end or 0,
                                     (earliest // self.sliding + 1) * self.sliding)
            if self._next_end > candidate:
                break
            _keep(fired, self._fire(self._next_end))
            self._next_end += self.sliding
        return fired

    def _forget(self, serial: int) -> None:
        self._shown.discard(serial)

    def _fire(self, end: int) -> Firing:
        start = end - self.length
        leaving = bisect.bisect_left(self._events, (start, -1))
        gone = self._events[:leaving]
        del self._events[:leaving]
        expired = [item for _ts, _serial, item in gone]
        self._shown.difference_update(serial for _ts, serial, _item in gone)
        inside = self._events[:bisect.bisect_left(self._events, (end, -1))]
        if not inside:
            return None, expired
        new = [item for _ts, serial, item in inside if serial not in self._shown]
        self._shown.update(serial for _ts, serial, _item in inside)
        return Window([item for _ts, _serial, item in inside], new, list(expired), start,
                      end), expired


class WindowedBolt(Bolt):
    """Subclass it and implement ``execute(window)``; configure it with ``with_window`` or
    ``with_tumbling_window`` when adding it to a topology."""

    window_length: Length | None = None
    window_sliding: Length | None = None
    timestamp_field: str | None = None
    timestamp_extractor: Callable[[Tuple], int] | None = None
    lag: Duration | None = None
    watermark_interval: Duration | None = None
    late_tuple_stream: str | None = None

    def with_window(self, length: Length, sliding: Length | None = None) -> Self:
        """A window of ``length`` that fires every ``sliding`` (default: ``Count(1)``, every
        tuple, as Storm's ``withWindow(length)``)."""
        for what, value in (("length", length), ("sliding interval", sliding)):
            if value is not None and (not isinstance(value, (Count, Duration))
                                      or value == Duration()):   # Storm: "must be positive"
                raise TopologyError(f"a window's {what} must be a positive Count or Duration, "
                                    f"got {value!r}")
        self.window_length = length
        self.window_sliding = sliding if sliding is not None else Count(1)
        return self

    def with_tumbling_window(self, length: Length) -> Self:
        return self.with_window(length, length)

    def with_timestamp_field(self, field: str) -> Self:
        """Event time: each tuple's time is its ``field`` (ms since the epoch)."""
        _one_timestamp(self)
        self.timestamp_field = field
        return self

    def with_timestamp_extractor(self, extractor: Callable[[Tuple], int]) -> Self:
        """Event time: each tuple's time is ``extractor(tuple)`` (ms since the epoch)."""
        _one_timestamp(self)
        self.timestamp_extractor = extractor
        return self

    def with_lag(self, lag: Duration) -> Self:
        """How far behind the newest timestamp the watermark stays (out-of-order slack)."""
        self.lag = _duration("lag", lag)
        return self

    def with_watermark_interval(self, interval: Duration) -> Self:
        self.watermark_interval = _duration("watermark interval", interval, positive=True)
        return self

    def with_late_tuple_stream(self, stream: str) -> Self:
        """Late tuples go to ``stream`` (one field, ``tuple``: their values) instead of being
        dropped."""
        if not isinstance(stream, str) or not stream:
            raise TopologyError(f"a late-tuple stream must be a non-empty name, got {stream!r}")
        self.late_tuple_stream = stream
        return self

    @property
    def event_time(self) -> bool:
        return self.timestamp_field is not None or self.timestamp_extractor is not None

    def timestamp_of(self, tup: Tuple) -> int:
        value = (self.timestamp_extractor(tup) if self.timestamp_extractor is not None
                 else tup[self.timestamp_field])
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"the tuple's timestamp must be a number of ms, got {value!r}")
        return int(value)

    def execute(self, window: Window) -> None:   # type: ignore[override]
        raise NotImplementedError


def _duration(what: str, value: Any, positive: bool = False) -> Duration:
    if not isinstance(value, Duration) or (positive and value.ms == 0):
        raise TopologyError(f"a window's {what} must be a {'positive ' * positive}Duration, "
                            f"got {value!r}")
    return value


def _one_timestamp(bolt: WindowedBolt) -> None:
    # As Storm's withTimestampExtractor: a second source of event time is a mistake.
    if bolt.event_time:
        raise TopologyError(f"{type(bolt).__name__} already has a timestamp field or extractor")


class _WindowCollector(AnchoringCollector):
    """What a windowed bolt's ``self.collector`` is: emits anchored to the current window."""

    def __init__(self, runner: WindowedBoltRunner, collector: OutputCollector):
        super().__init__(collector)
        self._runner = runner
        self.window: Window | None = None

    def anchored(self, anchors: Tuple | Iterable[Tuple] | None) -> Tuple | Iterable[Tuple]:
        if anchors is not None:
            return anchors
        return self.window.get() if self.window is not None else ()

    def ack(self, tup: Tuple) -> None:
        """Nothing: the window acks its tuples as they leave it."""

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        self._runner.fail(tup, reason)


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
        if self.bolt.late_tuple_stream is not None:
            declarer.declare([LATE_TUPLE_FIELD], stream=self.bolt.late_tuple_stream)

    def _watermark_ms(self) -> int:
        interval = self.bolt.watermark_interval
        return interval.ms if interval is not None else DEFAULT_WATERMARK_INTERVAL_MS

    def get_component_configuration(self) -> dict[str, Any] | None:
        conf = dict(self.bolt.get_component_configuration() or {})
        sliding = self.bolt.window_sliding
        if self.bolt.event_time:   # the watermark moves on ticks
            conf[cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS] = max(MIN_TICK_SECS,
                                                           self._watermark_ms() / 1000)
        elif isinstance(sliding, Duration):
            conf[cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS] = max(
                MIN_TICK_SECS, sliding.ms / 1000 / TICKS_PER_SLIDE)
        return conf

    def problems(self, component_id: str, timeout_secs: float) -> list[str]:
        """What is wrong with the window of bolt ``component_id`` under this message timeout."""
        length, sliding = self.bolt.window_length, self.bolt.window_sliding
        bolt = self.bolt
        if length is None or sliding is None:
            return [f"windowed bolt {component_id!r} has no window: use with_window(...) or "
                    f"with_tumbling_window(...)"]
        if bolt.late_tuple_stream is not None and not bolt.event_time:
            return [f"windowed bolt {component_id!r} names a late-tuple stream but has no "
                    f"event time: use with_timestamp_field(...)"]
        parts = [x.ms for x in (length, sliding) if isinstance(x, Duration)]
        what = "window length plus sliding interval"
        if bolt.event_time:
            if not (isinstance(length, Duration) and isinstance(sliding, Duration)):
                return [f"windowed bolt {component_id!r}: event-time windows take a Duration "
                        f"length and sliding interval (Count is processing time only here)"]
            parts += [bolt.lag.ms if bolt.lag else 0, self._watermark_ms()]
            what += ", lag and watermark interval"
        span_ms = sum(parts)
        if span_ms > timeout_secs * 1000:
            return [f"windowed bolt {component_id!r}: its {what} ({span_ms / 1000:g} s) is "
                    f"longer than the message timeout ({timeout_secs:g} s, "
                    f"{cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS}): its tuples would time out before "
                    f"they leave the window"]
        return []

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        problems = self.problems(context.component_id,
                                 float(conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS]))
        if problems:
            raise TopologyError("; ".join(problems))
        self.collector = collector
        self.window_collector = _WindowCollector(self, collector)
        bolt = self.bolt
        if bolt.event_time:
            inputs = {task for source in context.get_this_sources()
                      for task in context.get_component_tasks(source)}
            self.manager: Any = EventTimeWindowManager(
                bolt.window_length, bolt.window_sliding, bolt.lag.ms if bolt.lag else 0, inputs)
            self.late_dropped = context.register_counter(LATE_DROPPED_METRIC)
        else:
            self.manager = WindowManager(bolt.window_length, bolt.window_sliding, self._now_ms())
        bolt.prepare(conf, context, self.window_collector)   # type: ignore[arg-type]

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def execute(self, tup: Tuple) -> None:
        if self.bolt.event_time:
            self._execute_event_time(tup)
        elif tup.is_tick():
            self._fire(self.manager.advance(self._now_ms()))
        else:
            self._fire(self.manager.add(tup, self._now_ms()))

    def _execute_event_time(self, tup: Tuple) -> None:
        if tup.is_tick():
            self._fire(self.manager.advance())
            return
        try:
            timestamp = self.bolt.timestamp_of(tup)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            self.collector.fail(tup, f"no event time: {exc}")
            self.collector.report_error(exc)
            return
        if not self.manager.is_late(timestamp):
            self.manager.add(tup, timestamp, tup.source_task)
            return
        if self.bolt.late_tuple_stream is not None:
            self.collector.emit([list(tup.values)], tup, self.bolt.late_tuple_stream)
        else:
            self.late_dropped.inc()
        self.collector.ack(tup)

    def _fire(self, fired: list[Firing]) -> None:
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
