"""The Python daemon of stormlet's Spark jobs (``spark.python.daemon.module``): PySpark's own, run
from the installed PySpark package instead of the ``pyspark.zip`` that Spark puts first on its
workers' path, when both are the same version.

The zip holds only source, so each worker Spark forks compiles the PySpark modules it imports
before it runs its first task (0.3–0.5 s of every job's first stage on this project's 2-core
machine); the installed package has them compiled. A worker with no installed PySpark of the
zip's version runs from the zip, as Spark's own daemon does.
"""

from __future__ import annotations

import importlib.machinery
import re
import runpy
import sys
import zipfile
from pathlib import Path

_VERSION = re.compile(r"""__version__(?:\s*:\s*str)?\s*=\s*['"]([^'"]+)['"]""")


def _version(text: str) -> str | None:
    found = _VERSION.search(text)
    return found.group(1) if found else None


def _zip_version(path: str) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            return _version(archive.read("pyspark/version.py").decode())
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError):
        return None


def _installed_version(path: list[str]) -> str | None:
    spec = importlib.machinery.PathFinder.find_spec("pyspark", path)
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        return _version((Path(spec.submodule_search_locations[0]) / "version.py").read_text())
    except (OSError, UnicodeDecodeError):
        return None


def prefer_installed(path: list[str]) -> list[str]:
    """``path`` with Spark's ``pyspark.zip`` moved after the installed PySpark, when that is the
    zip's version; else ``path`` as it is."""
    zips = [p for p in path if p.endswith("pyspark.zip")]
    rest = [p for p in path if p not in zips]
    if not zips:
        return path
    shipped = _zip_version(zips[0])
    if shipped is None or _installed_version(rest) != shipped:
        return path
    return rest + zips


def main() -> None:
    """Run PySpark's daemon (its arguments, as Spark gave them, stay in ``sys.argv``)."""
    sys.path[:] = prefer_installed(sys.path)
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
