"""``stormlet worker``: one worker process, as its supervisor starts it (hidden from --help):

    python [OPTIONS] -m stormlet worker --zk HOSTS --zk-root ROOT --topology-id ID \\
        --supervisor-id SID --port PORT [--host HOST] [--bind ADDRESS] --code ENTRY_FILE \\
        --heartbeat-file FILE [--state-dir DIR] [--cpu N] \
        [--log-dir DIR --log-format text|json --log-max-bytes N --log-backups N]

(OPTIONS: the topology's ``topology.worker.childopts``, with its ``topology.environment`` in the
environment: see supervisor.py.) With ``--log-dir`` it writes its log there, rotated, its
stdout and stderr included (cluster/logging_setup.py); without, it logs to stderr.

It runs a ``cluster.worker.Worker`` until the worker ends itself or gets SIGTERM or SIGINT, and
exits 1 when an executor died or the slot had nothing to run, else 0. A signal that comes while
the worker is still starting (a supervisor rebalancing a worker it has just launched) stops it the
same way, once it has started (see signals.py). From its first moment it answers its
supervisor's request for its threads' stacks, written to its ``--log-dir`` (worker_stacks.py).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from ..cluster.cpu_pinning import CPU_OPTION, pin_this_process
from ..cluster.logging_setup import LOG_DIR_OPTION, LogSettings
from ..cluster.worker_command import PORT_OPTION
from .options import ZK_SESSION_OPTION, log_file_options
from .signals import run_until_signal


@click.command(hidden=True)
@click.option("--zk", required=True)
@click.option("--zk-root", required=True)
@click.option("--topology-id", required=True)
@click.option("--supervisor-id", required=True)
@click.option(PORT_OPTION, type=int, required=True)
@click.option("--host", default="127.0.0.1", help="the address peers reach this worker at")
@click.option("--bind", default=None, help="the address to listen on (default: --host)")
@click.option("--code", type=click.Path(path_type=Path), required=True,
              help="the topology's entry file")
@click.option("--heartbeat-file", type=click.Path(path_type=Path), required=True)
@ZK_SESSION_OPTION
@click.option("--state-dir", type=click.Path(path_type=Path), default=None,
              help="the embedded state store's directory, unless the topology names one")
@click.option(CPU_OPTION, "cpu", type=int, default=None,
              help="the one CPU to run on (its supervisor's choice: see cpu_pinning.py)")
@click.option(LOG_DIR_OPTION, "log_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="the directory its log files go to (its supervisor's choice: "
                                 "see cluster/log_files.py); without it, it logs to stderr")
@log_file_options
def worker(zk: str, zk_root: str, topology_id: str, supervisor_id: str, port: int, host: str,
           bind: str | None, code: Path, heartbeat_file: Path, zk_session_timeout: float,
           state_dir: Path | None, cpu: int | None, log_dir: Path | None,
           log_settings: LogSettings) -> None:
    """Run one worker of a topology (supervisors start these)."""
    from ..cluster.logging_setup import log_worker
    from ..cluster.project_files import project_directory
    from ..cluster.security import Security, SecurityError, restrict_new_files
    from ..cluster.worker import NotAssigned, Worker
    from ..cluster.worker_stacks import allow_supervisor_to_trace, install_stacks_handler
    from ..runtime.tuning import tune_for_streaming

    restrict_new_files()   # its supervisor's already; a worker started by hand too
    # First, so that a worker still starting (or stuck starting) can be looked into too.
    if log_dir is not None:
        install_stacks_handler(log_dir.resolve())
    allow_supervisor_to_trace()   # py-spy, its supervisor's child (worker_introspection.py)
    # The topology's relative paths resolve against its project directory, as nimbus's
    # inspection and `stormlet local` started there do (cluster/project_files.py): the paths
    # this command was given, before we move there.
    code, heartbeat_file = code.resolve(), heartbeat_file.resolve()
    state_dir = state_dir.resolve() if state_dir is not None else None
    log_dir = log_dir.resolve() if log_dir is not None else None
    os.chdir(project_directory(code))

    if log_dir is not None:
        # Every line names its topology, component and task; the file is this worker's own.
        log_worker(log_dir, log_settings, topology_id, f"{host}:{port}")
    else:
        logging.basicConfig(level=logging.getLogger().level, force=True,
                            format=f"%(asctime)s %(levelname)s worker:{port} %(name)s: "
                                   f"%(message)s")
    if cpu is not None:
        pin_this_process(cpu)   # first: every thread started from here on inherits it
    tune_for_streaming()
    try:
        security = Security.from_environment()
    except SecurityError as exc:
        raise SystemExit(str(exc)) from None
    daemon = Worker(zk, zk_root, topology_id, supervisor_id, port, host, code, heartbeat_file,
                    security, bind, state_dir, zk_session_timeout, log_dir=log_dir)
    try:
        run_until_signal(daemon, end=daemon.end, ended=daemon.wait)
    except NotAssigned as exc:   # from start: nothing was started
        raise SystemExit(str(exc)) from None   # the message, and exit status 1
    sys.exit(1 if daemon.failed else 0)
