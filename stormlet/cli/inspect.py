"""``stormlet inspect FILE``: what nimbus needs to know of a submitted topology, hidden from
--help. Nimbus never imports user code itself: ``cluster.code.inspect_package`` runs

    python -m stormlet inspect ENTRY_FILE

in a subprocess, which prints one JSON line: ``cluster.inspect.summary`` of the file, or
``{"ok": false, "error": ...}`` with the reason it cannot run.
"""

from __future__ import annotations

import json
import logging

import click


@click.command(hidden=True)
@click.argument("file")
def inspect(file: str) -> None:
    """Print a topology file's summary as one JSON line (nimbus runs this)."""
    from ..cluster.inspect import summary
    from ..loader import TopologyFileError

    logging.disable(logging.CRITICAL)  # the one line we print must stay parseable
    try:
        report = summary(file)
    except TopologyFileError as exc:
        report = {"ok": False, "error": str(exc)}
    click.echo(json.dumps(report))
