"""The package's version is written once, in stormlet/version.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import stormlet
from stormlet import version
from stormlet.cluster import environments


def test_the_version_is_read_from_one_module_by_the_front_the_daemons_and_the_packaging():
    project = tomllib.loads((Path(stormlet.__file__).parent.parent / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert (project["tool"]["setuptools"]["dynamic"]["version"]
            == {"attr": "stormlet.version.__version__"})
    assert stormlet.__version__ == environments.__version__ == version.__version__
