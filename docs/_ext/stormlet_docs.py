"""Sphinx directives that generate reference pages from stormlet's own definitions, so that a
fact is written once, in the code, and the site cannot drift from it:

- ``stormlet-config``: every key of ``stormlet.config.DEFAULTS``, its default and meaning;
- ``stormlet-docstring MODULE``: a module's docstring (where a layout is defined, e.g. the
  ZooKeeper paths), indented blocks kept as written;
- ``stormlet-records MODULE``: every control message kind and its record's fields;
- ``stormlet-routes``: every URL rule of the UI's Flask app, the REST API among them.
"""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from types import ModuleType
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

# `text` in a docstring or a setting's meaning: a code span as ``text``, in RST as in Markdown.
_CODE_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _literal(text: str) -> str:
    return _CODE_SPAN.sub(r"``\1``", text)


def _cell(text: str) -> nodes.entry:
    entry = nodes.entry()
    entry += nodes.paragraph("", text)
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
    """A cell whose text is parsed as the page's markup (its code spans become code)."""
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


def docstring_lines(doc: str) -> list[str]:
    """A module docstring as the page's markup (Markdown: the site's pages are MyST, and a
    directive's content is parsed as its page is): an indented block (a table of paths, a
    frame's layout) stays a block of code, set off by a blank line, instead of running into the
    paragraph before it."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    for line in lines:
        if line.startswith(" ") and out and out[-1].strip() and not out[-1].startswith(" "):
            out.append("")
        out.append(line if line.startswith(" ") else _literal(line))
    return out


def first_module(names: list[str]) -> ModuleType:
    """The first of ``names`` that imports: a page may name a module's new place first and its
    old one after it while the package's layout moves (issue 57), and drop the old one once the
    move has landed."""
    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return importlib.import_module(names[-1])


class DocstringDirective(SphinxDirective):
    """A module's docstring, where the module is the one definition of what the page shows."""

    required_arguments = 1
    optional_arguments = 3

    def run(self) -> list[nodes.Node]:
        module = first_module(self.arguments)
        container = nodes.container(classes=["stormlet-docstring"])
        self.state.nested_parse(StringList(docstring_lines(module.__doc__ or ""), module.__name__),
                                0, container)
        return [container]


class RecordsDirective(SphinxDirective):
    """Every control message kind and its record's fields, from the protocol module's
    ``RECORDS`` (the one definition the writers, the readers and the wire decoder share)."""

    required_arguments = 1
    optional_arguments = 3

    def run(self) -> list[nodes.Node]:
        module = first_module(self.arguments)
        kinds = {value: name for name, value in vars(module).items()
                 if name.isupper() and isinstance(value, int) and value in module.RECORDS}
        rows = []
        for kind, record in sorted(module.RECORDS.items()):
            hints = typing.get_type_hints(record)
            fields = ", ".join(f"{f}: {getattr(hints[f], '__name__', str(hints[f]))}"
                               for f in record._fields)
            rows.append([_code_cell(f"{kinds[kind]} = {kind}"),
                         _code_cell(f"{record.__name__}({fields})"),
                         _parsed_cell(self, inspect.getdoc(record) or "")])
        return [_table(self, ["kind", "record", "meaning"], [20, 40, 40], rows)]


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
    app.add_directive("stormlet-records", RecordsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
