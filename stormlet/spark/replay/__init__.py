"""Replaying the failed-message log into the log or topic a spout reads, as a PySpark job.

    from stormlet.spark.replay import replay

    preview = replay("data/events/_failed", "log:data/events", reason="error", dry_run=True)
    print(preview.planned, preview.by_reason(), preview.by_component())
    summary = replay("data/events/_failed", "log:data/events", reason="error")
    summary = replay("failed", "kafka://broker:9092/orders", topology="orders", master="local[4]")

The job reads the complete files of the failed-message log (``stormlet.failed``), keeps the
records that match the filters (topology, component, reason kind, ``since <= last_failed_at <
until``), keeps one record per message, drops the messages an earlier run replayed, then appends
the payloads to the target, each with its original key:

- ``log:PATH``: stormlet's local partitioned log (``PartitionedLog``), which must exist;
- ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``: a Kafka topic, which must exist.

The parts, each in its module: ``job`` (the ``replay`` function, which ties the others together,
and its summary), ``targets`` (the targets, and reading back what a crashed run wrote), ``plan``
(which messages, to which partition: the Spark job, and the plan it writes), ``plan_tasks`` (what
that job's tasks run, in Arrow), ``manifest``
(``<failed-dir>/.replays/``: the runs, their journals, the lock), ``writer`` (writing a plan chunk
by chunk, and finishing a crashed run) and ``errors`` (what the user is told).
"""

from .errors import ReplayError
from .job import DEFAULT_CHUNK, PARTITION_BY, ReplaySummary, replay
from .manifest import REPLAYS_DIR
from .targets import HEADER_KEY, HEADER_RUN, TargetSpec, parse_target
from .writer import PlanProgress, ReplayProgress, RunResult

__all__ = ["DEFAULT_CHUNK", "HEADER_KEY", "HEADER_RUN", "PARTITION_BY", "PlanProgress",
           "REPLAYS_DIR", "ReplayError", "ReplayProgress", "ReplaySummary", "RunResult",
           "TargetSpec", "parse_target", "replay"]
