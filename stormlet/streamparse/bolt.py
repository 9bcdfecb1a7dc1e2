"""streamparse's bolts: ``Bolt``, ``BatchingBolt``, ``TicklessBatchingBolt``, and the
``ShellBolt`` and ``JavaBolt`` specs (refused when the topology loads unless the shell command is
a Python component's).

As in streamparse, a bolt anchors its emits to the tuple being processed (``auto_anchor``), acks
it when ``process`` returns (``auto_ack``) and fails it when ``process`` raises (``auto_fail``).
A raising ``process`` fails the tuple with reason ``error`` and the error's text, and is reported
as the task's error; the bolt keeps running (under Storm the shell process would exit and be
restarted). As in Storm's shell bolts, a bolt holds each input until it acks or fails it, so it
can also ack, fail or anchor by tuple id; anchoring onto a tuple already acked or failed is an
error.
"""

from __future__ import annotations

import time
from collections import defaultdict, namedtuple
from collections.abc import Sequence
from typing import Any, cast

from ..collectors import OutputCollector
from ..context import TopologyContext
from ..streams import DEFAULT_STREAM
from ..tuples import StreamInfo
from ..tuples import Tuple as NativeTuple
from .component import Component, Tuple
from .dsl import ComponentSpec, java_spec, shell_spec
from .emitting import checked_values, python_command

_new_tuple = tuple.__new__

__all__ = ["BatchingBolt", "Bolt", "JavaBolt", "ShellBolt", "TicklessBatchingBolt"]


class JavaBolt(Component):
    """A bolt written in Java: stormlet has no JVM, so a topology using one is refused."""

    @classmethod
    def spec(cls, name: str | None = None, serialized_java: bytes | None = None,
             full_class_name: str | None = None, args_list: list[Any] | None = None,
             inputs: Any = None, par: int = 1, config: dict[str, Any] | None = None,
             outputs: list[Any] | None = None) -> ComponentSpec:
        return java_spec(cls, False, full_class_name, serialized_java, name=name, inputs=inputs,
                         par=par, config=config, outputs=outputs)


class ShellBolt(Component):
    """A bolt run as a command: only a Python component's (``streamparse_run module.Class``)
    runs here."""

    @classmethod
    def spec(cls, name: str | None = None, command: str | None = None, script: str | None = None,
             inputs: Any = None, par: int | None = None, config: dict[str, Any] | None = None,
             outputs: list[Any] | None = None) -> ComponentSpec:
        return shell_spec(cls, False, command, script, name=name, inputs=inputs, par=par,
                          config=config, outputs=outputs)


class Bolt(ShellBolt):
    """Subclass and implement ``process(tup)`` (and ``process_tick(tup)`` for tick tuples)."""

    auto_anchor = True
    auto_ack = True
    auto_fail = True

    @classmethod
    def spec(  # type: ignore[override]  # as streamparse's: a Python bolt has no command
            cls, name: str | None = None, inputs: Any = None, par: int | None = None,
            config: dict[str, Any] | None = None) -> ComponentSpec:
        return shell_spec(cls, False, *python_command(cls), name=name, inputs=inputs, par=par,
                          config=config, outputs=cls.outputs)

    @staticmethod
    def is_tick(tup: Tuple) -> bool:
        return tup.component == "__system" and tup.stream == "__tick"

    def process(self, tup: Tuple) -> None:
        raise NotImplementedError

    def process_tick(self, tup: Tuple) -> None:
        pass

    def emit(self, tup: list[Any] | tuple[Any, ...], stream: str | None = None,
             anchors: Sequence[Any] | None = None, direct_task: int | None = None,
             need_task_ids: bool = False) -> list[int] | None:
        """Emit ``tup`` anchored to ``anchors`` (tuples or their ids), by default to the tuples
        being processed. Returns the task ids it went to when ``need_task_ids`` is true."""
        values = checked_values(tup)
        if anchors is None:
            anchors = self._current_tups if self.auto_anchor else ()
        if (len(anchors) == 1 and type(anchor := anchors[0]) is Tuple
                and (native := self._inputs.get(anchor.id)) is not None):
            natives = [native]   # the usual case: the tuple being processed, still held
        else:
            natives = [self._held(anchor, "Anchored onto") for anchor in anchors]
        stream = stream or DEFAULT_STREAM
        if direct_task is None:
            tasks = self._stormlet_collector.emit(values, natives, stream)
        else:
            tasks = self._stormlet_collector.emit_direct(direct_task, values, natives, stream)
        return tasks if need_task_ids else None

    def ack(self, tup: Tuple | Any) -> None:
        """``tup`` (or the tuple with that id) is done."""
        self._stormlet_collector.ack(self._release(tup, "Acked"))

    def fail(self, tup: Tuple | Any) -> None:
        """Fail ``tup`` (or the tuple with that id): its spout tuples fail now."""
        self._stormlet_collector.fail(self._release(tup, "Failed"),
                                      f"failed by bolt {self.component_name!r}")

    def raise_exception(self, exception: BaseException, tup: Any = None) -> None:
        super().raise_exception(exception, tup)
        self._stormlet_collector.report_error(exception)

    # ----- how stormlet runs it

    def _stormlet_prepare(self, conf: dict[str, Any], context: TopologyContext,
                          collector: OutputCollector) -> None:
        self._stormlet_collector = collector
        self._inputs: dict[int, NativeTuple] = {}
        self._next_id = 0
        self._value_types: dict[StreamInfo, type] = {}
        self._current_tups: list[Tuple] = []
        # The automatic ack skips the call to ``ack`` unless the bolt overrides it.
        self._plain_ack = type(self).ack is Bolt.ack
        self._stormlet_bind(conf, context)

    def _stormlet_execute(self, native: NativeTuple) -> None:
        """Run one input as streamparse's loop does: tick or data, then the automatic ack. An
        exception propagates with the input no longer held, so the executor fails it with the
        error (``auto_fail``); without ``auto_fail`` it is reported and the input stays held."""
        tup = self._received(native)
        self._current_tups = [tup]
        try:
            if native.is_tick():
                self.process_tick(tup)
            else:
                self.process(tup)
        except Exception as exc:
            if self.auto_fail and self._inputs.pop(tup.id, None) is not None:
                raise
            self.raise_exception(exc, tup)
            return
        finally:
            self._current_tups = []
        if self.auto_ack:
            if self._plain_ack:
                held = self._inputs.pop(tup.id, None)
                if held is not None:
                    self._stormlet_collector.ack(held)
            elif tup.id in self._inputs:
                self.ack(tup)

    def _received(self, native: NativeTuple) -> Tuple:
        """The streamparse tuple for ``native``, held under a new id until acked or failed."""
        self._next_id += 1
        tup_id = self._next_id
        self._inputs[tup_id] = native
        info = native.info
        value_type = self._value_types.get(info)
        if value_type is None:
            # (cast: mypy takes a namedtuple assigned as it is for a class of literal fields.)
            value_type = cast(type, namedtuple("Values", info.fields, rename=True))
            self._value_types[info] = value_type
        # tuple.__new__ skips the named tuples' generated constructors (a tenth of a bolt's
        # time); stormlet already checked the values against the stream's fields at emit.
        return _new_tuple(Tuple, (tup_id, info.component, info.stream, native.source_task,
                                  _new_tuple(value_type, native.values)))

    def _held(self, tup: Tuple | Any, verb: str) -> NativeTuple:
        tup_id = tup.id if isinstance(tup, Tuple) else tup
        native = self._inputs.get(tup_id)
        if native is None:
            raise ValueError(f"bolt {self.component_name!r}: {verb} tuple {tup_id!r} after it "
                             f"was acked or failed (or it was never an input)")
        return native

    def _release(self, tup: Tuple | Any, verb: str) -> NativeTuple:
        native = self._held(tup, verb)
        del self._inputs[tup.id if isinstance(tup, Tuple) else tup]
        return native


class BatchingBolt(Bolt):
    """Groups inputs by ``group_key(tup)`` and hands each group to ``process_batch(key, tups)``
    every ``ticks_between_batches`` tick tuples (set ``topology.tick.tuple.freq.secs`` in the
    bolt's ``config``). A batch's tuples are acked once ``process_batch`` returns and failed if
    it raises; emits in ``process_batch`` are anchored to the whole batch."""

    ticks_between_batches = 1
    # Set by _stormlet_prepare.
    _batches: defaultdict[Any, list[Tuple]]
    _tick_counter: int

    def group_key(self, tup: Tuple) -> Any:
        """The batch ``tup`` belongs to (one batch for all by default)."""
        return None

    def process_batch(self, key: Any, tups: list[Tuple]) -> None:
        raise NotImplementedError

    # Keyword arguments only, as streamparse's BatchingBolt.emit.
    def emit(  # type: ignore[override]
            self, tup: list[Any] | tuple[Any, ...], **kwargs: Any) -> list[int] | None:
        kwargs["need_task_ids"] = False
        return super().emit(tup, **kwargs)

    def process(self, tup: Tuple) -> None:
        self._batches[self.group_key(tup)].append(tup)

    def process_tick(self, tick_tup: Tuple) -> None:
        # streamparse counts past ticks_between_batches before it processes (its own rule).
        self._tick_counter += 1
        if self._tick_counter > self.ticks_between_batches and self._batches:
            self.process_batches()
            self._tick_counter = 0

    def process_batches(self) -> None:
        """Hand every waiting batch to ``process_batch``, then ack its tuples (or fail them if
        it raised)."""
        batches, self._batches = self._batches, defaultdict(list)
        for key, batch in batches.items():
            self._current_tups = batch
            try:
                self.process_batch(key, batch)
            except Exception as exc:
                self.raise_exception(exc, batch)
                if self.auto_fail:
                    reason = f"process_batch raised {type(exc).__name__}: {exc}"
                    self._settle(batch,
                                 lambda native: self._stormlet_collector.fail(native, reason))
                continue
            finally:
                self._current_tups = []
            if self.auto_ack:
                self._settle(batch, self._stormlet_collector.ack)

    def _settle(self, batch: list[Tuple], settle: Any) -> None:
        """Ack or fail each tuple of ``batch`` the bolt still holds."""
        inputs = self._inputs
        for tup in batch:
            native = inputs.pop(tup.id, None)
            if native is not None:
                settle(native)

    def _stormlet_prepare(self, conf: dict[str, Any], context: TopologyContext,
                          collector: OutputCollector) -> None:
        self._batches = defaultdict(list)
        self._tick_counter = 0
        super()._stormlet_prepare(conf, context, collector)

    def _stormlet_execute(self, native: NativeTuple) -> None:
        """Data joins its batch; a tick is acked and may process the batches. Nothing is acked
        when ``process`` returns: a tuple is acked with its batch."""
        tup = self._received(native)
        self._current_tups = [tup]
        try:
            if native.is_tick():
                self._stormlet_collector.ack(self._release(tup, "Acked"))
                self.process_tick(tup)
            else:
                self.process(tup)
        except Exception:
            self._inputs.pop(tup.id, None)   # the executor fails it with the error
            raise
        finally:
            self._current_tups = []


class TicklessBatchingBolt(BatchingBolt):
    """A ``BatchingBolt`` that processes its batches every ``secs_between_batches`` seconds.
    streamparse runs a timer thread; here the bolt asks for tick tuples at that interval, so
    ``process_batch`` runs on the bolt's own thread as every other call does."""

    secs_between_batches = 2
    _last_batches: float   # set by _stormlet_prepare

    def process_tick(self, tick_tup: Tuple) -> None:
        now = time.monotonic()
        if now - self._last_batches >= self.secs_between_batches * 0.99 and self._batches:
            self.process_batches()
            self._last_batches = now

    def _stormlet_prepare(self, conf: dict[str, Any], context: TopologyContext,
                          collector: OutputCollector) -> None:
        self._last_batches = time.monotonic()
        super()._stormlet_prepare(conf, context, collector)
