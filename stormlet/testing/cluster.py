"""A local cluster on simulated time (Storm's ``withSimulatedTimeLocalCluster`` and
``advanceClusterTime``).

    with simulated_time() as clock, SimulatedCluster(clock) as cluster:
        cluster.submit("counts", conf, topology)
        cluster.wait_idle("counts")          # every tuple sent so far has been executed
        advance_cluster_time(cluster, 10)    # ticks and time windows due in 10 s, in order

A topology submitted here runs on the same runtime as ``LocalCluster``'s, with two changes: its
bolts get no tick tuples from the runtime's tick thread (their ``topology.tick.tuple.freq.secs``
is set to none); the cluster sends them itself as the clock passes each tick's time. And the
window of each processing-time ``WindowedBolt`` reads the simulated clock. ``advance_time``
moves the clock from one tick's time to the next, sending the ticks due and waiting until the
topology is idle after each, so a window's content and firings are the same on every run.
Message timeouts stay on real time.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace
from typing import Any

from .. import config as cfg
from ..local import FinalReport, LocalCluster
from ..runtime.protocol import ACKER_COMPONENT, SYSTEM_TASK, TICK, Message
from ..state.windowed import StatefulWindowedBoltRunner
from ..topology import Topology
from ..windowing import WindowedBoltRunner
from .clock import SimulatedClock, current_clock

# How often wait_idle looks. Idle must be seen on two looks in a row, with the same counts.
IDLE_POLL_SECS = 0.005


@dataclass
class _Tick:
    due: float      # simulated seconds
    every: float
    task: int
    inbox: Any


def _on_clock(obj: Any, clock: SimulatedClock) -> Any:
    """``obj``, or a copy of it whose processing-time window reads ``clock``: a windowed bolt's
    runner (a stateful one's too), also as the ``inner`` bolt of a checkpoint forwarder."""
    if isinstance(obj, WindowedBoltRunner):
        obj = copy.copy(obj)
        obj.clock = clock.time
    elif isinstance(obj, StatefulWindowedBoltRunner):   # its window is a plain one's
        obj = copy.copy(obj)
        obj.windowing = _on_clock(obj.windowing, clock)
    elif isinstance(getattr(obj, "inner", None), WindowedBoltRunner):
        obj = copy.copy(obj)
        obj.inner = _on_clock(obj.inner, clock)
    return obj


def simulated_topology(topology: Topology, conf: dict[str, Any] | None,
                       clock: SimulatedClock) -> tuple[Topology, dict[str, float]]:
    """``topology`` with its windows on ``clock`` and its bolts' ticks taken away, and the tick
    period (s) of each bolt that had ticks, which the caller sends."""
    periods: dict[str, float] = {}
    specs = {}
    for cid, spec in topology.components.items():
        if spec.is_spout:
            specs[cid] = spec
            continue
        period = spec.component_conf(conf or {}).get(cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS)
        if period:
            periods[cid] = float(period)
        specs[cid] = replace(spec, obj=_on_clock(spec.obj, clock),
                             config={**spec.config, cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS: None})
    return Topology(specs), periods


class SimulatedCluster(LocalCluster):
    """A ``LocalCluster`` whose topologies' ticks and processing-time windows follow ``clock``
    (default: the ``simulated_time()`` clock, else a new one). See the module doc."""

    def __init__(self, clock: SimulatedClock | None = None):
        super().__init__()
        self.clock = clock or current_clock() or SimulatedClock()
        self._ticks: dict[str, list[_Tick]] = {}
        self._ticks_sent: dict[str, int] = {}

    def submit(self, name: str, conf: dict[str, Any] | None, topology: Topology) -> None:
        """Start ``topology`` under ``name`` on simulated time (see ``LocalCluster.submit``)."""
        if not isinstance(topology, Topology):
            super().submit(name, conf, topology)   # refused there, with its message
        simulated, periods = simulated_topology(topology, conf, self.clock)
        super().submit(name, conf, simulated)
        now = self.clock.time()
        runtime = self.runtime(name)
        self._ticks[name] = [_Tick(now + every, every, task.task_id, executor.inbox)
                             for cid, every in sorted(periods.items())
                             for executor in runtime.executors.get(cid, [])
                             for task in executor.tasks]
        self._ticks_sent[name] = 0

    def kill(self, name: str, wait_secs: float | None = None) -> FinalReport:
        report = super().kill(name, wait_secs)
        self._ticks.pop(name, None)
        self._ticks_sent.pop(name, None)
        return report

    def next_tick(self) -> float | None:
        """The simulated time of the next tick due, in any topology (None: no bolt has ticks)."""
        return min((t.due for ticks in self._ticks.values() for t in ticks), default=None)

    def advance_time(self, secs: float, timeout: float = 30.0) -> None:
        """Move the clock ``secs`` on, stopping at each tick's time on the way: send the ticks
        due then (in task order) and wait until every topology is idle (``wait_idle``)."""
        if secs < 0:
            raise ValueError(f"simulated time only moves forward, got {secs!r} s")
        target = self.clock.time() + secs
        while (due := self.next_tick()) is not None and due <= target:
            self.clock.advance_to(due)
            for name, ticks in self._ticks.items():
                for tick in ticks:
                    if tick.due <= due:
                        tick.due += tick.every
                        self._ticks_sent[name] += 1
                        tick.inbox.put(Message(TICK, tick.task, SYSTEM_TASK, None))
            for name in list(self._ticks):
                self.wait_idle(name, timeout)
        self.clock.advance_to(target)

    def _counts(self, name: str) -> tuple[int, int] | None:
        """(tuples sent to bolts plus ticks, tuples and ticks executed), or None while some
        executor is in user code, holds unsent emits or has messages waiting."""
        runtime = self.runtime(name)
        bolts = {cid for cid, spec in runtime.topology.components.items() if not spec.is_spout}
        for executors in runtime.executors.items():
            for executor in executors[1]:
                if executor.busy is not None or not executor.inbox.empty():
                    return None
                for task in executor.tasks:
                    transfer = getattr(task, "transfer", None)
                    if transfer is not None and any(transfer.data):
                        return None
        sent = self._ticks_sent.get(name, 0)
        executed = 0
        for metrics in runtime.metrics:
            if metrics.component == ACKER_COMPONENT:
                continue
            sent += metrics.transferred
            if metrics.component in bolts:
                executed += metrics.executed
        return sent, executed

    def wait_idle(self, name: str, timeout: float = 30.0) -> None:
        """Wait until every tuple sent in ``name`` so far (and every tick) has been executed
        and nothing is left to send, seen twice in a row; ``TimeoutError`` after ``timeout``
        seconds of real time, naming what was still moving."""
        deadline = time.monotonic() + timeout
        before: tuple[int, int] | None = None
        while True:
            counts = self._counts(name)
            if counts is not None and counts[0] == counts[1] and counts == before:
                return
            before = counts
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topology {name!r} not idle within {timeout:g} s (sent, "
                                   f"executed: {counts or 'an executor is busy'})")
            time.sleep(IDLE_POLL_SECS)


def advance_cluster_time(cluster: SimulatedCluster, secs: float) -> None:
    """Storm's ``Testing.advanceClusterTime``: ``cluster.advance_time(secs)``."""
    cluster.advance_time(secs)
