"""``stormlet blob upload|update|list|delete``: the cluster's blob store (cluster/blob_service.py),
for files too large to ship with every submit (a model, a lookup table)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from .options import NimbusTarget, nimbus_target

FILE_ARGUMENT = click.argument("file", type=click.Path(exists=True, dir_okay=False,
                                                       path_type=Path))


@click.group()
def blob() -> None:
    """Large files for topologies (a model, a lookup table), kept out of the code package:
    stored by nimbus (and its standbys), copied once to each node that runs a topology
    mapping them, and seen by its workers under a local name in their working directory.

    \b
    A topology maps keys to local names in its config, as Storm's does:
      config = {"topology.blobstore.map": {"model": {"localname": "model.bin"}}}
      config = {"topology.blobstore.map": {"model": "model.bin"}}
      stormlet submit app.py -c 'topology.blobstore.map={"model": "model.bin"}'

    `stormlet blob update` reaches running workers: the local name then holds the new
    version (open it again to read it; stormlet.blobs.watch calls a component back when it
    changes)."""


@blob.command()
@click.argument("key")
@FILE_ARGUMENT
@nimbus_target
def upload(key: str, file: Path, target: NimbusTarget) -> None:
    """Store FILE as blob KEY, version 1; refused if KEY exists (use update). Needs the admin
    role (the cluster secret)."""
    _send(target, key, file, replace=False)


@blob.command()
@click.argument("key")
@FILE_ARGUMENT
@nimbus_target
def update(key: str, file: Path, target: NimbusTarget) -> None:
    """Store FILE as blob KEY's next version; running workers that map KEY see it within
    seconds under their local name. Needs the admin role."""
    _send(target, key, file, replace=True)


@blob.command(name="list")
@nimbus_target
def list_blobs(target: NimbusTarget) -> None:
    """List the blobs: key, size, version, when it last changed, and its SHA-256."""
    rows = _call(target, "blob_list")
    if not rows:
        click.echo("no blobs")
        return
    width = max(len(row["key"]) for row in rows)
    click.echo(f"{'key':<{width}}  {'size':>10}  {'version':>7}  {'updated':<19}  sha256")
    for row in rows:
        updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["updated"]))
        click.echo(f"{row['key']:<{width}}  {_size(row['size']):>10}  {row['version']:>7}  "
                   f"{updated:<19}  {row['sha256'][:16]}")


@blob.command()
@click.argument("key")
@nimbus_target
def delete(key: str, target: NimbusTarget) -> None:
    """Remove blob KEY; refused while a topology that maps it runs. Needs the admin role."""
    result = _call(target, "blob_delete", key=key)
    click.echo(f"deleted blob {key} (it was version {result['version']})")


def _send(target: NimbusTarget, key: str, file: Path, replace: bool) -> None:
    from ..cluster.blob_transfer import BlobTransferError
    from ..cluster.blob_transfer import upload as send
    from ..cluster.rpc import RpcError

    started = time.monotonic()
    try:
        with target.client() as client:
            record = send(client, key, file, replace)
    except (RpcError, BlobTransferError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{'updated' if replace else 'uploaded'} blob {key}: version {record['version']}, "
               f"{_size(record['size'])} in {time.monotonic() - started:.1f} s, sha256 "
               f"{record['sha256']}")


def _call(target: NimbusTarget, op: str, **args: Any) -> Any:
    from ..cluster.rpc import RpcError

    try:
        with target.client() as client:
            return client.call(op, **args)
    except RpcError as exc:
        raise click.ClickException(str(exc)) from None


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
