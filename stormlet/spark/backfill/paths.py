"""Paths as a backfill takes them, and where its outputs go.

A path without a scheme is a local path (on a cluster: a mount every worker shares), never one on
Spark's default file system: that is how the driver checked it, so that is what Spark is given
(``stormlet.spark.uri``). ``hdfs://``, ``s3a://`` and so on are left to Spark. One written stream
goes to the output path itself; several go to ``<output>/<component>/<stream>`` (``output_paths``).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from ..uri import has_scheme


def is_glob(path: str) -> bool:
    """Whether ``path`` is a pattern Spark expands (``*``, ``?``, ``[...]``, ``{...}``)."""
    return any(c in path for c in "*?[{")


def absolute(path: str) -> str:
    """A local path made absolute; a URL as it is."""
    return path if has_scheme(path) else str(Path(path).absolute())


def output_paths(output: str, outputs: list[tuple[str, str]]) -> list[str]:
    """Where each written ``(component, stream)`` goes: ``output`` for one, else a directory each,
    their names percent-encoded."""
    if len(outputs) == 1:
        return [output]
    return [f"{output.rstrip('/')}/{quote(c, safe='')}/{quote(s, safe='')}" for c, s in outputs]
