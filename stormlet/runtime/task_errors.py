"""One task's errors: every one counted, the first few of each kind logged in full, the rest
summarized, and the recent ones kept (for ``LocalCluster.errors``, heartbeats, ``stormlet
errors``).

A bolt that raises on every tuple at 100,000 tuples a second must not write 100,000 log lines a
second. Errors are alike when they come from the same place (``what``: "execute raised",
"next_tuple raised") with the same exception type. Of each kind, the first ``per_window`` are
logged with their traceback and recorded; later ones are only counted, and once per window a
summary is logged and recorded: "... and N more like it in the last 10 s". A kind that stays
quiet for a whole window starts over (its next error is logged in full again).

    errors = TaskErrors("split", 3)
    errors.report("execute raised", exc, on=tup)   # on the executor's thread
    errors.flush()                                 # now and then (the watchdog does)

The path of an error that is only counted costs a clock read, a lock and a dict lookup: nothing is
formatted (not even the tuple's repr) until it is logged.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

RECENT = 20           # records kept per task
MAX_TEXT = 1000       # characters of an error's message kept in a record
MAX_DETAIL = 4000     # characters of its traceback or stack (the innermost end is kept)
MAX_KINDS = 32        # distinct kinds tracked per task; more share one catch-all kind


@dataclass
class ErrorRecord:
    component: str
    task: int
    time: float
    error: str
    detail: str = ""   # the traceback, or a hung thread's stack


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def clip_tail(text: str, limit: int) -> str:
    """Keep the end: the innermost frames of a traceback say most."""
    return text if len(text) <= limit else "..." + text[-(limit - 3):]


class _Kind:
    __slots__ = ("window_start", "logged", "more", "latest")

    def __init__(self, now: float):
        self.window_start = now
        self.logged = 0
        self.more = 0          # counted, not logged, this window
        self.latest: tuple = ()


class TaskErrors:
    """Errors of one task. ``report`` runs on the task's executor thread; ``note``, ``flush`` and
    ``recent_records`` may run on any thread."""

    def __init__(self, component: str, task: int, window_secs: float = 10.0,
                 per_window: int = 5):
        self.component = component
        self.task = task
        # A zero interval would log a summary per error: the very flood this is here to stop.
        self.window_secs = max(0.1, float(window_secs))
        self.per_window = int(per_window)
        self.count = 0   # every error, logged or not
        self.recent: deque[ErrorRecord] = deque(maxlen=RECENT)
        # (what, the error's type); ("", None) holds every kind past MAX_KINDS.
        self._kinds: dict[tuple[str, type | None], _Kind] = {}
        self._lock = threading.Lock()

    def report(self, what: str, error: BaseException | str, on: Any = None) -> None:
        """An error at ``what`` (a fixed phrase such as "execute raised"), optionally ``on`` the
        tuple being processed."""
        now = time.monotonic()
        key: tuple[str, type | None] = (what, type(error))
        with self._lock:
            self.count += 1
            kind = self._kinds.get(key)
            if kind is None:
                if len(self._kinds) >= MAX_KINDS:
                    key = ("", None)
                    kind = self._kinds.get(key)
                if kind is None:
                    kind = self._kinds[key] = _Kind(now)
            summary = None
            if now - kind.window_start >= self.window_secs:
                summary = self._close_window(kind, now)
            if kind.logged >= self.per_window:
                kind.more += 1
                kind.latest = (what, error, on)
                if summary is None:
                    return
                full = False
            else:
                kind.logged += 1
                full = True
        if summary is not None:
            self._summarize(*summary)
        if full:
            text = _text(what, error, on)
            detail = _traceback(error)
            self._keep(text, detail)
            log.error("%s task %d: %s%s", self.component, self.task, text,
                      "\n" + detail if detail else "")

    def note(self, text: str, detail: str = "", level: int | None = logging.ERROR,
             counted: bool = True) -> None:
        """Record one event as it is, never throttled: a hang, its end, a dead executor. It is
        logged at ``level`` (None: the caller logs it) as it is, so ``text`` should name the
        component and task. ``counted`` says whether it adds to the error count."""
        with self._lock:
            if counted:
                self.count += 1
        self._keep(clip(text, MAX_TEXT), clip_tail(detail, MAX_DETAIL))
        if level is not None:
            log.log(level, "%s%s", text, "\n" + detail if detail else "")

    def flush(self, now: float | None = None, everything: bool = False) -> None:
        """Log the summaries of windows that ended (with ``everything``, of every window: the
        task is stopping), and forget kinds that went quiet."""
        now = time.monotonic() if now is None else now
        summaries = []
        with self._lock:
            for key, kind in list(self._kinds.items()):
                if now - kind.window_start < self.window_secs and not everything:
                    continue
                if kind.more:
                    summaries.append(self._close_window(kind, now))
                else:
                    del self._kinds[key]
        for summary in summaries:
            if summary is not None:   # never: a kind with more always has a summary
                self._summarize(*summary)

    def recent_records(self) -> list[ErrorRecord]:
        with self._lock:
            return list(self.recent)

    # ----- inside

    def _close_window(self, kind: _Kind, now: float) -> tuple | None:
        """End ``kind``'s window (holding the lock): what to summarize, if anything was only
        counted. A window with nothing counted means the kind went quiet: it starts over."""
        summary = None
        if kind.more:
            summary = (kind.more, now - kind.window_start, kind.latest)
        else:
            kind.logged = 0
        kind.window_start = now
        kind.more = 0
        kind.latest = ()
        return summary

    def _summarize(self, more: int, secs: float, latest: tuple) -> None:
        text = f"{_text(*latest)} ... and {more} more like it in the last {secs:.0f} s"
        self._keep(clip(text, MAX_TEXT), "")
        log.error("%s task %d: %s", self.component, self.task, text)

    def _keep(self, text: str, detail: str) -> None:
        with self._lock:
            self.recent.append(ErrorRecord(self.component, self.task, time.time(), text, detail))


def _text(what: str, error: BaseException | str, on: Any = None) -> str:
    where = what if on is None else f"{what} on {clip(repr(on), 200)}"
    if isinstance(error, BaseException):
        return clip(f"{where}: {type(error).__name__}: {error}", MAX_TEXT)
    return clip(f"{where}: {error}", MAX_TEXT)


def _traceback(error: BaseException | str) -> str:
    if not isinstance(error, BaseException) or error.__traceback__ is None:
        return ""
    return clip_tail("".join(traceback.format_exception(error)).rstrip(), MAX_DETAIL)
