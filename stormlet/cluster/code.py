"""Topology code packages: the topology's project directory, every file of it less what its
``.stormletignore`` and the defaults exclude (``project_files.py`` says which files, and where
relative paths resolve), zipped with a manifest naming the entry file.

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
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from .dependencies import Dependencies
from .project_files import IGNORE_FILE, ProjectError, project_directory, project_files

MAX_PACKAGE_BYTES = 64 * 1024 * 1024
MAX_FILES = 2000
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MANIFEST = "stormlet-manifest.json"
# The manifest's keys: the entry file, and the topology's declared requirements (normalized, see
# dependencies.py) and where they were declared, when it declares any.
ENTRY, REQUIREMENTS, REQUIREMENTS_FROM = "entry", "requirements", "requirements_from"
# How many of the largest files an over-limit refusal names.
LARGEST_SHOWN = 5
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


def package_topology(path: str | Path, dependencies: Dependencies | None = None) -> bytes:
    """Zip every file of ``path``'s project directory that is not ignored (``project_files``);
    the manifest names ``path`` as the entry file, and lists ``dependencies`` (what the project
    declares: ``dependencies.declared``), which nodes install before running it
    (environments.py). ``CodeError`` if the package would be over a limit, naming the limit,
    the size and the largest files."""
    path = Path(path).resolve()
    if not path.is_file():
        raise CodeError(f"{path}: no such file")
    base = project_directory(path)
    try:
        files = project_files(base, MAX_FILES)
    except ProjectError as exc:
        raise CodeError(str(exc)) from None
    entry = path.relative_to(base).as_posix()
    if entry not in {f.name for f in files}:
        raise CodeError(f"{path} is excluded from its own package by {base / IGNORE_FILE} or "
                        f"the defaults; take it back with a line !{entry}")
    if MANIFEST in {f.name for f in files}:
        raise CodeError(f"{base / MANIFEST}: stormlet names a package's manifest so; rename it "
                        f"or list it in {base / IGNORE_FILE}")
    unpacked = sum(f.size for f in files)
    if unpacked > MAX_UNPACKED_BYTES:
        raise CodeError(_over_limit(base, f"unpacks to {_size(unpacked)}", MAX_UNPACKED_BYTES,
                                    [(f.name, f.size) for f in files], ""))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in files:
            archive.write(file.path, file.name)
        # A fixed time (files keep their own): the same code packs to the same bytes, so its
        # digest names one unpacked copy on a backfill's workers, not one per job.
        manifest = zipfile.ZipInfo(MANIFEST, date_time=(1980, 1, 1, 0, 0, 0))
        described: dict[str, Any] = {ENTRY: entry}
        if dependencies is not None:
            described.update({REQUIREMENTS: list(dependencies.requirements),
                              REQUIREMENTS_FROM: dependencies.source})
        archive.writestr(manifest, json.dumps(described), zipfile.ZIP_DEFLATED)
        packed = [(i.filename, i.compress_size) for i in archive.infolist()]
    data = buffer.getvalue()
    if len(data) > MAX_PACKAGE_BYTES:
        raise CodeError(_over_limit(base, f"is {_size(len(data))} compressed", MAX_PACKAGE_BYTES,
                                    packed, " compressed"))
    return data


def _over_limit(base: Path, what: str, limit: int, sizes: list[tuple[str, int]],
                measure: str) -> str:
    """The refusal of a package over ``limit``: its size, its largest files, what to do."""
    largest = sorted(sizes, key=lambda item: (-item[1], item[0]))[:LARGEST_SHOWN]
    listed = ", ".join(f"{name} ({_size(size)})" for name, size in largest)
    return (f"the code package of {base} {what}, over the limit of {_size(limit)}; its largest "
            f"files{measure}: {listed}. List what the workers do not need in "
            f"{base / IGNORE_FILE} (gitignore syntax); large artifacts (a model, a big lookup "
            f"table) belong in the cluster's blob store: `stormlet blob upload KEY FILE`, then "
            f"map KEY to a local name in topology.blobstore.map")


def _size(count: int) -> str:
    """``count`` bytes, for people: 812 bytes, 3.4 KiB, 70.2 MiB."""
    if count < 1024:
        return f"{count} bytes"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1024 * 1024):.1f} MiB"


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
            _keep_executable_bits(archive, directory)
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
        raise CodeError(f"not a stormlet code package: {exc}") from None
    return directory / entry


def package_requirements(directory: str | Path) -> list[str]:
    """The requirements the manifest of the package unpacked in ``directory`` lists (none for a
    topology that declares none); ``CodeError`` if the manifest is malformed."""
    try:
        manifest = json.loads((Path(directory) / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise CodeError(f"cannot read the manifest of the package in {directory}: {exc}") from None
    requirements = manifest.get(REQUIREMENTS, []) if isinstance(manifest, dict) else None
    if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
        raise CodeError(f"the manifest of the package in {directory} lists requirements that "
                        f"are not a list of strings")
    return requirements


def _keep_executable_bits(archive: zipfile.ZipFile, directory: Path) -> None:
    """Make executable for its owner (the workers' user) what was executable when packaged (a
    script the topology runs): ``extractall`` drops every mode bit."""
    for info in archive.infolist():
        mode = info.external_attr >> 16
        if not info.is_dir() and mode & stat.S_IXUSR:
            target = directory / info.filename
            target.chmod(target.stat().st_mode | stat.S_IXUSR)


def inspect_package(entry: Path, timeout: float = INSPECT_TIMEOUT_SECS,
                    overrides: dict[str, Any] | None = None,
                    python: str | Path | None = None) -> dict[str, Any]:
    """Load the topology in a subprocess (the hidden ``stormlet inspect`` command) run by
    ``python`` (the topology's environment's, see environments.py; default: ours) and return its
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
        process = subprocess.Popen([str(python or sys.executable), *INSPECT_COMMAND_ARGS, *limits,
                                    "--overrides-on-stdin", str(entry)],
                                   stdin=given, stdout=out, stderr=err,
                                   cwd=str(project_directory(entry)), env=environment,
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
