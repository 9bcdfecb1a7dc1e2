"""A worker's command line: how a supervisor writes it, and reads it back from /proc.

A worker is ``python -m stormlet worker --zk ... --port N ...`` (the hidden command in
cli/worker.py). Supervisors find running workers by their command lines in /proc: to stop the
workers a previous run left on their ports (supervisor.py), and to see which CPU each worker on
the machine is pinned to (cpu_pinning.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

WORKER_MODULE_ARGS = ["-m", "stormlet", "worker"]
# Workers started by a stormlet from before the ``stormlet worker`` command, still running after
# an upgrade: recognised so that they too are stopped as orphans, and free their ports.
LEGACY_WORKER_MODULE = b"stormlet.cluster.worker"
# The option naming the slot port a worker binds.
PORT_OPTION = "--port"
PROC = Path("/proc")
# WORKER_MODULE_ARGS as /proc gives them, encoded once: a scan tests every process on the machine.
_WORKER_MODULE_BYTES = [arg.encode() for arg in WORKER_MODULE_ARGS]


def command_line(pid: int | str, proc: Path = PROC) -> list[bytes]:
    """The arguments of process ``pid`` (``OSError`` if it is gone). Just after a process
    starts they can read as one empty argument."""
    return (proc / str(pid) / "cmdline").read_bytes().split(b"\0")


def is_worker(command: Sequence[bytes]) -> bool:
    """Whether a process's command line (``command_line``) is a worker's."""
    return (list(command[1:1 + len(_WORKER_MODULE_BYTES)]) == _WORKER_MODULE_BYTES
            or LEGACY_WORKER_MODULE in command)


def option_value(command: Sequence[bytes], option: str) -> bytes | None:
    """The value given to ``option`` in a command line, or None if it has none."""
    name = option.encode()
    for i, arg in enumerate(command[:-1]):
        if arg == name:
            return command[i + 1]
    return None
