"""Runs one acker task: feeds batches to the ledger and sends its verdicts to spout tasks."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from .acker import Acker, roots_in_acks
from .executor import FLUSH_EVERY, Executor
from .protocol import (
    ACK_ACK,
    ACK_FAIL,
    ACK_INIT,
    ACK_RESET,
    ACK_TIMEOUT,
    SPOUT_ACK,
    SPOUT_FAIL,
    SPOUT_RESET,
    STOP,
    AckInit,
    Message,
    stride,
)


class AckerExecutor(Executor):
    def __init__(self, *args: Any, timeout_secs: float, task_component: list[int],
                 routes: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.ledger = Acker()
        self.timeout_secs = timeout_secs
        self.task_component = task_component  # task id -> component number
        self.routes = routes
        (self.task,) = [t.task_id for t in self.tasks]
        self.metrics = self.tasks[0].metrics
        self.acked: dict[int, list] = {}
        self.failed: dict[int, list] = {}
        self.reset: dict[int, list] = {}

    def handle(self, kind: int, src: int, payload: Any) -> None:
        """``payload``: a list of roots, or for ACK_ACK an array of pairs (protocol.ack_pairs)."""
        ledger = self.ledger
        component = self.task_component[src]
        if kind == ACK_ACK:
            ledger.acks(payload, component, self.acked)
            self.metrics.executed += roots_in_acks(payload)
        elif kind == ACK_INIT:
            ledger.inits(payload, component, self.acked, self.failed)
            self.metrics.executed += len(payload) // stride(AckInit)
        elif kind == ACK_FAIL:
            ledger.fails(payload, component, self.failed)
        elif kind == ACK_RESET:
            ledger.resets(payload, self.reset)
        elif kind == ACK_TIMEOUT:
            ledger.timeouts(payload, src, self.failed)

    def send_verdicts(self) -> None:
        for kind, verdicts in ((SPOUT_ACK, self.acked), (SPOUT_FAIL, self.failed),
                               (SPOUT_RESET, self.reset)):
            if verdicts:
                for task, batch in verdicts.items():
                    self.routes[task].put(Message(kind, task, self.task, batch))
                verdicts.clear()

    def steps(self) -> Generator[float, tuple | None, None]:
        self.ready.set()
        empty = self.inbox.empty
        next_rotation = time.monotonic() + self.timeout_secs
        since_flush = 0
        while True:
            message = yield next_rotation
            kind = None
            src: Any = None
            payload: Any = None
            if message is not None:
                kind, _dest, src, payload = message
            if kind == STOP:
                break
            if kind is not None:
                started = time.monotonic()
                try:
                    self.handle(kind, src, payload)
                except Exception as exc:  # a malformed batch: drop it, keep the ledger serving
                    self.tasks[0].report(f"dropped a malformed batch of kind {kind} from task "
                                         f"{src}", exc)
                self.metrics.busy_secs += time.monotonic() - started
                since_flush += 1
            if since_flush >= FLUSH_EVERY or empty():
                self.send_verdicts()
                since_flush = 0
            if time.monotonic() >= next_rotation:
                next_rotation += self.timeout_secs
                self.ledger.rotate()
        self.send_verdicts()
