"""Runs spout tasks: calls ``next_tuple`` in bursts, and delivers acks, fails and timeouts on the
spout's own thread.

Each task keeps its tracked tuples in a 2-bucket rotating map rotated every message timeout T, so
a tuple not acked expires between T and 2T after its emit (or its last ``reset_timeout``). An
expired root is not failed on the spot: the spout asks its acker, which forgets the root and
answers with the component the tree last reached, and that answer becomes the timeout's
``FailReason``. A root whose acker does not answer by the next rotation fails anyway. Exactly one
of ``ack`` or ``fail`` is called per tracked message: whichever arrives first removes the entry.

A spout never blocks on backpressure: while a destination of its data is full (a bolt's inbox,
or a bolt in another worker that asked for data to be held), its batch stays buffered, the spout
emits nothing more, and it goes on taking acks and fails. Tuples queued behind backpressure are
alive, so the timeout clock stands still while the spout waits: a message times out after T to
2T of time in which its spout was free to emit, and a slow bolt does not turn a deep queue into a
storm of timeouts and replays. The clock never stands still for long enough to push a rotation
more than TIMEOUT_STRETCH timeouts late, so a tuple lost in a dead worker is still replayed
(within 2 x (1 + TIMEOUT_STRETCH) x T) while a slow bolt keeps the spout held back.

Time in ``next_tuple``, ``ack`` and ``fail`` counts as the task's busy time. A spout with
``partition_metrics()`` (an offset-tracking spout) has it called here every PARTITIONS_SECS, on
the spout's own thread, which is the only one allowed to read its offsets; the metrics snapshot
shows that copy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator
from typing import Any

import cython

from ..fail_reason import TIMEOUT, FailReason
from . import task_hooks
from .executor import NOW, Busy, Executor, TaskBase
from .extensions import DeadLetters
from .metrics import TaskMetrics
from .numbering import TopologyLayout
from .protocol import (
    SPOUT_ACK,
    SPOUT_FAIL,
    SPOUT_RESET,
    STOP,
    SYSTEM_TASK,
    WAKE,
    Message,
    SpoutFail,
    records,
)
from .rotating_map import RotatingMap
from .task_collectors import InFlight, SpoutCollector

# next_tuple calls per task between looks at the inbox.
BURST = 100
LATENCY_SAMPLE = 4
# Seconds between refreshes of an offset spout's partition rows (lag etc.).
PARTITIONS_SECS = 2.0
# How long a throttled spout waits for an ack or a fail before it tries its held data again.
THROTTLED_WAIT_SECS = 0.002
# Time held back by backpressure postpones a rotation by at most this many message timeouts.
TIMEOUT_STRETCH = 5
# How long an inactive spout waits before looking at its inbox and its rotation clock again
# (``ask_active`` wakes it sooner).
INACTIVE_WAIT_SECS = 0.05


class SpoutTask(TaskBase):
    def __init__(self, *args: Any, collector: SpoutCollector, pending: RotatingMap,
                 max_pending: int | None, layout: TopologyLayout, dead_letters: DeadLetters,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.collector = collector
        self.dead_letters = dead_letters
        self.pending = pending
        # A whole count (a config file or -c may give 1000.0), read as a C integer per burst.
        self.max_pending = math.ceil(max_pending) if max_pending else 0
        self.layout = layout
        # Expired roots whose acker we asked about: this rotation's and the previous one's.
        self.expiring: dict[int, InFlight] = {}
        self.expiring_before: dict[int, InFlight] = {}
        self.opened = False
        self.partition_metrics = getattr(self.obj, "partition_metrics", None)
        # Whether the last burst ended on a next_tuple call that emitted nothing: the spout
        # had less to give than it could send (below its peak).
        self.ran_dry = False

    def in_flight(self) -> int:
        return len(self.pending) + len(self.expiring) + len(self.expiring_before)

    def call(self, what: str, method: Any, *args: Any) -> None:
        try:
            method(*args)
        except Exception as exc:
            self.report(what, exc)

    def hooks_on(self) -> None:
        task_hooks.hook_spout(self)

    def open(self) -> None:
        try:
            self.add_auto_hooks()
            self.obj.open(self.conf, self.context, self.collector)
            self.opened = True
        except Exception as exc:
            self.report("open failed; this task will not emit", exc)

    @cython.locals(collector=SpoutCollector, start=cython.Py_ssize_t, before=cython.Py_ssize_t,
                   emitted=cython.Py_ssize_t, room=cython.Py_ssize_t)
    def emit_burst(self, executor: Any = None) -> int:
        """Call next_tuple until it emits nothing, the burst ends or max pending is reached, or
        ``executor`` (this task's) is asked to deactivate: a worker fenced off from ZooKeeper
        must not go on emitting because a call blocked (on a commit, say) past the fence."""
        self.ran_dry = False
        if not self.opened:
            return 0
        collector = self.collector
        next_tuple = self.obj.next_tuple
        max_pending = self.max_pending
        start = collector.emits
        # Room under max pending, counted down by what each call emits, so in-flight is not
        # recounted per call and a spout emitting several tuples per call overshoots by one call.
        room = max_pending - self.in_flight() if max_pending else BURST
        # A burst's emits are flushed together: at most a transfer batch of them.
        room = min(room, self.transfer.batch_size)
        for _ in range(BURST):
            if room <= 0:
                break
            before = collector.emits
            try:
                next_tuple()
            except Exception as exc:
                self.report("next_tuple raised", exc)
                break
            emitted = collector.emits - before
            if not emitted:
                self.ran_dry = True
                break
            room -= emitted
            if executor is not None and not executor.want_active:
                break
        if collector.acked_at_emit:
            self._ack_untracked()
        return collector.emits - start

    def _ack_untracked(self) -> None:
        # With no ackers a tracked emit counts as done at once, as in Storm.
        ids, self.collector.acked_at_emit = self.collector.acked_at_emit, []
        for msg_id in ids:
            self.metrics.acked += 1
            self.call("ack raised", self.obj.ack, msg_id)

    def _take(self, root: int) -> InFlight | None:
        entry = self.pending.take(root)
        return entry if entry is not None else self._take_expiring(root)

    def _take_expiring(self, root: int) -> InFlight | None:
        """A root that left the pending map at a rotation and waits for its acker's answer."""
        entry = self.expiring.pop(root, None)
        if entry is None:
            entry = self.expiring_before.pop(root, None)
        return entry

    @cython.locals(now=cython.double, pending=RotatingMap, entry=InFlight, metrics=TaskMetrics)
    def on_acks(self, roots: list[int]) -> None:
        now = time.monotonic()
        pending = self.pending
        take_expiring = self._take_expiring
        metrics = self.metrics
        ack = self.obj.ack
        # Counting attempts is on for the task's life, or off.
        forget = self.dead_letters.forget if self.dead_letters.attempts else None
        for root in roots:
            entry = pending.take(root)
            if entry is None:
                entry = take_expiring(root)
                if entry is None:
                    continue  # failed or timed out already: the first verdict stands
            msg_id = entry.msg_id
            # Latency of one ack in LATENCY_SAMPLE (Storm samples 5%): percentiles stay accurate
            # at any useful rate, and the log per ack is off the hot path.
            if not metrics.acked % LATENCY_SAMPLE:
                metrics.complete_latency.record(now - entry.emitted_at)
            metrics.acked += 1
            if forget is not None:
                forget(msg_id)
            try:
                ack(msg_id)
            except Exception as exc:
                self.report("ack raised", exc)

    def on_fails(self, batch: list) -> None:
        """``batch`` holds ``SpoutFail`` records from an acker."""
        take = self._take
        for root, kind, component, message in records(SpoutFail, batch):
            entry = take(root)
            if entry is None:
                continue
            self._deliver_fail(entry, FailReason(kind, self.layout.component_name(component),
                                                 message))
        self._flush_dead_letters()

    def _deliver_fail(self, entry: InFlight, reason: FailReason, counts: bool = True) -> None:
        msg_id = entry.msg_id
        self.metrics.count_fail(reason.kind, reason.component)
        box = self.dead_letters
        if counts and box.attempts:
            failures = box.failed(msg_id)
            if box.exhausted(failures):
                try:
                    box.write(entry.values, msg_id, reason, failures)
                except Exception as exc:
                    # The log cannot take it: the spout gets the fail and replays as before.
                    self.report("writing a dead letter failed", exc)
                else:
                    self.call("dead_lettered raised", self.obj.dead_lettered, msg_id, reason)
                    return
        self.call("fail raised", self.obj.fail, msg_id, reason)

    def _flush_dead_letters(self) -> None:
        if self.dead_letters.unflushed:
            self.call("flushing dead letters failed", self.dead_letters.flush)

    def on_resets(self, roots: list[int]) -> None:
        pending = self.pending
        for root in roots:
            if not pending.touch(root):
                entry = self.expiring.pop(root, None) or self.expiring_before.pop(root, None)
                if entry is not None:
                    pending.put_new(root, entry)

    def rotate(self) -> None:
        """One message timeout passed: ask the ackers about roots that expired now, and fail the
        ones asked about last time that no acker answered for."""
        for entry in self.expiring_before.values():
            self._deliver_fail(entry, FailReason(TIMEOUT, None, "no acker answered for it"))
        self._flush_dead_letters()
        self.expiring_before = self.expiring
        self.expiring = self.pending.rotate()
        timeouts = self.transfer.timeouts
        n = len(timeouts)
        if n:
            for root in self.expiring:
                timeouts[root % n].append(root)

    def refresh_partitions(self) -> None:
        if self.opened and self.partition_metrics is not None:
            # Building the rows is inside the try too: a spout returning anything but a dict of
            # dicts must be reported, not kill this executor (on a cluster, a crash loop).
            try:
                rows = self.partition_metrics()
                partitions = [{"partition": p, **row} for p, row in rows.items()]
            except Exception as exc:
                self.report("partition_metrics raised or returned something other than a "
                            "dict of dicts", exc)
                return
            self.metrics.partitions = partitions

    def fail_all_in_flight(self, message: str) -> None:
        entries = self.pending.drain()
        entries += list(self.expiring.values()) + list(self.expiring_before.values())
        self.expiring.clear()
        self.expiring_before.clear()
        for entry in entries:
            # The topology is stopping, the message did not fail: no attempt is counted.
            self._deliver_fail(entry, FailReason(TIMEOUT, None, message), counts=False)


class SpoutExecutor(Executor):
    def __init__(self, *args: Any, timeout_secs: float, wait_secs: float,
                 yields: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.timeout_secs = timeout_secs
        self.wait_secs = wait_secs
        # Whether to offer the GIL after each burst that emitted: when the topology spans
        # workers. In one process nothing outside waits on this GIL, and yielding after every
        # burst would shrink batches to a burst (measured: a third slower in local mode).
        self.yields = yields
        # Written by the runtime (``ask_active``), acted on by this thread (activate/deactivate
        # run here).
        self.want_active = False
        self.active = False
        self.published_in_flight = 0
        # Put in this executor's inbox by a full inbox it held data for, once that has room:
        # a throttled spout sends again then, not after THROTTLED_WAIT_SECS.
        wake_message = Message(WAKE, SYSTEM_TASK, SYSTEM_TASK, None)
        self._wake = lambda: self.inbox.put(wake_message)

    def ask_active(self, want: bool) -> None:
        """Ask this executor to activate (or deactivate) its spouts. Safe from any thread: it
        acts on it at once, woken if it waits, not when its idle wait next ends (up to 50 ms
        after a submit, measured on 2026-11-28: a twentieth of a 1 s benchmark)."""
        if self.want_active != want:
            self.want_active = want
            self._wake()

    def in_flight(self) -> int:
        """Tracked tuples in flight, as this executor last published it. Other threads read this
        instead of the maps, which are mid-update while the executor rotates them."""
        return self.published_in_flight

    def _publish_in_flight(self) -> None:
        self.published_in_flight = sum(task.in_flight() for task in self.tasks)

    def handle(self, message: tuple) -> bool:
        """Deliver one control message; False on STOP."""
        kind, dest, _src, payload = message
        task = self.tasks_by_id.get(dest)
        if kind == SPOUT_ACK or kind == SPOUT_FAIL:
            # The spout's ack and fail are its code: timed as busy, watched for hangs.
            assert task is not None   # acks and fails come for this executor's own tasks
            started = time.monotonic()
            if kind == SPOUT_ACK:
                self.busy = Busy(started, task, "ack")
                task.on_acks(payload)
            else:
                self.busy = Busy(started, task, "fail")
                task.on_fails(payload)
            self.busy = None
            task.metrics.busy_secs += time.monotonic() - started
        elif kind == SPOUT_RESET:
            assert task is not None
            task.on_resets(payload)
        elif kind == STOP:
            return False
        return True   # WAKE and anything else: nothing to do but go round the loop again

    def _follow_activation(self) -> None:
        want = self.want_active
        if want == self.active:
            return
        self.active = want
        for task in self.tasks:
            if task.opened:
                if want:
                    self.busy = Busy(time.monotonic(), task, "activate")
                    task.call("activate raised", task.obj.activate)
                else:
                    self.busy = Busy(time.monotonic(), task, "deactivate")
                    task.call("deactivate raised", task.obj.deactivate)
        self.busy = None

    def _flush_or_hold(self) -> list[SpoutTask]:
        """Hand over what every task emitted; the tasks whose data was held back."""
        return [task for task in self.tasks
                if task.transfer.flush(hold_back=True, wake=self._wake)]

    def steps(self) -> Generator[float, tuple | None, None]:
        for task in self.tasks:
            self.busy = Busy(time.monotonic(), task, "open")
            task.open()
        self.busy = None
        self.ready.set()
        inbox = self.inbox
        get_nowait = inbox.get_nowait
        last_rotation = time.monotonic()
        next_rotation = last_rotation + self.timeout_secs
        next_partitions = 0.0
        throttled: list[SpoutTask] = []
        running = True
        while running:
            while not inbox.empty():
                if not self.handle(get_nowait()):
                    running = False
                    break
            if not running:
                break
            self._follow_activation()
            now = time.monotonic()
            if now >= next_rotation:
                last_rotation, next_rotation = now, now + self.timeout_secs
                for task in self.tasks:
                    task.rotate()
            if now >= next_partitions:
                next_partitions = now + PARTITIONS_SECS
                for task in self.tasks:
                    self.busy = Busy(now, task, "partition_metrics")
                    task.refresh_partitions()
                self.busy = None
            emitted = 0
            ran_dry = False
            if self.active:
                for task in self.tasks:
                    if not self.want_active:
                        break      # deactivated during another task's burst
                    if task in throttled:
                        continue   # its last batch is still held back
                    started = time.monotonic()
                    self.busy = Busy(started, task, "next_tuple")
                    emitted += task.emit_burst(self)
                    ran_dry = ran_dry or task.ran_dry
                    task.metrics.busy_secs += time.monotonic() - started
                self.busy = None
            throttled = self._flush_or_hold()
            self._publish_in_flight()
            if emitted and self.yields and (ran_dry or not self.shared):
                # Hand the GIL to whichever thread waits for it: the receiver with another
                # worker's tuples, the bolts and the acker that would finish them. Otherwise the
                # spout keeps it for the whole switch interval (5 ms) making more work, while
                # the other worker, whose trees wait on this one, idles. Taking turns at full
                # speed, it keeps it: its bolts run at its ``yield NOW`` below and the rounds
                # move the transport's frames, so a hand-off only cost a pair of context
                # switches a burst and left the core idle meanwhile (scaling.py: 1.85 cores
                # busy, not 1.97). Below its peak (a burst ran dry) the hand-off is cheap, and
                # it lets the worker's other threads in without a switch interval's wait.
                time.sleep(0)
            if throttled and not emitted:
                started = time.monotonic()
                message = yield started + THROTTLED_WAIT_SECS
                waited = time.monotonic() - started
                # The timeout clock stands still while the spout is held back, up to a limit,
                # so that a tuple lost elsewhere still times out while backpressure lasts.
                next_rotation = min(next_rotation + waited,
                                    last_rotation + TIMEOUT_STRETCH * self.timeout_secs)
                for task in throttled:
                    task.metrics.throttled_secs += waited
                if message is not None:
                    running = self.handle(message)
            elif not emitted:
                wait = self.wait_secs if self.active else INACTIVE_WAIT_SECS
                message = yield time.monotonic() + wait
                if message is not None:
                    running = self.handle(message)
            elif self.shared:
                yield NOW   # the bolts' turn at what this burst emitted
        self.flush()
        # Deactivate first, so the spout knows it is stopping when the fails arrive; emits made
        # from here on (a replay from fail(), say) are refused, since nothing would run them.
        if self.active:
            self.want_active = False
            self._follow_activation()
        for task in self.tasks:
            task.collector.closed = True
            task.fail_all_in_flight("topology stopped before the tuple tree completed")
            if task.opened:
                task.call("close raised", task.obj.close)
            task.cleanup_hooks()
            task.call("closing the dead-letter log failed", task.dead_letters.close)
            task.collector.log_refused()
