"""A topology's shape as plain data: what the metrics views and the UI draw, with no user code.

Nimbus stores it with the topology at submit (the topology object itself lives only in workers);
local mode computes it from the running topology.
"""

from __future__ import annotations

from typing import Any

from ..topology import Topology


def topology_structure(topology: Topology) -> dict:
    """``{"components": {cid: {"kind", "tasks", "executors", "streams": {stream: [fields]},
    "inputs": [{"component", "stream", "grouping", "fields"?}]}}}``, spouts first."""
    components = {}
    for cid, spec in topology.components.items():
        inputs = []
        for sub in spec.inputs:
            edge: dict[str, Any] = {"component": sub.source, "stream": sub.stream,
                                    "grouping": sub.grouping.kind}
            if sub.grouping.fields:
                edge["fields"] = list(sub.grouping.fields)
            inputs.append(edge)
        components[cid] = {
            "kind": spec.kind,
            "tasks": spec.tasks,
            "executors": spec.executors,
            "streams": {stream: list(decl.fields) for stream, decl in spec.streams.items()},
            "inputs": inputs,
        }
    return {"components": components}
