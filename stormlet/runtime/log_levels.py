"""Log levels changed while a topology runs, and put back when their time runs out, as Storm's
``storm set_log_level -l ROOT=DEBUG:30`` does (its docs/dynamic-log-level-settings.md).

A setting names a logger (``ROOT``, or the empty name, for the root logger; otherwise a
``logging`` logger name such as ``myproject.bolts``), a level, and optionally how many seconds it
lasts; without them it lasts until cleared. As in log4j, a level set on a parent reaches every
child logger that has no level of its own.

``LogLevels`` applies the settings in force to this process's loggers. It remembers each
logger's own level from before the first setting touched it, and puts exactly that back when
no setting names the logger any more (cleared, or expired): a logger set to DEBUG and then to
WARNING goes back to what it was before DEBUG, as in Storm.

    levels = LogLevels()
    levels.apply({"ROOT": "DEBUG", "myproject": "WARNING"})   # what is in force now
    levels.apply({})                                         # both back as they were
"""

from __future__ import annotations

import logging
import math
import re
import threading

log = logging.getLogger(__name__)

ROOT = "ROOT"
# The word that clears a logger's setting where a level is expected (LOGGER=CLEAR).
CLEAR = "CLEAR"
# Level names as logging spells them, and log4j's that mean the same (Storm users type them).
LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
          "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}
ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL", "TRACE": "DEBUG", "ALL": "DEBUG"}
# A setting lasts at most this long (30 days): a level is a diagnosis, not a configuration.
MAX_SECONDS = 30 * 24 * 3600.0
# What a logger name may hold: dotted Python identifiers and dashes.
_LOGGER_NAME = re.compile(r"[A-Za-z_][\w\-]*(\.[A-Za-z_][\w\-]*)*")
MAX_LOGGER_CHARS = 200


def check_logger(name: object) -> str:
    """``name`` as settings key it: ``ROOT`` for the root logger (also written ``root`` or
    empty), else the logger's dotted name; ValueError saying what is wrong."""
    if not isinstance(name, str):
        raise ValueError(f"a logger name must be text, got {name!r}")
    name = name.strip()
    if name == "" or name.upper() == ROOT:
        return ROOT
    if len(name) > MAX_LOGGER_CHARS or not _LOGGER_NAME.fullmatch(name):
        raise ValueError(f"{name[:MAX_LOGGER_CHARS]!r} is not a logger name: use ROOT or a "
                         f"dotted name such as myproject.bolts")
    return name


def check_level(level: object) -> str:
    """``level`` as logging names it (``warn`` -> ``WARNING``); ValueError naming the known
    levels."""
    if isinstance(level, str):
        name = level.strip().upper()
        name = ALIASES.get(name, name)
        if name in LEVELS:
            return name
    known = ", ".join([*LEVELS, *ALIASES])
    raise ValueError(f"{level!r} is not a log level: use one of {known} (or {CLEAR} to clear "
                     f"the logger's setting)")


def check_seconds(seconds: object, what: str = "a setting") -> float | None:
    """How long ``what`` lasts: None (until cleared; 0 says the same, as in Storm) or a number
    of seconds up to MAX_SECONDS; ValueError otherwise."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
        raise ValueError(f"{what} lasts 0 (until cleared) to {MAX_SECONDS:.0f} seconds, "
                         f"got {seconds!r}")
    return float(seconds) or None


def parse_setting(text: str) -> tuple[str, str | None, float | None]:
    """``LOGGER=LEVEL[:SECONDS]`` (``ROOT=DEBUG:30``) or ``LOGGER=CLEAR`` as (logger, level or
    None to clear, seconds or None); ValueError saying what is wrong."""
    logger, sep, rest = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r} is not LOGGER=LEVEL[:SECONDS] (ROOT=DEBUG:30) or "
                         f"LOGGER={CLEAR}")
    level, colon, seconds_text = rest.partition(":")
    name = check_logger(logger)
    if level.strip().upper() == CLEAR:
        if colon:
            raise ValueError(f"{text!r}: {CLEAR} takes no seconds")
        return name, None, None
    seconds = None
    if colon:
        try:
            seconds = float(seconds_text)
        except ValueError:
            raise ValueError(f"{text!r}: {seconds_text!r} is not a number of seconds") from None
    return name, check_level(level), check_seconds(seconds, f"the level of {name}")


def python_logger(name: str) -> logging.Logger:
    """The ``logging`` logger a settings key names."""
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


class LogLevels:
    """The levels set on this process's loggers by run-time settings. ``apply`` may be called
    from any thread (ZooKeeper's watch, the settings thread); one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Each logger a setting changed -> its own level before that (logging.NOTSET: none).
        self._original: dict[str, int] = {}

    def apply(self, wanted: dict[str, str]) -> None:
        """Set each logger of ``wanted`` (settings key -> level name) to its level, and put
        back every logger set before that ``wanted`` no longer names."""
        with self._lock:
            for name, level in wanted.items():
                logger = python_logger(name)
                number = LEVELS[level]
                if name not in self._original:
                    self._original[name] = logger.level
                if logger.level != number:
                    logger.setLevel(number)
                    log.info("log level of %s set to %s (its own was %s)", name, level,
                             logging.getLevelName(self._original[name]))
            for name in [n for n in self._original if n not in wanted]:
                original = self._original.pop(name)
                python_logger(name).setLevel(original)
                log.info("log level of %s back to %s", name, logging.getLevelName(original))

    def changed(self) -> dict[str, int]:
        """The loggers set now, with the level each had of its own before."""
        with self._lock:
            return dict(self._original)
