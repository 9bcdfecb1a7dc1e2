"""Nimbus's blob operations: what ``stormlet blob upload|update|list|delete`` call, the chunks
supervisors and standbys copy, the check of a submission's ``topology.blobstore.map``, and the
standbys' replication, as Storm's blob store has them.

A key's record in ZooKeeper (``BlobRecord``: digest, version, size, times) says which bytes it
holds now; the bytes are files in nimbus's ``BlobStore``, by digest. Writes (upload, update,
delete) are the leader's and the admin's; ``blob_list`` is the read role's and any nimbus's;
``get_blob_chunk`` is the daemons' (supervisors, standby nimbuses), by digest, from any nimbus
that holds it. A nimbus keeps the blobs some key holds now and removes the others after
``UNUSED_GRACE_SECS``: a supervisor still copying a replaced version asks again and gets the
new one (the old one is of no use to it any more).
"""

from __future__ import annotations

import builtins
import io
import logging
import threading
import time
import zipfile
from typing import Callable

from .. import config as cfg
from . import rpc
from .blob_store import CHUNK_BYTES, BlobError, BlobStore
from .blob_transfer import BlobTransferError, download
from .names import check_blob_key
from .security import Security
from .zk_state import BlobRecord, ClusterState

log = logging.getLogger(__name__)

# A stored blob no key holds is removed once its file is this old (one just uploaded is in the
# store a moment before its record is in ZooKeeper).
UNUSED_GRACE_SECS = 60.0
# What a topology with this status no longer holds on to.
KILLED = "killed"


class BlobService:
    def __init__(self, store: BlobStore, state: Callable[[], ClusterState],
                 require_leader: Callable[[], None], security: Security, own_address: str):
        self.store = store
        self._state = state
        self._require_leader = require_leader
        self.security = security
        self.own_address = own_address
        self._uploads: dict[str, tuple[str, bool]] = {}   # upload id -> (key, replace)
        self._lock = threading.Lock()   # a key's record changes one request at a time

    # ----- the admin's requests

    def upload_begin(self, key: str, size: int, replace: bool = False) -> dict:
        """Start an upload of ``key``'s first version (an existing key is refused: use
        update), or with ``replace`` its next (a key that does not exist is refused)."""
        self._require_leader()
        check_blob_key(key)
        self._check_existence(key, bool(replace))
        try:
            upload = self.store.begin(size)
        except BlobError as exc:
            raise rpc.RpcError(str(exc)) from None
        # Forget the uploads the store abandoned (idle too long) along with this one's start.
        in_progress = self.store.uploads()
        self._uploads = {u: v for u, v in self._uploads.items() if u in in_progress}
        self._uploads[upload] = (key, bool(replace))
        return {"upload": upload, "chunk_bytes": CHUNK_BYTES}

    def upload_chunk(self, upload: str, offset: int, payload: bytes = b"") -> int:
        self._require_leader()
        try:
            return self.store.receive(upload, offset, payload)
        except BlobError as exc:
            raise rpc.RpcError(str(exc)) from None

    def upload_commit(self, upload: str, sha256: str) -> dict:
        """Store the upload (checked against ``sha256``) as its key's new version."""
        self._require_leader()
        key, replace = self._uploads.pop(upload, (None, False))
        if key is None:
            self.store.abandon(upload)
            raise rpc.RpcError(f"no upload {upload!r} in progress on this nimbus; upload again")
        with self._lock:
            try:
                self._check_existence(key, replace)   # again: another upload may have won
            except rpc.RpcError:
                self.store.abandon(upload)
                raise
            try:
                digest = self.store.finish(upload, sha256)
            except BlobError as exc:
                raise rpc.RpcError(str(exc)) from None
            state = self._state()
            old = state.blob(key)
            now = time.time()
            record = BlobRecord(digest, old.version + 1 if old else 1,
                                self.store.path(digest).stat().st_size,
                                old.created if old else now, now)
            state.set_blob(key, record)
        log.info("blob %s is now version %d (%d bytes, sha256 %s)", key, record.version,
                 record.size, digest)
        return {"key": key, **record._asdict()}

    def upload_abandon(self, upload: str) -> None:
        self._uploads.pop(upload, None)
        self.store.abandon(upload)

    def delete(self, key: str) -> dict:
        """Remove ``key``; refused while a topology maps it (kill that first)."""
        self._require_leader()
        check_blob_key(key)
        with self._lock:
            state = self._state()
            record = state.blob(key)
            if record is None:
                raise rpc.RpcError(f"the blob store holds no key {key!r}")
            users = sorted(str(topology.get("name")) for topology in state.topologies().values()
                           if topology.get("status") != KILLED
                           and key in _mapped(topology.get("conf")))
            if users:
                raise rpc.RpcError(f"blob {key!r} is mapped by the running topology "
                                   f"{', '.join(users)} ({cfg.TOPOLOGY_BLOBSTORE_MAP}): kill it "
                                   f"first")
            state.remove_blob(key)
        log.info("deleted blob %s (version %d)", key, record.version)
        return {"key": key, "version": record.version}

    # ----- anyone's

    def list(self) -> list[dict]:
        """Every key, with its digest, version, size and times, in key order."""
        return [{"key": key, **record._asdict()}
                for key, record in sorted(self._state().blobs().items())]

    def get_chunk(self, sha256: str, offset: int) -> bytes:
        """At most CHUNK_BYTES of the blob with this digest, from ``offset``."""
        try:
            return self.store.read(sha256, offset)
        except BlobError as exc:
            raise rpc.RpcError(str(exc)) from None

    # ----- submissions

    def check_map(self, name: str, conf: dict, package: bytes) -> None:
        """Refuse (``RpcError``) a topology whose ``topology.blobstore.map`` names a key the
        store does not hold, or a local name its code package has a file or directory of."""
        mapping = cfg.blobstore_map(conf.get(cfg.TOPOLOGY_BLOBSTORE_MAP))
        if not mapping:
            return
        held = self._state().blobs()
        unknown = sorted(set(mapping) - set(held))
        if unknown:
            listing = ", ".join(sorted(held)) or "none"
            raise rpc.RpcError(
                f"topology {name!r} maps blob {', '.join(map(repr, unknown))} "
                f"({cfg.TOPOLOGY_BLOBSTORE_MAP}), which the blob store does not hold (it holds: "
                f"{listing}); upload it first with `stormlet blob upload KEY FILE`")
        with zipfile.ZipFile(io.BytesIO(package)) as archive:
            top = {member.split("/", 1)[0] for member in archive.namelist()}
        clashes = sorted(local for local in mapping.values() if local in top)
        if clashes:
            raise rpc.RpcError(
                f"topology {name!r} maps a blob to {', '.join(map(repr, clashes))} "
                f"({cfg.TOPOLOGY_BLOBSTORE_MAP}), which its project directory has already: "
                f"choose another local name, or leave the file out of the package "
                f"(.stormletignore)")

    # ----- keeping a copy of every blob (standbys; a leader fills its gaps the same way)

    def replicate(self, peers: builtins.list[str]) -> None:   # list: a method of the class
        """Copy every blob some key holds and this nimbus lacks from ``peers``, then remove the
        ones no key holds (after the grace)."""
        records = self._state().blobs()
        for key, record in records.items():
            if self.store.has(record.sha256):
                continue
            try:
                download(peers, record.sha256, record.size, self.store.path(record.sha256),
                         self.store.partial_path(record.sha256), self.security)
            except (BlobTransferError, OSError) as exc:
                log.warning("could not copy blob %s (version %d) from another nimbus: %s", key,
                            record.version, exc)
                continue
            log.info("copied blob %s (version %d, %d bytes)", key, record.version, record.size)
        for digest in self.store.remove_unused({r.sha256 for r in records.values()},
                                               UNUSED_GRACE_SECS):
            log.info("removed blob %s: no key holds it any more", digest)

    def _check_existence(self, key: str, replace: bool) -> None:
        exists = self._state().blob(key) is not None
        if exists and not replace:
            raise rpc.RpcError(f"the blob store holds {key!r} already: `stormlet blob update "
                               f"{key} FILE` replaces it with a new version")
        if replace and not exists:
            raise rpc.RpcError(f"the blob store holds no key {key!r}: `stormlet blob upload "
                               f"{key} FILE` makes it")


def _mapped(conf: object) -> dict[str, str]:
    """The blob map of a recorded topology config (one that no longer parses maps nothing)."""
    if not isinstance(conf, dict):
        return {}
    try:
        return cfg.blobstore_map(conf.get(cfg.TOPOLOGY_BLOBSTORE_MAP))
    except ValueError:
        return {}
