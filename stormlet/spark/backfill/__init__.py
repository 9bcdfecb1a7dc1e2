"""Backfill: run a topology's bolts over a historical dataset in Spark, so a fixed bolt can
recompute past results. For the same messages, the output equals what the streaming topology
emits, wherever that is fixed by the messages (not by timing: how tuples from different senders
interleave, wall-clock ticks, replays of failed tuples).

    from stormlet.spark.backfill import Backfill, InputOptions
    from stormlet.spark.session import spark_session

    job = Backfill("topologies/word_count.py", InputOptions("sentences.txt"))
    with spark_session("backfill", master="local[2]") as spark:
        result = job.run(spark, "out/counts")        # JSON Lines of what `count` emitted
    print(result.components["count"]["executed"])

The dataset stands in for one spout (``spout=``, needed when the topology has several): a
stormlet partitioned log (each record becomes the tuple that spout's ``translate`` makes, by
default ``partition, offset, key, value``), text (one message per line, into the spout's single
field) or JSON Lines (an object by field name, or an array by position, per line).

From that spout the topology graph is walked in order. Every bolt runs as many Spark partitions
as it has tasks, partition ``i`` being task index ``i`` with the task id, context and config a
streaming run would give it; each partition's tuples are what that task would get:

- fields, all, global, direct, partial-key and custom groupings choose tasks with the runtime's
  own choosers (the same CRC-32 hash over the same task ids), and Spark repartitions by them;
- shuffle, none and local-or-shuffle: any task will do, so partitions stay where they are when
  the counts match (or the input's are merged), else they are dealt round-robin.

Tuples are not tracked: ``ack`` is a no-op, ``fail`` is counted (streaming would replay those
messages; a backfill does not), an exception from ``execute`` is counted as an error with a
sample of its text. Bolts with ``topology.tick.tuple.freq.secs`` get one tick after their last
tuple. Bolts see ``stormlet.backfill: True`` in their config.

What is written: the tuples the leaf bolts emit (or every stream of ``components=``), one JSON
object per tuple with the stream's field names. One stream goes to ``output`` itself; several
go to ``output/<component>/<stream>``.

Spark's Python workers load the topology themselves, from its code package (the file and the
Python files beside it, as ``stormlet submit`` ships it) sent as a broadcast: nothing of the
user's classes is pickled. On a cluster the workers need stormlet (and what the topology
imports) installed. Paths without a scheme are local paths (on a cluster: a mount every worker
shares, which a partitioned log must be); give ``hdfs://``, ``s3a://`` and so on otherwise.
Refused, with the component named: a direct grouping from the spout the input replaces (only
that spout could choose the tasks) and bolts that feed each other in a cycle.

The parts, each in its module. Without Spark, and tested so: ``plan`` (which bolts run, how each
one's input is cut into its tasks), ``inputs`` (the dataset, checked on the driver), ``formats``
(records in, JSON Lines out) and ``paths``. The job on the driver: ``job`` (``Backfill``: the
RDDs, the outputs, the result; its progress lines come from ``stormlet.spark.progress``) and
``errors``. On the workers: ``shipping`` (how the topology's code gets there), ``runner`` (one
task over one partition), ``emitter`` (where a task's tuples go; compiled with the runtime's hot
path), ``chunks`` (how they are gathered and cross
Spark: runs of plain values, pickled in one call where they leave the worker), ``collectors``
(what a bolt emits through) and ``counts``.
"""

from .errors import BackfillError, BackfillWorkerError
from .inputs import InputOptions, InputSpec
from .job import Backfill, BackfillResult, OutputInfo
from .plan import Plan, plan_backfill

__all__ = ["Backfill", "BackfillError", "BackfillResult", "BackfillWorkerError", "InputOptions",
           "InputSpec", "OutputInfo", "Plan", "plan_backfill"]
