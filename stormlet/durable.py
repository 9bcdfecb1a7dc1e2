"""Making files survive a crash: the two steps every durable write here needs."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: str | os.PathLike) -> None:
    """Make the directory's entries (a rename, a new file) durable, not only the files' data."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old content or the new, never a mix:
    write a private temporary file, fsync it, rename it over ``path``, fsync the directory."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{id(data):x}")
    with open(partial, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    fsync_dir(path.parent)
