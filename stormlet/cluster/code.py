"""Topology code packages: the topology file and the Python files beside it (a streamparse
project's whole tree), zipped.

Nimbus keeps packages on its own disk (not in ZooKeeper, whose nodes stop at 1 MB) and serves them
to supervisors; the topology's record holds each package's SHA-256, and whoever fetches a package
(a supervisor, a standby nimbus) checks the bytes against it. Nimbus never imports user code
itself: it inspects a package in a subprocess of its own process group, with resource limits and
a clean environment, and kills the group when done.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ..streamparse.project import CONFIG_FILE as PROJECT_CONFIG_FILE
from ..streamparse.project import project_root

MAX_PACKAGE_BYTES = 64 * 1024 * 1024
MAX_FILES = 2000
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MANIFEST = "stormlet-manifest.json"
SKIP_DIRS = {"__pycache__", ".git", ".venv", "venv", "node_modules", ".tox", ".pytest_cache"}
# How nimbus inspects a package: ``python -m stormlet inspect ENTRY`` (cli/inspect.py).
INSPECT_COMMAND_ARGS = ["-m", "stormlet", "inspect"]
INSPECT_TIMEOUT_SECS = 60.0
# The summary line is read from the end of the output; anything before it is the topology's.
MAX_REPORT_BYTES = 8 * 1024 * 1024
# What the inspecting process may use (it applies them to itself before loading the topology).
INSPECT_MEMORY_BYTES = 2 * 1024 * 1024 * 1024
INSPECT_OPEN_FILES = 256
INSPECT_WRITE_BYTES = 16 * 1024 * 1024
# The only variables the inspecting process inherits: enough to find Python and stormlet, none
# of the daemon's own settings (its secret above all).
INSPECT_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV",
                       "STORMLET_PURE_PYTHON")


class CodeError(Exception):
    """A package that cannot be built, read or inspected; the message says why."""


def package_topology(path: str | Path) -> bytes:
    """Zip ``path`` and every .py file under its code root; the manifest names the entry file.

    The code root is the file's directory, or for a streamparse project its root (with its
    ``config.json``, so the project is found again where the package is unpacked)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise CodeError(f"{path}: no such file")
    base = project_root(path) or path.parent
    buffer = io.BytesIO()
    count = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for directory, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            for name in sorted(files):
                full = Path(directory, name)
                if not (name.endswith(".py") or full == base / PROJECT_CONFIG_FILE):
                    continue
                count += 1
                if count > MAX_FILES:
                    raise CodeError(f"{base} holds more than {MAX_FILES} Python files; put the "
                                    f"topology in a directory of its own")
                archive.write(full, full.relative_to(base).as_posix())
        # A fixed time (files keep their own): the same code packs to the same bytes, so its
        # digest names one unpacked copy on a backfill's workers, not one per job.
        manifest = zipfile.ZipInfo(MANIFEST, date_time=(1980, 1, 1, 0, 0, 0))
        archive.writestr(manifest, json.dumps({"entry": path.relative_to(base).as_posix()}),
                         zipfile.ZIP_DEFLATED)
    data = buffer.getvalue()
    if len(data) > MAX_PACKAGE_BYTES:
        raise CodeError(f"code package is {len(data)} bytes, over the {MAX_PACKAGE_BYTES} limit")
    return data


def digest(data: bytes) -> str:
    """The SHA-256 a topology record keeps of its package (hex)."""
    return hashlib.sha256(data).hexdigest()


def verify(data: bytes, expected: str | None, topology_id: str) -> None:
    """Raise ``CodeError`` unless ``data`` is the package whose digest the record holds."""
    if not isinstance(expected, str):
        raise CodeError(f"the record of {topology_id} holds no code digest; refusing its code")
    if digest(data) != expected:
        raise CodeError(f"the code package served for {topology_id} does not match the digest "
                        f"in its record; refusing it")


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
            entry = json.loads(archive.read(MANIFEST))["entry"]
            if (not isinstance(entry, str) or "\\" in entry or ".." in entry.split("/")
                    or entry.startswith("/") or not entry.endswith(".py")
                    or entry not in archive.namelist()):
                raise CodeError(f"the package's manifest names {entry!r} as its entry: not a "
                                f"Python file in the package")
            archive.extractall(directory)
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
        raise CodeError(f"not a stormlet code package: {exc}") from None
    return directory / entry


def inspect_package(entry: Path, timeout: float = INSPECT_TIMEOUT_SECS,
                    overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load the topology in a subprocess (the hidden ``stormlet inspect`` command) and return its
    summary (see ``stormlet.cluster.inspect``), its config checked with ``overrides`` (the
    submit's ``-c`` settings) applied; raise ``CodeError`` with the loader's message if it does
    not load or cannot run with that config. Whatever the topology's code started is killed
    before this returns."""
    try:
        # On stdin, not the command line: any local user may read a command line (a state
        # store's password, say), and its length is limited.
        settings = json.dumps(overrides or {}).encode()
    except (TypeError, ValueError) as exc:
        raise CodeError(f"the submitted config must hold JSON values only ({exc})") from None
    limits = ["--max-memory", str(INSPECT_MEMORY_BYTES), "--max-cpu-secs", str(int(timeout)),
              "--max-open-files", str(INSPECT_OPEN_FILES),
              "--max-write-bytes", str(INSPECT_WRITE_BYTES)]
    environment = {k: os.environ[k] for k in INSPECT_ENVIRONMENT if k in os.environ}
    # Files, not pipes: a process the topology started in the background would hold a pipe open
    # and keep us reading until the time-out.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryFile() as given:
        given.write(settings)
        given.seek(0)
        process = subprocess.Popen([sys.executable, *INSPECT_COMMAND_ARGS, *limits,
                                    "--overrides-on-stdin", str(entry)],
                                   stdin=given, stdout=out, stderr=err,
                                   cwd=str(entry.parent), env=environment,
                                   start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CodeError(f"loading the topology took longer than {timeout:g}s") from None
        finally:
            _kill_group(process)
        stdout, stderr = (_read_text(f, MAX_REPORT_BYTES) for f in (out, err))
    lines = stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
        if not isinstance(report, dict):
            raise ValueError("not a summary")
    except (IndexError, ValueError):
        raise CodeError(f"could not inspect the topology: {stderr.strip()[-500:]}") from None
    if not report.get("ok"):
        raise CodeError(report.get("error", "invalid topology"))
    return report


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the inspection's process group (the process and anything it started) and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _read_text(file: Any, limit: int) -> str:
    """The last ``limit`` bytes written to ``file``, as text."""
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - limit))
    return file.read().decode("utf-8", errors="replace")
