"""The documentation site (docs/): it builds in strict mode, its Python examples run, and the
commands it and the README name exist."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from docs_examples import DOCS, named_commands, page_program, pages, python_blocks

ROOT = DOCS.parent
# The README's example runs too: it is the first code a visitor copies.
EXAMPLE_PAGES = [p for p in [*pages(), ROOT / "README.md"] if python_blocks(p)]


@pytest.mark.slow  # ~15 s of Sphinx: once per CI run (the compiled one), not in the inner loop
def test_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")
    # -W: every warning fails the build (a broken link, a page missing from the toctree, a
    # docstring that does not parse); -n: so does every reference that resolves to nothing.
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-E",
         str(DOCS), str(tmp_path / "html")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert build.returncode == 0, build.stdout + build.stderr
    from stormlet import config

    # The configuration page is generated from DEFAULTS: every key stormlet reads is on it.
    page = (tmp_path / "html" / "reference" / "config.html").read_text()
    assert [key for key in config.DEFAULTS if key not in page] == []


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page, tmp_path):
    """A page's examples run as one program, in a directory of their own."""
    script = tmp_path / "examples.py"
    script.write_text(page_program(page))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, f"{page}:\n{run.stdout}\n{run.stderr}"


def test_named_commands_exist():
    """Every `stormlet COMMAND` the site or the README names is a command (the README once named
    `stormlet cluster` and `stormlet metrics`, which never existed)."""
    from stormlet.cli import main

    texts = {p: p.read_text() for p in [*pages(), ROOT / "README.md"] if p.exists()}
    unknown = {str(p.relative_to(ROOT)): sorted(named_commands(t) - set(main.commands))
               for p, t in texts.items()}
    assert not {p: c for p, c in unknown.items() if c}, unknown
