"""Loading a topology file: a Python module that defines ``topology`` (and maybe ``config``), or a
streamparse project's topology file, which defines a ``Topology`` class (``stormlet.streamparse``).
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

from .streamparse import project
from .topology import Topology, TopologyError


class TopologyFileError(Exception):
    """The file cannot give a topology; the message says which file and why."""


def load_topology_file(path: str | Path) -> tuple[Topology, dict[str, Any]]:
    """Import ``path`` and return its ``topology`` and ``config`` (``{}`` if it has none)."""
    path = Path(path)
    if not path.is_file():
        raise TopologyFileError(f"{path}: no such file")
    module_name = f"stormlet_topology_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TopologyFileError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    # Components are deep-copied and, on a cluster, pickled: their module must be importable.
    sys.modules[module_name] = module
    streamparse = project.uses_streamparse(path)
    if streamparse:
        project.alias_streamparse()
    directories = project.import_paths(path) if streamparse else [path.resolve().parent]
    for directory in reversed(directories):
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise TopologyFileError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except TopologyError as exc:
        raise TopologyFileError(f"{path}: {exc}") from None
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise TopologyFileError(
            f"{path}: importing it raised {type(exc).__name__}: {exc} "
            f"(at {where.filename}:{where.lineno})") from None
    topology = getattr(module, "topology", None)
    if topology is None and streamparse:
        return _streamparse_topology(path, module)
    if topology is None:
        raise TopologyFileError(
            f"{path}: defines no module-level `topology` (set topology = builder.build())")
    if not isinstance(topology, Topology):
        raise TopologyFileError(
            f"{path}: `topology` is a {type(topology).__name__}, not a built Topology "
            f"(did you forget .build()?)")
    config = getattr(module, "config", None) or {}
    if not isinstance(config, dict):
        raise TopologyFileError(f"{path}: `config` must be a dict, got {type(config).__name__}")
    return topology, dict(config)


def _streamparse_topology(path: Path, module: Any) -> tuple[Topology, dict[str, Any]]:
    """The topology of the one streamparse ``Topology`` class ``module`` defines."""
    from .streamparse.build import build
    from .streamparse.dsl import Topology as StreamparseTopology

    classes = [value for value in vars(module).values()
               if isinstance(value, type) and issubclass(value, StreamparseTopology)
               and value is not StreamparseTopology and value.__module__ == module.__name__]
    if len(classes) != 1:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise TopologyFileError(f"{path}: a streamparse topology file defines one Topology "
                                f"subclass (found: {found})")
    try:
        return build(classes[0])
    except TopologyError as exc:
        raise TopologyFileError(f"{path}: {classes[0].__name__}: {exc}") from None
