"""A worker's command line: how a supervisor writes it, and reads it back from /proc.

A worker is ``python [OPTIONS] -m stormlet worker --zk ... --port N ...`` (the hidden command in
cli/worker.py), OPTIONS its topology's ``topology.worker.childopts``, one argument each with its
value attached (``config.worker_python_options``). Supervisors find running workers by their
command lines in /proc: to stop the workers a previous run left on their ports (supervisor.py),
and to see which CPU each worker on the machine is pinned to (cpu_pinning.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ..config import PYTHON_FLAGS, PYTHON_VALUE_OPTIONS

WORKER_MODULE_ARGS = ["-m", "stormlet", "worker"]
# Workers started by a stormlet from before the ``stormlet worker`` command, still running after
# an upgrade: recognised so that they too are stopped as orphans, and free their ports.
LEGACY_WORKER_MODULE = b"stormlet.cluster.worker"
# The option naming the slot port a worker binds.
PORT_OPTION = "--port"
PROC = Path("/proc")
# WORKER_MODULE_ARGS as /proc gives them, encoded once: a scan tests every process on the machine.
_WORKER_MODULE_BYTES = [arg.encode() for arg in WORKER_MODULE_ARGS]
# One interpreter option as a supervisor writes it (config.worker_python_options).
_PYTHON_OPTION = re.compile(rb"-[%s]|-[%s].+" % (PYTHON_FLAGS.encode(),
                                                 PYTHON_VALUE_OPTIONS.encode()), re.DOTALL)


def command_line(pid: int | str, proc: Path = PROC) -> list[bytes]:
    """The arguments of process ``pid`` (``OSError`` if it is gone). Just after a process
    starts they can read as one empty argument."""
    return (proc / str(pid) / "cmdline").read_bytes().split(b"\0")


def is_worker(command: Sequence[bytes]) -> bool:
    """Whether a process's command line (``command_line``) is a worker's."""
    start = 1
    while start < len(command) and _PYTHON_OPTION.fullmatch(command[start]):
        start += 1
    return (list(command[start:start + len(_WORKER_MODULE_BYTES)]) == _WORKER_MODULE_BYTES
            or LEGACY_WORKER_MODULE in command)


def worker_command(python: str, options: Sequence[str], worker_args: Sequence[str]) -> list[str]:
    """The command line of a worker: ``python`` with its ``options`` (as
    ``config.worker_python_options`` gives them) runs ``stormlet worker`` with ``worker_args``."""
    return [python, *options, *WORKER_MODULE_ARGS, *worker_args]


def option_value(command: Sequence[bytes], option: str) -> bytes | None:
    """The value given to ``option`` in a command line, or None if it has none."""
    name = option.encode()
    for i, arg in enumerate(command[:-1]):
        if arg == name:
            return command[i + 1]
    return None
