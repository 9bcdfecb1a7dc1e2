"""Python environments for topologies that declare dependencies (``dependencies.py``): on each
node, one virtualenv per distinct dependency set, built once, shared by every topology and
worker that needs that set, and removed once nobody has used it for a while. Nimbus builds a
submission's environment to inspect the topology in it; a supervisor builds it (in the
background) before starting the topology's workers with its ``bin/python``. A topology that
declares no dependencies runs in the daemon's own environment, with its ``sys.executable``.

    environments = Environments(EnvironmentSettings(directory=Path("/var/cache/stormlet/envs")))
    spec = package_spec(unpacked_code_directory)      # None: no dependencies declared
    environment = environments.ensure(spec)            # builds once, or reuses; BuildError
    subprocess.run([environment.python, "-m", "stormlet", "worker", ...])

**The key** naming an environment is the SHA-256 of what decides its contents: the normalized
requirements (``dependencies.normalize``), the SHA-256 of each wheel the topology ships in
``wheels/``, the Python (version, implementation, and ``sys.prefix``: the daemon's environment
it layers on) and stormlet's version. An unpinned requirement is resolved when a node first
builds its environment, and stays so while that environment lives: pin what must not move.

**Layering.** ``python -m venv --without-pip`` from the daemon's interpreter, without system
site-packages, and a ``.pth`` file in its site-packages that adds the daemon's own
site-packages directories after its own (``site.addsitedir``, so that their ``.pth`` files,
editable installs included, are read too). So stormlet and its dependencies import from the
daemon's environment; what the topology installs comes first and wins over the daemon's
versions; and pip, run in the environment (the daemon's own pip, found through the same
``.pth``), installs into it only and leaves alone what lies outside it (it says "Not
uninstalling ..., outside environment"). A topology's dependencies therefore never touch the
daemon's environment, and two topologies that pin two versions of a package get two
environments side by side. (Ray's ``runtime_env`` clones the virtualenv its daemon runs in, or
inherits the system site-packages; the ``.pth`` reaches the daemon's packages in both cases
without copying them.)

**On disk**, under the environments directory (``EnvironmentSettings.directory``), which is
node-wide by default so that every daemon on a host shares it:

    <key>.lock                      flock'd while the environment is looked up, built or removed
    <key>/                          the virtualenv; bin/python is what workers and inspections run
    <key>/requirements.txt          what was installed
    <key>/build.log                 pip's output
    <key>/stormlet-environment.json written last: the environment is complete
    <key>/last-used                 its mtime: when a daemon last started or kept a worker with it
    .removing-<key>-<random>/       one being removed

**Locking.** A daemon takes ``<key>.lock`` (``flock``: it excludes two processes, and two
threads of one process alike) before it looks at an environment, and builds while holding it;
the marker is written last. Another daemon that wants the same key meanwhile waits for the
lock, then finds the environment complete: a host builds each environment once. A build that
was interrupted (its daemon killed) left no marker, and the next one starts it again.

**Cleanup.** ``remove_unused`` removes an environment whose ``last-used`` is older than the TTL.
It takes the lock without waiting (an environment being built or looked up is skipped) and
checks the time again under it, so a daemon that has just touched an environment keeps it. A
supervisor touches the environments of its running workers every ``TOUCH_SECS``: one in use
never looks unused.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import site
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..version import __version__
from .code import CodeError, package_requirements
from .dependencies import WHEELS_DIR, DependencyError, normalize
from .security import SECRET_FILE_ENV, WORKER_CREDENTIALS_ENV

log = logging.getLogger(__name__)

# Where environments live unless a daemon is told otherwise: one directory per user and host.
DIRECTORY_ENV = "STORMLET_ENVIRONMENTS_DIR"
DEFAULT_TTL_SECS = 24 * 3600.0
# The value of --pip-index-url that means "no index": only wheels shipped with the topology
# and --pip-find-links.
NO_INDEX = "none"
BUILD_TIMEOUT_SECS = 900.0
MARKER = "stormlet-environment.json"
LAST_USED = "last-used"
BUILD_LOG = "build.log"
REQUIREMENTS = "requirements.txt"
BASE_PTH = "_stormlet_daemon_site.pth"
REMOVING_PREFIX = ".removing-"
# How much of pip's output a failed build's message quotes: its last lines, where pip says why.
PIP_MESSAGE_LINES = 12
# A supervisor keeps its workers' environments from looking unused this often, and looks for
# unused ones this often.
TOUCH_SECS = 60.0
CLEAN_SECS = 600.0
# After a failed build, a supervisor tries again after this long, doubling up to the maximum.
RETRY_SECS = 60.0
MAX_RETRY_SECS = 900.0
# Changes when the layout or layering changes: older environments are then not reused.
LAYOUT_VERSION = 1


class BuildError(Exception):
    """An environment that could not be built; the message ends with pip's last lines."""


def default_directory() -> Path:
    """``$STORMLET_ENVIRONMENTS_DIR``, else ``$XDG_CACHE_HOME/stormlet/environments`` (by
    default ``~/.cache/stormlet/environments``)."""
    configured = os.environ.get(DIRECTORY_ENV)
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "stormlet" / "environments"


@dataclass(frozen=True)
class EnvironmentSettings:
    """A node's settings for environments (the daemons' options of the same names):

    - ``directory``: where they are kept (``--environments-dir``);
    - ``ttl``: seconds unused before one is removed (``--environment-ttl``);
    - ``index_url``: the package index pip installs from (``--pip-index-url``): None leaves it
      to pip's own configuration on the node (``PIP_INDEX_URL``, ``pip.conf``), ``"none"``
      means no index at all (only the topology's ``wheels/`` and ``find_links``);
    - ``find_links``: more directories or URLs of wheels (``--pip-find-links``).
    """

    directory: Path = field(default_factory=default_directory)
    ttl: float = DEFAULT_TTL_SECS
    index_url: str | None = None
    find_links: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.ttl > 0:
            raise ValueError(f"the environment TTL must be a positive number of seconds, got "
                             f"{self.ttl!r}")

    def pip_options(self) -> list[str]:
        options = []
        if self.index_url == NO_INDEX:
            options.append("--no-index")
        elif self.index_url:
            options += ["--index-url", self.index_url]
        for link in self.find_links:
            options += ["--find-links", link]
        return options


@dataclass(frozen=True)
class EnvironmentSpec:
    """What an environment holds: normalized requirements and the wheels shipped with the
    topology, as (file name, SHA-256), found in ``wheel_dir``."""

    requirements: tuple[str, ...]
    wheels: tuple[tuple[str, str], ...] = ()
    wheel_dir: Path | None = None

    @property
    def key(self) -> str:
        identity = {"requirements": sorted(set(self.requirements)),
                    "wheels": sorted(self.wheels), "python": sys.version,
                    "implementation": sys.implementation.name, "base": sys.prefix,
                    "stormlet": __version__, "layout": LAYOUT_VERSION}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def package_spec(directory: str | Path) -> EnvironmentSpec | None:
    """The environment the code package unpacked in ``directory`` declares: the requirements
    in its manifest and the wheels in its ``wheels/``; None when it declares none."""
    directory = Path(directory)
    try:
        requirements = package_requirements(directory)
    except CodeError as exc:
        raise BuildError(str(exc)) from None
    if not requirements:
        return None
    for requirement in requirements:
        # Written by whoever submitted the package: one requirement each, nothing pip would
        # read as an option (a line break, say).
        try:
            if normalize(requirement, "the package's manifest") != requirement:
                raise DependencyError(f"the package's manifest lists {requirement!r}, not "
                                      f"normalized as stormlet submit writes it")
        except DependencyError as exc:
            raise BuildError(str(exc)) from None
    wheel_dir = directory / WHEELS_DIR
    wheels = tuple(sorted((path.name, _file_digest(path))
                          for path in wheel_dir.glob("*.whl"))) if wheel_dir.is_dir() else ()
    return EnvironmentSpec(tuple(requirements), wheels, wheel_dir if wheels else None)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Environment:
    """A complete environment: its key, where it is, whether this call built it (False: it
    was there already) and how many seconds its build took (whenever it happened)."""

    key: str
    path: Path
    built: bool
    build_seconds: float

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


class Environments:
    """A node's environments, in ``settings.directory``; see the module's docstring."""

    def __init__(self, settings: EnvironmentSettings | None = None):
        self.settings = settings or EnvironmentSettings()
        self.directory = Path(self.settings.directory)

    def ensure(self, spec: EnvironmentSpec, timeout: float = BUILD_TIMEOUT_SECS) -> Environment:
        """The environment of ``spec``: the one there is, or one built now (once per host: a
        daemon building it meanwhile is waited for). ``BuildError`` if pip fails, with its
        last lines."""
        key = spec.key
        self.directory.mkdir(parents=True, exist_ok=True)
        lock = self._lock(key, wait=True)
        assert lock is not None   # waiting, the lock is had
        try:
            found = self._complete(key)
            if found is not None:
                return found
            return self._build(spec, key, timeout)
        finally:
            os.close(lock)

    def lookup(self, spec: EnvironmentSpec) -> Environment | None:
        """The complete environment of ``spec`` (marked used), or None when there is none or
        it is locked (being built or removed): never waits."""
        if not self.directory.is_dir():
            return None
        lock = self._lock(spec.key, wait=False)
        if lock is None:
            return None
        try:
            return self._complete(spec.key)
        finally:
            os.close(lock)

    def building(self) -> list[dict]:
        """The builds under way on this node (a key whose lock is held and that is not yet
        complete): {"key", "requirements", "seconds" so far, "last": pip's last line so far}."""
        builds: list[dict] = []
        if not self.directory.is_dir():
            return builds
        for lock_path in sorted(self.directory.glob("*.lock")):
            key = lock_path.stem
            path = self.directory / key
            if (path / MARKER).exists() or not (path / REQUIREMENTS).exists():
                continue
            lock = self._lock(key, wait=False)
            if lock is not None:   # nobody builds it: a build that died, redone when asked
                os.close(lock)
                continue
            try:
                requirements = (path / REQUIREMENTS).read_text().splitlines()
                started = (path / REQUIREMENTS).stat().st_mtime
                log_text = (path / BUILD_LOG).read_bytes()[-4096:].decode("utf-8", "replace")
            except OSError:
                continue   # finished or removed meanwhile
            lines = [line.strip() for line in log_text.splitlines() if line.strip()]
            builds.append({"key": key, "requirements": requirements,
                           "seconds": max(0.0, time.time() - started),
                           "last": lines[-1][:200] if lines else ""})
        return builds

    def touch(self, key: str) -> None:
        """Mark the environment ``key`` used now (if it is there)."""
        try:
            os.utime(self.directory / key / LAST_USED)
        except FileNotFoundError:
            pass

    def remove_unused(self, now: float | None = None) -> list[str]:
        """Remove every environment unused for longer than the TTL (and what interrupted
        builds left as long); return their keys."""
        if not self.directory.is_dir():
            return []
        now = time.time() if now is None else now
        removed = []
        for path in self.directory.iterdir():
            if path.name.startswith(REMOVING_PREFIX):
                shutil.rmtree(path, ignore_errors=True)   # a removal interrupted
                continue
            if path.suffix == ".lock" and not path.with_suffix("").exists():
                self._remove_lone_lock(path, now)   # of a build that failed
                continue
            if not path.is_dir() or now - self._last_used(path) <= self.settings.ttl:
                continue
            lock = self._lock(path.name, wait=False)
            if lock is None:
                continue   # being built or looked up: in use
            try:
                if now - self._last_used(path) <= self.settings.ttl:
                    continue   # touched since we looked
                doomed = path.with_name(f"{REMOVING_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}")
                os.replace(path, doomed)
                (self.directory / f"{path.name}.lock").unlink(missing_ok=True)
            finally:
                os.close(lock)
            shutil.rmtree(doomed, ignore_errors=True)
            log.info("removed environment %s: unused for more than %.0f s", path.name,
                     self.settings.ttl)
            removed.append(path.name)
        return removed

    def _remove_lone_lock(self, path: Path, now: float) -> None:
        try:
            if now - path.stat().st_mtime <= self.settings.ttl:
                return
        except FileNotFoundError:
            return
        lock = self._lock(path.stem, wait=False)
        if lock is None:
            return
        try:
            if not path.with_suffix("").exists():
                path.unlink(missing_ok=True)
        finally:
            os.close(lock)

    # ----- under the lock

    def _complete(self, key: str) -> Environment | None:
        path = self.directory / key
        try:
            record = json.loads((path / MARKER).read_text())
        except (OSError, ValueError):
            return None
        if not (path / "bin" / "python").exists():
            return None
        self.touch(key)
        return Environment(key, path, built=False,
                           build_seconds=float(record.get("build_seconds", 0.0)))

    def _build(self, spec: EnvironmentSpec, key: str, timeout: float) -> Environment:
        path = self.directory / key
        shutil.rmtree(path, ignore_errors=True)   # what an interrupted build left
        started = time.monotonic()
        log.info("building environment %s: %s", key, ", ".join(spec.requirements))
        try:
            self._create(path)
            self._install(spec, path, started + timeout)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
        record = {"key": key, "requirements": list(spec.requirements),
                  "wheels": [list(wheel) for wheel in spec.wheels], "python": sys.version,
                  "base": sys.prefix, "stormlet": __version__, "built": time.time(),
                  "build_seconds": seconds}
        (path / LAST_USED).touch()
        partial = path / f".{MARKER}.part"
        partial.write_text(json.dumps(record, indent=1))
        os.replace(partial, path / MARKER)
        log.info("built environment %s in %.1f s", key, seconds)
        return Environment(key, path, built=True, build_seconds=seconds)

    def _create(self, path: Path) -> None:
        """A virtualenv at ``path`` whose site-packages reach the daemon's after its own."""
        # The daemon's pip serves (through the .pth) unless the daemon has none.
        own_pip = importlib.util.find_spec("pip") is None
        command = [sys.executable, "-m", "venv", *([] if own_pip else ["--without-pip"]),
                   str(path)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise BuildError(f"could not create a virtualenv at {path}: "
                             f"{_last_lines(result.stdout + result.stderr)}")
        python = path / "bin" / "python"
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        lines = [f"import site; site.addsitedir({directory!r})"
                 for directory in daemon_site_directories()]
        (Path(purelib) / BASE_PTH).write_text("".join(line + "\n" for line in lines))

    def _install(self, spec: EnvironmentSpec, path: Path, deadline: float) -> None:
        requirements = path / REQUIREMENTS
        requirements.write_text("".join(line + "\n" for line in spec.requirements))
        command = [str(path / "bin" / "python"), "-m", "pip", "install", "--no-input",
                   "--disable-pip-version-check", "--progress-bar", "off",
                   "--no-warn-script-location", *self.settings.pip_options()]
        if spec.wheel_dir is not None:
            command += ["--find-links", str(spec.wheel_dir)]
        command += ["-r", str(requirements)]
        # The daemon's own settings (PIP_INDEX_URL, PIP_FIND_LINKS, proxies) reach pip; the
        # cluster secret's location does not: pip may run a package's build code.
        environment = {k: v for k, v in os.environ.items()
                       if k not in (SECRET_FILE_ENV, WORKER_CREDENTIALS_ENV)}
        with open(path / BUILD_LOG, "w+b") as output:
            try:
                result = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=environment,
                                        timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise BuildError(f"pip install took longer than {BUILD_TIMEOUT_SECS:.0f} s "
                                 f"for {', '.join(spec.requirements)}") from None
            output.seek(0)
            text = output.read().decode("utf-8", errors="replace")
        if result.returncode != 0:
            raise BuildError(f"pip could not install {', '.join(spec.requirements)}; its "
                             f"last lines:\n{_last_lines(text)}")

    # ----- locks and times

    def _lock(self, key: str, wait: bool) -> int | None:
        """An open descriptor holding ``<key>.lock`` exclusively (close it to release), or
        None if ``wait`` is false and someone else holds it."""
        path = self.directory / f"{key}.lock"
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            # A remover unlinks the lock file it held: a lock taken on that file meanwhile
            # locks nothing anyone else sees. Take the file that is there now instead.
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    @staticmethod
    def _last_used(path: Path) -> float:
        for name in (LAST_USED, MARKER):
            try:
                return (path / name).stat().st_mtime
            except OSError:
                continue
        try:
            return path.stat().st_mtime
        except OSError:
            return time.time()


def daemon_site_directories() -> list[str]:
    """The site-packages directories of this process, in its ``sys.path`` order: what an
    environment adds after its own."""
    known = {*site.getsitepackages(), site.getusersitepackages()}
    found = []
    for entry in sys.path:
        if entry in known and entry not in found and os.path.isdir(entry):
            found.append(entry)
    return found


def _last_lines(text: str, count: int = PIP_MESSAGE_LINES) -> str:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-count:])


class _Failed(NamedTuple):
    """An environment's last failed build: its error, when (on the builds' clock) it may be
    tried again, and how many builds in a row have failed."""

    error: BuildError
    retry_at: float
    failures: int


class Builds:
    """Environments for a daemon whose loop must not wait on pip (the supervisor): a lookup
    answers at once, and a missing environment is built on a thread of its own.

    ``python_for(code directory)`` is the interpreter for a worker of the package unpacked
    there: ``sys.executable`` when it declares no dependencies, its environment's python when
    that is complete, None while it is being built; ``BuildError`` when the last build failed,
    until ``RETRY_SECS`` (doubling with each failure) have passed and it is tried again."""

    def __init__(self, environments: Environments,
                 clock: Callable[[], float] = time.monotonic):
        self.environments = environments
        self._clock = clock
        self._lock = threading.Lock()
        self._specs: dict[Path, EnvironmentSpec | None] = {}   # wheels are hashed once
        self._building: set[str] = set()
        self._failed: dict[str, _Failed] = {}   # by environment key
        self._last_touch = self._last_clean = clock()

    def python_for(self, directory: Path) -> str | None:
        spec = self._spec(directory)
        if spec is None:
            return sys.executable
        environment = self.environments.lookup(spec)
        if environment is not None:
            return str(environment.python)
        key = spec.key
        with self._lock:
            if key in self._building:
                return None
            failed = self._failed.get(key)
            if failed is not None and self._clock() < failed.retry_at:
                raise failed.error
            self._building.add(key)
        threading.Thread(target=self._build, args=(spec,), name=f"environment-{key[:8]}",
                         daemon=True).start()
        return None

    def failures(self, directory: Path) -> int:
        """How many times in a row the environment of the package in ``directory`` failed to
        build here (1 for a package whose manifest is unusable)."""
        try:
            key = self.key_of(directory)
        except BuildError:
            return 1
        with self._lock:
            failed = self._failed.get(key or "")
        return failed.failures if failed else 0

    def key_of(self, directory: Path) -> str | None:
        spec = self._spec(directory)
        return None if spec is None else spec.key

    def keep(self, directories: Iterable[Path]) -> None:
        """Called from the daemon's loop with the code directories of what runs or is
        assigned here: touch their environments every TOUCH_SECS, forget the others, and remove
        unused environments every CLEAN_SECS."""
        directories = set(directories)
        now = self._clock()
        with self._lock:
            for gone in set(self._specs) - directories:
                del self._specs[gone]
        if now - self._last_touch >= TOUCH_SECS:
            self._last_touch = now
            for directory in directories:
                key = self.key_of(directory)
                if key is not None:
                    self.environments.touch(key)
        if now - self._last_clean >= CLEAN_SECS:
            self._last_clean = now
            self.environments.remove_unused()

    def _spec(self, directory: Path) -> EnvironmentSpec | None:
        with self._lock:
            if directory in self._specs:
                return self._specs[directory]
        spec = package_spec(directory)
        with self._lock:
            self._specs[directory] = spec
        return spec

    def _build(self, spec: EnvironmentSpec) -> None:
        key = spec.key
        error: BuildError | None = None
        try:
            self.environments.ensure(spec)
        except Exception as exc:
            error = exc if isinstance(exc, BuildError) else BuildError(
                f"building the environment failed: {exc}")
        except BaseException:
            with self._lock:
                self._building.discard(key)
            raise
        with self._lock:   # the outcome and the build's end, seen at once by any reader
            self._building.discard(key)
            if error is None:
                self._failed.pop(key, None)
                return
            last = self._failed.get(key)
            count = (last.failures if last else 0) + 1
            delay = min(MAX_RETRY_SECS, RETRY_SECS * 2 ** (count - 1))
            self._failed[key] = _Failed(error, self._clock() + delay, count)
        log.warning("environment %s failed to build (attempt %d; again in %.0f s): %s",
                    key, count, delay, error)
