"""Sphinx configuration of stormlet's documentation site.

Build it: ``python -m sphinx -W -n --keep-going docs docs/_build/html`` (``-W -n``: a broken
link, a missing reference or a docstring that does not parse fails the build, as the test does:
tests/docs/test_docs.py). Nothing here reaches the network.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # the stormlet beside the docs, not another installed one

project = "stormlet"
author = "the stormlet authors"
copyright = "the stormlet authors"  # noqa: A001 (Sphinx's name)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
    "stormlet_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "README.md"]
html_theme = "furo"
html_title = "stormlet"
html_static_path: list[str] = []

myst_enable_extensions = ["deflist", "colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True}

# Strict mode (-n) checks every cross-reference. Builtins, the standard library and third-party
# types in signatures have no page here (resolving them would need another site's inventory,
# fetched over the network at build time), so those are let through by name; a reference to
# anything of stormlet's that the site does not document still fails.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(builtins\.)?(str|int|float|bool|bytes|dict|list|tuple|set|object|type|None"
               r"|Exception|KeyError|ValueError|RuntimeError|callable)"),
    (r"py:.*", r"(typing|collections|collections\.abc|os|pathlib|threading|array|"
               r"types|enum|abc)\..*"),
    (r"py:.*", r"(Any|Callable|Iterable|Iterator|Mapping|Sequence|Optional|Union|Protocol|"
               r"NamedTuple|Path|PathLike|TypeVar|Literal|Hashable|MutableMapping)"),
    (r"py:.*", r"(kazoo|zmq|msgpack|pyarrow|click|confluent_kafka|redis|flask)\..*"),
]
# stormlet's own types that public signatures name but users do not build themselves (what
# builder.set_bolt returns, what kill reports, the runtime objects behind a context): named one
# by one, so that any other undocumented reference still fails the build.
nitpick_ignore = [("py:class", name) for name in (
    "stormlet.components.Component", "stormlet.components.StreamDeclaration",
    "stormlet.tuples.StreamInfo", "stormlet.context.RunningTopology",
    "stormlet.metrics.user.UserMetrics", "stormlet.metrics.user.Counter",
    "stormlet.metrics.user.Gauge", "stormlet.metrics.user.Histogram",
    "stormlet.topology.ComponentDeclarer", "stormlet.topology.ComponentSpec",
    "stormlet.groupings.Grouping", "stormlet.local.FinalReport",
    "stormlet.runtime.engine.TopologyRuntime", "stormlet.runtime.task_errors.ErrorRecord",
    "stormlet.runtime.task_errors.ErrorRecord",  # ErrorRecord's module after the layout move
    "stormlet.state.store.Store", "stormlet.sources.offset_store.OffsetStore", "Length",
)]
