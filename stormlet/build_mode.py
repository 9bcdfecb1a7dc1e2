"""Whether the hot path runs compiled or as plain Python.

The hot modules are plain Python files; ``pip install .`` compiles them with Cython when a C
compiler is there (see setup.py), and the same files run interpreted where it is not. Both modes
behave identically; compiled is faster. ``stormlet local`` and the benchmarks print the mode.
"""

from __future__ import annotations

import importlib
import importlib.machinery

#: The modules setup.py compiles: the per-tuple path of every executor. One list, read by the
#: build and by ``mode()``.
HOT_MODULES = (
    "stormlet.tuples",
    "stormlet.rotating_map",
    "stormlet.acker",
    "stormlet.groupings",
    "stormlet.serialization",
    "stormlet.runtime.collector",
    "stormlet.runtime.transfer",
    "stormlet.runtime.bolt_executor",
)

COMPILED = "compiled"
INTERPRETED = "interpreted"


def compiled_modules() -> list[str]:
    """The hot modules this process loaded from a compiled extension."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = []
    for name in HOT_MODULES:
        path = getattr(importlib.import_module(name), "__file__", "") or ""
        if path.endswith(suffixes):
            found.append(name)
    return found


def mode() -> str:
    """``"compiled"`` when every hot module is compiled, else ``"interpreted"`` (a partial
    build counts as interpreted, and ``describe()`` says which are missing)."""
    return COMPILED if len(compiled_modules()) == len(HOT_MODULES) else INTERPRETED


def describe() -> str:
    """One line for logs and benchmark headers."""
    found = compiled_modules()
    if len(found) == len(HOT_MODULES):
        return "hot path: compiled (Cython)"
    if not found:
        return "hot path: interpreted (plain Python; install with a C compiler to compile it)"
    missing = sorted(set(HOT_MODULES) - set(found))
    return f"hot path: partly compiled; interpreted: {', '.join(missing)}"
