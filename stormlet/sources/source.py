"""What an offset-tracking spout reads: a partitioned, replayable log with numbered records.

Kafka topics and stormlet's local partitioned log both implement ``Source``. A source behaves
like a Kafka consumer with manual assignment: it holds a read position per assigned partition,
``fetch`` returns the next records of partitions that are not paused and advances those
positions, and ``seek`` moves a position. It never commits anything: offsets are the spout's
business (see ``offset_store.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


# Not frozen: a frozen dataclass's __init__ goes through object.__setattr__, which made building
# records most of the cost of reading the local log.
@dataclass(slots=True)
class Record:
    """One message of a partition. ``offset`` is its position; the next record's offset may be
    higher than ``offset + 1`` where the source removed records (compaction)."""

    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: float | None = None


class SourceError(Exception):
    """The source cannot be reached or read; the message names it and says why."""


class OffsetOutOfRange(SourceError):
    """A fetch asked for an offset the partition no longer (or not yet) holds."""

    def __init__(self, partition: int, requested: int, earliest: int, latest: int):
        self.partition = partition
        self.requested = requested
        self.earliest = earliest
        self.latest = latest
        super().__init__(f"partition {partition}: offset {requested} is out of range "
                         f"(the partition holds {earliest} to {latest - 1})")


class Source(Protocol):
    """A partitioned log as the spout sees it. Methods are called from the spout's thread only."""

    #: What the log is called (a Kafka topic, a log directory): recorded with committed offsets.
    name: str

    def partitions(self) -> list[int]:
        """Every partition the log has now, sorted."""
        ...

    def earliest(self, partition: int) -> int:
        """The lowest offset the partition still holds (the next offset, if it is empty)."""
        ...

    def latest(self, partition: int) -> int:
        """The offset the next appended record will get (Kafka's high watermark)."""
        ...

    def lag_end(self, partition: int) -> int:
        """``latest`` as lag metrics need it: it may be some seconds old, and must be cheap
        while the partition is read."""
        ...

    def lost(self, partition: int) -> int:
        """How many offsets of the partition can never be read because a damaged file lost
        them (the local log's quarantined spans): shown with the spout's partition metrics. 0
        for a source that loses nothing it acknowledged."""
        ...

    def assign(self, positions: dict[int, int]) -> None:
        """Read exactly these partitions from now on, each from the given offset. Partitions left
        out are dropped, with whatever was buffered for them."""
        ...

    def seek(self, partition: int, offset: int) -> None:
        """Move the read position of an assigned partition."""
        ...

    def pause(self, partitions: list[int]) -> None:
        """Stop returning records of these partitions until ``resume``; positions are kept."""
        ...

    def resume(self, partitions: list[int]) -> None:
        ...

    def fetch(self, max_records: int, timeout: float = 0.0) -> list[Record]:
        """Up to ``max_records`` records of assigned, unpaused partitions, in offset order within
        each partition, waiting up to ``timeout`` seconds when none is ready. Raises
        ``OffsetOutOfRange`` for a partition whose position is outside what it holds (its
        position is left where it was, so the caller can seek it)."""
        ...

    def close(self) -> None:
        ...
