"""What a topology's code package carries: its project directory, every file in it, less what the
project's ``.stormletignore`` and the defaults below exclude.

**The project directory** is the topology file's directory, or for a streamparse project its
root (the directory holding its ``config.json``). It is what gets packaged, and it is where the
topology runs: a worker's working directory is the unpacked project directory, and nimbus loads
the topology there when it inspects a submission. So a path relative to the project directory
(``open("data/stopwords.txt")`` beside the topology file) resolves on every worker as it does
under ``stormlet local`` started from that directory (where ``sparse run`` is started for a
streamparse project). ``stormlet local`` itself runs wherever it is started; a path built from
``__file__`` (``Path(__file__).parent / "data" / "stopwords.txt"``) resolves the same anywhere.

**The ignore file**, ``.stormletignore`` at the project directory's top, is in gitignore syntax
(``pathspec``'s ``GitIgnoreSpec``: the same rules as git, negation with ``!`` included). Its
lines come after ``DEFAULT_IGNORES``, so a ``!`` line can take back a default (``!build/``). As
in git, a file inside an excluded directory cannot be taken back: the directory is never
entered. A directory holding ``pyvenv.cfg`` is a virtualenv, whatever its name, and is left out.

**Symbolic links** are followed inside the project only: a link to a file or directory in the
project is packaged as what it points to, under the link's name. A link that leads out of the
project, or to nothing, or to a directory that contains it, refuses the package, naming the
link: its target would be missing on the workers, which is the ``FileNotFoundError`` packaging
every file is meant to prevent. Exclude such a link in ``.stormletignore`` (an excluded path is
never looked at) or copy its target in.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pathspec

from ..streamparse.project import project_root

log = logging.getLogger(__name__)

IGNORE_FILE = ".stormletignore"
# Version control, virtualenvs, caches and build outputs: nothing a worker reads.
DEFAULT_IGNORES = (
    ".git/", ".hg/", ".svn/",
    ".venv/", "venv/",
    "__pycache__/", "*.pyc", ".pytest_cache/", ".tox/", ".mypy_cache/", ".ruff_cache/",
    "build/", "dist/", "*.egg-info/",
    "node_modules/",
)
# What makes a directory a virtualenv (PEP 405), whatever it is called.
VIRTUALENV_MARKER = "pyvenv.cfg"


class ProjectError(Exception):
    """A project directory that cannot be packaged; the message names the path and what to do."""


@dataclass(frozen=True)
class ProjectFile:
    """One file to package: its name in the package (``/``-separated, relative to the project
    directory), where it is read from, and its size in bytes."""

    name: str
    path: Path
    size: int


def project_directory(topology_file: str | Path) -> Path:
    """The project directory of ``topology_file`` (see the module's docstring), resolved."""
    topology_file = Path(topology_file).resolve()
    return project_root(topology_file) or topology_file.parent


def ignore_spec(directory: Path) -> pathspec.GitIgnoreSpec:
    """The defaults, then the lines of ``directory``'s ``.stormletignore`` if it has one."""
    lines = list(DEFAULT_IGNORES)
    ignore_file = directory / IGNORE_FILE
    if ignore_file.is_file():
        lines += ignore_file.read_text(errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def project_files(directory: str | Path, max_files: int) -> list[ProjectFile]:
    """Every file under ``directory`` that is not ignored, in a fixed order (by name, a
    directory's files before its subdirectories'); ``ProjectError`` past ``max_files`` files
    or on a link that leaves the project."""
    base = Path(directory).resolve()
    spec = ignore_spec(base)
    found: list[ProjectFile] = []

    def walk(real: Path, prefix: str, ancestors: frozenset[Path]) -> None:
        subdirectories = []
        with os.scandir(real) as scan:
            entries = sorted(scan, key=lambda e: e.name)
        for entry in entries:
            name = prefix + entry.name
            is_dir = entry.is_dir()   # follows a link: a link to a directory is a directory
            if spec.match_file(name + "/" if is_dir else name):
                continue
            target = Path(entry.path).resolve() if entry.is_symlink() else Path(entry.path)
            if entry.is_symlink():
                _check_link(base, name, Path(entry.path), target, ancestors)
            if is_dir:
                if (target / VIRTUALENV_MARKER).is_file():
                    log.info("not packaging %s: a virtualenv (it holds %s)", name,
                             VIRTUALENV_MARKER)
                    continue
                subdirectories.append((target, name + "/"))
            elif entry.is_file():
                if len(found) == max_files:
                    raise ProjectError(
                        f"{base} holds more than {max_files} files to package (the limit); list "
                        f"what the workers do not need in {base / IGNORE_FILE} (gitignore "
                        f"syntax), or put the topology in a directory of its own")
                found.append(ProjectFile(name, target, entry.stat().st_size))
            else:
                log.info("not packaging %s: not a regular file", name)
        for target, name in subdirectories:
            walk(target, name, ancestors | {target})

    walk(base, "", frozenset({base}))
    return found


def _check_link(base: Path, name: str, link: Path, target: Path,
                ancestors: frozenset[Path]) -> None:
    """Refuse a link whose target is missing, outside ``base`` or one of its own ancestors."""
    points_to = os.readlink(link)
    advice = f"list it in {base / IGNORE_FILE} to leave it out, or copy what it points to in"
    if not target.exists():
        raise ProjectError(f"{base / name} is a symbolic link to {points_to}, which does not "
                           f"exist; {advice}")
    if not target.is_relative_to(base):
        raise ProjectError(f"{base / name} is a symbolic link to {points_to}, outside the "
                           f"project directory {base}: it would be missing on the workers; "
                           f"{advice}")
    if target in ancestors:
        raise ProjectError(f"{base / name} is a symbolic link to {points_to}, a directory that "
                           f"contains it (a loop); list it in {base / IGNORE_FILE}")
