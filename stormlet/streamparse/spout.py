"""streamparse's spouts: ``Spout``, ``ReliableSpout``, and the ``ShellSpout`` and ``JavaSpout``
specs (refused when the topology loads unless the shell command is a Python component's).

A spout's ``emit(values, tup_id=...)`` is tracked by stormlet's acker: its ``ack(tup_id)`` or
``fail(tup_id)`` is called once, when the tuple's tree completes, fails or times out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..collectors import SpoutOutputCollector
from ..context import TopologyContext
from ..streams import DEFAULT_STREAM
from .component import Component
from .dsl import ComponentSpec, java_spec, shell_spec
from .emitting import checked_values, python_command

__all__ = ["JavaSpout", "ReliableSpout", "ShellSpout", "Spout"]


class JavaSpout(Component):
    """A spout written in Java: stormlet has no JVM, so a topology using one is refused."""

    @classmethod
    def spec(cls, name: str | None = None, serialized_java: bytes | None = None,
             full_class_name: str | None = None, args_list: list[Any] | None = None,
             par: int = 1, config: dict[str, Any] | None = None,
             outputs: list[Any] | None = None) -> ComponentSpec:
        return java_spec(cls, True, full_class_name, serialized_java, name=name, par=par,
                         config=config, outputs=outputs)


class ShellSpout(Component):
    """A spout run as a command: only a Python component's (``streamparse_run
    module.Class``) runs here."""

    @classmethod
    def spec(cls, name: str | None = None, command: str | None = None, script: str | None = None,
             par: int | None = None, config: dict[str, Any] | None = None,
             outputs: list[Any] | None = None) -> ComponentSpec:
        return shell_spec(cls, True, command, script, name=name, par=par, config=config,
                          outputs=outputs)


class Spout(ShellSpout):
    """Subclass and implement ``next_tuple``; override ``ack`` and ``fail`` to hear about
    tracked tuples (those emitted with a ``tup_id``)."""

    @classmethod
    def spec(  # type: ignore[override]  # as streamparse's: a Python spout has no command
            cls, name: str | None = None, par: int | None = None,
            config: dict[str, Any] | None = None) -> ComponentSpec:
        return shell_spec(cls, True, *python_command(cls), name=name, par=par, config=config,
                          outputs=cls.outputs)

    def next_tuple(self) -> None:
        raise NotImplementedError

    def ack(self, tup_id: Any) -> None:
        """The tree of the tuple emitted with ``tup_id`` was fully processed."""

    def fail(self, tup_id: Any) -> None:
        """The tree of the tuple emitted with ``tup_id`` failed or timed out."""

    def activate(self) -> None:
        pass

    def deactivate(self) -> None:
        pass

    def emit(self, tup: list[Any] | tuple[Any, ...], tup_id: Any = None, stream: str | None = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        """Emit ``tup``; with a ``tup_id`` it is tracked. Returns the task ids it went to when
        ``need_task_ids`` is true."""
        values = checked_values(tup)
        stream = stream or DEFAULT_STREAM
        if direct_task is None:
            tasks = self._stormlet_collector.emit(values, msg_id=tup_id, stream=stream)
        else:
            tasks = self._stormlet_collector.emit_direct(direct_task, values, msg_id=tup_id,
                                                         stream=stream)
        return tasks if need_task_ids else None

    def _stormlet_open(self, conf: dict[str, Any], context: TopologyContext,
                       collector: SpoutOutputCollector) -> None:
        self._stormlet_collector = collector
        self._stormlet_bind(conf, context)

    def _stormlet_forget(self, tup_id: Any) -> None:
        """The message went to the failed-message log: it will be neither acked nor failed."""


class ReliableSpout(Spout):
    """A spout that replays a failed tuple, with its ``tup_id``, up to ``max_fails`` times, then
    gives it up as if it had been acked. Every emit needs a ``tup_id``."""

    max_fails = 3

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failed_tuples: Counter = Counter()
        self.unacked_tuples: dict[Any, tuple[Any, ...]] = {}

    def ack(self, tup_id: Any) -> None:
        self.failed_tuples.pop(tup_id, None)
        if self.unacked_tuples.pop(tup_id, None) is None:
            self.logger.error("Received ack for unknown tuple ID: %r", tup_id)

    def fail(self, tup_id: Any) -> None:
        saved = self.unacked_tuples.get(tup_id)
        if saved is None:
            self.logger.error("Received fail for unknown tuple ID: %r", tup_id)
            return
        if self.failed_tuples[tup_id] < self.max_fails:
            tup, stream, direct_task, need_task_ids = saved
            self.emit(tup, tup_id=tup_id, stream=stream, direct_task=direct_task,
                      need_task_ids=need_task_ids)
            self.failed_tuples[tup_id] += 1
        else:
            self.logger.info("Acking tuple ID %r after it exceeded retry limit (%r)", tup_id,
                             self.max_fails)
            self.ack(tup_id)

    def emit(self, tup: list[Any] | tuple[Any, ...], tup_id: Any = None, stream: str | None = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if tup_id is None:
            raise ValueError("You must provide a tuple ID when emitting with a ReliableSpout in "
                             "order for the tuple to be tracked.")
        self.unacked_tuples[tup_id] = (tup, stream, direct_task, need_task_ids)
        return super().emit(tup, tup_id=tup_id, stream=stream, direct_task=direct_task,
                            need_task_ids=need_task_ids)

    def _stormlet_forget(self, tup_id: Any) -> None:
        self.failed_tuples.pop(tup_id, None)
        self.unacked_tuples.pop(tup_id, None)
