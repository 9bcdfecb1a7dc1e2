"""``stormlet secret generate FILE``: a new cluster secret (see cluster/security.py)."""

from __future__ import annotations

from pathlib import Path

import click

from .options import SECRET_OPTION, ZK_OPTION, ZK_ROOT_OPTION, load_security


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


@secret.command(name="read-only")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@SECRET_OPTION
def read_only(file: Path, secret_file: str | None) -> None:
    """Write credentials that may only read the cluster (list, errors, metrics, the UI's
    pages) to FILE (mode 600): give them to a monitoring host instead of the secret, which
    it passes as --secret-file FILE."""
    import json

    from ..cluster.security import write_private_file

    security = load_security(secret_file)
    if not security.holds_secret:
        raise click.ClickException("read-only credentials are made from the cluster secret: "
                                   "pass it with --secret-file or STORMLET_SECRET_FILE")
    try:
        write_private_file(file, json.dumps(security.read_only_credentials()))
    except OSError as exc:
        raise click.ClickException(f"cannot create {file}: {exc.strerror}") from None
    click.echo(f"wrote read-only credentials to {file}")


@secret.command(name="ui-token")
@SECRET_OPTION
def ui_token(secret_file: str | None) -> None:
    """Print the UI's access token, derived from the cluster secret: sign in with it on the
    UI's /login.html, or send it as 'Authorization: Bearer TOKEN'."""
    token = load_security(secret_file).ui_token()
    if token is None:
        raise click.ClickException("no cluster secret given (--secret-file or "
                                   "STORMLET_SECRET_FILE): without one the UI needs no token")
    click.echo(token)


@secret.command(name="adopt-zookeeper")
@ZK_OPTION
@ZK_ROOT_OPTION
@SECRET_OPTION
def adopt_zookeeper(zk: str, zk_root: str, secret_file: str | None) -> None:
    """Give the nodes of a cluster that ran without a secret the daemons' ACLs, so that the
    daemons holding the secret accept its root. Nimbus refuses a root it did not make and
    adopts nothing itself: run this once, having checked that nothing under the root was
    planted. The offsets there then belong to the first topology submitted with their spout
    id."""
    from ..cluster.security import SecurityError
    from ..cluster.zk_state import ClusterState, connect

    security = load_security(secret_file)
    if not security.holds_secret:
        raise click.ClickException("adopting needs the cluster secret: pass it with "
                                   "--secret-file or STORMLET_SECRET_FILE")
    client = connect(zk, timeout=10, security=security)
    try:
        state = ClusterState(client, zk_root, security, adopt_open=True)
    except SecurityError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        client.stop()
        client.close()
    click.echo(f"gave {state.adopted} open nodes under {state.root} the cluster's ACL")
