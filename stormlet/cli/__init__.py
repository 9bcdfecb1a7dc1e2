"""The ``stormlet`` command: a click group of thin commands over library objects, one module
per group of commands:

    local.py     stormlet local: a topology in this process
    cluster.py   the daemons (nimbus, supervisor, ui) and the calls on nimbus (submit, list,
                 errors, kill, activate, deactivate, rebalance)
    worker.py    stormlet worker, hidden: the worker process a supervisor starts
    inspect.py   stormlet inspect, hidden: nimbus's look at a submitted topology, in a subprocess
    events.py    stormlet events: a topology's event history
    log.py       stormlet log create | append | describe
    logs.py      stormlet logs: a topology's worker logs across the cluster
    workers.py   stormlet stack | profile | restart-worker: one worker looked into, or restarted
    failed.py    stormlet failed ls | show | convert
    replay.py    stormlet replay
    secret.py    stormlet secret generate
    blob.py      stormlet blob upload | update | list | delete
    debug.py     stormlet set-log-level, stormlet debug: log levels and tuple sampling at run time
    backfill.py  stormlet backfill
    options.py   the options several commands share
    signals.py   how the daemons end: on SIGTERM or SIGINT, through their own stop

Commands import what they run when they run, so that ``stormlet --help`` stays quick.
"""

from __future__ import annotations

import logging

import click

from .backfill import backfill
from .blob import blob
from .cluster import (
    activate,
    deactivate,
    errors,
    kill,
    list_command,
    nimbus,
    rebalance,
    submit,
    supervisor,
    ui,
)
from .debug import debug, set_log_level
from .events import events
from .failed import failed
from .inspect import inspect
from .local import local
from .log import log_group
from .logs import logs
from .replay import replay
from .secret import secret
from .worker import worker
from .workers import profile, restart_worker, stack


@click.group()
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def main(log_level: str) -> None:
    """stormlet: Storm-style stream processing for Python."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level.upper() != "DEBUG":
        logging.getLogger("kazoo").setLevel(logging.WARNING)  # its connection chatter


for _command in (local, nimbus, supervisor, worker, inspect, submit, list_command, errors, kill,
                 activate, deactivate, rebalance, ui, failed, log_group, backfill, replay,
                 secret, blob, events, logs, stack, profile, restart_worker,
                 set_log_level, debug):
    main.add_command(_command)
