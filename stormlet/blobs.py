"""Blobs as a component sees them: files in its working directory, under the local names its
topology's ``topology.blobstore.map`` gives (``stormlet blob`` stores them on the cluster).

A bolt opens a blob by its local name, like any file. When someone runs ``stormlet blob
update``, the worker's supervisor copies the new version and swaps the name over to it in one
rename: a component that opens the name again reads the new version, and a file it holds open
stays the old one until it closes it. To be told, ask for the name's ``version()`` now and
then, or ``watch`` it:

    import stormlet.blobs

    class Tagger(Bolt):
        def prepare(self, conf, context, collector):
            self.model = load_model("model.bin")
            self.loaded = stormlet.blobs.version("model.bin")

        def execute(self, tup):
            if stormlet.blobs.version("model.bin") != self.loaded:   # cheap: one readlink
                self.loaded = stormlet.blobs.version("model.bin")
                self.model = load_model("model.bin")
            ...

    # or, on a thread of the watch's own (the callback must be safe to run beside execute):
    self.watch = stormlet.blobs.watch("model.bin", lambda path: self.reload(path))
    self.watch.stop()   # in cleanup

This module only reads the file system: it works the same under ``stormlet local``, where the
name is a plain file you put in the working directory (its version then changes when the file
is replaced or rewritten).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

__all__ = ["Watch", "version", "watch"]

# How often a watch looks at its name by default.
WATCH_INTERVAL_SECS = 1.0


def version(name: str | os.PathLike) -> str:
    """What ``name`` holds now, as a string that changes when its content does: on a cluster
    the blob's SHA-256 (the name of the cached file the link points at); for a plain file, its
    inode, size and modification time. ``FileNotFoundError`` when there is no such file."""
    path = Path(name)
    try:
        target = Path(os.readlink(path))
    except OSError:   # not a link: a plain file (or nothing, which stat says)
        status = path.stat()
        return f"file:{status.st_dev}:{status.st_ino}:{status.st_size}:{status.st_mtime_ns}"
    if not (path.parent / target).exists():
        raise FileNotFoundError(f"{path} points at {target}, which is not there")
    return target.name


class Watch:
    """Calls ``callback(path)`` on a thread of its own each time ``version(path)`` changes.
    Made by ``watch``; ``stop()`` ends it; ``version`` is the last version seen."""

    def __init__(self, name: str | os.PathLike, callback: Callable[[Path], object],
                 interval: float = WATCH_INTERVAL_SECS):
        # Absolute now: the component may change directory later.
        self.path = Path(os.path.abspath(name))
        self.callback = callback
        self.interval = interval
        self.version = version(self.path)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"blob-watch-{self.path.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.interval + 1)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                now = version(self.path)
            except OSError:
                continue   # replaced right now, or gone for a moment: look again next time
            if now == self.version:
                continue
            self.version = now
            try:
                self.callback(self.path)
            except Exception:
                # The component's own error: logged, and the watch goes on.
                log.exception("the callback watching %s failed", self.path)


def watch(name: str | os.PathLike, callback: Callable[[Path], object],
          interval: float = WATCH_INTERVAL_SECS) -> Watch:
    """Call ``callback(path)`` each time ``name`` holds a new version, looking every
    ``interval`` seconds; ``path`` is the name's absolute path (open it to read the new
    version). The callback runs on the watch's thread, not the component's."""
    return Watch(name, callback, interval)
