"""Where the failed-message log's files live and what they are called: the one place that spells
its paths."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from urllib.parse import quote

from ..durable import fsync_dir

FINAL_SUFFIX = ".parquet"
#: The final files of the first format (JSON Lines): still read, and converted by
#: ``stormlet failed convert``.
LEGACY_SUFFIX = ".jsonl"
#: A writer's journal: the JSON lines of the records since its file began, from which the final
#: file is made (and, after a crash, recovered).
JOURNAL_SUFFIX = ".jsonl.inprogress"
# What follows "<component>-<task>-" in a name: writer start time (UTC), writer id, file sequence.
SESSION_SEQ = r"\d{8}T\d{6}\.\d{3}Z-[0-9a-f]{6}-\d+"


def file_safe(name: str) -> str:
    safe = quote(name, safe="")
    # A leading "." would hide the file from readers (and from Spark), so encode it too.
    return "%2E" + safe[1:] if safe.startswith(".") else safe


def topology_dir(directory: str | os.PathLike, topology: str) -> Path:
    return Path(directory) / file_safe(topology)


def own_inprogress(component: str, task: int) -> re.Pattern[str]:
    prefix = re.escape(f".{file_safe(component)}-{task}-")
    return re.compile(prefix + SESSION_SEQ + re.escape(JOURNAL_SUFFIX))


def is_final(name: str) -> bool:
    return not name.startswith(".") and name.endswith((FINAL_SUFFIX, LEGACY_SUFFIX))


def is_legacy(name: str) -> bool:
    return is_final(name) and name.endswith(LEGACY_SUFFIX)


def is_inprogress(name: str) -> bool:
    return name.startswith(".") and name.endswith(JOURNAL_SUFFIX)


def final_name(journal: str) -> str:
    """The final file a journal becomes."""
    return journal[1:-len(JOURNAL_SUFFIX)] + FINAL_SUFFIX


def utc_stamp(t: float) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def make_dirs(path: Path) -> None:
    """``mkdir -p`` whose new entries survive a crash (each new directory's parent is fsynced)."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for new in reversed(missing):
        try:
            new.mkdir()
        except FileExistsError:
            pass  # made by a writer of another task meanwhile
        fsync_dir(new.parent)


def same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)
