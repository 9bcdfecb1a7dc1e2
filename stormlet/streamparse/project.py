"""Where a streamparse project's code is, and making ``import streamparse`` mean this package.

A streamparse project keeps ``config.json`` at its root, its topology files in ``topologies/``
and its components in ``src/``; its files import components both as ``from bolts.x import ...``
and as ``from src.bolts.x import ...``, so both the root and ``src/`` go on ``sys.path``. A code
package for a cluster carries the whole root (see ``cluster/code.py``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

CONFIG_FILE = "config.json"
SOURCE_DIR = "src"
# Keys streamparse's config.json has (at least one of them), so another tool's config.json
# does not make a directory a streamparse project.
_CONFIG_KEYS = ("topology_specs", "virtualenv_specs", "envs", "serializer")
_IMPORTS_STREAMPARSE = re.compile(r"^\s*(from|import)\s+streamparse\b", re.MULTILINE)
_ALIAS = "streamparse"
_PACKAGE = __name__.rpartition(".")[0]


def project_root(topology_file: Path) -> Path | None:
    """The streamparse project ``topology_file`` belongs to: the directory holding its
    ``config.json``, the file's own directory or its parent (``topologies/``'s)."""
    directory = topology_file.resolve().parent
    for candidate in (directory, directory.parent):
        if _is_streamparse_config(candidate / CONFIG_FILE):
            return candidate
    return None


def uses_streamparse(topology_file: Path) -> bool:
    """Whether the file is part of a streamparse project or imports streamparse."""
    if project_root(topology_file) is not None:
        return True
    try:
        return bool(_IMPORTS_STREAMPARSE.search(topology_file.read_text(errors="replace")))
    except OSError:
        return False


def import_paths(topology_file: Path) -> list[Path]:
    """The directories a streamparse topology's imports resolve from: the project root and its
    ``src/`` (or the file's own directory outside a project)."""
    root = project_root(topology_file) or topology_file.resolve().parent
    source = root / SOURCE_DIR
    return [root, source] if source.is_dir() else [root]


def alias_streamparse() -> None:
    """From now on, ``import streamparse`` (and its submodules) in this process gives
    stormlet's package, even where the real streamparse is installed or already imported."""
    for name in [n for n in sys.modules if n == _ALIAS or n.startswith(_ALIAS + ".")]:
        if not sys.modules[name].__name__.startswith(_PACKAGE):
            del sys.modules[name]
    if not any(isinstance(finder, _StreamparseAlias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StreamparseAlias())


def _is_streamparse_config(path: Path) -> bool:
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and any(key in config for key in _CONFIG_KEYS)


class _StreamparseAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``streamparse.X`` as ``stormlet.streamparse.X`` (one module under both names)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _ALIAS and not fullname.startswith(_ALIAS + "."):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        target = _PACKAGE + spec.name[len(_ALIAS):]
        try:
            return importlib.import_module(target)
        except ModuleNotFoundError:
            raise ModuleNotFoundError(
                f"stormlet runs streamparse topologies itself and has no {spec.name!r} (it has "
                f"streamparse's components, DSL and Tuple: streamparse, streamparse.bolt, "
                f"streamparse.spout, streamparse.component, streamparse.dsl, streamparse.storm)",
                name=spec.name) from None

    def exec_module(self, module: ModuleType) -> None:
        """The module was imported whole under its own name; nothing more to run."""
