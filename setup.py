"""Builds stormlet, compiling the hot modules (stormlet/runtime/build_mode.py's HOT_MODULES) with
Cython.

The compiled modules are the same .py files, typed by the .pxd files beside them; where Cython or
a C compiler is missing, or STORMLET_PURE_PYTHON=1 is set, the build says so in one line and the
package runs as plain Python, behaving identically.
"""

import os
import runpy
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Read without importing stormlet: its dependencies are not in the build environment.
BUILD_MODE = runpy.run_path(os.path.join("stormlet", "runtime", "build_mode.py"))
HOT_MODULES, PURE_PYTHON_ENV = BUILD_MODE["HOT_MODULES"], BUILD_MODE["PURE_PYTHON_ENV"]


def notice(why: str) -> None:
    print(f"stormlet: {why}; the hot path will run as plain Python", file=sys.stderr)


def extensions() -> list:
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        notice(f"{PURE_PYTHON_ENV}=1 is set")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        notice("Cython is not installed")
        return []
    modules = [Extension(name, [name.replace(".", os.sep) + ".py"])
               for name in HOT_MODULES]
    # annotation_typing off: annotations document, the .pxd files type. A compiled module then
    # accepts exactly what the interpreted one does (Cython would enforce `list` annotations).
    return cythonize(modules, language_level=3, quiet=True,
                     compiler_directives={"annotation_typing": False})


class OptionalBuildExt(build_ext):
    """Compile every hot module, or none: a failure (no compiler, say) removes the ones built."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            notice(f"compiling the hot modules failed ({str(exc).splitlines()[0][:200]})")
            for extension in self.extensions:
                built = self.get_ext_fullpath(extension.name)
                if os.path.exists(built):
                    os.remove(built)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
