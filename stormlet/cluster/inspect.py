"""``python -m stormlet.cluster.inspect FILE``: load a topology file and print, as one JSON line,
what nimbus needs to schedule it (and, under "structure", what the UI draws), or the reason it
cannot run."""

from __future__ import annotations

import json
import logging
import sys

from ..loader import TopologyFileError, load_topology_file
from ..metrics.structure import topology_structure


def summary(path: str) -> dict:
    topology, config = load_topology_file(path)
    try:
        json.dumps(config)
    except TypeError as exc:
        raise TopologyFileError(f"{path}: `config` must hold JSON values only ({exc})") from None
    components = {}
    for cid, spec in topology.components.items():
        components[cid] = {"spout": spec.is_spout, "tasks": spec.tasks, "executors": spec.executors,
                           "inputs": sorted({sub.source for sub in spec.inputs})}
    return {"ok": True, "config": config, "components": components,
            "structure": topology_structure(topology)}


def main() -> None:
    logging.disable(logging.CRITICAL)  # the one line we print must stay parseable
    try:
        report = summary(sys.argv[1])
    except TopologyFileError as exc:
        report = {"ok": False, "error": str(exc)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
