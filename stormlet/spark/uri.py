"""What Spark is given for a path: the one rule both jobs follow.

A path without a scheme is a local path (on a cluster: a mount the driver and every executor
share at the same place), never one on Spark's default file system, which a cluster's Hadoop
configuration may set to HDFS. ``hdfs://``, ``s3a://`` and so on are left as they are.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def has_scheme(path: str) -> bool:
    """Whether ``path`` is a URL (``file://`` included) rather than a plain local path."""
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+://", path) is not None


def spark_uri(path: str | os.PathLike) -> str:
    """``path`` for Spark: a local path as a ``file://`` URL, a URL as it is. Not
    percent-encoded: Hadoop parses the path itself, and a glob's ``*`` must stay one."""
    text = os.fspath(path)
    return text if has_scheme(text) else f"file://{Path(text).absolute()}"
