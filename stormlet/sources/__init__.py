"""Offset-tracking spouts and the partitioned logs they read."""

from .offset_spout import OffsetSpout
from .retry import RetryPolicy
from .source import OffsetOutOfRange, Record, Source, SourceError
from .spouts import KafkaSpout, LogSpout

__all__ = ["KafkaSpout", "LogSpout", "OffsetOutOfRange", "OffsetSpout", "Record", "RetryPolicy",
           "Source", "SourceError"]
