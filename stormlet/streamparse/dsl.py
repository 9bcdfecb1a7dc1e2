"""streamparse's topology DSL: ``Topology`` classes whose attributes are component specs.

    class WordCount(Topology):
        word_spout = WordSpout.spec()
        count_bolt = WordCountBolt.spec(inputs={word_spout: Grouping.fields("word")}, par=2)

A spec's ``inputs`` is a list of specs or streams (``spec["stream"]``), subscribed with a shuffle
grouping (direct if the stream is direct), or a dict from spec or stream to a ``Grouping``. The
class is checked when it is defined, as streamparse checks it, with streamparse's errors:
duplicate names, a bolt without inputs, a spout without outputs, a grouping on a field its
stream does not have, a topology without spouts. ``stormlet.streamparse.build`` turns it into a
stormlet topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..streams import DEFAULT_STREAM


class Stream:
    """One declared output stream: its fields, its name (``"default"`` unless given) and
    whether it is direct."""

    def __init__(self, fields: list[str] | tuple[str, ...] | None = None,
                 name: str = DEFAULT_STREAM, direct: bool = False):
        if fields is None:
            fields = []
        elif not isinstance(fields, (list, tuple)):
            raise TypeError(f"Stream fields must be a list, tuple, or None; given: {fields!r}")
        for name_of_field in fields:
            if not isinstance(name_of_field, str):
                raise TypeError(f"All field names must be strings; given: {name_of_field!r}")
        if not isinstance(name, str):
            raise TypeError(f"Stream name must be a string; given: {name!r}")
        if not isinstance(direct, bool):
            raise TypeError(f'"direct" must be either True or False; given: {direct!r}')
        self.fields = list(fields)
        self.name = name
        self.direct = direct

    def __repr__(self) -> str:
        return f"Stream({self.fields!r}, name={self.name!r}, direct={self.direct!r})"


@dataclass(frozen=True)
class _Grouping:
    """A grouping as streamparse spells it; ``kind`` is Storm's grouping name."""

    kind: str
    fields: tuple[str, ...] = ()
    java_class: str | None = None

    def __repr__(self) -> str:
        return f"fields({list(self.fields)!r})" if self.kind == "fields" else self.kind.upper()


class Grouping:
    """The groupings a spec's ``inputs`` dict maps to."""

    __slots__ = ()
    SHUFFLE = _Grouping("shuffle")
    GLOBAL = _Grouping("global")
    DIRECT = _Grouping("direct")
    ALL = _Grouping("all")
    NONE = _Grouping("none")
    LOCAL_OR_SHUFFLE = _Grouping("local_or_shuffle")

    @classmethod
    def fields(cls, *fields: Any) -> _Grouping:
        """Tuples with equal values of ``fields`` go to the same task: ``fields("word")`` or
        ``fields(["a", "b"])``."""
        if len(fields) == 1 and isinstance(fields[0], list):
            fields = tuple(fields[0])
        if not fields:
            raise ValueError("List cannot be empty for fields grouping")
        return _Grouping("fields", tuple(fields))

    @classmethod
    def custom_object(cls, java_class_name: str, arg_list: list[Any]) -> _Grouping:
        """A Java grouping class: accepted here, refused when the topology is loaded."""
        return _Grouping("custom", java_class=java_class_name)

    @classmethod
    def custom_serialized(cls, java_serialized: bytes) -> _Grouping:
        """A serialized Java grouping: accepted here, refused when the topology is loaded."""
        return _Grouping("custom", java_class="(serialized Java object)")


@dataclass(frozen=True)
class StreamId:
    """A component's stream, as ``spec["stream"]`` names it (streamparse's ``GlobalStreamId``);
    a key of a spec's ``inputs`` dict."""

    component: ComponentSpec | str
    stream: str


class ComponentSpec:   # hashed by identity: specs are keys of ``inputs`` dicts
    """One component of a topology: its class, name, parallelism, config, outputs and inputs.

    ``shell`` holds a ``ShellBolt``/``ShellSpout``'s ``(command, script)``; a spout or bolt
    written in Python is the shell command ``streamparse_run`` with its class's dotted path, as
    in streamparse. ``java`` holds a ``JavaBolt``/``JavaSpout``'s class name."""

    def __init__(self, component_cls: type, is_spout: bool, name: str | None = None,
                 inputs: Any = None, par: Any = None, config: dict[str, Any] | None = None,
                 outputs: Any = None, shell: tuple[str, str] | None = None,
                 java: str | None = None):
        self.component_cls = component_cls
        self.is_spout = is_spout
        self.name = name
        self.par = _checked_par(component_cls, par)
        self.config = _checked_config(component_cls, config)
        self.outputs = _checked_outputs(component_cls, outputs)
        self.inputs = _checked_inputs(inputs)
        self.shell = shell
        self.java = java

    def __getitem__(self, stream: str) -> StreamId:
        if stream not in self.outputs:
            raise KeyError(f"Invalid stream for {self.name}: {stream!r}. Valid streams are: "
                           f"{list(self.outputs)}")
        return StreamId(self, stream)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.component_cls.__name__}, name={self.name!r})"


def shell_spec(component_cls: type, is_spout: bool, command: str | None, script: str | None,
               **kwargs: Any) -> ComponentSpec:
    """A ``ShellBolt``/``ShellSpout`` spec (Python components are ``streamparse_run`` ones)."""
    if not command:
        raise ValueError("command is required")
    if script is None:
        raise TypeError("script must not be None.  If your command does not take arguments, "
                        "specify the empty string for script.")
    return ComponentSpec(component_cls, is_spout, shell=(command, script), **kwargs)


def java_spec(component_cls: type, is_spout: bool, full_class_name: str | None,
              serialized_java: bytes | None, **kwargs: Any) -> ComponentSpec:
    """A ``JavaBolt``/``JavaSpout`` spec: kept so the loader can name it when refusing it."""
    if serialized_java is None and not full_class_name:
        raise ValueError("full_class_name is required")
    return ComponentSpec(component_cls, is_spout,
                         java=full_class_name or "(serialized Java object)", **kwargs)


def _checked_par(component_cls: type[Any], par: Any) -> int:
    if par is None:
        par = component_cls.par
    if isinstance(par, dict):
        raise TypeError(f"{component_cls.__name__}: par is a dict of per-environment hints "
                        f"({par!r}); stormlet has no streamparse environments, give an int")
    if isinstance(par, bool) or not isinstance(par, int):
        raise TypeError(f"Parallelism hint must be an integer greater than 0. Given: {par!r}")
    if par < 1:
        raise ValueError(f"Parallelism hint must be an integer greater than 0. Given: {par}")
    return par


def _checked_config(component_cls: type[Any], config: Any) -> dict[str, Any]:
    if config is None:
        config = component_cls.config
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise TypeError(f"Config must either be a dict or None.  Given: {config!r}")
    return dict(config)


def _checked_outputs(component_cls: type[Any], outputs: Any) -> dict[str, Stream]:
    if outputs is None:
        outputs = component_cls.outputs
    if outputs is None:
        outputs = []
    if not isinstance(outputs, (list, tuple)):
        raise TypeError(f"Outputs must either be a list of strings or a list of Streams.  "
                        f"Given: {outputs!r}")
    streams: dict[str, Stream] = {}
    for output in outputs:
        if isinstance(output, Stream):
            streams[output.name] = output
        elif isinstance(output, str):
            streams.setdefault(DEFAULT_STREAM, Stream([])).fields.append(output)
        else:
            raise TypeError(f"Outputs must either be a list of strings or a list of Streams.  "
                            f"Invalid entry: {output!r}")
    return streams


def _checked_inputs(inputs: Any) -> dict[tuple[Any, str], _Grouping]:
    """``{(source spec or name, stream): grouping}``; a list subscribes with shuffle (direct for
    a direct stream)."""
    if inputs is None:
        return {}
    if isinstance(inputs, dict):
        checked = {}
        for key, grouping in inputs.items():
            if (not isinstance(key, (ComponentSpec, StreamId))
                    or not isinstance(grouping, _Grouping)):
                raise TypeError(f"If inputs is a dict, it is expected to map from GlobalStreamId "
                                f"or ComponentSpec objects to Grouping objects.  Given key: "
                                f"{key!r}; Given value: {grouping!r}")
            checked[_stream_key(key)] = grouping
        return checked
    if isinstance(inputs, (ComponentSpec, StreamId)):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"Inputs must either be a list, dict, or None.  Given: {inputs!r}")
    checked = {}
    for source in inputs:
        if not isinstance(source, (ComponentSpec, StreamId)):
            raise TypeError(f"Inputs must be ComponentSpec or GlobalStreamId objects.  "
                            f"Given: {source!r}")
        spec, stream = _stream_key(source)
        declared = spec.outputs.get(stream) if isinstance(spec, ComponentSpec) else None
        checked[(spec, stream)] = (Grouping.DIRECT if declared and declared.direct
                                   else Grouping.SHUFFLE)
    return checked


def _stream_key(source: ComponentSpec | StreamId) -> tuple[Any, str]:
    if isinstance(source, ComponentSpec):
        return (source, DEFAULT_STREAM)
    return (source.component, source.stream)


class TopologyType(type):
    """Collects a topology class's specs, names them after their attributes and checks them."""

    def __new__(mcs, classname: str, bases: tuple[type, ...],
                namespace: dict[str, Any]) -> TopologyType:
        specs: dict[str, ComponentSpec] = {}
        for attribute, value in namespace.items():
            if isinstance(value, ComponentSpec):
                if value.name is None:
                    value.name = attribute
                if value.name in specs:
                    raise ValueError(f"Duplicate component name: {value.name}")
                specs[value.name] = value
            elif _is_component(value):
                raise TypeError(f"Topology classes should have ComponentSpec attributes.  Did you "
                                f"forget to call the spec class method for your component?  "
                                f"Given: {value!r}")
        for spec in specs.values():
            _check_spec(spec, specs)
        if (namespace.get("_stormlet_base") is not True
                and not any(s.is_spout for s in specs.values())):
            raise ValueError("A Topology requires at least one Spout")
        config = namespace.setdefault("config", {})
        if not isinstance(config, dict):
            raise TypeError(f"Topology config must be a dictionary. Given: {config!r}")
        namespace["specs"] = list(specs.values())
        return super().__new__(mcs, classname, bases, namespace)


def _is_component(value: Any) -> bool:
    from .component import Component
    return isinstance(value, Component)


def _check_spec(spec: ComponentSpec, specs: dict[str, ComponentSpec]) -> None:
    kind = spec.component_cls.__name__
    if spec.is_spout and not spec.outputs:
        raise ValueError(f'{kind} "{spec.name}" requires at least one output, because it is a '
                         f'Spout')
    if not spec.is_spout and not spec.inputs:
        raise ValueError(f'{kind} "{spec.name}" requires at least one input, because it is a Bolt.')
    resolved = {}
    for (source, stream), grouping in spec.inputs.items():
        source_name = source.name if isinstance(source, ComponentSpec) else source
        if source_name not in specs:
            raise ValueError(f'{kind} "{spec.name}" subscribes to {source_name!r}, which is not a '
                             f'component of this topology')
        source_spec = specs[source_name]
        if stream not in source_spec.outputs:
            raise ValueError(f'{kind} "{spec.name}" subscribes to stream {stream!r} of '
                             f'{source_name!r}, which declares only {list(source_spec.outputs)}')
        valid = set(source_spec.outputs[stream].fields)
        for field_name in grouping.fields:
            if field_name not in valid:
                raise ValueError(f"Field {field_name!r} specified in grouping is not a valid "
                                 f"output field for the {source_name!r} {stream!r} stream.")
        resolved[(source_name, stream)] = grouping
    spec.inputs = resolved


class Topology(metaclass=TopologyType):
    """Subclass with one class attribute per component (``SomeSpout.spec(...)``); set ``config``
    to the topology's Storm config."""

    _stormlet_base = True
    config: dict[str, Any] = {}
    specs: list[ComponentSpec] = []
