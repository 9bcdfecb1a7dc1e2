"""``WindowedBoltRunner``: the bolt a topology runs in a ``WindowedBolt``'s place. It keeps the
window (``managers``), fires it, and acks and fails the window's tuples."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable

from .. import config as cfg
from ..collectors import AnchoringCollector
from ..components import Bolt, OutputFieldsDeclarer
from ..errors import TopologyError
from ..tuples import Tuple
from .bolt import WindowedBolt
from .managers import EventTimeWindowManager, WindowManager
from .windows import (
    DEFAULT_WATERMARK_INTERVAL_MS,
    LATE_DROPPED_METRIC,
    LATE_TUPLE_FIELD,
    MIN_TICK_SECS,
    TICKS_PER_SLIDE,
    Duration,
    Firing,
    Window,
)

if TYPE_CHECKING:
    from ..collectors import OutputCollector
    from ..context import TopologyContext


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

    def config_problems(self, conf: dict[str, Any]) -> list[str]:
        return self.bolt.config_problems(conf)

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
        refuse_problems(self, conf, context)
        self.collector = collector
        self.window_collector = _WindowCollector(self, collector)
        bolt = self.bolt
        if bolt.event_time:
            inputs = {task for source in context.get_this_sources()
                      for task in context.get_component_tasks(source)}
            # (problems above refused a window without length and sliding, and in event time
            # one of counts.)
            self.manager: Any = EventTimeWindowManager(
                bolt.window_length, bolt.window_sliding,  # type: ignore[arg-type]
                bolt.lag.ms if bolt.lag else 0, inputs)
            self.late_dropped = context.register_counter(LATE_DROPPED_METRIC)
        else:
            self.manager = WindowManager(
                bolt.window_length, bolt.window_sliding,  # type: ignore[arg-type]
                self.now_ms())
        bolt.prepare(conf, context, self.window_collector)

    def now_ms(self) -> int:
        """The time on ``clock``, in ms: what a processing-time window reads."""
        return int(self.clock() * 1000)

    def execute(self, tup: Tuple) -> None:
        if self.bolt.event_time:
            self._execute_event_time(tup)
        elif tup.is_tick():
            self._fire(self.manager.advance(self.now_ms()))
        else:
            self._fire(self.manager.add(tup, self.now_ms()))

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


def refuse_problems(runner: Any, conf: dict[str, Any], context: TopologyContext) -> None:
    """Raise ``TopologyError`` with what is wrong with ``runner``'s window (its ``problems``)
    under ``conf``: at prepare, for a topology that did not go through ``build()``."""
    problems = runner.problems(context.component_id,
                               float(conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS]))
    if problems:
        raise TopologyError("; ".join(problems))
