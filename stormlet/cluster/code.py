"""Topology code packages: the topology file and the Python files beside it, zipped.

Nimbus keeps packages on its own disk (not in ZooKeeper, whose nodes stop at 1 MB) and serves them
to supervisors. Nimbus never imports user code itself: it inspects a package in a subprocess.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

MAX_PACKAGE_BYTES = 64 * 1024 * 1024
MAX_FILES = 2000
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MANIFEST = "stormlet-manifest.json"
SKIP_DIRS = {"__pycache__", ".git", ".venv", "venv", "node_modules", ".tox", ".pytest_cache"}
# How nimbus inspects a package: ``python -m stormlet inspect ENTRY`` (cli/inspect.py).
INSPECT_COMMAND_ARGS = ["-m", "stormlet", "inspect"]


class CodeError(Exception):
    """A package that cannot be built, read or inspected; the message says why."""


def package_topology(path: str | Path) -> bytes:
    """Zip ``path`` and every .py file under its directory; the manifest names the entry file."""
    path = Path(path).resolve()
    if not path.is_file():
        raise CodeError(f"{path}: no such file")
    base = path.parent
    buffer = io.BytesIO()
    count = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for directory, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                count += 1
                if count > MAX_FILES:
                    raise CodeError(f"{base} holds more than {MAX_FILES} Python files; put the "
                                    f"topology in a directory of its own")
                full = Path(directory, name)
                archive.write(full, full.relative_to(base).as_posix())
        archive.writestr(MANIFEST, json.dumps({"entry": path.name}))
    data = buffer.getvalue()
    if len(data) > MAX_PACKAGE_BYTES:
        raise CodeError(f"code package is {len(data)} bytes, over the {MAX_PACKAGE_BYTES} limit")
    return data


def unpack(data: bytes, directory: str | Path) -> Path:
    """Extract a package into ``directory``; return the entry file's path."""
    directory = Path(directory)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_FILES + 1 or sum(i.file_size for i in infos) > MAX_UNPACKED_BYTES:
                raise CodeError(f"code package unpacks to more than {MAX_FILES} files or "
                                f"{MAX_UNPACKED_BYTES} bytes")
            base = directory.resolve()
            for member in archive.namelist():
                if not (directory / member).resolve().is_relative_to(base):
                    raise CodeError(f"code package member {member!r} escapes its directory")
            archive.extractall(directory)
            entry = json.loads(archive.read(MANIFEST))["entry"]
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
        raise CodeError(f"not a stormlet code package: {exc}") from None
    return directory / entry


def inspect_package(entry: Path, timeout: float = 60.0) -> dict[str, Any]:
    """Load the topology in a subprocess (the hidden ``stormlet inspect`` command) and return its
    summary (see ``stormlet.cluster.inspect``); raise ``CodeError`` with the loader's message if
    it does not load."""
    try:
        result = subprocess.run([sys.executable, *INSPECT_COMMAND_ARGS, str(entry)],
                                capture_output=True, text=True, timeout=timeout,
                                cwd=str(entry.parent))
    except subprocess.TimeoutExpired:
        raise CodeError(f"loading the topology took longer than {timeout:g}s") from None
    lines = result.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise CodeError(f"could not inspect the topology: {result.stderr.strip()[-500:]}") from None
    if not report.get("ok"):
        raise CodeError(report.get("error", "invalid topology"))
    return report
