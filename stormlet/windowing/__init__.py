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

A window checkpointed with a state, acked at checkpoints and larger than memory if need be, is
``stormlet.state.StatefulWindowedBolt``'s (Storm's stateful windowing).

``WindowManager`` and ``EventTimeWindowManager`` are the bookkeeping alone, on explicit
timestamps, for tests and reuse; ``WindowedBoltRunner`` is the bolt the topology runs in a
``WindowedBolt``'s place.
"""

from .bolt import WindowedBolt
from .managers import EventTimeWindowManager, WindowManager
from .windows import LATE_DROPPED_METRIC, LATE_TUPLE_FIELD, Count, Duration, Firing, Length, Window
from .wrapper import WindowedBoltRunner

__all__ = [
    "Count", "Duration", "EventTimeWindowManager", "Firing", "LATE_DROPPED_METRIC",
    "LATE_TUPLE_FIELD", "Length", "Window", "WindowManager", "WindowedBolt", "WindowedBoltRunner",
]
