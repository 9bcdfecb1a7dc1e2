"""What the partitioned log raises to its callers."""

from __future__ import annotations

from ..source import SourceError


class LogError(SourceError):
    """The log refuses a request or cannot be opened, written or read; the message names the
    path (and the partition) and says why."""


class PartialAppend(LogError):
    """An ``append_many`` failed part-way: ``written`` holds what did reach the log."""

    def __init__(self, message: str, written: dict[int, range]):
        super().__init__(message)
        self.written = written
