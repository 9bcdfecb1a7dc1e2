"""``stormlet secret generate FILE``: a new cluster secret (see cluster/security.py)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def secret() -> None:
    """The cluster secret that authenticates every daemon, worker and client."""


@secret.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def generate(file: Path) -> None:
    """Write a new cluster secret to FILE (mode 600). Copy it to every node and pass it to the
    daemons and commands with --secret-file FILE or STORMLET_SECRET_FILE=FILE."""
    from ..cluster.security import Security, SecurityError

    try:
        Security.generate(file)
    except (SecurityError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote a new cluster secret to {file}")
