"""Looking into a running worker from its supervisor, as Storm's "dynamic worker profiling" does:
every thread's stack now (``stack_dump``), a CPU profile of some seconds as a flame graph
(``profile``), and a restart (``Restarts``, which the supervisor's loop carries out).

    text = stack_dump(worker.process.pid, log_dir)          # str, py-spy's layout
    svg = profile(worker.process.pid, 30)                   # bytes of an SVG flame graph
    supervisor.restart_worker(topology_id, port, "asked by alice")

Each raises ``IntrospectionError`` with what went wrong and what to do (``WorkerGone`` when the
process has exited); it is an ``rpc.RpcError``, so a server passes its message on as it is.

A stack dump is first asked of the worker itself (a signal it answers by writing its stacks to
its log directory: worker_stacks.py), which needs no right beyond signalling a process one
started. Only a worker that does not answer (its main thread stuck in C code holding the
interpreter lock, or started without a log directory) is dumped by py-spy, which reads the
process's memory through ptrace.

A profile is py-spy's (``py-spy record``), a dependency of stormlet: a sampling profiler of
Benfred's, maintained since 2018 and shipped on PyPI as a static binary in a wheel for every
common platform, that reads a running interpreter from outside, so the worker needs no change,
no restart and no profiling hook, and pays only the short pauses in which each sample is read
(a hundred a second by default). Its flame graphs have a tower per thread (``--threads``),
and a worker's executor threads are named after their component and task (runtime/threads.py).
Python code compiled by Cython shows as the Python frame that called it, unless ``native``.

py-spy needs the kernel's leave to ptrace the worker. Root has it; an ordinary user has it for
its own processes unless Yama (``kernel.yama.ptrace_scope``) says otherwise: at 1 (Debian's and
Ubuntu's default) only ancestors may trace, and py-spy, the supervisor's child, is the worker's
sibling, so each worker names its supervisor as its tracer (``allow_supervisor_to_trace``); at 2
or 3, and in a container without ``CAP_SYS_PTRACE``, py-spy is refused, and the error says what
to change. One py-spy at a time traces a process (a second attach would be refused as if it
lacked the right), so a profile or dump waits for, or is refused during, another.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from shutil import which
from typing import Protocol

import psutil

from . import rpc
from .worker_command import PROC
from .worker_stacks import STACKS_FILE, STACKS_SIGNAL

log = logging.getLogger(__name__)

# A profile's length, in whole seconds: long enough to be worth a flame graph, short enough
# that one asked for by mistake ends soon, and that a request for it can wait for its answer.
MIN_PROFILE_SECS = 1
MAX_PROFILE_SECS = 300
# py-spy's samples per second: its default, and the bounds it accepts usefully.
DEFAULT_PROFILE_RATE = 100
MAX_PROFILE_RATE = 1000
DEFAULT_STACKS_TIMEOUT_SECS = 10.0
DEFAULT_RESTART_TIMEOUT_SECS = 60.0
# How long py-spy may take beyond a profile's seconds: attaching, and writing the SVG.
PY_SPY_GRACE_SECS = 30.0
# How often the supervisor looks for the stacks a worker writes.
_POLL_SECS = 0.01
YAMA_PTRACE_SCOPE = PROC / "sys" / "kernel" / "yama" / "ptrace_scope"


class IntrospectionError(rpc.RpcError):
    """A stack dump, profile or restart failed; the message says why and what to do."""


class WorkerGone(IntrospectionError):
    """The worker process has exited."""


# ----- stacks


class _NoAnswer(Exception):
    """The worker did not write its stacks in time."""


def stack_dump(pid: int, directory: Path | None = None,
               timeout: float = DEFAULT_STACKS_TIMEOUT_SECS) -> str:
    """Every thread's Python stack in worker ``pid``, innermost call first, each thread with its
    name. Asked of the worker itself when it has a log ``directory`` and answers the signal
    there; otherwise, or when it does not answer within ``timeout`` seconds, taken by py-spy (a
    line at the top says why)."""
    _check_alive(pid)
    why_py_spy = None
    if directory is None:
        pass
    elif not catches_signal(pid, STACKS_SIGNAL):
        # Sending it would end the worker (the signal's default action): it is still starting,
        # or it is a stormlet older than its handler.
        why_py_spy = f"worker {pid} does not answer {STACKS_SIGNAL.name} (yet)"
    else:
        try:
            return _dump_by_signal(pid, Path(directory), timeout)
        except WorkerGone:
            raise
        except (_NoAnswer, IntrospectionError) as exc:
            why_py_spy = str(exc)
    try:
        text = _dump_by_py_spy(pid, timeout)
    except WorkerGone:
        raise
    except IntrospectionError as exc:
        raise IntrospectionError(f"{why_py_spy}; and {exc}" if why_py_spy else str(exc)) from None
    return f"({why_py_spy}: these stacks are py-spy's)\n{text}" if why_py_spy else text


def _dump_by_signal(pid: int, directory: Path, timeout: float) -> str:
    path = directory / STACKS_FILE
    deadline = time.monotonic() + timeout
    with _dumping.hold(path, timeout, f"another stack dump of worker {pid} took over "
                                      f"{timeout:g}s"):
        path.unlink(missing_ok=True)
        try:
            os.kill(pid, STACKS_SIGNAL)
        except ProcessLookupError:
            raise WorkerGone(_gone(pid)) from None
        while True:
            try:
                return path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                pass
            if not _alive(pid):
                raise WorkerGone(_gone(pid))
            if time.monotonic() >= deadline:
                raise _NoAnswer(f"worker {pid} wrote no stacks to {path} within {timeout:g}s of "
                                f"{STACKS_SIGNAL.name} (its main thread may be stuck in C code "
                                f"that holds the interpreter lock)")
            time.sleep(_POLL_SECS)


def _dump_by_py_spy(pid: int, timeout: float) -> str:
    with _tracing(pid, wait=timeout):
        done = _run_py_spy(pid, ["dump", "--pid", str(pid), "--full-filenames"], timeout)
    return done.stdout.decode("utf-8", errors="replace")


def catches_signal(pid: int, signum: int, proc: Path = PROC) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its ``SigCgt`` in /proc). False
    where there is no /proc to tell."""
    try:
        status = (proc / str(pid) / "status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split(":", 1)[1], 16) >> (signum - 1) & 1)
    return False


# ----- profiles


def check_profile_seconds(seconds: object) -> int:
    """``seconds`` as a profile's length, or ``IntrospectionError`` saying the bounds."""
    if (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
            or not MIN_PROFILE_SECS <= seconds <= MAX_PROFILE_SECS or seconds != int(seconds)):
        raise IntrospectionError(f"a profile lasts {MIN_PROFILE_SECS} to {MAX_PROFILE_SECS} "
                                 f"whole seconds, not {seconds!r}")
    return int(seconds)


def check_profile_rate(rate: object) -> int:
    """``rate`` as a profile's samples a second, or ``IntrospectionError`` saying the bounds."""
    if (isinstance(rate, bool) or not isinstance(rate, int)
            or not 1 <= rate <= MAX_PROFILE_RATE):
        raise IntrospectionError(f"a profile samples 1 to {MAX_PROFILE_RATE} times a second, "
                                 f"not {rate!r}")
    return rate


def profile(pid: int, seconds: int, *, rate: int = DEFAULT_PROFILE_RATE, idle: bool = False,
            native: bool = False) -> bytes:
    """A CPU profile of worker ``pid`` over the next ``seconds`` (1 to 300), sampled ``rate``
    times a second, as an SVG flame graph with a tower per thread. ``idle``: include the
    samples of threads waiting (for tuples, a lock, the network), which py-spy leaves out by
    default as best it can tell them: they show where time goes rather than where the CPU
    goes. ``native``: unwind C and Cython frames too (slower; Linux and a few other
    platforms). A worker that exits meanwhile gives the profile of its last moments."""
    seconds = check_profile_seconds(seconds)
    check_profile_rate(rate)
    _check_alive(pid)
    with _tracing(pid, wait=0), tempfile.TemporaryDirectory(prefix="stormlet-profile-") as tmp:
        output = Path(tmp) / "profile.svg"
        options = [*(["--idle"] if idle else []), *(["--native"] if native else [])]
        _run_py_spy(pid, ["record", "--pid", str(pid), "--duration", str(seconds),
                          "--rate", str(rate), "--format", "flamegraph", "--threads",
                          "--full-filenames", *options, "--output", str(output)],
                    seconds + PY_SPY_GRACE_SECS)
        try:
            return output.read_bytes()
        except FileNotFoundError:
            if not _alive(pid):
                raise WorkerGone(_gone(pid)) from None
            raise IntrospectionError(
                f"py-spy wrote no flame graph of worker {pid}: no samples in {seconds}s, every "
                f"thread idle; profile again with idle to see where they wait") from None


# ----- py-spy


def py_spy_path() -> str:
    """py-spy's binary: the one installed with this Python (a virtualenv's bin directory need
    not be on PATH), else the first on PATH."""
    name = "py-spy.exe" if sys.platform == "win32" else "py-spy"
    beside = Path(sysconfig.get_path("scripts")) / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = which(name)
    if found is None:
        raise IntrospectionError(
            f"py-spy is not installed where this supervisor runs ({sys.executable}); stormlet "
            f"depends on it: pip install py-spy")
    return found


class _Busy:
    """Keys (a process, a file) one thread at a time works on; the others wait their turn."""

    def __init__(self) -> None:
        self._held: set[object] = set()
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def hold(self, key: object, wait: float, busy: str) -> Iterator[None]:
        """Hold ``key``, waiting up to ``wait`` seconds for it, else ``IntrospectionError``
        with the message ``busy``."""
        with self._changed:
            if not self._changed.wait_for(lambda: key not in self._held, timeout=wait):
                raise IntrospectionError(busy)
            self._held.add(key)
        try:
            yield
        finally:
            with self._changed:
                self._held.discard(key)
                self._changed.notify_all()


# One py-spy at a time attaches to a process; one dump at a time uses a worker's stacks file.
_traced = _Busy()
_dumping = _Busy()


def _tracing(pid: int, wait: float) -> contextlib.AbstractContextManager[None]:
    return _traced.hold(pid, wait, f"worker {pid} is being profiled or dumped by py-spy; ask "
                                   f"again once that is done")


def _run_py_spy(pid: int, arguments: list[str], timeout: float) -> subprocess.CompletedProcess:
    binary = py_spy_path()
    try:
        done = subprocess.run([binary, *arguments], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise IntrospectionError(f"py-spy did not finish with worker {pid} within "
                                 f"{timeout:g}s") from None
    if done.returncode != 0:
        raise _py_spy_failure(pid, binary, done.stderr.decode("utf-8", errors="replace"))
    return done


def _py_spy_failure(pid: int, binary: str, stderr: str) -> IntrospectionError:
    """What to tell an operator of py-spy's failure on ``pid``, from its error output."""
    if not _alive(pid):
        return WorkerGone(_gone(pid))
    if "Permission Denied" in stderr or "Operation not permitted" in stderr:
        return IntrospectionError(permission_advice(pid, binary))
    # Its first line says it ("Error: Failed to find python version ..."); a backtrace follows.
    first = next((line.strip() for line in stderr.splitlines() if line.strip()), "no message")
    return IntrospectionError(f"py-spy failed on worker {pid}: {first}")


def permission_advice(pid: int, binary: str) -> str:
    """Why py-spy may not trace ``pid``, and the ways to let it, the narrowest first."""
    try:
        scope = YAMA_PTRACE_SCOPE.read_text().strip()
    except OSError:
        scope = None
    where = (f"kernel.yama.ptrace_scope is {scope} here" if scope is not None
             else "this kernel has no Yama")
    return (f"the kernel refuses py-spy ({binary}) the right to trace worker {pid} ({where}; "
            f"the supervisor runs as uid {os.getuid()}). Any one of these lets it: set "
            f"kernel.yama.ptrace_scope to 1 or 0 (sysctl -w kernel.yama.ptrace_scope=1: workers "
            f"name their supervisor as their tracer, which is enough at 1); give py-spy the "
            f"right (setcap cap_sys_ptrace+ep {binary}); run the supervisor as root; in a "
            f"container, add the capability (docker run --cap-add SYS_PTRACE)")


# ----- the process


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (an exited worker its supervisor has not reaped yet does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:   # another user's: it exists
        return True


def _check_alive(pid: int) -> None:
    if not _alive(pid):
        raise WorkerGone(_gone(pid))


def _gone(pid: int) -> str:
    return f"worker process {pid} has exited (its supervisor starts it again if still assigned)"


# ----- restarts


class _Process(Protocol):
    pid: int


class _Worker(Protocol):
    """What ``Restarts.serve`` reads of a supervisor's worker (supervisor.WorkerProcess)."""

    @property   # read-only: a Popen satisfies _Process only so
    def process(self) -> _Process: ...

    topology_id: str


@dataclass
class RestartRequest:
    topology_id: str
    port: int
    reason: str
    done: threading.Event = field(default_factory=threading.Event)
    result: dict | None = None
    error: str | None = None


class Restarts:
    """Requests to restart one of a node's workers, asked from any thread (the node service's)
    and carried out by the supervisor's loop, which alone starts and stops workers: a restart
    then never races the loop's own decisions about the same slot.

        restarts.ask("wc-1", 6700, "asked by alice")         # any thread; blocks until done
        restarts.serve(self.workers, self._kill)             # the loop, before it starts workers

    Serving stops the worker (``stop(port, reason)``, which forgets it); the same pass of the
    loop then starts a new one on its free slot, as it starts any missing worker, with no
    delay: a restart asked for is no crash loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[RestartRequest] = []

    def ask(self, topology_id: str, port: int, reason: str,
            timeout: float = DEFAULT_RESTART_TIMEOUT_SECS) -> dict:
        """Restart the worker of ``topology_id`` on ``port``, logging ``reason``; once the old
        worker has stopped: ``{"topology_id", "port", "pid": the stopped worker's}``."""
        request = RestartRequest(topology_id, int(port), reason)
        with self._lock:
            self._pending.append(request)
        if not request.done.wait(timeout):
            with self._lock:
                waiting = request in self._pending
                if waiting:
                    self._pending.remove(request)
            if waiting:
                raise IntrospectionError(f"the supervisor did not get to restarting port {port} "
                                         f"within {timeout:g}s; nothing was done")
            # Under way: stopping a worker takes at most the supervisor's bound (supervisor._kill).
            if not request.done.wait(timeout):
                raise IntrospectionError(f"restarting port {port} is taking over {timeout:g}s")
        if request.error is not None:
            raise IntrospectionError(request.error)
        assert request.result is not None
        return request.result

    def serve(self, workers: Mapping[int, _Worker], stop: Callable[[int, str], object],
              host: str = "this node") -> None:
        """Carry out the requests asked since the last call: ``stop(port, reason)`` each
        worker asked for. Called by the supervisor's loop only."""
        with self._lock:
            requests, self._pending = self._pending, []
        for request in requests:
            worker = workers.get(request.port)
            if worker is None or worker.topology_id != request.topology_id:
                request.error = (f"no worker of {request.topology_id} runs on port "
                                 f"{request.port} of {host}")
            else:
                pid = worker.process.pid
                try:
                    stop(request.port, f"restart asked: {request.reason}")
                except Exception as exc:   # the loop goes on; the asker hears why
                    log.exception("restarting worker %s:%d failed", host, request.port)
                    request.error = f"restarting port {request.port} of {host} failed: {exc}"
                else:
                    request.result = {"topology_id": request.topology_id,
                                      "port": request.port, "pid": pid}
            request.done.set()

