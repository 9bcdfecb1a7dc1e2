"""The documentation site's runnable parts, for tests/docs/test_docs.py: its pages, the Python
examples in them, and the `stormlet ...` commands they name.

Every fenced ```python block of a page runs, in the page's order and in one namespace (a later
block may use what an earlier one defined, as a reader would), so an example that no longer
works fails the suite. A page whose examples need a service or take long sets the environment
variable ``STORMLET_DOCS_QUICK`` aside: none does yet.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
# A fenced block: its opening fence's info string and its text (MyST's and CommonMark's syntax).
# A fence may be indented (inside a list item): its text is dedented as the reader sees it.
_FENCE = re.compile(r"^( *)```([^\n`]*)\n(.*?)^\1```\s*$", re.MULTILINE | re.DOTALL)


def _fences(text: str) -> list[tuple[str, str]]:
    """Every fenced block of a Markdown text: its info string and its text."""
    return [(info, textwrap.dedent(body)) for _indent, info, body in _FENCE.findall(text)]


# `stormlet COMMAND` in a code span, and a shell example's line that runs it.
_SPAN_COMMAND = re.compile(r"`stormlet ([a-z][a-z-]*)")
_SHELL_COMMAND = re.compile(r"^\$? ?stormlet ([a-z][a-z-]*)", re.MULTILINE)
_SHELLS = ("sh", "bash", "console", "shell")


def pages() -> list[Path]:
    """Every Markdown page of the site."""
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def python_blocks(page: Path) -> list[str]:
    """The page's Python examples, in order."""
    return [body for info, body in _fences(page.read_text())
            if info.strip().split(" ")[0] in ("python", "py")]


def page_program(page: Path) -> str:
    """The page's examples as one program, each block marked with where it starts."""
    parts = []
    for n, block in enumerate(python_blocks(page), 1):
        parts.append(f"# --- {page.name}, example {n}\n{block}")
    return "\n".join(parts)


def named_commands(text: str) -> set[str]:
    """The ``stormlet`` subcommands a text names (``stormlet local``, ``$ stormlet submit``)."""
    shell = "\n".join(body for info, body in _fences(text)
                      if info.strip().split(" ")[0] in _SHELLS)
    return set(_SPAN_COMMAND.findall(text)) | set(_SHELL_COMMAND.findall(shell))
