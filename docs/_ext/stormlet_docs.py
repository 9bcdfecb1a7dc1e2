"""Sphinx directives that generate reference pages from stormlet's own definitions, so that a
fact is written once, in the code, and the site cannot drift from it:

- ``stormlet-config``: every key of ``stormlet.config.DEFAULTS``, its default and meaning;
- ``stormlet-docstring MODULE``: a module's docstring (where a layout is defined, e.g. the
  ZooKeeper paths), indented blocks kept as written;
- ``stormlet-routes``: every URL rule of the UI's Flask app, the REST API among them.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

# `text` (Markdown's code span) in a docstring or a setting's meaning: an RST literal here.
_CODE_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _literal(text: str) -> str:
    return _CODE_SPAN.sub(r"``\1``", text)


def _cell(text: str) -> nodes.entry:
    entry = nodes.entry()
    entry += nodes.paragraph(text="", children=[nodes.Text(text)])
    return entry


def _code_cell(text: str) -> nodes.entry:
    entry = nodes.entry()
    entry += nodes.paragraph("", "", nodes.literal(text=text))
    return entry


def _table(directive: SphinxDirective, headers: list[str], widths: list[int],
           rows: list[list[nodes.entry]]) -> nodes.table:
    table = nodes.table(classes=["stormlet-generated"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    head_row = nodes.row()
    for header in headers:
        head_row += _cell(header)
    head += head_row
    body = nodes.tbody()
    group += body
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            row += cell
        body += row
    return table


def _parsed_cell(directive: SphinxDirective, text: str) -> nodes.entry:
    entry = nodes.entry()
    directive.state.nested_parse(StringList([_literal(text)], "stormlet.config"), 0, entry)
    return entry


def default_text(value: Any) -> str:
    """How a default reads in the table: None is "none" (the key is unset unless given)."""
    return "none" if value is None else repr(value)


class ConfigDirective(SphinxDirective):
    """Every setting stormlet reads, from ``stormlet.config.DEFAULTS``."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from stormlet import config

        rows = [[_code_cell(key), _code_cell(default_text(setting.default)),
                 _parsed_cell(self, setting.doc)]
                for key, setting in sorted(config.DEFAULTS.items())]
        return [_table(self, ["key", "default", "meaning"], [30, 10, 60], rows)]


def docstring_rst(doc: str) -> list[str]:
    """A module docstring as RST lines: an indented block (a table of paths, a frame's layout)
    after an unindented line is kept as a literal block rather than reflowed as a quote."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        indented = line.startswith(" ")
        starts_block = indented and (i == 0 or not lines[i - 1].strip()
                                     or not lines[i - 1].startswith(" "))
        if starts_block and (not out or not out[-1].startswith(" ")):
            if out and out[-1].strip():
                out.append("")
            out.extend(["::", ""])
        out.append(line)
    return [_literal(line) if not line.startswith(" ") else line for line in out]


class DocstringDirective(SphinxDirective):
    """A module's docstring, where the module is the one definition of what the page shows."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module = importlib.import_module(self.arguments[0])
        container = nodes.container(classes=["stormlet-docstring"])
        self.state.nested_parse(StringList(docstring_rst(module.__doc__ or ""), module.__name__),
                                0, container)
        return [container]


class RoutesDirective(SphinxDirective):
    """Every URL the UI serves, from its Flask app: method, rule and the view that answers."""

    def run(self) -> list[nodes.Node]:
        from stormlet.ui.app import create_app

        app = create_app(source=None)  # type: ignore[arg-type]  # routes only: none is called
        rows = []
        for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
            methods = sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
            rows.append([_code_cell(" ".join(methods)), _code_cell(rule.rule)])
        return [_table(self, ["method", "path"], [15, 85], rows)]


def _plain_help(_app: Sphinx, _ctx: Any, lines: list[str]) -> None:
    """A command's help is plain text, not RST: a ``*`` in it (``*.jsonl``) is a star."""
    for i, line in enumerate(lines):
        if not line.lstrip().startswith(".."):
            lines[i] = re.sub(r"(?<!\\)\*", r"\\*", line)


def setup(app: Sphinx) -> dict[str, Any]:
    for part in ("description", "options", "arguments", "epilog"):
        app.connect(f"sphinx-click-process-{part}", _plain_help)
    app.add_directive("stormlet-config", ConfigDirective)
    app.add_directive("stormlet-docstring", DocstringDirective)
    app.add_directive("stormlet-routes", RoutesDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
