"""``stormlet inspect FILE``: what nimbus needs to know of a submitted topology, hidden from
--help. Nimbus never imports user code itself: ``cluster.code.inspect_package`` runs

    python -m stormlet inspect [--overrides-on-stdin] ENTRY_FILE

in a subprocess, which prints one JSON line: ``cluster.inspect.summary`` of the file, or
``{"ok": false, "error": ...}`` with the reason it cannot run. The limits nimbus passes are
applied to this process before the topology's code runs, and so to anything that code starts.
"""

from __future__ import annotations

import json
import logging
import resource
import sys

import click


@click.command(hidden=True)
@click.argument("file")
@click.option("--max-memory", type=int, help="Address space limit in bytes.")
@click.option("--max-cpu-secs", type=int, help="CPU time limit in seconds.")
@click.option("--max-open-files", type=int, help="Open file descriptor limit.")
@click.option("--max-write-bytes", type=int, help="Largest file the code may write.")
@click.option("--overrides-on-stdin", is_flag=True,
              help="Read the submit's config settings, a JSON object, from stdin: the topology's "
              "config is checked with them applied.")
def inspect(file: str, max_memory: int | None, max_cpu_secs: int | None,
            max_open_files: int | None, max_write_bytes: int | None,
            overrides_on_stdin: bool) -> None:
    """Print a topology file's summary as one JSON line (nimbus runs this)."""
    for limit, value in ((resource.RLIMIT_AS, max_memory), (resource.RLIMIT_CPU, max_cpu_secs),
                         (resource.RLIMIT_NOFILE, max_open_files),
                         (resource.RLIMIT_FSIZE, max_write_bytes)):
        if value is not None:
            _soft, hard = resource.getrlimit(limit)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(limit, (value, value))
    from ..cluster.inspect import summary
    from ..loader import TopologyFileError

    logging.disable(logging.CRITICAL)  # the one line we print must stay parseable
    try:
        report = summary(file, json.load(sys.stdin) if overrides_on_stdin else None)
    except TopologyFileError as exc:
        report = {"ok": False, "error": str(exc)}
    click.echo(json.dumps(report))
