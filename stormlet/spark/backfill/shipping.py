"""How a topology's code reaches Spark's workers, and what it becomes there.

The driver packages the topology's project directory, as ``stormlet submit`` ships it
(``package_code``; ``cluster/project_files.py`` says which files), and broadcasts the bytes;
every task gets a ``TopologyCode``: that broadcast and the plain data every task must agree
on. A worker loads the topology from the code itself (``TopologyCode.load``), so nothing of the
user's classes is ever pickled: a worker never unpickles a class from a module it cannot import.

On a worker:

- the code is unpacked under ``CODE_DIR``, private to the user (code found there is executed), into
  a directory named by the package's digest, unpacked aside and renamed into place (another
  worker process may be doing the same);
- it is loaded once per worker process and code version (Python workers are reused across tasks
  and jobs), one version at a time: a reused worker forgets the modules the last job's code
  imported, so a sibling with the same name (``helpers.py``) comes from this code;
- the config and task numbering are what a streaming run of the same file would have, plus
  ``stormlet.backfill: True`` (``LoadedTopology``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import config as cfg
from ...cluster.code import MANIFEST, CodeError, package_topology, unpack
from ...loader import load_topology_file
from ...runtime.numbering import TopologyLayout
from ...runtime.tuning import tune_for_streaming
from ...serializers import registry_for
from ...topology import ComponentSpec, Topology
from .errors import BackfillError, BackfillWorkerError

# Per user and private: code found here is executed.
CODE_DIR = Path(tempfile.gettempdir()) / f"stormlet-backfill-code-{os.getuid()}"


def package_code(file: Path) -> bytes:
    """The code package of the topology in ``file`` (its project directory), to broadcast;
    raises ``BackfillError`` if it cannot be made."""
    try:
        return package_topology(file)
    except CodeError as exc:
        raise BackfillError(f"{file}: cannot ship it to Spark's workers: {exc}") from None


def code_digest(package: bytes) -> str:
    """The package's name on the workers: one code version, one directory and one load."""
    return hashlib.sha256(package).hexdigest()[:32]


@dataclass(frozen=True)
class TopologyCode:
    """The topology file and the Python files beside it (a code package, as ``stormlet submit``
    ships), broadcast to the workers, with what every task needs to agree on: the name, the
    topology instance id, the config overrides and the acker count that fixes task numbering."""

    name: str
    digest: str
    package: Any              # a Broadcast of the package's bytes
    origin: str               # the directory the code came from, for messages
    overrides: dict[str, Any]
    n_ackers: int
    topology_id: str

    def load(self) -> LoadedTopology:
        """The topology, loaded from this code once per worker process (see the module doc)."""
        loaded = _LOADED.get(self.digest)
        if loaded is None:
            # A Python worker running bolts allocates tuples as a streaming worker does, and
            # CPython's default gen-0 threshold would collect every few hundred of them (more
            # than half the time of a word count). Spark's workers are this job's processes.
            tune_for_streaming()
            _LOADED.clear()    # one code version at a time: see _forget_other_code
            loaded = _LOADED[self.digest] = _load(self.digest, self.package.value,
                                                   self.origin)
        topology, file_conf = loaded
        return LoadedTopology(self, topology, file_conf)


# One load per worker process and code version: Python workers are reused across tasks and
# jobs.
_LOADED: dict[str, tuple[Topology, dict[str, Any]]] = {}


def _load(digest: str, package: bytes, origin: str) -> tuple[Topology, dict[str, Any]]:
    _private_code_dir()
    directory = CODE_DIR / digest
    if not directory.is_dir():
        # Unpacked aside and renamed into place: another worker process may be doing the same.
        staging = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=CODE_DIR))
        unpack(package, staging)
        try:
            os.rename(staging, directory)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    entry = json.loads((directory / MANIFEST).read_text())["entry"]
    _forget_other_code(directory)
    try:
        return load_topology_file(directory / entry)
    except Exception as exc:
        where = str(exc).replace(str(directory), origin)   # name the user's file, not our copy
        raise BackfillWorkerError(f"cannot load the topology on a Spark worker: {where}") from None


def _private_code_dir() -> None:
    CODE_DIR.mkdir(mode=0o700, exist_ok=True)
    st = CODE_DIR.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise BackfillWorkerError(f"{CODE_DIR} belongs to another user or is writable by others; "
                                  f"remove it (topology code is unpacked there and run)")


def _forget_other_code(keep: Path) -> None:
    # A reused worker may have imported another topology's modules: a sibling with the same
    # name (helpers.py) must come from this code, not from the cache of the last job's.
    root, mine = str(CODE_DIR.resolve()) + os.sep, str(keep.resolve())
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None) or ""
        if where.startswith(root) and not where.startswith(mine + os.sep):
            del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not p.startswith(root) or p == mine]


class LoadedTopology:
    """The topology as one worker process loaded it, with the config and task numbering a
    streaming run of the same file would have."""

    def __init__(self, code: TopologyCode, topology: Topology, file_conf: dict[str, Any]):
        self.topology = topology
        self.layout = TopologyLayout(code.name, topology, code.n_ackers)
        self.conf = backfill_conf(file_conf, code.overrides, code.topology_id)
        # The types its tuples may hold, from its config, as a streaming run has them.
        self.registry = registry_for(self.conf)

    def component_conf(self, spec: ComponentSpec) -> dict[str, Any]:
        return spec.component_conf(self.conf)


BACKFILL_KEY = "stormlet.backfill"


def backfill_conf(file_conf: dict[str, Any], overrides: dict[str, Any],
                  topology_id: str) -> dict[str, Any]:
    """The topology config as bolts see it in a backfill: the file's, the overrides, the run's
    topology id, and ``stormlet.backfill: True`` so a bolt can tell it is not live."""
    conf = cfg.merged(file_conf, overrides)
    conf[cfg.STORMLET_TOPOLOGY_ID] = topology_id
    conf[BACKFILL_KEY] = True
    return conf
