"""A supervisor's blob cache: every blob its topologies map, fetched once per node and shared
by digest, and seen by each worker under its local name in its working directory, as Storm's
localizer does it (``topology.blobstore.map``; Storm's LocalizedResource and the worker's
symlinks):

    <data dir>/blobs/<sha256>             the bytes, read only: one file per digest, whichever
                                          keys and topologies map it
    <data dir>/blobs/.<sha256>.partial    a copy under way (blob_transfer.download)
    <data dir>/code/<tid>/<localname>     a symbolic link to the cached file: the worker's
                                          working directory is its unpacked project directory

Every pass the supervisor hands ``sync`` the blob map of each topology it runs or is to run
and the keys' records in ZooKeeper. The cache then

- starts copying every digest those keys hold now that it lacks, on a thread of its own (a
  gigabyte must not hold up the supervisor's loop); a worker whose blobs are not all here is not
  started yet (``ready``), and ``link`` makes its links before it starts;
- points each link at its key's digest once that is here: a new link renamed over the old one,
  so the name always resolves, to the old bytes or to the new, never to nothing. That is how an
  update (``stormlet blob update``) reaches running workers: a component that opens the name
  again reads the new version; a file it holds open stays the old one (``stormlet.blobs`` lets
  it notice the change);
- removes a cached file that no link and no wanted key uses once it has been unused for
  ``keep_secs``: a topology submitted again soon finds its blobs here.

A key removed from ZooKeeper (or a ZooKeeper out of reach) changes no link: workers keep what
they have.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import threading
import time
from pathlib import Path
from typing import Callable, NamedTuple

from ..repeats import Repeats
from .names import is_digest
from .zk_state import BlobRecord

log = logging.getLogger(__name__)

# How long an unused cached blob is kept by default.
DEFAULT_KEEP_SECS = 600.0
# A copy that failed is not tried again sooner than this.
RETRY_SECS = 5.0


class Wanted(NamedTuple):
    """What one local name of one topology should hold: the key and its digest and size."""
    key: str
    sha256: str
    size: int
    version: int


#: Copies ``sha256`` of ``size`` bytes into the first path, through the second (a partial file).
Fetch = Callable[[str, int, Path, Path], None]


class BlobCache:
    def __init__(self, directory: str | Path, code_dir: Callable[[str], Path], fetch: Fetch,
                 keep_secs: float = DEFAULT_KEEP_SECS):
        """``code_dir(tid)``: the topology's unpacked project directory, where its links go."""
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in self.directory.glob(".*.partial"):   # a copy a previous run left
            path.unlink(missing_ok=True)
        self.code_dir = code_dir
        self.fetch = fetch
        self.keep_secs = keep_secs
        self._wanted: dict[str, dict[str, Wanted]] = {}   # tid -> local name -> what it holds
        self._missing: dict[str, list[str]] = {}          # tid -> keys no record names
        self._unused_since: dict[str, float] = {}
        self._lock = threading.Lock()
        self._fetching: set[str] = set()
        self._failed_at: dict[str, float] = {}
        self._queue: queue.Queue[tuple[str, int]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._repeats = Repeats(log)

    def path(self, digest: str) -> Path:
        return self.directory / digest

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    # ----- every pass

    def sync(self, maps: dict[str, dict[str, str]], records: dict[str, BlobRecord] | None) -> None:
        """``maps``: each topology here (running or to start) -> its blob map (key -> local
        name); ``records``: the keys' records, or None when ZooKeeper is out of reach (what
        each name should hold stays as it was)."""
        for tid in list(self._wanted):
            if tid not in maps:
                del self._wanted[tid]
                self._missing.pop(tid, None)
        for tid, mapping in maps.items():
            before = self._wanted.get(tid, {})
            wanted, missing = {}, []
            for key, local in mapping.items():
                record = records.get(key) if records is not None else None
                if record is not None:
                    wanted[local] = Wanted(key, record.sha256, record.size, record.version)
                elif local in before:
                    wanted[local] = before[local]   # keep what it held
                else:
                    missing.append(key)
            self._wanted[tid] = wanted
            self._missing[tid] = missing
        for tid, wanted in self._wanted.items():
            for local, want in wanted.items():
                if not self.has(want.sha256):
                    self._request(want)
                    continue
                try:
                    self._update_link(tid, local, want)
                except OSError as exc:   # this link's trouble stops no other, nor the pass
                    self._repeats.warning(("link", tid, local), "topology %s: cannot link %s "
                                          "to blob %r: %s", tid, local, want.key, exc)
        try:
            self._remove_unused()
        except OSError as exc:
            self._repeats.warning("cleanup", "cannot clean the blob cache %s: %s",
                                  self.directory, exc)

    def ready(self, tid: str) -> bool:
        """Whether every blob topology ``tid`` maps is here, so its workers may start: its key's
        current version, or (while that is being copied) the version its link holds. False
        for a topology ``sync`` was not told of."""
        wanted = self._wanted.get(tid)
        return (wanted is not None and not self._missing.get(tid)
                and all(self.has(w.sha256) or self._resolves(tid, local)
                        for local, w in wanted.items()))

    def waiting_for(self, tid: str) -> str:
        """What ``tid``'s workers wait for, for the log: '' when nothing."""
        if tid not in self._wanted:
            return "its blob map (the topology's record)"
        parts = [f"blob {key!r}, which the blob store does not hold"
                 for key in self._missing.get(tid, [])]
        parts += [f"blob {w.key!r} version {w.version} ({w.size} bytes) to be copied"
                  for local, w in self._wanted[tid].items()
                  if not self.has(w.sha256) and not self._resolves(tid, local)]
        return "; ".join(parts)

    def link(self, tid: str) -> None:
        """Make every link of ``tid`` in its code directory (before a worker of it starts).
        ``FileNotFoundError`` when a blob is not here yet (see ``ready``)."""
        if not self.ready(tid):
            raise FileNotFoundError(f"topology {tid} waits for {self.waiting_for(tid)}")
        for local, want in self._wanted[tid].items():
            if self.has(want.sha256):   # else its link holds the version before, for now
                self._update_link(tid, local, want)

    def _resolves(self, tid: str, local: str) -> bool:
        """Whether ``tid``'s link ``local`` is there and leads to a cached file."""
        link = self.code_dir(tid) / local
        return link.is_symlink() and link.exists()

    # ----- links

    def _update_link(self, tid: str, local: str, want: Wanted) -> None:
        directory = self.code_dir(tid)
        if not directory.is_dir():
            return   # no worker of it has started here: ``link`` makes them first
        link = directory / local
        target = str(self.path(want.sha256))
        try:
            current = os.readlink(link)
        except FileNotFoundError:
            current = None
        except OSError:   # there, and no link: nimbus refuses such a map at submit
            self._repeats.warning(("not a link", tid, local), "topology %s: %s is a file of its "
                                  "package, not the link to blob %r; leaving it", tid, link,
                                  want.key)
            return
        if current == target:
            return
        # A new link renamed over the old one: the name never resolves to nothing.
        staging = directory / f".{local}.{secrets.token_hex(4)}.link"
        os.symlink(target, staging)
        os.replace(staging, link)
        if current is not None:
            log.info("topology %s: %s now holds blob %r version %d (%s)", tid, local, want.key,
                     want.version, want.sha256[:12])

    def _linked(self) -> set[str]:
        """The digests the links of the topologies here point at."""
        found = set()
        for tid, wanted in self._wanted.items():
            for local in wanted:
                try:
                    name = Path(os.readlink(self.code_dir(tid) / local)).name
                except OSError:
                    continue
                if is_digest(name):
                    found.add(name)
        return found

    # ----- cleaning up

    def _remove_unused(self) -> None:
        with self._lock:
            fetching = set(self._fetching)
        used = ({w.sha256 for wanted in self._wanted.values() for w in wanted.values()}
                | self._linked() | fetching)
        now = time.monotonic()
        cached = {p.name for p in self.directory.iterdir() if is_digest(p.name)}
        for digest in cached - used:
            since = self._unused_since.setdefault(digest, now)
            if now - since >= self.keep_secs:
                self.path(digest).unlink(missing_ok=True)
                del self._unused_since[digest]
                log.info("removed cached blob %s: unused for %.0f s", digest, now - since)
        for digest in set(self._unused_since) - (cached - used):
            del self._unused_since[digest]

    # ----- copying, on a thread of its own

    def _request(self, want: Wanted) -> None:
        with self._lock:
            if want.sha256 in self._fetching:
                return
            if time.monotonic() - self._failed_at.get(want.sha256, -RETRY_SECS) < RETRY_SECS:
                return
            self._fetching.add(want.sha256)
        log.info("copying blob %r version %d (%d bytes, %s)", want.key, want.version, want.size,
                 want.sha256[:12])
        self._queue.put((want.sha256, want.size))
        if self._thread is None:
            self._thread = threading.Thread(target=self._copy_forever, name="blob-cache",
                                            daemon=True)
            self._thread.start()

    def _copy_forever(self) -> None:
        while True:
            digest, size = self._queue.get()
            started = time.monotonic()
            try:
                self.fetch(digest, size, self.path(digest),
                           self.directory / f".{digest}.partial")
            except Exception as exc:
                with self._lock:
                    self._failed_at[digest] = time.monotonic()
                self._repeats.warning(("copy", digest), "could not copy blob %s: %s; trying "
                                      "again in %.0f s", digest, exc, RETRY_SECS)
            else:
                self._repeats.clear(("copy", digest))
                log.info("copied blob %s (%d bytes) in %.1f s", digest, size,
                         time.monotonic() - started)
            finally:
                with self._lock:
                    self._fetching.discard(digest)
