"""The hot path loads compiled or from source, all modules alike, and says which."""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import stormlet
from stormlet.runtime import build_mode

PACKAGE = Path(stormlet.__file__).parent
REPORT = ("import stormlet, importlib, stormlet.runtime.build_mode as b; "
          "print(b.mode()); print(b.describe()); "
          "print(*[importlib.import_module(m).__file__ for m in b.HOT_MODULES], sep='\\n')")


def report(package_parent: Path, **env: str) -> list[str]:
    """mode, describe() and each hot module's file, from a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", REPORT], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(package_parent), **env}, cwd=package_parent)
    return result.stdout.splitlines()


def built() -> bool:
    return all(build_mode._is_built(name) for name in build_mode.HOT_MODULES)


needs_build = pytest.mark.skipif(
    not built() and not os.environ.get("STORMLET_REQUIRE_COMPILED"),
    reason="the hot modules are not compiled here (pip install -e . with Cython and gcc)")


def test_the_build_compiles_every_hot_module_when_ci_requires_it():
    if os.environ.get("STORMLET_REQUIRE_COMPILED"):
        assert built(), "STORMLET_REQUIRE_COMPILED is set but the hot modules are not compiled"
    mode, line, *files = report(PACKAGE.parent, STORMLET_PURE_PYTHON="")
    assert len(files) == len(build_mode.HOT_MODULES)
    if built():
        assert (mode, line) == ("compiled", "hot path: compiled (Cython)")
        assert not any(f.endswith(".py") for f in files)
    else:
        assert mode == "interpreted" and all(f.endswith(".py") for f in files)


@needs_build
def test_pure_python_env_loads_every_hot_module_from_its_source():
    mode, line, *files = report(PACKAGE.parent, STORMLET_PURE_PYTHON="1")
    assert (mode, line) == ("interpreted", "hot path: interpreted (STORMLET_PURE_PYTHON=1)")
    assert all(f.endswith(".py") for f in files)


@needs_build
def test_a_partial_build_runs_all_from_source_and_says_what_is_missing(tmp_path):
    # Compiled modules share classes at the C level: one missing must not mix the two kinds.
    copy = tmp_path / "stormlet"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for leftover in copy.glob("runtime/task_collectors.*.so"):
        leftover.unlink()
    mode, line, *files = report(tmp_path, STORMLET_PURE_PYTHON="")
    assert mode == "interpreted"
    assert line == ("hot path: interpreted (partly compiled build, missing "
                    "stormlet.runtime.task_collectors)")
    assert all(f.startswith(str(copy)) and f.endswith(".py") for f in files)


@needs_build
def test_a_module_edited_since_it_was_compiled_runs_all_from_source(tmp_path):
    copy = tmp_path / "stormlet"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    acker = copy / "runtime" / "acker"
    if not acker.with_suffix(".c").exists():
        pytest.skip("an installed build: no C files to compare with")
    acker.with_suffix(".py").touch()
    os.utime(acker.with_suffix(".py"), (os.path.getmtime(acker.with_suffix(".c")) + 10,) * 2)
    mode, line, *files = report(tmp_path, STORMLET_PURE_PYTHON="")
    assert mode == "interpreted"
    assert line == ("hot path: interpreted (edited since compiled: stormlet.runtime.acker; "
                    "pip install -e . rebuilds)")
    assert all(f.endswith(".py") for f in files)


def test_a_build_left_of_a_module_no_longer_compiled_never_loads(tmp_path):
    # groupings.py was compiled before its choosers moved to runtime/choosers.py; a rebuild
    # leaves its old build beside it, which Python's import would prefer to the .py.
    copy = tmp_path / "stormlet"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name in build_mode.RETIRED_HOT_MODULES:
        path = Path(tmp_path, *name.split("."))
        path.with_name(path.name + importlib.machinery.EXTENSION_SUFFIXES[0]).write_bytes(
            b"not a build: loading it fails")
    code = ("import importlib, stormlet.runtime.build_mode as b; "
            "print(*[importlib.import_module(m).__file__ for m in b.RETIRED_HOT_MODULES])")
    for pure in ("1", ""):
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(tmp_path), "STORMLET_PURE_PYTHON": pure})
        assert result.returncode == 0, result.stderr
        assert all(f.startswith(str(copy)) and f.endswith(".py") for f in result.stdout.split())
