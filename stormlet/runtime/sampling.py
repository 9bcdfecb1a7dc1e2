# cython: binding=False
"""Tuple sampling (``stormlet debug``): a share of the tuples a component emits is recorded
while it runs, as Storm's event logger does (its docs/Eventlogging.md): when, which component,
task and stream, the values, the tasks it went to, and the message id and root of a spout's
emit (the roots of a bolt's).

Every emit counts down to its task's next sample (task_collectors.py, ``_Emitter.sample_with``):
off, the count never runs out, and an emit pays a decrement and a test. On, the gaps are drawn
from the geometric distribution, so each emit is sampled with the percentage's probability,
independently, and no emit pays for a random number.

A sample is made on the executor's thread, and only there is anything of the emit read: its
values are copied, cut to a size (``shown_values``), so that a later change to the emitted list,
a huge value or one JSON cannot hold never reaches a reader. It is kept as a tuple of
SAMPLE_FIELDS (a dict of them costs several times as much to make, and most samples are never
read) whose sequences are tuples too: made of plain values only, the garbage collector stops
tracking it at its first pass, so that samples living a while do not make the collector's full
passes come sooner. Readers and the file get it as a dict of lists (``as_dict``). Then it goes
into two bounded buffers and the executor goes on; nothing here blocks or takes a lock:

- the newest KEPT samples of each component, for ``stormlet debug --show`` and the UI;
- samples not yet in the file (at most PENDING; beyond that the oldest are dropped, counted),
  which the settings thread appends to ``samples.jsonl`` in the worker's log directory, one JSON
  object a line, renamed to ``samples.jsonl.1`` once past MAX_FILE_BYTES (one old file kept).

The file takes at most WRITTEN_PER_SEC samples a second: at 1 % of a million emits a second a
worker samples ten thousand a second, and writing each would cost more than all the rest of
sampling, while the file, rotated every few seconds, would hold only the last seconds. Each
writing pass grants the samplers room for what the rate allows until the next (a pass every
SAMPLING_TICK_SECS: live_settings.py), and a sample finding none is counted, not queued; the
memory buffers get every sample.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections import deque
from math import log1p
from pathlib import Path
from time import time as time_now
from typing import Any

log = logging.getLogger(__name__)

# The newest samples kept in memory for each component.
KEPT = 100
# Samples waiting for the file: beyond this the oldest are dropped (the disk is too slow).
PENDING = 10_000
# samples.jsonl is renamed to samples.jsonl.1 (the one old file kept) past this size.
MAX_FILE_BYTES = 16 * 1024 * 1024
# The most samples written to the file a second (see the module docstring): 16 MiB then hold
# the last minutes.
WRITTEN_PER_SEC = 1000
# Dropped samples are logged at most once in this long.
DROPPED_NOTE_SECS = 60.0
# The characters of a sample's values shown: the rest is cut, and the sample says so.
VALUES_CHARS = 1024
# A message id that is not a plain value is shown as its repr, cut to this.
MSG_ID_CHARS = 200
# A list of at most _SHORT values, none of them longer text than _SHORT_CHARS, is within
# VALUES_CHARS however it is written.
_SHORT = 8
_SHORT_CHARS = VALUES_CHARS // _SHORT - 16
# A sample's fields, in the order it holds them; readers get a dict of those that are not None.
SAMPLE_FIELDS = ("time", "component", "task", "stream", "values", "to_tasks", "msg_id", "roots",
                 "note")
_TIME = SAMPLE_FIELDS.index("time")
# What the reader of a truncated sample is told.
CUT_NOTE = f"values cut to {VALUES_CHARS} characters"
BYTES_NOTE = "bytes shown as their repr"


class Sampler:
    """The sampling of one task's emits at ``percent`` (0 < percent <= 100): the collector
    calls ``take`` when its countdown (``gap``) runs out, and counts down anew from what it
    returns. Only the task's executor thread calls it."""

    def __init__(self, percent: float, component: str, task: int, sink: SampleSink,
                 rng: random.Random | None = None):
        self.percent = percent
        self.component = component
        self.task = task
        self.sink = sink
        self._keep = sink.kept(component).append
        self._random = (rng or random.Random(os.urandom(8))).random
        self._log_keep = math.log1p(-percent / 100) if percent < 100 else 0.0

    def gap(self) -> int:
        """How many emits from here to the next sample (1: the next): geometric, so that
        every emit is sampled with probability ``percent`` / 100."""
        log_keep = self._log_keep
        # log(1 - random()), of a number in (0, 1]: finite.
        return int(log1p(-self._random()) / log_keep) + 1 if log_keep else 1

    def take(self, values: Any, stream: str, tasks: list[int], msg_id: Any,
             roots: tuple[int, ...] | None) -> int:
        """Record one emit (``roots``: the tree roots the emitted tuple belongs to, None when
        untracked); the gap to the next sample. (At 1 % of a fast topology's emits this runs
        ten thousand times a second: each step here is counted.)"""
        shown, note = shown_values(values)
        # SAMPLE_FIELDS; roots as ints (see shown_roots).
        sample = (time_now(), self.component, self.task, stream, shown, tuple(tasks),
                  None if msg_id is None else shown_id(msg_id), roots or None, note)
        self._keep(sample)
        sink = self.sink
        pending = sink.pending
        if pending is not None:
            # Interpreted, threads may race on these counts (the file then takes a few more
            # than its room); compiled, each is one C operation under the GIL.
            if sink.room <= 0:
                sink.thinned += 1
            else:
                sink.room -= 1
                if len(pending) == pending.maxlen:
                    sink.dropped += 1
                pending.append(sample)
        log_keep = self._log_keep   # gap(), without its call
        return int(log1p(-self._random()) / log_keep) + 1 if log_keep else 1


def shown_values(values: Any) -> tuple[Any, str | None]:
    """A copy of an emit's ``values`` that JSON holds, and what was changed to make it so (None:
    nothing). Text past VALUES_CHARS in all is cut; bytes become their repr; a float that is
    not finite, or anything else, its repr."""
    if type(values) is list and len(values) <= _SHORT:
        # The usual tuple, a few short words and numbers, is copied as it is.
        for value in values:
            kind = type(value)
            if kind is str:
                if len(value) > _SHORT_CHARS:
                    break
            elif kind is float:
                if not math.isfinite(value):
                    break
            elif kind is not int and value is not None and kind is not bool:
                break
        else:
            return tuple(values), None
    budget = [VALUES_CHARS]
    notes: set[str] = set()
    shown = _shown(values, budget, notes)
    return shown, "; ".join(sorted(notes)) or None


def _shown(value: Any, budget: list[int], notes: set[str]) -> Any:
    if budget[0] <= 0:
        notes.add(CUT_NOTE)
        return "..."
    if value is None or isinstance(value, bool) or type(value) is int:
        budget[0] -= 8
        return value
    if type(value) is float:
        budget[0] -= 8
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return _cut(value, budget, notes)
    if isinstance(value, (bytes, bytearray, memoryview)):
        notes.add(BYTES_NOTE)
        return _cut(repr(bytes(value[:VALUES_CHARS])), budget, notes)
    if isinstance(value, (list, tuple)):
        return [_shown(item, budget, notes) for item in value]
    if isinstance(value, dict):
        return {str(key): _shown(item, budget, notes) for key, item in value.items()}
    return _cut(repr(value), budget, notes)


def _cut(text: str, budget: list[int], notes: set[str]) -> str:
    if len(text) > budget[0]:
        notes.add(CUT_NOTE)
        text = text[:max(0, budget[0])] + "..."
    budget[0] -= len(text)
    return text


def as_dict(sample: tuple) -> dict:
    """A sample as readers get it: its SAMPLE_FIELDS that are not None, sequences as lists."""
    return {name: list(value) if type(value) is tuple else value
            for name, value in zip(SAMPLE_FIELDS, sample) if value is not None}


def shown_roots(sample: dict) -> dict:
    """``sample`` with its roots as 16 hex digits: JSON readers in a browser hold numbers as
    doubles, which cannot hold a 64-bit id (a sample keeps them as ints, cheaper to make and
    exact in Python)."""
    roots = sample.get("roots")
    if not roots or not isinstance(roots, list):
        return sample
    return {**sample, "roots": [f"{root:016x}" if isinstance(root, int) else str(root)
                                for root in roots]}


def shown_id(msg_id: Any) -> Any:
    """A spout's message id as JSON holds it."""
    if msg_id is None or isinstance(msg_id, (bool, int, str)) or (
            type(msg_id) is float and math.isfinite(msg_id)):
        return msg_id if not isinstance(msg_id, str) else msg_id[:MSG_ID_CHARS]
    return repr(msg_id)[:MSG_ID_CHARS]


# One encoder for every line. Samples hold only what JSON can (see shown_values); anything
# else would be written as its repr. json's C encoder is made once: JSONEncoder.encode makes
# one a call, which costs as much as the line (the pure-Python one is the fallback).
# (c_make_encoder is json's private name, absent from its stubs.)
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
if _c_make_encoder is not None:
    _c_encoder = _c_make_encoder(None, repr, json.encoder.encode_basestring_ascii,
                                 None, ":", ",", False, False, False)

    def _encoded(sample: dict) -> str:
        return "".join(_c_encoder(sample, 0))
else:   # pragma: no cover (CPython has the C encoder)
    _encoded = json.JSONEncoder(allow_nan=False, default=repr).encode  # type: ignore[assignment]


class SampleSink:
    """Where a process's samples go: see the module docstring. Samplers append to its deques
    from the executors' threads (any number, no lock: each step is one operation on a deque or
    a dict, atomic in CPython); ``write`` and ``latest`` are other threads'."""

    def __init__(self, path: Path | None = None, keep: int = KEPT, pending: int = PENDING,
                 max_file_bytes: int = MAX_FILE_BYTES,
                 written_per_sec: float | None = WRITTEN_PER_SEC):
        """``written_per_sec`` None: every sample goes to the file."""
        self.path = path
        self.keep = keep   # samples kept in memory per component
        self.max_file_bytes = max_file_bytes
        self.written_per_sec = written_per_sec
        # How many more samples the file takes until the next pass grants more; samplers count
        # it down. A second's worth at most, and to start with.
        self.room = math.inf if written_per_sec is None else written_per_sec
        self._granted_at = time.monotonic()
        self.thinned = 0   # samples left out of the file for want of room
        self._latest: dict[str, deque[tuple]] = {}
        # Samples waiting for the file (None: memory only); Sampler.take appends.
        self.pending: deque[tuple] | None = deque(maxlen=pending) if path is not None else None
        self.dropped = 0   # samples the file never got (approximate: threads race on it)
        self._dropped_said = 0   # the count last logged, and when
        self._dropped_said_at = 0.0
        self._write_failed = False

    def kept(self, component: str) -> deque[tuple]:
        """The newest samples of ``component``, kept in memory."""
        kept = self._latest.get(component)
        if kept is None:
            kept = self._latest.setdefault(component, deque(maxlen=self.keep))
        return kept

    def components(self) -> list[str]:
        """The components that have samples."""
        return list(self._latest)

    def latest(self, component: str | None = None, limit: int = KEPT,
               since: float = 0.0) -> list[dict]:
        """The newest ``limit`` samples (of ``component``, or of all), taken after ``since``
        (epoch seconds), oldest first."""
        groups = ([self._latest.get(component, ())] if component is not None
                  else list(self._latest.values()))
        found = [s for group in groups for s in list(group) if s[_TIME] > since]
        found.sort(key=lambda s: s[_TIME])
        return [as_dict(s) for s in found[-limit:]] if limit > 0 else []

    def write(self) -> int:
        """Append the pending samples to the file (rotating it past its size), and grant the
        samplers room for ``written_per_sec`` a second since the last pass; how many."""
        written = self._write()
        if self.written_per_sec is not None:
            now = time.monotonic()
            elapsed, self._granted_at = now - self._granted_at, now
            self.room = min(self.written_per_sec,
                            max(0, self.room) + self.written_per_sec * elapsed)
        self._note_dropped()
        return written

    def _write(self) -> int:
        pending = self.pending
        if pending is None or not pending:
            return 0
        taken = []
        while pending:
            try:
                taken.append(pending.popleft())
            except IndexError:   # pragma: no cover (only this thread takes)
                break
        lines = []
        for sample in taken:
            try:
                lines.append(_encoded(as_dict(sample)))
            except ValueError:   # pragma: no cover (shown_values made it JSON's)
                continue
        if not lines:
            return 0
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and self.path.stat().st_size >= self.max_file_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            with open(self.path, "a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
            self._write_failed = False
        except OSError as exc:
            self.dropped += len(lines)
            if not self._write_failed:   # one line a run of failures, not one a pass
                self._write_failed = True
                log.warning("could not write tuple samples to %s: %s; they are kept in "
                            "memory only until it works again", self.path, exc)
            return 0
        return len(lines)

    def _note_dropped(self) -> None:
        """One line, at most every DROPPED_NOTE_SECS, when samples were dropped since."""
        now = time.monotonic()
        unwritten = self.dropped + self.thinned
        if unwritten > self._dropped_said and now - self._dropped_said_at >= DROPPED_NOTE_SECS:
            log.warning("%d tuple samples were not written to %s (so far: %d beyond %s a "
                        "second, %d while it could not keep up): a smaller percentage samples "
                        "fewer; the newest of each component are in memory all the same",
                        unwritten, self.path, self.thinned, self.written_per_sec, self.dropped)
            self._dropped_said, self._dropped_said_at = unwritten, now
