"""How workers and daemons write their logs: files rotated by size, every line of a worker naming
the topology, component and task that logged it, as text for people or JSON lines for shippers.

    log_worker(log_dir, LogSettings.from_conf(conf), topology_id, "host:6700")   # a worker
    log_daemon("nimbus", data_dir, settings)                                      # a daemon

A worker writes ``worker.log`` in its directory (log_files.py), rotated at
``stormlet.log.max.bytes`` with ``stormlet.log.backups`` kept, and nothing else: its stdout and
stderr are the logger's too (``stdout`` and ``stderr`` loggers, as Storm's workers have them),
so a component's ``print`` lands in the log naming that component, and an uncaught exception
is one record with its traceback (the ``uncaught`` logger's). What bypasses Python's
streams (a C library writing to fd 2, the interpreter dying) goes to ``worker.out``, where the
supervisor redirects the process's output and keeps it bounded (node_service.py). A daemon
writes ``<data dir>/logs/<role>.log``, rotated the same way, besides stderr.

A worker's text line::

    2026-11-30T10:00:00.123+01:00 INFO [wordcount-1764493200-a1b2c3 split 4] app.split: hello

its context in brackets: topology id, component, task (``4-6`` for an executor running tasks 4
to 6), ``-`` where the line has none (the worker's own threads name no component). The JSON
form has the same fields (``time``, ``epoch``, ``level``, ``logger``, ``message``, ``topology``,
``component``, ``task``, ``worker``, ``thread``, ``exception``). ``parse_head`` reads both back:
readers (node_service.py, ``stormlet logs``) filter on them.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any, NamedTuple

from .. import config as cfg
from ..runtime import log_context
from .log_files import daemon_log_file, worker_log_file

# The options that carry LogSettings to a worker (its supervisor passes them) and a daemon.
LOG_DIR_OPTION = "--log-dir"
LOG_FORMAT_OPTION = "--log-format"
LOG_MAX_BYTES_OPTION = "--log-max-bytes"
LOG_BACKUPS_OPTION = "--log-backups"
# What a line's context shows for a field it does not have.
NONE = "-"
# A partial line a worker's stdout or stderr holds before it is logged anyway (a progress bar
# printed without newlines would otherwise grow without bound).
MAX_PARTIAL_LINE = 64 * 1024


@dataclass(frozen=True)
class LogSettings:
    """How large a log file grows before it is rotated, how many rotated ones are kept, and in
    which format lines are written (config.py's stormlet.log.* settings)."""

    max_bytes: int = cfg.DEFAULTS[cfg.STORMLET_LOG_MAX_BYTES].default
    backups: int = cfg.DEFAULTS[cfg.STORMLET_LOG_BACKUPS].default
    format: str = cfg.DEFAULTS[cfg.STORMLET_LOG_FORMAT].default

    def __post_init__(self) -> None:
        found = [cfg.problem(key, value) for key, value in self._as_conf().items()]
        wrong = [text for text in found if text]
        if wrong:
            raise ValueError("; ".join(wrong))

    @classmethod
    def from_conf(cls, conf: dict | None) -> LogSettings:
        """A topology's (its defaults where it sets none); ``ValueError`` naming a bad key."""
        merged = cfg.merged(conf)
        return cls(int(merged[cfg.STORMLET_LOG_MAX_BYTES]), int(merged[cfg.STORMLET_LOG_BACKUPS]),
                   merged[cfg.STORMLET_LOG_FORMAT])

    def _as_conf(self) -> dict[str, Any]:
        return {cfg.STORMLET_LOG_MAX_BYTES: self.max_bytes,
                cfg.STORMLET_LOG_BACKUPS: self.backups, cfg.STORMLET_LOG_FORMAT: self.format}

    def options(self) -> list[str]:
        """These settings as a worker's (or daemon's) command-line options."""
        return [LOG_FORMAT_OPTION, self.format, LOG_MAX_BYTES_OPTION, str(self.max_bytes),
                LOG_BACKUPS_OPTION, str(self.backups)]


# ----- who logged a line


class ContextFilter(logging.Filter):
    """Gives each record ``topology``, ``component`` and ``task`` (empty where unknown) from the
    executor its thread runs (runtime/log_context.py), and ``worker`` ("host:port"). A filter on
    the handler, so that it sees every logger's records."""

    def __init__(self, topology: str = "", worker: str = ""):
        super().__init__()
        self.topology = topology
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        context = log_context.current()
        if context is None:
            record.topology, record.component, record.task = self.topology, "", ""
        else:
            record.topology = context.topology or self.topology
            record.component, record.task = context.component, context.tasks
        record.worker = self.worker
        return True


def iso_time(epoch: float) -> str:
    """``epoch`` as ISO 8601 in local time with its UTC offset, to the millisecond: a reader on
    another host in another zone reads the same instant."""
    return datetime.fromtimestamp(epoch, timezone.utc).astimezone().isoformat(
        timespec="milliseconds")


def _token(value: object) -> str:
    """A context field as one word of a text line."""
    text = str(value or "")
    return re.sub(r"\s", "_", text) if text else NONE


class TextFormatter(logging.Formatter):
    """``TIME LEVEL [TOPOLOGY COMPONENT TASK] LOGGER: MESSAGE``; without ``context`` (a
    daemon's), ``TIME LEVEL LOGGER: MESSAGE``."""

    def __init__(self, context: bool = True):
        middle = "[%(context_text)s] " if context else ""
        super().__init__(f"%(asctime)s %(levelname)s {middle}%(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_time(record.created)

    def format(self, record: logging.LogRecord) -> str:
        record.context_text = " ".join(_token(getattr(record, key, ""))
                                       for key in ("topology", "component", "task"))
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback is its ``exception`` field)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": iso_time(record.created), "epoch": round(record.created, 3),
                 "level": record.levelname, "logger": record.name,
                 "message": record.getMessage(),
                 "topology": getattr(record, "topology", "") or None,
                 "component": getattr(record, "component", "") or None,
                 "task": getattr(record, "task", "") or None,
                 "worker": getattr(record, "worker", "") or None,
                 "thread": record.threadName}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(settings: LogSettings, context: bool = True) -> logging.Formatter:
    return JsonFormatter() if settings.format == "json" else TextFormatter(context)


def rotating_handler(path: Path, settings: LogSettings) -> RotatingFileHandler:
    """A handler writing ``path``, rotated (``path.1`` ... ``path.N``) at the settings' size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return RotatingFileHandler(path, maxBytes=settings.max_bytes, backupCount=settings.backups,
                               encoding="utf-8")


# ----- setting a process up


def log_worker(log_dir: Path, settings: LogSettings, topology_id: str, worker: str) -> None:
    """Send this worker process's logging, its warnings, and what it writes to ``sys.stdout``
    and ``sys.stderr``, to ``worker.log`` in ``log_dir``, each line naming who logged it."""
    handler = rotating_handler(worker_log_file(log_dir), settings)
    handler.addFilter(ContextFilter(topology_id, worker))
    handler.setFormatter(formatter(settings))
    root = logging.getLogger()
    for old in list(root.handlers):   # basicConfig's, to stderr
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    logging.captureWarnings(True)
    sys.stdout = LineWriter(logging.getLogger("stdout"), logging.INFO, sys.__stdout__)
    sys.stderr = LineWriter(logging.getLogger("stderr"), logging.WARNING, sys.__stderr__)
    # An uncaught exception is one record, its traceback under it, rather than a line a record
    # through sys.stderr: a reader's filter keeps or leaves the traceback whole.
    threading.excepthook = _log_thread_exception
    sys.excepthook = _log_exception


UNCAUGHT = logging.getLogger("uncaught")


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return   # as Python's own hook: a thread's way to end
    name = args.thread.name if args.thread is not None else "?"
    # (exc_value may be None, which logging's traceback formats as well.)
    UNCAUGHT.error("uncaught exception in thread %s", name,
                   exc_info=(args.exc_type,  # type: ignore[arg-type]
                             args.exc_value, args.exc_traceback))


def _log_exception(exc_type: type[BaseException], value: BaseException, tb: Any) -> None:
    """The main thread's: logged, and written to the process's own stderr (worker.out) too,
    where a process's last words are looked for when its log says nothing."""
    UNCAUGHT.critical("uncaught exception", exc_info=(exc_type, value, tb))
    if sys.__stderr__ is not None:
        traceback.print_exception(exc_type, value, tb, file=sys.__stderr__)


def log_daemon(role: str, data_dir: Path, settings: LogSettings) -> Path:
    """Also write this daemon's log to ``<data_dir>/logs/<role>.log``, rotated; returns the
    path. Its other handlers (stderr) stay."""
    path = daemon_log_file(data_dir, role)
    handler = rotating_handler(path, settings)
    handler.setFormatter(formatter(settings, context=False))
    logging.getLogger().addHandler(handler)
    return path


class LineWriter:
    """A text stream whose complete lines become log records of ``logger`` at ``level``: a
    worker's ``sys.stdout`` and ``sys.stderr``. Each thread's partial line is kept apart, so
    two threads printing at once do not mix their words. ``fileno()`` is the real stream's, for
    what writes to the descriptor itself (faulthandler): that reaches ``worker.out``."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, logger: logging.Logger, level: int, stream: Any):
        self.logger = logger
        self.level = level
        self.stream = stream
        self._local = threading.local()

    def write(self, text: str) -> int:
        local = self._local
        if getattr(local, "writing", False):
            # Logging failed and reports it on stderr, which is us: to the real stream.
            if self.stream is not None:
                self.stream.write(text)
            return len(text)
        local.writing = True
        try:
            pending = getattr(local, "pending", "") + text
            *lines, pending = pending.split("\n")
            if len(pending) > MAX_PARTIAL_LINE:
                lines.append(pending)
                pending = ""
            local.pending = pending
            for line in lines:
                self.logger.log(self.level, "%s", line.rstrip("\r"))
        finally:
            local.writing = False
        return len(text)

    def flush(self) -> None:
        """Nothing: a line is logged once complete (a partial one waits for its end)."""

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self.stream is None:
            raise OSError("no underlying stream")
        return self.stream.fileno()


# ----- reading lines back


class Head(NamedTuple):
    """What the first line of a record says: when (epoch seconds), its level, and who logged
    it ("" where it does not say)."""

    time: float
    level: str
    topology: str
    component: str
    task: str


_TEXT_HEAD = re.compile(
    r"(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)?) "
    r"(?P<level>[A-Z]+) (?:\[(?P<topology>\S+) (?P<component>\S+) (?P<task>\S+)\] )?")


def parse_head(line: str) -> Head | None:
    """The head of a record if ``line`` begins one (a text line as TextFormatter writes it, or a
    JSON line); None for a line that continues one (a traceback's, a message's next line)."""
    if line.startswith("{"):
        # A JSON line is a whole record (a log line of JsonFormatter's, a sample): its time is
        # its "epoch", or a numeric "time".
        try:
            entry = json.loads(line)
        except ValueError:
            return None
        if not isinstance(entry, dict):
            return None
        when = entry.get("epoch", entry.get("time"))
        return Head(float(when) if isinstance(when, (int, float)) else 0.0,
                    str(entry.get("level") or ""), str(entry.get("topology") or ""),
                    str(entry.get("component") or ""), str(entry.get("task") or ""))
    match = _TEXT_HEAD.match(line)
    if match is None:
        return None
    try:
        when = datetime.fromisoformat(match["time"])
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.astimezone()
    fields = [match[k] or "" for k in ("topology", "component", "task")]
    return Head(when.timestamp(), match["level"], *("" if f == NONE else f for f in fields))


def component_token(component: str) -> str:
    """``component`` as a text line shows it: what a filter on it compares with."""
    return _token(component)


def task_in(task_field: str, task: int) -> bool:
    """Whether a line's task field ("4", or "4-6" for an executor of several) covers ``task``."""
    first, _, last = task_field.partition("-")
    try:
        return int(first) <= task <= int(last or first)
    except ValueError:
        return False
