"""Running a task's hooks (stormlet/hooks.py): the hooked paths the runtime swaps in when a
task's first hook is added, so that a task without hooks runs its usual paths, with no check
per tuple (as ``topology.debug`` swaps in a logged ``emit``: runtime/task_collectors.py).

A hooked path is the usual one wrapped, each in an instance attribute that an attribute lookup
finds before the class's method: the collector's ``emit`` (``_Emitter.hook_with``), a bolt
collector's ``ack``, ``fail`` and ``fail_with_error``, a bolt task's ``execute``, a spout
task's ``on_acks``, ``_deliver_fail`` and ``_ack_untracked``. A basic bolt's input is acked by
a C call into the collector when compiled, which no instance attribute intercepts: its hooked
``execute`` acks through the hooked ``ack`` instead, and its emits go through the plain
``BasicOutputCollector`` over the hooked ``emit`` (BoltTask._choose_basic).
"""

from __future__ import annotations

import importlib
from time import monotonic
from typing import TYPE_CHECKING, Any

from .. import config as cfg
from ..components import BasicBolt
from ..errors import TopologyError
from ..hooks import (
    BoltAckInfo,
    BoltExecuteInfo,
    BoltFailInfo,
    SpoutAckInfo,
    SpoutFailInfo,
    TaskHook,
)

if TYPE_CHECKING:
    from ..context import TopologyContext
    from ..fail_reason import FailReason
    from ..tuples import Tuple
    from .bolt_executor import BoltTask
    from .spout_executor import SpoutTask
    from .task_collectors import InFlight


def load_hook(path: str) -> TaskHook:
    """A new instance of the hook class at ``path`` (``package.module.Class`` or
    ``package.module:Class``), made with no arguments."""
    module, colon, name = path.partition(":")
    if not colon:
        module, _, name = path.rpartition(".")
    try:
        hook = getattr(importlib.import_module(module), name)()
    except Exception as exc:
        raise TopologyError(f"{cfg.TOPOLOGY_AUTO_TASK_HOOKS}: cannot make a hook of {path!r} "
                            f"({type(exc).__name__}: {exc})") from exc
    if not isinstance(hook, TaskHook):
        raise TopologyError(f"{cfg.TOPOLOGY_AUTO_TASK_HOOKS}: {path!r} is not a "
                            f"stormlet.hooks.TaskHook")
    return hook


def add_auto_hooks(context: TopologyContext, conf: dict[str, Any]) -> None:
    for path in conf.get(cfg.TOPOLOGY_AUTO_TASK_HOOKS) or ():
        context.add_task_hook(load_hook(path))


class _Executing:
    """The input a hooked bolt is executing and when its execute started (``monotonic()``):
    its ack or fail inside that execute has a latency (Storm gives one for sampled tuples
    only). Set in place on each execute."""

    __slots__ = ("tup", "started")

    def __init__(self) -> None:
        self.tup: Tuple | None = None
        self.started = 0.0


def hook_bolt(task: BoltTask) -> None:
    """Run the task's hooks on its emits, executes, acks and fails from now on."""
    hooks = task.context.hooks
    collector = task.collector
    collector.hook_with(hooks)
    task_id = task.task_id
    current = _Executing()

    def latency(tup: Tuple) -> float | None:
        return (monotonic() - current.started) * 1000 if tup is current.tup else None

    ack, fail, fail_with_error = collector.ack, collector.fail, collector.fail_with_error

    def hooked_ack(tup: Tuple) -> None:
        ack(tup)
        info = BoltAckInfo(tup, task_id, latency(tup))
        for hook in hooks:
            hook.bolt_ack(info)

    def failed(tup: Tuple, reason: str | None) -> None:
        info = BoltFailInfo(tup, task_id, latency(tup), reason)
        for hook in hooks:
            hook.bolt_fail(info)

    def hooked_fail(tup: Tuple, reason: Any = None) -> None:
        fail(tup, reason)
        failed(tup, None if reason is None else str(reason))

    def hooked_fail_with_error(tup: Tuple, error: BaseException) -> None:
        fail_with_error(tup, error)
        failed(tup, f"{type(error).__name__}: {error}")

    collector.ack = hooked_ack
    collector.fail = hooked_fail
    collector.fail_with_error = hooked_fail_with_error

    if isinstance(task.obj, BasicBolt):
        user_execute = task._basic_user_execute
        task._choose_basic()

        def run(tup: Tuple) -> None:
            basic = task._basic
            basic.input = tup
            user_execute(tup, basic)
            collector.ack(tup)   # the hooked ack (BoltTask._basic_execute's is a C call)
    else:
        run = task.obj.execute

    def hooked_execute(tup: Tuple) -> None:
        started = monotonic()
        current.tup, current.started = tup, started
        run(tup)
        info = BoltExecuteInfo(tup, task_id, (monotonic() - started) * 1000)
        current.tup = None
        for hook in hooks:
            hook.bolt_execute(info)

    task.execute = hooked_execute


def hook_spout(task: SpoutTask) -> None:
    """Run the task's hooks on its emits, acks and fails from now on."""
    hooks = task.context.hooks
    task.collector.hook_with(hooks)
    task_id = task.task_id
    on_acks, deliver_fail = task.on_acks, task._deliver_fail
    ack_untracked = task._ack_untracked

    def spout_acked(msg_id: Any, latency_ms: float | None) -> None:
        info = SpoutAckInfo(msg_id, task_id, latency_ms)
        for hook in hooks:
            task.call("a task hook's spout_ack raised", hook.spout_ack, info)

    def hooked_on_acks(roots: list[int]) -> None:
        # The entries the acks will take (on_acks skips roots already failed or timed out).
        held = []
        for root in roots:
            entry = (task.pending.get(root) or task.expiring.get(root)
                     or task.expiring_before.get(root))
            if entry is not None:
                held.append(entry)
        on_acks(roots)
        now = monotonic()
        for entry in held:
            spout_acked(entry.msg_id, (now - entry.emitted_at) * 1000)

    def hooked_ack_untracked() -> None:
        ids = list(task.collector.acked_at_emit)
        ack_untracked()
        for msg_id in ids:
            spout_acked(msg_id, None)   # no ackers: acked at emit, no latency (as in Storm)

    def hooked_deliver_fail(entry: InFlight, reason: FailReason, counts: bool = True) -> None:
        deliver_fail(entry, reason, counts)
        info = SpoutFailInfo(entry.msg_id, task_id, (monotonic() - entry.emitted_at) * 1000,
                             reason)
        for hook in hooks:
            task.call("a task hook's spout_fail raised", hook.spout_fail, info)

    task.on_acks = hooked_on_acks
    task._deliver_fail = hooked_deliver_fail  # type: ignore[method-assign]
    task._ack_untracked = hooked_ack_untracked  # type: ignore[method-assign]
