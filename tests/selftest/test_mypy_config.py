"""pyproject.toml's [tool.mypy] names folders and modules one by one (mypy matches bare module
names only exactly): these tests keep those lists in step with the files."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MYPY = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]


def test_every_folder_of_test_modules_is_on_mypy_path():
    # As tests/conftest.py puts them on sys.path: test modules import each other by bare name.
    folders = {str(p.parent.relative_to(REPO)) for p in (REPO / "tests").glob("*/test_*.py")}
    assert folders - set(MYPY["mypy_path"]) == set()


def test_every_benchmark_is_checked_inside_unannotated_functions():
    checked = next(o["module"] for o in MYPY["overrides"] if o.get("check_untyped_defs"))
    benchmarks = {p.stem for p in (REPO / "benchmarks").glob("*.py")}
    assert benchmarks - set(checked) == set()
    assert (REPO / "benchmarks" / "peers").is_dir() and "peers.*" in checked
