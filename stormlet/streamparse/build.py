"""Turning a streamparse ``Topology`` class into a stormlet topology, or refusing it.

Every spout and bolt written in Python runs in stormlet's executors through the adapters. What
needs a JVM or another language (``JavaSpout``, ``JavaBolt``, a ``ShellBolt``/``ShellSpout``
whose command is not a Python component, a Java custom grouping) is refused here, when the
topology file loads, naming the component and what to use instead; nothing has started.
"""

from __future__ import annotations

import importlib
from typing import Any

from .. import config as cfg
from ..errors import TopologyError
from ..topology import ComponentDeclarer, Topology, TopologyBuilder
from .adapters import StreamparseBolt, StreamparseSpout
from .bolt import Bolt, TicklessBatchingBolt
from .dsl import ComponentSpec, _Grouping
from .dsl import Topology as StreamparseTopology
from .emitting import PYTHON_COMPONENT_COMMAND
from .spout import Spout


def build(topology_class: type[StreamparseTopology]) -> tuple[Topology, dict[str, Any]]:
    """The stormlet topology and config of ``topology_class``; ``TopologyError`` names every
    component that cannot run here and why."""
    builder = TopologyBuilder()
    problems = []
    for spec in topology_class.specs:
        try:
            _add(builder, spec)
        except TopologyError as exc:
            problems.append(str(exc))
    if problems:
        raise TopologyError("; ".join(problems))
    return builder.build(), dict(topology_class.config)


def _add(builder: TopologyBuilder, spec: ComponentSpec) -> None:
    component_class = _component_class(spec)
    assert spec.name is not None   # the topology's class named it
    config = dict(spec.config)
    if spec.is_spout:
        declarer = builder.set_spout(spec.name, StreamparseSpout(component_class, spec.outputs),
                                     parallelism=spec.par)
    else:
        declarer = builder.set_bolt(spec.name, StreamparseBolt(component_class, spec.outputs),
                                    parallelism=spec.par)
        if issubclass(component_class, TicklessBatchingBolt):
            config.setdefault(cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS,
                              component_class.secs_between_batches)
        for (source, stream), grouping in spec.inputs.items():
            _subscribe(declarer, spec, source, stream, grouping)
    declarer.add_configurations(config)


def _component_class(spec: ComponentSpec) -> type:
    """The Python class that runs ``spec``, or ``TopologyError`` saying why none can."""
    kind = "spout" if spec.is_spout else "bolt"
    base = Spout if spec.is_spout else Bolt
    if spec.java is not None:
        raise TopologyError(
            f"component {spec.name!r}: {spec.component_cls.__name__} runs the Java class "
            f"{spec.java} on a JVM, which stormlet does not have; {_instead(spec)}")
    assert spec.shell is not None   # a component that is not Java's is a shell one
    command, script = spec.shell
    if command != PYTHON_COMPONENT_COMMAND:
        raise TopologyError(
            f"component {spec.name!r}: {spec.component_cls.__name__} runs the command "
            f"{' '.join(filter(None, (command, script)))!r}, which stormlet cannot run (it runs "
            f"Python components in its own processes); {_instead(spec)}")
    if issubclass(spec.component_cls, base):
        return spec.component_cls
    module_name, _, class_name = script.rpartition(".")
    try:
        component_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise TopologyError(f"component {spec.name!r}: cannot load the {kind} class {script!r} "
                            f"({type(exc).__name__}: {exc})") from None
    if not (isinstance(component_class, type) and issubclass(component_class, base)):
        raise TopologyError(f"component {spec.name!r}: {script!r} is not a streamparse "
                            f"{base.__name__} subclass")
    return component_class


def _instead(spec: ComponentSpec) -> str:
    if spec.is_spout:
        if "kafka" in f"{spec.java} {spec.shell}".lower():
            return "use stormlet's KafkaSpout (stormlet.sources) instead"
        return ("write it as a streamparse Spout in Python or use a stormlet spout "
                "(stormlet.Spout, or stormlet.sources' KafkaSpout and LogSpout) instead")
    return "write it as a streamparse Bolt in Python (or a stormlet Bolt) instead"


def _subscribe(declarer: ComponentDeclarer, spec: ComponentSpec, source: str, stream: str,
               grouping: _Grouping) -> None:
    kind = grouping.kind
    if kind == "fields":
        declarer.fields_grouping(source, list(grouping.fields), stream=stream)
    elif kind == "custom":
        raise TopologyError(f"component {spec.name!r}: its input from {source!r} uses the Java "
                            f"grouping {grouping.java_class}, which needs a JVM; use one of "
                            f"Storm's groupings (stormlet also takes a Python custom grouping)")
    else:
        getattr(declarer, f"{kind}_grouping")(source, stream=stream)
