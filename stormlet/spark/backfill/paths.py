"""Paths as a backfill takes them, and where its outputs go.

A path without a scheme is a local path (on a cluster: a mount every worker shares), never one on
Spark's default file system: that is how the driver checked it, so that is what Spark is given
(``spark_uri``). ``hdfs://``, ``s3a://`` and so on are left to Spark. One written stream goes to
the output path itself; several go to ``<output>/<component>/<stream>`` (``output_paths``).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote


def has_scheme(path: str) -> bool:
    """Whether ``path`` is a URL (``file://`` included) rather than a plain local path."""
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+://", path) is not None


def is_glob(path: str) -> bool:
    """Whether ``path`` is a pattern Spark expands (``*``, ``?``, ``[...]``, ``{...}``)."""
    return any(c in path for c in "*?[{")


def absolute(path: str) -> str:
    """A local path made absolute; a URL as it is."""
    return path if has_scheme(path) else str(Path(path).absolute())


def spark_uri(path: str) -> str:
    """What to give Spark for a path: a path without a scheme is a local path (that is how it
    was checked), not one on the cluster's default file system. Not percent-encoded: Hadoop
    parses the path itself, and a glob's ``*`` must stay one."""
    return path if has_scheme(path) else f"file://{Path(path).absolute()}"


def output_paths(output: str, outputs: list[tuple[str, str]]) -> list[str]:
    """Where each written ``(component, stream)`` goes: ``output`` for one, else a directory each,
    their names percent-encoded."""
    if len(outputs) == 1:
        return [output]
    return [f"{output.rstrip('/')}/{quote(c, safe='')}/{quote(s, safe='')}" for c, s in outputs]
