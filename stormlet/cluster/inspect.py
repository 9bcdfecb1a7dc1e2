"""What nimbus needs to schedule a topology file (and, under "structure", what the UI draws).
Nimbus gets it from the hidden ``stormlet inspect`` command (cli/inspect.py), run in a
subprocess by ``code.inspect_package``: loading a topology runs user code, which nimbus never
imports itself."""

from __future__ import annotations

import json

from ..loader import TopologyFileError, load_topology_file
from ..metrics.structure import topology_structure
from ..sources.offset_spout import OffsetSpout
from ..topology import Topology


def summary(path: str, overrides: dict | None = None) -> dict:
    """``{"ok": True, "config", "components", "structure", "warnings"}`` (settings that change
    nothing: ``Topology.config_warnings``) for the topology file at ``path``;
    raises ``TopologyFileError`` when it cannot run with its config and ``overrides`` (the
    submit's settings) applied (its config must be JSON too)."""
    topology, config = load_topology_file(path)
    try:
        json.dumps(config)
    except TypeError as exc:
        raise TopologyFileError(f"{path}: `config` must hold JSON values only ({exc})") from None
    if overrides is not None and not isinstance(overrides, dict):
        raise TopologyFileError("the submitted config is not a map of settings")
    conf = {**config, **(overrides or {})}
    problems = topology.config_problems(conf)
    if problems:
        raise TopologyFileError(f"{path}: " + "; ".join(problems))
    components = {}
    for cid, spec in topology.components.items():
        components[cid] = {"spout": spec.is_spout, "tasks": spec.tasks, "executors": spec.executors,
                           "inputs": sorted({sub.source for sub in spec.inputs})}
    return {"ok": True, "config": config, "components": components,
            "structure": topology_structure(topology),
            "warnings": topology.config_warnings(conf),
            "offset_spouts": offset_spouts(topology)}


def offset_spouts(topology: Topology) -> list[dict]:
    """Each offset spout that commits to ZooKeeper: ``{"component", "spout_id", "zk_root"}``
    (nimbus makes their offsets nodes the topology's own: ``ClusterState.claim_offsets``)."""
    found = []
    for cid, spec in topology.components.items():
        if isinstance(spec.obj, OffsetSpout):
            commits = spec.obj.zookeeper_commits()
            if commits is not None:
                found.append({"component": cid, **commits})
    return found
