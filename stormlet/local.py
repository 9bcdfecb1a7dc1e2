"""LocalCluster: run topologies inside this process, with no external service.

    with LocalCluster() as cluster:
        cluster.submit("word-count", {"topology.max.spout.pending": 1000}, topology)
        cluster.wait_for(lambda: cluster.metrics("word-count")["count"]["executed"] > 100)
        cluster.debug("word-count", 10, component="split", seconds=60)   # sample 10% of emits
        cluster.set_log_levels("word-count", {"myproject": {"level": "DEBUG", "seconds": 30}})
        cluster.kill("word-count")

The same executors, acker and groupings as a cluster's workers, with in-process queues for
transport. Each topology has an event history as on a cluster (``events``: its submit,
activations, deactivations and kill), kept in memory. Every executor thread runs on one CPU, as a
pinned worker's do, unless the topology's ``stormlet.local.one.cpu`` is false (see
stormlet/runtime/cpu_affinity.py).

Log levels and tuple sampling change while a topology runs as on a cluster, by the same rules
(runtime/live_settings.py), with the record kept here; its samples stay in memory. Loggers are
the process's, so a level set for one local topology is the level of every one.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import config as cfg
from . import event_history as events
from .runtime import live_settings as live
from .runtime.cpu_affinity import local_executor_cpu
from .runtime.engine import TopologyRuntime
from .runtime.task_errors import ErrorRecord
from .topology import Topology, TopologyError

log = logging.getLogger(__name__)


class UnknownTopologyError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class FinalReport:
    metrics: dict[str, dict]
    errors: list[ErrorRecord]


class LocalCluster:
    def __init__(self) -> None:
        self._running: dict[str, TopologyRuntime] = {}
        self._lock = threading.Lock()
        self._events = events.MemoryEvents(f"local:{socket.gethostname()}")
        # name -> its run-time settings, once one was changed (see live_settings.py).
        self._live: dict[str, live.LiveSettings] = {}

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def submit(self, name: str, conf: dict[str, Any] | None, topology: Topology) -> None:
        """Start ``topology`` under ``name``, active. Raises if the name is taken."""
        if not isinstance(topology, Topology):
            raise TopologyError(f"submit takes a built Topology (call TopologyBuilder.build()), "
                                f"got {type(topology).__name__}")
        problems = topology.config_problems(conf)
        if problems:
            raise TopologyError(cfg.refusal(name, problems))
        for line in topology.config_warnings(conf):
            log.warning("topology %s: %s", name, line)
        with self._lock:
            if name in self._running:
                raise ValueError(f"a topology named {name!r} is already running")
            one_cpu = cfg.merged(conf)[cfg.STORMLET_LOCAL_ONE_CPU]
            runtime = TopologyRuntime(name, topology, conf or {},
                                      executor_cpu=local_executor_cpu() if one_cpu else None)
            self._running[name] = runtime
        topology_id = runtime.conf[cfg.STORMLET_TOPOLOGY_ID]
        self._events.open(topology_id, name, conf)
        runtime.start(active=True)
        log.info("topology %s started", name)
        self._events.record(topology_id, events.SUBMITTED,
                            f"submitted {name} in this process, active")

    def _get(self, name: str) -> TopologyRuntime:
        runtime = self._running.get(name)
        if runtime is None:
            known = sorted(self._running) or "none"
            raise UnknownTopologyError(f"no topology named {name!r} is running (running: {known})")
        return runtime

    def kill(self, name: str, wait_secs: float | None = None) -> FinalReport:
        """Deactivate, wait for in-flight tuples (up to ``wait_secs``, default the message
        timeout), then stop and clean up. Returns the final metrics and errors."""
        runtime = self._get(name)
        topology_id = runtime.conf[cfg.STORMLET_TOPOLOGY_ID]
        wait = runtime.timeout_secs if wait_secs is None else wait_secs
        self._events.record(topology_id, events.KILLED, f"killed: deactivated now, removed once "
                            f"nothing is in flight or after {wait:g} s", wait=wait)
        runtime.stop(wait_secs)
        with self._lock:
            self._running.pop(name, None)
            settings = self._live.pop(name, None)
        if settings is not None:
            settings.close()   # puts back the loggers it set
        log.info("topology %s killed", name)
        self._events.removed(topology_id, "removed: its executors stopped")
        return FinalReport(runtime.summary(), runtime.errors())

    def activate(self, name: str) -> None:
        runtime = self._get(name)
        runtime.activate()
        self._events.record(runtime.conf[cfg.STORMLET_TOPOLOGY_ID], events.ACTIVATED,
                            "activated: its spouts emit again")

    def deactivate(self, name: str) -> None:
        runtime = self._get(name)
        runtime.deactivate()
        self._events.record(runtime.conf[cfg.STORMLET_TOPOLOGY_ID], events.DEACTIVATED,
                            "deactivated: its spouts stop emitting; tuples in flight finish")

    def events(self, key: str, limit: int = events.DEFAULT_READ, since: int | None = None,
               kind: str | None = None) -> dict[str, Any]:
        """The event history of the topology named (or with the id) ``key``, running or
        killed (the last few killed are kept), as nimbus's ``events`` answers
        (cluster/events.py): its newest ``limit`` events after seq ``since``, of ``kind`` if
        given, oldest first. ``UnknownTopologyError`` if none has that name."""
        try:
            return self._events.history(key, limit, since, kind, status=self._status)
        except events.NoHistory as exc:
            raise UnknownTopologyError(str(exc)) from None

    def _status(self, topology_id: str) -> str | None:
        for runtime in list(self._running.values()):
            if runtime.conf[cfg.STORMLET_TOPOLOGY_ID] == topology_id:
                return "active" if runtime.is_active() else "inactive"
        return None

    def topologies(self) -> list[str]:
        return sorted(self._running)

    def metrics(self, name: str) -> dict[str, dict]:
        """Per component: tasks, emitted, executed, acked, failed, fail_reasons, complete
        latency."""
        return self._get(name).summary()

    def metrics_snapshot(self, name: str) -> dict:
        """Everything measured, per task and window, as a worker reports it to nimbus (see
        ``TopologyRuntime.metrics_snapshot``); ``stormlet.metrics.views`` makes tables of it."""
        return self._get(name).metrics_snapshot()

    def structure(self, name: str) -> dict:
        """The topology's components, streams and subscriptions as plain data."""
        return self._get(name).structure

    def runtime(self, name: str) -> TopologyRuntime:
        """The running topology itself: its id, start time, activation (for the UI)."""
        return self._get(name)

    def errors(self, name: str) -> list[ErrorRecord]:
        """Recent errors, oldest first: component, task, time, error (the message) and detail
        (traceback, or a hung component's stack). Errors of one kind beyond the first few per
        interval appear as one summary; ``metrics(name)[component]["errors"]`` counts them all."""
        return self._get(name).errors()

    def in_flight(self, name: str) -> int:
        return self._get(name).in_flight()

    def instances(self, name: str, component: str) -> list[Any]:
        """The component objects of every task, as they run (for tests and debugging)."""
        return self._get(name).instances(component)

    # ----- run-time settings: log levels and tuple sampling (as nimbus's runtime_settings.py)

    def set_log_levels(self, name: str, levels: dict) -> dict:
        """Set or clear loggers' levels while ``name`` runs: ``levels`` is ``{logger: {"level":
        "DEBUG", "seconds": 30} or None}`` (None: back to its own now; no seconds: until
        cleared). ValueError says what is wrong. Returns the settings in force."""
        changes = live.log_level_changes(levels)
        return self._change(name, lambda record, now: {
            live.LOG_LEVELS: live.with_log_levels(record[live.LOG_LEVELS], changes, now)})

    def debug(self, name: str, percent: float | None, component: str | None = None,
              seconds: float | None = None) -> dict:
        """Sample ``percent`` of the tuples ``component`` (None: every one) emits, for
        ``seconds`` (None: until turned off); ``percent`` None turns it off. Returns the
        settings in force."""
        runtime = self._get(name)
        if component is not None and component not in runtime.topology.components:
            raise ValueError(f"topology {name!r} has no component {component!r} (it has "
                             f"{', '.join(sorted(runtime.topology.components))})")
        return self._change(name, lambda record, now: {
            live.SAMPLING: live.with_sampling(record[live.SAMPLING], component, percent,
                                              seconds, now)})

    def live_settings(self, name: str) -> dict:
        """The log levels and sampling in force for ``name``, as a record holds them."""
        self._get(name)
        settings = self._live.get(name)
        return settings.record() if settings else {live.LOG_LEVELS: {}, live.SAMPLING: {}}

    def samples(self, name: str, component: str | None = None, limit: int = 100) -> list[dict]:
        """The newest ``limit`` tuple samples of ``name`` (of ``component``, or every one),
        oldest first (see runtime/sampling.py for what each holds)."""
        self._get(name)
        settings = self._live.get(name)
        return settings.latest_samples(component, limit) if settings else []

    def _change(self, name: str, change: Callable[[dict, float], dict]) -> dict:
        runtime = self._get(name)
        with self._lock:
            settings = self._live.get(name)
            if settings is None:
                settings = self._live[name] = live.LiveSettings(runtime).start()
            record = settings.record()
            record.update(change(record, time.time()))
            settings.follow(record)
        return settings.record()

    def wait_for(self, condition: Callable[[], object], timeout: float = 30.0,
                 interval: float = 0.01) -> None:
        """Wait until ``condition()`` is true; raise ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            time.sleep(interval)

    def shutdown(self, wait_secs: float | None = 5.0) -> None:
        for name in list(self._running):
            self.kill(name, wait_secs)
