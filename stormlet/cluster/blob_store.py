"""Nimbus's blob store on disk: each blob's bytes in one file named by its SHA-256.

Content-addressed, so two keys (or two versions) with the same bytes share one file, and a file
is checked by its name. Which key points at which digest is ZooKeeper's (``BlobRecord``, through
``ClusterState``); this module knows files only. An upload arrives in chunks, in order, into a
file of its own that is hashed as it grows, so no blob is ever held in memory whole; only when
the whole size has arrived and its digest is the one the uploader computed does it become the
store's file:

    store = BlobStore(data_dir / "blobs")
    upload = store.begin(size)
    store.receive(upload, 0, first_chunk); ...          # each at the offset received so far
    digest = store.finish(upload, sha256_the_uploader_computed)
    store.read(digest, offset)                          # at most CHUNK_BYTES, for get_blob_chunk

Replicas (standby nimbuses) and supervisors copy a blob with ``blob_transfer.download``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .names import is_digest

log = logging.getLogger(__name__)

# The most bytes one chunk carries, either way (an upload's payload, a get_blob_chunk answer).
CHUNK_BYTES = 4 * 1024 * 1024
# An upload that received nothing this long is abandoned (its client died, say).
UPLOAD_IDLE_SECS = 600.0
# Uploads in progress at once: each holds an open file and a hash.
MAX_UPLOADS = 8
# Free space an upload leaves on nimbus's disk, beyond its own size.
FREE_MARGIN_BYTES = 64 * 1024 * 1024
# Files of unfinished uploads and copies: ``.upload-<id>``, ``.<digest>.partial``.
PARTIAL_PREFIX = "."


class BlobError(Exception):
    """A blob that cannot be stored or read; the message says why and what to do."""


@dataclass
class _Upload:
    size: int
    path: Path
    file: BinaryIO
    hasher: Any = field(default_factory=hashlib.sha256)
    received: int = 0
    active: float = field(default_factory=time.monotonic)


class BlobStore:
    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        # What a previous run left half-written is of no use: an upload does not survive its
        # nimbus (the client starts again), nor does a copy.
        for path in self.directory.glob(f"{PARTIAL_PREFIX}*"):
            path.unlink(missing_ok=True)
        self._uploads: dict[str, _Upload] = {}
        self._lock = threading.Lock()

    def path(self, digest: str) -> Path:
        """Where the blob with this SHA-256 is (or would be) stored."""
        if not is_digest(digest):
            raise BlobError(f"not a SHA-256: {digest!r}")
        return self.directory / digest

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def digests(self) -> set[str]:
        """The digests of every blob stored here."""
        return {p.name for p in self.directory.iterdir() if is_digest(p.name)}

    # ----- uploads

    def begin(self, size: int) -> str:
        """Start receiving a blob of ``size`` bytes; returns the upload's id."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BlobError(f"a blob's size is a whole number of bytes, not {size!r}")
        free = shutil.disk_usage(self.directory).free
        if size + FREE_MARGIN_BYTES > free:
            raise BlobError(f"nimbus's disk ({self.directory}) has {free} bytes free, too few for "
                            f"a blob of {size} bytes and a margin of {FREE_MARGIN_BYTES}")
        with self._lock:
            self._drop_idle()
            if len(self._uploads) >= MAX_UPLOADS:
                raise BlobError(f"nimbus is receiving {MAX_UPLOADS} blobs already; try again "
                                f"when one is done")
            upload = secrets.token_hex(8)
            path = self.directory / f"{PARTIAL_PREFIX}upload-{upload}"
            self._uploads[upload] = _Upload(size, path, open(path, "wb"))
        return upload

    def receive(self, upload: str, offset: int, data: bytes) -> int:
        """Append ``data``, which must start at ``offset``, the bytes received so far; returns
        how many have been received now."""
        with self._lock:
            state = self._upload(upload)
            if offset != state.received:
                raise BlobError(f"upload {upload} has {state.received} bytes; a chunk at offset "
                                f"{offset} does not follow them")
            if state.received + len(data) > state.size:
                raise BlobError(f"upload {upload} would grow past the {state.size} bytes it "
                                f"announced")
            state.file.write(data)
            state.hasher.update(data)
            state.received += len(data)
            state.active = time.monotonic()
            return state.received

    def finish(self, upload: str, sha256: str) -> str:
        """Store the upload under its digest, which must be ``sha256`` (the uploader's): a
        transfer that changed a byte is refused, and nothing is stored. Returns the digest."""
        with self._lock:
            state = self._upload(upload)
            del self._uploads[upload]
        try:
            state.file.flush()
            os.fsync(state.file.fileno())
            state.file.close()
            if state.received != state.size:
                raise BlobError(f"upload {upload} ended after {state.received} of the "
                                f"{state.size} bytes it announced")
            digest = state.hasher.hexdigest()
            if digest != sha256:
                raise BlobError(f"the bytes received hash to {digest}, not to {sha256}, the "
                                f"uploader's SHA-256: something changed them on the way; "
                                f"upload again")
            self.install(state.path, digest)
            return digest
        finally:
            state.path.unlink(missing_ok=True)

    def uploads(self) -> set[str]:
        """The ids of the uploads in progress."""
        with self._lock:
            return set(self._uploads)

    def abandon(self, upload: str) -> None:
        with self._lock:
            state = self._uploads.pop(upload, None)
        if state is not None:
            state.file.close()
            state.path.unlink(missing_ok=True)

    def _upload(self, upload: str) -> _Upload:
        state = self._uploads.get(upload) if isinstance(upload, str) else None
        if state is None:
            raise BlobError(f"no upload {upload!r} in progress on this nimbus (it finished, "
                            f"was idle over {UPLOAD_IDLE_SECS:.0f} s, or nimbus restarted); "
                            f"upload again")
        return state

    def _drop_idle(self) -> None:
        now = time.monotonic()
        for upload, state in list(self._uploads.items()):
            if now - state.active > UPLOAD_IDLE_SECS:
                log.info("abandoning blob upload %s: nothing received for %.0f s", upload,
                         now - state.active)
                del self._uploads[upload]
                state.file.close()
                state.path.unlink(missing_ok=True)

    # ----- files

    def partial_path(self, digest: str) -> Path:
        """Where a copy of ``digest`` from another nimbus is written until it is verified."""
        return self.directory / f"{PARTIAL_PREFIX}{self.path(digest).name}.partial"

    def install(self, verified: Path, digest: str) -> None:
        """Make ``verified`` (a file whose bytes hash to ``digest``) the store's copy: read
        only, under its digest, in one rename; the same bytes stored already stay as they
        are."""
        target = self.path(digest)
        verified.chmod(0o440)
        os.replace(verified, target)

    def read(self, digest: str, offset: int) -> bytes:
        """At most CHUNK_BYTES of the blob ``digest`` from ``offset`` (none past its end)."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise BlobError(f"an offset is a whole number of bytes, not {offset!r}")
        try:
            with open(self.path(digest), "rb") as f:
                f.seek(offset)
                return f.read(CHUNK_BYTES)
        except FileNotFoundError:
            raise BlobError(f"this nimbus holds no blob {digest}") from None

    def remove_unused(self, used: set[str], older_than: float) -> list[str]:
        """Remove the blobs whose digest is not in ``used`` and whose file is older than
        ``older_than`` seconds (one just stored may not be in ZooKeeper yet); returns their
        digests."""
        removed = []
        now = time.time()
        for digest in self.digests() - used:
            path = self.path(digest)
            try:
                if now - path.stat().st_mtime < older_than:
                    continue
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(digest)
        return removed
