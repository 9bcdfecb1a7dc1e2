"""Moving a blob over nimbus's RPC in chunks, never whole in memory, checked by its SHA-256.

    # the CLI, as the admin: send FILE as KEY's first version (or, replace=True, its next)
    record = upload(nimbus_client, "model", Path("model.bin"), replace=False)
    # a supervisor or a standby nimbus, as a daemon: copy a blob from the nimbuses there are
    download(addresses, record.sha256, record.size, destination, partial, security)

Both ends hash as the bytes pass: an upload's digest is checked by nimbus before the blob is
stored (``BlobStore.finish``), a download's by the copier before the file takes its name. A
download that loses one nimbus half-way goes on from the same offset at the next: the bytes
are named by their digest, so every nimbus holding it serves the same ones.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import rpc
from .blob_store import CHUNK_BYTES
from .security import DAEMON_USER, Security

if TYPE_CHECKING:
    from .nimbus_client import NimbusClient

# How long one chunk may take to arrive.
CHUNK_TIMEOUT_SECS = 30.0


class BlobTransferError(Exception):
    """A blob that could not be copied, or whose bytes are not the ones named; says which."""


def upload(client: NimbusClient, key: str, path: Path, replace: bool,
           progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Send the file at ``path`` as blob ``key`` (its first version, or with ``replace`` its
    next) through ``client`` (the admin's), reading and sending one chunk at a time; returns
    nimbus's answer: the key's new record. ``progress(sent, size)`` after each chunk."""
    size = path.stat().st_size
    started = client.call("blob_upload_begin", key=key, size=size, replace=replace)
    upload_id, chunk_bytes = started["upload"], min(int(started["chunk_bytes"]), CHUNK_BYTES)
    hasher = hashlib.sha256()
    sent = 0
    try:
        with open(path, "rb") as f:
            while sent < size:
                chunk = f.read(chunk_bytes)
                if not chunk:
                    raise BlobTransferError(f"{path} became shorter ({sent} bytes) while it was "
                                            f"being uploaded")
                hasher.update(chunk)
                client.call("blob_upload_chunk", upload=upload_id, offset=sent, payload=chunk)
                sent += len(chunk)
                if progress is not None:
                    progress(sent, size)
        return client.call("blob_upload_commit", upload=upload_id, sha256=hasher.hexdigest())
    except BaseException:
        try:
            client.call("blob_upload_abandon", upload=upload_id)
        except rpc.RpcError:
            pass
        raise


def download(addresses: list[str], digest: str, size: int, destination: Path, partial: Path,
             security: Security, timeout: float = CHUNK_TIMEOUT_SECS) -> None:
    """Copy blob ``digest`` of ``size`` bytes from the nimbuses at ``addresses`` (in turn,
    going on from where the last one failed) into ``partial``, check its SHA-256, and rename it
    to ``destination``. ``BlobTransferError`` when none could give it all, or the bytes do not
    hash to ``digest`` (nothing is left at ``destination`` then)."""
    credentials = security.rpc_client_keys(DAEMON_USER)
    hasher = hashlib.sha256()
    received = 0
    problems: list[str] = []
    try:
        with open(partial, "wb") as f:
            for address in addresses:
                try:
                    while received < size:
                        chunk = rpc.call(address, "get_blob_chunk", timeout=timeout,
                                         credentials=credentials, sha256=digest, offset=received)
                        if not isinstance(chunk, bytes) or not chunk:
                            raise rpc.RpcError(f"an empty chunk at offset {received} of {size}")
                        f.write(chunk)
                        hasher.update(chunk)
                        received += len(chunk)
                    break
                except rpc.RpcError as exc:
                    problems.append(f"{address}: {exc}")
            if received < size:
                raise BlobTransferError(f"no nimbus could give blob {digest} ({received} of "
                                        f"{size} bytes copied): " + ("; ".join(problems)
                                                                     or "none is registered"))
            f.flush()
            os.fsync(f.fileno())
        if received != size or hasher.hexdigest() != digest:
            raise BlobTransferError(f"the bytes served as blob {digest} hash to "
                                    f"{hasher.hexdigest()} ({received} bytes): refusing them")
        partial.chmod(0o440)
        os.replace(partial, destination)
    finally:
        partial.unlink(missing_ok=True)
