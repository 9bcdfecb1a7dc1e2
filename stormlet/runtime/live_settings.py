"""The settings an operator changes while a topology runs, and how a running topology follows
them: log levels (``stormlet set-log-level``, log_levels.py) and tuple sampling (``stormlet
debug``, sampling.py). Both are kept in the topology's record (ops53.md):

    record["log_levels"] = {logger: {"level": "DEBUG", "until": epoch seconds or None}}
    record["sampling"]   = {component or "*": {"percent": 1.0, "until": epoch seconds or None}}

``until`` None lasts until cleared. A component's own sampling entry wins over ``"*"`` (every
component). On a cluster nimbus writes them (cluster/runtime_settings.py) and every worker
follows its topology's record; in local mode ``LocalCluster`` keeps the record. Both change it
with the functions here, which check what they are given (ValueError, in words), and run a
``LiveSettings`` per process that applies what is in force.

An entry whose time ran out is out of force wherever it is read: a worker reverts it on its own
clock (the settings thread wakes for it), without waiting for nimbus to remove it, and a worker
started later applies only what is still in force.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from . import log_levels as levels
from .sampling import KEPT, Sampler, SampleSink

log = logging.getLogger(__name__)

LOG_LEVELS, SAMPLING = "log_levels", "sampling"   # the record's keys
ALL_COMPONENTS = "*"
# The most loggers one topology may have set at once.
MAX_LOGGERS = 100
# How often the settings thread looks for executors started since (a worker taking on more)
# and writes the samples made since to their file; while sampling is on, every
# SAMPLING_TICK_SECS, so that the samples of a pass (sampling.WRITTEN_PER_SEC a second at most)
# are few, and yet the thread seldom takes the interpreter's lock from the executors.
TICK_SECS = 1.0
SAMPLING_TICK_SECS = 0.5
# A worker's metrics report carries the newest samples of each component, made in the last
# REPORTED_SECS: what nimbus answers ``samples`` with until it can read the files.
REPORTED = 20
REPORTED_SECS = 600.0


# ----- the record's entries and the changes made to them

def in_force(entries: Any, now: float) -> dict[str, dict]:
    """The entries of a record's ``log_levels`` or ``sampling`` whose time has not run out
    (malformed ones, which no stormlet writes, are left out)."""
    if not isinstance(entries, dict):
        return {}
    found = {}
    for key, entry in entries.items():
        if not isinstance(entry, dict):
            continue
        until = entry.get("until")
        if until is None or (isinstance(until, (int, float)) and until > now):
            found[key] = entry
    return found


def next_expiry(*groups: dict[str, dict]) -> float | None:
    """The earliest ``until`` of the entries in ``groups`` (None: none ends)."""
    ends = [e["until"] for group in groups for e in group.values()
            if isinstance(e.get("until"), (int, float))]
    return min(ends) if ends else None


def log_level_changes(changes: Any) -> dict[str, tuple[str | None, float | None]]:
    """The changes a request asks for, as ``{logger: {"level": L, "seconds": S} or None}``
    (None, or level ``CLEAR``: clear it), checked: logger -> (level or None, seconds or None)."""
    if not isinstance(changes, dict) or not changes:
        raise ValueError("give at least one logger and its level, as {logger: {\"level\": "
                         "\"DEBUG\", \"seconds\": 30}} (or None to clear it)")
    checked: dict[str, tuple[str | None, float | None]] = {}
    for logger, change in changes.items():
        name = levels.check_logger(logger)
        if change is None or (isinstance(change, dict) and isinstance(change.get("level"), str)
                              and change["level"].strip().upper() == levels.CLEAR):
            checked[name] = (None, None)
        elif isinstance(change, dict):
            checked[name] = (levels.check_level(change.get("level")),
                             levels.check_seconds(change.get("seconds"), f"the level of {name}"))
        else:
            raise ValueError(f"the change of logger {name} must be {{\"level\": ..., "
                             f"\"seconds\": ...}} or None, got {change!r}")
    return checked


def with_log_levels(entries: Any, changes: dict[str, tuple[str | None, float | None]],
                    now: float) -> dict[str, dict]:
    """``entries`` in force, with ``changes`` (from ``log_level_changes``) made."""
    result = in_force(entries, now)
    for logger, (level, seconds) in changes.items():
        if level is None:
            result.pop(logger, None)
        else:
            result[logger] = {"level": level, "until": None if seconds is None else now + seconds}
    if len(result) > MAX_LOGGERS:
        raise ValueError(f"at most {MAX_LOGGERS} loggers may be set at once; clear some first")
    return result


def check_percent(percent: Any) -> float:
    """A sampling percentage: more than 0, at most 100."""
    if isinstance(percent, bool) or not isinstance(percent, (int, float)) \
            or not math.isfinite(percent) or not 0 < percent <= 100:
        raise ValueError(f"the sampling percentage must be more than 0 and at most 100, got "
                         f"{percent!r}")
    return float(percent)


def with_sampling(entries: Any, component: str | None, percent: float | None,
                  seconds: float | None, now: float) -> dict[str, dict]:
    """``entries`` in force, with ``component``'s sampling (None: every component's) set to
    ``percent`` for ``seconds`` (None: until turned off), or turned off (``percent`` None).
    Off for every component clears every component's entry too."""
    key = component or ALL_COMPONENTS
    result = in_force(entries, now)
    if percent is None:
        if key == ALL_COMPONENTS:
            return {}
        result.pop(key, None)
        return result
    seconds = levels.check_seconds(seconds, "sampling")
    result[key] = {"percent": check_percent(percent),
                   "until": None if seconds is None else now + seconds}
    return result


def sampling_percent(sampling: dict[str, dict], component: str) -> float | None:
    """The percentage ``component`` is sampled at under ``sampling`` (in force), or None."""
    entry = sampling.get(component) or sampling.get(ALL_COMPONENTS)
    if entry is None:
        return None
    percent = entry.get("percent")
    try:
        return check_percent(percent)
    except ValueError:
        return None


def is_sampled_component(component: str) -> bool:
    """Whether a component's emits may be sampled: every user component; not the system's
    (the acker's, the checkpoint spout's: their ids begin with two underscores)."""
    return not component.startswith("__")


# ----- following them in a running topology

class LiveSettings:
    """Applies the settings in force to ``runtime`` (a TopologyRuntime) and this process's
    loggers: ``follow`` each new record (a worker's ZooKeeper watch; local mode's changes), and
    a thread of its own reverts what runs out, samples executors that start later, and writes
    the samples to ``samples_file`` (None: memory only, as in local mode)."""

    def __init__(self, runtime: Any, samples_file: Path | None = None,
                 clock: Callable[[], float] = time.time, samples: SampleSink | None = None):
        """``samples``: where the samples go, if not a SampleSink of ``samples_file``."""
        self.runtime = runtime
        self.clock = clock
        self.log_levels = levels.LogLevels()
        self.samples = samples or SampleSink(samples_file)
        self._lock = threading.Lock()
        self._log_levels: dict[str, dict] = {}
        self._sampling: dict[str, dict] = {}
        # Each task sampled now -> its percentage (weak: a removed executor's tasks go).
        self._sampled: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LiveSettings:
        self._thread = threading.Thread(target=self._run, name="live-settings", daemon=True)
        self._thread.start()
        return self

    def follow(self, record: dict) -> None:
        """Apply the ``log_levels`` and ``sampling`` of ``record`` (a topology record, or any
        dict with those keys; missing ones are empty)."""
        with self._lock:
            self._log_levels = dict(record.get(LOG_LEVELS) or {})
            self._sampling = dict(record.get(SAMPLING) or {})
            try:
                self._apply()
            except Exception:   # the caller (a ZooKeeper watch) has its own work to go on with
                log.exception("applying the run-time settings failed; the settings thread "
                              "tries again")
        self._wake.set()

    def record(self) -> dict[str, dict]:
        """The settings last followed, in force now, as a record holds them."""
        now = self.clock()
        with self._lock:
            return {LOG_LEVELS: in_force(self._log_levels, now),
                    SAMPLING: in_force(self._sampling, now)}

    def _apply(self) -> None:
        """With ``_lock`` held: the loggers and the tasks' samplers as the settings in force
        say."""
        now = self.clock()
        self.log_levels.apply({logger: entry["level"]
                               for logger, entry in in_force(self._log_levels, now).items()
                               if entry.get("level") in levels.LEVELS})
        sampling = in_force(self._sampling, now)
        for executor in self.runtime.all_executors():
            for task in executor.tasks:
                component = task.component_id
                if not is_sampled_component(component):
                    continue
                percent = sampling_percent(sampling, component)
                if self._sampled.get(task) == percent:
                    continue
                # Swapping a task's emit is safe from this thread while its executor runs:
                # see _Emitter.sample_with.
                if percent is None:
                    task.sample_with(None)
                    self._sampled.pop(task, None)
                    log.info("%s:%d: tuple sampling off", component, task.task_id)
                else:
                    task.sample_with(Sampler(percent, component, task.task_id, self.samples))
                    self._sampled[task] = percent
                    log.info("%s:%d: sampling %g%% of its emitted tuples", component,
                             task.task_id, percent)

    def _run(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                now = self.clock()
                sampling = in_force(self._sampling, now)
                ends = next_expiry(in_force(self._log_levels, now), sampling)
            tick = SAMPLING_TICK_SECS if sampling else TICK_SECS
            self._wake.wait(tick if ends is None else min(tick, max(0.0, ends - self.clock())))
            self._wake.clear()
            try:
                with self._lock:
                    self._apply()
                self.samples.write()
            except Exception:   # never end the thread: reverts depend on it
                log.exception("applying the run-time settings failed; trying again in %g s",
                              TICK_SECS)
                self._stopping.wait(TICK_SECS)

    def reported_samples(self) -> list[dict]:
        """The newest REPORTED samples of each component made in the last REPORTED_SECS, for
        the worker's metrics report."""
        since = self.clock() - REPORTED_SECS
        return [sample for component in self.samples.components()
                for sample in self.samples.latest(component, REPORTED, since)]

    def latest_samples(self, component: str | None = None, limit: int = KEPT) -> list[dict]:
        return self.samples.latest(component, limit)

    def close(self) -> None:
        """Stop following: the samples made are written, and every logger set is put back."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.samples.write()
        with self._lock:
            self._log_levels, self._sampling = {}, {}
            self.log_levels.apply({})
