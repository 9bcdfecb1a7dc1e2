"""``WindowedBolt``: what a user subclasses, and how its window is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..components import Bolt
from ..errors import TopologyError
from ..tuples import Tuple
from .windows import Count, Duration, Length, Window

if TYPE_CHECKING:
    from typing import Self


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
                 else tup[self.timestamp_field])  # type: ignore[index]  # set if no extractor
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
