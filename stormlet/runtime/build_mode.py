"""Whether the hot path runs compiled or as plain Python.

The hot modules are plain Python files; ``pip install .`` compiles them with Cython when a C
compiler is there (see setup.py; the .pxd file beside a module types it), and the same files run
interpreted where it is not. Both modes behave identically (a tuple's ``values`` cannot be
reassigned in either: see tuples.py); compiled is faster.

The compiled modules share their classes at the C level (the collectors build ``Tuple`` objects
directly), so they load all together or not at all: ``select()``, run once as the package is
imported, loads every hot module from its .py file when ``STORMLET_PURE_PYTHON=1`` is set, when
some of them were not compiled, or when one was edited since it was. ``stormlet local`` and the
benchmarks print ``describe()``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

#: The modules setup.py compiles: the per-tuple path of every executor. One list, read by the
#: build and by ``mode()``.
HOT_MODULES = (
    "stormlet.tuples",
    "stormlet.runtime.int_map",
    "stormlet.runtime.rotating_map",
    "stormlet.runtime.acker",
    "stormlet.values",                     # the full value check, for values not plain scalars
    "stormlet.runtime.serialization",
    "stormlet.runtime.choosers",
    "stormlet.collectors",
    "stormlet.runtime.routing",
    "stormlet.metrics.histogram",
    "stormlet.runtime.metrics",
    "stormlet.runtime.sampling",           # a sample's making, while tuple sampling is on
    "stormlet.runtime.task_collectors",
    "stormlet.runtime.transfer",
    "stormlet.runtime.bolt_executor",
    "stormlet.runtime.spout_executor",
    "stormlet.runtime.acker_executor",
    "stormlet.cluster.columns",            # tuples to and from the wire's columns
    "stormlet.spark.backfill.emitter",     # backfill's: every emit of a backfill's bolts
)

#: Modules compiled once that are plain Python now (groupings.py's choosers moved to
#: runtime/choosers.py). A build of one left in a source tree, which a rebuild does not remove,
#: would load in place of its .py: their .py files load whatever the mode.
RETIRED_HOT_MODULES = ("stormlet.groupings",)

COMPILED = "compiled"
INTERPRETED = "interpreted"
#: Set to 1 to run the plain Python even where the compiled modules are installed (CI runs the
#: unit tests both ways).
PURE_PYTHON_ENV = "STORMLET_PURE_PYTHON"

_why_interpreted = ""


class _SourceFinder:
    """Finds the hot modules' .py files ahead of their compiled builds."""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources

    def find_spec(self, name: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        source = self.sources.get(name)
        return None if source is None else importlib.util.spec_from_file_location(name, source)


def _path(name: str, suffix: str) -> str:
    """Where hot module ``name`` would be with ``suffix`` (".py", or an extension suffix)."""
    package_dir = os.path.abspath(__file__)
    for _ in range(__name__.count(".")):  # up to stormlet/, where it lives
        package_dir = os.path.dirname(package_dir)
    return os.path.join(package_dir, *name.split(".")[1:]) + suffix


def _is_built(name: str) -> bool:
    return any(os.path.exists(_path(name, suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _is_stale(name: str) -> bool:
    """Whether a module compiled in a source tree (pip install -e .) was edited since: its C
    file, Cython's output, is older than its .py or .pxd. Installed wheels carry no C files."""
    generated = _path(name, ".c")
    if not os.path.exists(generated):
        return False
    sources = [path for path in (_path(name, ".py"), _path(name, ".pxd")) if os.path.exists(path)]
    return max(os.path.getmtime(path) for path in sources) > os.path.getmtime(generated)


def select() -> None:
    """Load the hot modules from source if they cannot all load compiled, or if asked to."""
    global _why_interpreted
    # A retired module's build never loads; the hot modules' only when all can.
    sources = {name: _path(name, ".py") for name in RETIRED_HOT_MODULES if _is_built(name)}
    built = [name for name in HOT_MODULES if _is_built(name)]
    stale = [name for name in built if _is_stale(name)]
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        _why_interpreted = f"{PURE_PYTHON_ENV}=1"
    elif built and len(built) < len(HOT_MODULES):
        missing = sorted(set(HOT_MODULES) - set(built))
        _why_interpreted = f"partly compiled build, missing {', '.join(missing)}"
    elif stale:
        # Running an old build of edited code would test what is no longer there.
        _why_interpreted = (f"edited since compiled: {', '.join(stale)}; "
                            f"pip install -e . rebuilds")
    if _why_interpreted and built:
        sources.update({name: _path(name, ".py") for name in HOT_MODULES})
    if sources:
        sys.meta_path.insert(0, _SourceFinder(sources))


def compiled_modules() -> list[str]:
    """The hot modules this process loaded from a compiled extension."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = []
    for name in HOT_MODULES:
        module = sys.modules.get(name) or importlib.import_module(name)
        if (getattr(module, "__file__", "") or "").endswith(suffixes):
            found.append(name)
    return found


def mode() -> str:
    """``"compiled"`` when the hot path runs compiled, else ``"interpreted"``."""
    return COMPILED if compiled_modules() else INTERPRETED


def describe() -> str:
    """One line for logs and benchmark headers."""
    if mode() == COMPILED:
        return "hot path: compiled (Cython)"
    if _why_interpreted:
        return f"hot path: interpreted ({_why_interpreted})"
    return ("hot path: interpreted (not compiled: pip install needs a C compiler and Python's "
            "headers, e.g. Debian's gcc and python3-dev)")
