"""What Python packages a topology declares it needs: read from its project when it is
submitted, the usual ways, and shipped in its code package's manifest as one normalized list.

Where they are declared, the first found wins (``declared`` says which it used):

1. ``stormlet submit --requirements FILE``: a pip requirements file anywhere;
2. a streamparse project's ``virtualenvs/<topology>.txt`` (the directory is ``config.json``'s
   ``virtualenv_specs``, ``<topology>`` the topology file's name without ``.py``, as ``sparse
   submit`` reads it);
3. ``requirements.txt`` in the project directory;
4. ``[project].dependencies`` of ``pyproject.toml`` in the project directory (the project's
   dependencies, not the project itself).

A requirements file holds requirement lines (PEP 508: ``humanize>=4``, ``numpy==2.1.*``),
comments and ``-r OTHER`` includes (relative to the file). Any other option is refused, naming
the file and line: the index a cluster installs from is the cluster's setting (the daemons'
``--pip-index-url``, or pip's own configuration), and wheels a cluster cannot download ship with
the topology in the project's ``wheels/`` directory.

``streamparse`` is satisfied by stormlet itself (``stormlet.streamparse``), so a line naming it
is dropped: installing the real one would do nothing for a stormlet worker.

Normalizing (names canonical, specifiers in one order, duplicates and order gone) makes two
projects that declare the same packages share one environment on each node
(``environments.py``).
"""

from __future__ import annotations

import json
import logging
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..streamparse.project import CONFIG_FILE, project_root
from .project_files import project_directory

log = logging.getLogger(__name__)

REQUIREMENTS_FILE = "requirements.txt"
PYPROJECT_FILE = "pyproject.toml"
# streamparse's config.json key naming the directory of its per-topology requirements files,
# and its default.
STREAMPARSE_SPECS_KEY = "virtualenv_specs"
STREAMPARSE_SPECS_DIR = "virtualenvs"
# Wheels shipped in the project for clusters without an index: pip finds them there.
WHEELS_DIR = "wheels"
# Packages a stormlet worker already provides.
PROVIDED = frozenset({"streamparse"})
INCLUDE_OPTIONS = ("-r", "--requirement")
MAX_INCLUDE_DEPTH = 10
# An option line: its name, and its value after a space or "=" ("-r base.txt").
_OPTION = re.compile(r"(-[^\s=]*)(?:[\s=]+(.*))?$")


class DependencyError(Exception):
    """Declared dependencies that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Dependencies:
    """A topology's declared requirements, normalized (sorted, each once), and where they came
    from, for people (``requirements.txt``, ``virtualenvs/wordcount.txt``, ...)."""

    requirements: tuple[str, ...]
    source: str


def declared(topology_file: str | Path,
             requirements_file: str | Path | None = None) -> Dependencies | None:
    """The dependencies ``topology_file``'s project declares (see the module's docstring), or
    ``requirements_file``'s when given; None when none are declared (the topology then runs in
    the daemons' own environment, as it always has)."""
    topology_file = Path(topology_file).resolve()
    base = project_directory(topology_file)
    if requirements_file is not None:
        path = Path(requirements_file)
        if not path.is_file():
            raise DependencyError(f"{path}: no such requirements file")
        return _dependencies(read_requirements(path), str(path))
    for path in _candidate_files(topology_file, base):
        if not path.is_file():
            continue
        where = path.relative_to(base).as_posix()
        if path.name == PYPROJECT_FILE:
            lines = _pyproject_dependencies(path)
            if lines is None:
                continue
        else:
            lines = read_requirements(path)
        return _dependencies(lines, where)
    return None


def _candidate_files(topology_file: Path, base: Path) -> list[Path]:
    candidates = []
    root = project_root(topology_file)
    if root is not None:
        candidates.append(root / _streamparse_specs_dir(root) / f"{topology_file.stem}.txt")
    return [*candidates, base / REQUIREMENTS_FILE, base / PYPROJECT_FILE]


def _streamparse_specs_dir(root: Path) -> str:
    try:
        config = json.loads((root / CONFIG_FILE).read_text())
        specs = config.get(STREAMPARSE_SPECS_KEY) or STREAMPARSE_SPECS_DIR
    except (OSError, ValueError, AttributeError):
        specs = STREAMPARSE_SPECS_DIR
    return str(specs).rstrip("/")


def _dependencies(lines: list[tuple[str, str]], source: str) -> Dependencies | None:
    """Normalize (requirement, where) pairs; None if nothing is left to install."""
    kept = set()
    for line, where in lines:
        requirement = normalize(line, where)
        if canonicalize_name(Requirement(requirement).name) in PROVIDED:
            log.info("%s: %s is provided by stormlet; not installing it", where, requirement)
            continue
        kept.add(requirement)
    if not kept:
        return None
    return Dependencies(tuple(sorted(kept)), source)


def normalize(line: str, where: str) -> str:
    """One requirement in a canonical spelling (``Humanize >= 4`` -> ``humanize>=4``);
    ``DependencyError`` naming ``where`` if it is not a requirement."""
    try:
        requirement = Requirement(line)
    except InvalidRequirement as exc:
        raise DependencyError(f"{where}: {line!r} is not a requirement pip understands "
                              f"({exc})") from None
    requirement.name = canonicalize_name(requirement.name)
    return str(requirement)


def read_requirements(path: str | Path, depth: int = 0) -> list[tuple[str, str]]:
    """The requirement lines of a pip requirements file and the files it includes with ``-r``,
    each with ``file:line`` for messages; ``DependencyError`` on any other option."""
    path = Path(path)
    if depth > MAX_INCLUDE_DEPTH:
        raise DependencyError(f"{path}: requirements files include each other more than "
                              f"{MAX_INCLUDE_DEPTH} deep (a loop?)")
    try:
        text = path.read_text()
    except OSError as exc:
        raise DependencyError(f"{path}: cannot read it ({exc.strerror})") from None
    found: list[tuple[str, str]] = []
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        if line.startswith("-"):
            match = _OPTION.match(line)
            assert match is not None   # any line that starts with "-"
            option, value = match.groups()
            if option not in INCLUDE_OPTIONS or not value:
                raise DependencyError(
                    f"{where}: {option!r}: stormlet reads only requirements and -r includes "
                    f"here. The index a cluster installs from is the cluster's setting (the "
                    f"daemons' --pip-index-url, or pip's own configuration on each node); put "
                    f"wheels the cluster cannot download in the project's {WHEELS_DIR}/")
            found += read_requirements(path.parent / value.strip(), depth + 1)
        else:
            found.append((line, where))
    return found


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each line that says something: comments (``#`` at the
    start or after a space) dropped, ``\\`` continuations joined, as pip reads them."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if raw.endswith("\\"):
            pending += raw[:-1]
            continue
        line = pending + raw
        pending = ""
        if line.lstrip().startswith("#"):
            continue
        line = line.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if line:
            lines.append((start, line))
    if pending.strip():
        lines.append((start, pending.strip()))
    return lines


def _pyproject_dependencies(path: Path) -> list[tuple[str, str]] | None:
    """``[project].dependencies`` of a pyproject.toml, or None if it declares none."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DependencyError(f"{path}: cannot read it ({exc})") from None
    project = data.get("project")
    if not isinstance(project, dict) or "dependencies" not in project:
        return None
    listed = project["dependencies"]
    if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
        raise DependencyError(f"{path}: [project].dependencies must be a list of requirement "
                              f"strings")
    return [(item, f"{path} [project].dependencies") for item in listed]
