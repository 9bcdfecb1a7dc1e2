"""Task hooks: code run on a task's events, with Storm 2.x's semantics (its docs/Hooks.md,
ITaskHook and BaseTaskHook).

    from stormlet.hooks import TaskHook

    class Counting(TaskHook):
        def prepare(self, conf, context):
            self.emitted = context.register_counter("hooked_emits")
        def emit(self, info):                 # EmitInfo: values, stream, task_id, out_tasks
            self.emitted.inc()

    # in a component's open or prepare, for its own task:
    context.add_task_hook(Counting())
    # or for every task of the topology, each with its own instance (made with no arguments):
    conf = {"topology.auto.task.hooks": ["mypackage.hooks.Counting"]}

A hook's ``prepare(conf, context)`` runs as it is added (auto hooks: before the component's
``open`` or ``prepare``), ``cleanup()`` once its task has stopped. Then, on the task's own
thread, after each event: ``emit`` for every emit and emit_direct (spouts' and bolts'),
``spout_ack`` and ``spout_fail`` after the spout's ``ack`` and ``fail`` (a dead-lettered message
too), ``bolt_execute`` after each ``execute`` that returns (ticks included), ``bolt_ack`` and
``bolt_fail`` for each ack and fail (an input failed because ``execute`` raised included). An
error a hook raises is the component's: it is reported as the event's own would be (an emit's
fails the input whose execute emitted it).

Latencies are in milliseconds; a bolt's process and fail latencies are known for the input
being executed (from the start of its ``execute``), None for one acked later (a windowed bolt's,
say), as Storm gives them only for sampled tuples. Hooks cost nothing until a task has one:
the runtime swaps in the hooked paths when the first is added. Added at any time on the task's
thread; a component's own hooks are best added in ``open`` or ``prepare``. Local mode and
workers run hooks; Spark backfill and replay do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import TopologyContext
    from .fail_reason import FailReason
    from .tuples import Tuple


@dataclass(frozen=True, slots=True)
class EmitInfo:
    """An emit: its values, stream, the emitting task and the tasks it went to."""

    values: Any
    stream: str
    task_id: int
    out_tasks: list[int]


@dataclass(frozen=True, slots=True)
class SpoutAckInfo:
    """A spout message whose tuple tree completed, and the time since its emit."""

    message_id: Any
    spout_task_id: int
    complete_latency_ms: float | None


@dataclass(frozen=True, slots=True)
class SpoutFailInfo:
    """A spout message that failed (or timed out), the time since its emit, and why."""

    message_id: Any
    spout_task_id: int
    fail_latency_ms: float | None
    reason: FailReason


@dataclass(frozen=True, slots=True)
class BoltExecuteInfo:
    """An input a bolt's ``execute`` returned from, and how long it took."""

    tuple: Tuple
    executing_task_id: int
    execute_latency_ms: float | None


@dataclass(frozen=True, slots=True)
class BoltAckInfo:
    """An input a bolt acked."""

    tuple: Tuple
    acking_task_id: int
    process_latency_ms: float | None


@dataclass(frozen=True, slots=True)
class BoltFailInfo:
    """An input a bolt failed, and the reason it gave."""

    tuple: Tuple
    failing_task_id: int
    fail_latency_ms: float | None
    reason: str | None


class TaskHook:
    """Subclass it and override what you need (Storm's ``BaseTaskHook``: every method does
    nothing)."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        pass

    def cleanup(self) -> None:
        pass

    def emit(self, info: EmitInfo) -> None:
        pass

    def spout_ack(self, info: SpoutAckInfo) -> None:
        pass

    def spout_fail(self, info: SpoutFailInfo) -> None:
        pass

    def bolt_execute(self, info: BoltExecuteInfo) -> None:
        pass

    def bolt_ack(self, info: BoltAckInfo) -> None:
        pass

    def bolt_fail(self, info: BoltFailInfo) -> None:
        pass


BaseTaskHook = TaskHook   # Storm's name
