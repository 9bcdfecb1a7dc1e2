"""A worker's own side of being looked into: it writes every thread's stack to a file in its log
directory when its supervisor sends it ``STACKS_SIGNAL``, and it lets its supervisor's children
(py-spy) trace it where the kernel allows only a process's ancestors to.

    install_stacks_handler(log_dir)     # stormlet worker, first thing, on its main thread
    allow_supervisor_to_trace()

Why a signal the worker answers itself, and not only py-spy: py-spy reads the worker's memory
through ptrace, which the kernel refuses to an ordinary user in several common set-ups (Yama's
``kernel.yama.ptrace_scope`` 2 or 3, a container without ``CAP_SYS_PTRACE``). A signal needs
only that the supervisor may signal the worker, which it may: it started it, as the same user.
So a stack dump works wherever the worker runs; py-spy is the fallback for a worker that cannot
answer (worker_introspection.py), and the only way to a CPU profile.

The handler is Python's, so it runs on the main thread between two bytecodes: in a worker that
is while the main thread waits for the worker to end (``Worker.wait``), in slices of a tenth of
a second, since the kernel may hand the signal to another thread and only the main thread's
return to Python runs the handler (cli/signals.py). It takes the interpreter lock for as long as it
takes to format the stacks (about a millisecond for a few dozen threads): the executors pause
that long, as they do for any other thread, and no tuple is lost. A worker whose main thread
cannot get the lock (a C extension holding it forever) never answers; py-spy, which needs no
lock, still can.

The dump is written to a temporary file renamed over ``STACKS_FILE``, so a reader sees a whole
dump or none; the last one stays among the worker's files, as Storm keeps its jstack dumps among
a worker's artifacts.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from .log_files import STACKS

log = logging.getLogger(__name__)

# SIGUSR1's default action ends a process: a supervisor sends it only to a worker that has
# installed this handler, which it reads in /proc (worker_introspection.catches_signal).
STACKS_SIGNAL = signal.SIGUSR1
# In the worker's log directory.
STACKS_FILE = STACKS

# prctl(2) options of Linux's Yama security module (linux/prctl.h).
_PR_SET_PTRACER = 0x59616D61


def install_stacks_handler(directory: Path) -> None:
    """Answer ``STACKS_SIGNAL`` with every thread's stack, written to ``directory /
    STACKS_FILE``. Call it on the main thread (Python's rule for signal handlers)."""
    directory = Path(directory)

    def answer(signum: int, frame: FrameType | None) -> None:
        try:
            write_stacks(directory / STACKS_FILE, frame, signal.Signals(signum).name)
        except OSError as exc:   # a full disk, a directory removed: the worker goes on
            log.warning("cannot write this worker's stacks to %s: %s", directory, exc)

    signal.signal(STACKS_SIGNAL, answer)


def write_stacks(path: Path, interrupted: FrameType | None = None, cause: str = "") -> None:
    """Every thread's stack (``format_stacks``) to ``path``, whole or not at all."""
    text = format_stacks(interrupted, cause)
    partial = path.with_name(path.name + ".part")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def format_stacks(interrupted: FrameType | None = None, cause: str = "") -> str:
    """This process's threads, each with its name and stack, innermost call first: the layout
    of ``py-spy dump --full-filenames``, so that a dump reads the same whichever took it.
    ``interrupted``: the frame a signal handler was called in, shown as the calling thread's
    stack instead of the handler's own."""
    # Not threading.enumerate(), which takes a lock the interrupted main thread may hold (it
    # does while it starts a thread): the handler would wait for itself. Copying the dict is
    # one step under the interpreter lock.
    names = dict(threading._active)  # type: ignore[attr-defined]
    frames = sys._current_frames()
    if interrupted is not None:
        frames[threading.get_ident()] = interrupted
    when = time.strftime("%Y-%m-%d %H:%M:%S %z")
    lines = [f"Process {os.getpid()}: {_command_line()}",
             f"Python v{sys.version.split()[0]} ({sys.executable})",
             f"Written by the process itself{f' on {cause}' if cause else ''} at {when}", ""]
    for ident, frame in frames.items():
        thread = names.get(ident)
        if thread is None:   # started outside threading (_thread, a C library): no name
            lines.append(f"Thread {ident:#x}:")
        else:
            daemon = " (daemon)" if thread.daemon else ""
            lines.append(f"Thread {thread.native_id}{daemon}: \"{thread.name}\"")
        current: FrameType | None = frame
        while current is not None:
            code = current.f_code
            lines.append(f"    {code.co_qualname} ({code.co_filename}:{current.f_lineno})")
            current = current.f_back
    return "\n".join(lines) + "\n"


def allow_supervisor_to_trace() -> bool:
    """Let this process's parent (its supervisor) and the parent's other children (py-spy)
    trace it. True if the kernel took it.

    With Yama's ``kernel.yama.ptrace_scope`` at 1 (Ubuntu's and Debian's default), only a
    process's ancestors may trace it: the supervisor may, but py-spy, the supervisor's child,
    is the worker's sibling and may not. Naming the supervisor with ``PR_SET_PTRACER`` extends
    its right to its children, and to nothing else: the supervisor could already trace this
    process (and the kernel forgets the naming when the supervisor exits). Where Yama is absent
    (the call fails with EINVAL) or set to 0 nothing needs it; at 2 and 3 nothing short of
    ``CAP_SYS_PTRACE`` helps."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(os.getppid()), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _command_line() -> str:
    try:
        raw = Path(f"/proc/{os.getpid()}/cmdline").read_bytes()
    except OSError:
        return " ".join(sys.argv)
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", errors="replace")
