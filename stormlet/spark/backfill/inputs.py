"""The dataset a backfill reads, checked on the driver before any Spark starts: where it is, which
format it holds (``auto`` settled by what is there or by the name), and whether its records can
fill the stream of the spout it replaces. What is checked here fails with one line naming the
path or the fields, before a session starts; what only Spark can reach (URLs, globs) is left to
it, and a failure there is reported in one line too (``errors.spark_failure_message``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...sources.partitioned_log import METADATA, LogError, PartitionedLog
from ..uri import has_scheme
from .errors import BackfillError
from .formats import (
    FORMATS,
    JSONL,
    JSONL_SUFFIXES,
    LOG,
    LOG_FIELDS,
    TEXT,
    default_translate,
    log_translate,
)
from .paths import is_glob
from .text_ranges import COMPRESSED_SUFFIXES


@dataclass(frozen=True)
class InputOptions:
    """Where the dataset is and what it holds (``format``: auto, log, text or jsonl)."""

    path: str
    format: str = "auto"


@dataclass(frozen=True)
class InputSpec:
    """The dataset standing in for one spout stream, as checked: what the input's runner on the
    workers reads."""

    kind: str         # LOG, TEXT or JSONL
    path: str
    stream: str
    #: A local text or JSON Lines input's files and their sizes, when the workers read them by
    #: byte ranges (``text_ranges``); empty when Spark's ``textFile`` reads the input.
    files: tuple[tuple[str, int], ...] = ()


def resolve_input(options: InputOptions, spout_stream: str) -> InputSpec:
    """Check a local input before any Spark starts, and settle its format. Paths with a scheme
    (``hdfs://``, ``s3a://``) and globs are left to Spark."""
    path, kind = options.path, options.format
    if kind not in FORMATS:
        raise BackfillError(f"unknown input format {kind!r} (choose from {', '.join(FORMATS)})")
    remote = has_scheme(path) and not path.startswith("file://")
    if remote or is_glob(path):
        if kind == LOG:
            raise BackfillError(f"{path}: a partitioned log must be a local (or shared) "
                                f"directory, not a URL or a pattern")
        if kind == "auto":
            kind = JSONL if path.lower().endswith(JSONL_SUFFIXES) else TEXT
        return InputSpec(kind, path, spout_stream)
    local = Path(path.removeprefix("file://")).absolute()
    if not local.exists():
        raise BackfillError(f"input {local}: no such file or directory")
    is_log = local.is_dir() and (local / METADATA).exists()
    if kind == "auto":
        kind = LOG if is_log else (JSONL if local.name.lower().endswith(JSONL_SUFFIXES)
                                   else TEXT)
    if kind == LOG:
        try:
            PartitionedLog(local).close()
        except LogError as exc:
            raise BackfillError(f"input {exc}") from None
    elif is_log:
        raise BackfillError(f"input {local} is a stormlet partitioned log, not {kind} files: "
                            f"use --format log (or auto)")
    else:
        files = [local] if local.is_file() else [
            p for p in sorted(local.rglob("*")) if p.is_file()
            and not any(part.startswith((".", "_")) for part in p.relative_to(local).parts)]
        if not files:
            raise BackfillError(f"input {local}: the directory holds no files")
        for p in files:
            if not os.access(p, os.R_OK):
                raise BackfillError(f"input {p}: not readable (permission denied)")
        # Read by ranges what textFile would read as it is: the files directly in the path
        # (it does not recurse), none compressed.
        if all(p.parent == local or p == local for p in files) and not any(
                p.name.lower().endswith(COMPRESSED_SUFFIXES) for p in files):
            return InputSpec(kind, str(local), spout_stream,
                             tuple((str(p), p.stat().st_size) for p in files))
    return InputSpec(kind, str(local), spout_stream)


def check_input_fields(spec: Any, stream: str, source: InputSpec) -> None:
    """Refuse a dataset that cannot fill the spout's stream, naming the fields."""
    fields = list(spec.streams[stream].fields)
    where = f"spout {spec.id!r} stream {stream!r} has fields {fields}"
    if source.kind == TEXT and len(fields) != 1:
        raise BackfillError(f"{where}; a text input fills exactly one field: give JSON Lines "
                            f"(--format jsonl) with those fields")
    # A spout without a translate of its own gets each log record as LOG_FIELDS.
    if source.kind == LOG and log_translate(spec) is default_translate \
            and len(fields) != len(LOG_FIELDS):
        raise BackfillError(f"{where}; a log input gives {len(LOG_FIELDS)} values "
                            f"{list(LOG_FIELDS)} per record: give text or JSON Lines instead")

