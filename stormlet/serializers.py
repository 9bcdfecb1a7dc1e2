"""Types beyond msgpack's own in tuples: Storm's serialization registrations
(``topology.kryo.register``, Storm's docs/Serialization.md) as msgpack extension types.

A value of a registered type travels as one msgpack extension value: its type's code (a byte)
and the bytes of what the type's ``Serializer`` made of it. Registered by default, in every
topology: ``datetime`` (naive and aware, its zone kept when it is a ``zoneinfo.ZoneInfo``),
``date``, ``time``, ``timedelta``, ``Decimal``, ``UUID``, ``tuple``, ``set`` and ``frozenset``
(without a registration a tuple arrived as a list on a cluster, and stayed a tuple in local
mode; a set did not pass the check at emit).

A topology registers more in its config, as Storm's does, under
``topology.serialization.register``: a list whose items are a class path (a dataclass, encoded
field by field: Storm's ``FieldSerializer``) or a one-entry map of a class path to the class
path of its serializer (a class with ``encode(value)`` and ``decode(data)``, made with no
arguments). ``register_serialization(conf, cls, serializer)`` appends one, as Storm's
``Config.registerSerialization`` does::

    class PointSerializer:
        def encode(self, point: Point) -> list:      # anything a tuple may hold
            return [point.x, point.y]

        def decode(self, data: list) -> Point:
            return Point(*data)

    config = {}
    register_serialization(config, Point, PointSerializer)

Codes follow the order of registration, as Kryo's ids do, so every process of a topology (its
workers, local mode, the Spark jobs that load its code package) must read one list: they do,
from the topology's config. A registration of a type registered by default replaces its
serializer, keeping its code.

Where values are checked at emit (``serialization.checked``), a value of a type that is not
registered fails there with the field, the type and how to register it named; one whose
serializer fails, with the serializer named. The failed-message log writes a registered value as
``{"ext": {"type": <class path>, "data": <what its serializer made of it>}}``
(``stormlet.failed``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import json
import threading
import uuid
from decimal import Decimal
from typing import Any, Callable, Protocol, runtime_checkable

import msgpack

#: The config key: Storm's ``topology.kryo.register``, for msgpack.
TOPOLOGY_SERIALIZATION_REGISTER = "topology.serialization.register"

# Extension codes: stormlet's own defaults below FIRST_USER_CODE, a topology's registrations from
# it in order. msgpack's application codes are 0..127 (negative ones are msgpack's own).
FIRST_USER_CODE = 16
MAX_CODE = 127


@runtime_checkable
class Serializer(Protocol):
    """Turns values of one type into data a tuple may hold, and back (Storm's Kryo
    ``Serializer``). ``encode``'s result may hold other registered types."""

    def encode(self, value: Any) -> Any: ...

    def decode(self, data: Any) -> Any: ...


class SerializerError(TypeError):
    """A value msgpack and the registrations cannot encode (``UnregisteredType``), or a
    serializer that failed (``SerializerFailed``)."""


class UnregisteredType(SerializerError):
    def __init__(self, kind: type):
        super().__init__(f"{kind.__module__}.{kind.__qualname__} is not registered")
        self.kind = kind


class SerializerFailed(SerializerError):
    def __init__(self, serializer: str, kind: type, exc: BaseException):
        super().__init__(f"serializer {serializer} failed on a {kind.__qualname__}: "
                         f"{type(exc).__name__}: {exc}")
        self.serializer = serializer
        self.kind = kind


class RegistrationError(ValueError):
    """A ``topology.serialization.register`` entry that cannot be used; the message names it."""


# ----- the default serializers. Each makes text: readable in the failed-message log, and the
# ext's payload is its UTF-8 (``text = True``) with no msgpack inside.

class DatetimeSerializer:
    """ISO 8601 with the offset of an aware value; a ``ZoneInfo`` zone's key and a fold of 1
    follow after a space (an ISO string holds none)."""

    text = True

    def encode(self, value: dt.datetime) -> str:
        zone = getattr(value.tzinfo, "key", None)
        if zone is None and not value.fold:
            return value.isoformat()
        return f"{value.isoformat()} {zone or ''} {value.fold}"

    def decode(self, data: str) -> dt.datetime:
        iso, _, rest = data.partition(" ")
        value = dt.datetime.fromisoformat(iso)
        if not rest:
            return value
        zone, _, fold = rest.partition(" ")
        if zone:
            from zoneinfo import ZoneInfo
            return value.astimezone(ZoneInfo(zone))    # the same instant, in its zone
        return value.replace(fold=int(fold))


class DateSerializer:
    text = True

    def encode(self, value: dt.date) -> str:
        return value.isoformat()

    def decode(self, data: str) -> dt.date:
        return dt.date.fromisoformat(data)


class TimeSerializer:
    """ISO 8601, with the offset of an aware time and `` 1`` after it for a fold of 1."""

    text = True

    def encode(self, value: dt.time) -> str:
        return f"{value.isoformat()} 1" if value.fold else value.isoformat()

    def decode(self, data: str) -> dt.time:
        iso, _, fold = data.partition(" ")
        value = dt.time.fromisoformat(iso)
        return value.replace(fold=1) if fold else value

class TimedeltaSerializer:
    """``days seconds microseconds``, the three ints a timedelta is."""

    text = True

    def encode(self, value: dt.timedelta) -> str:
        return f"{value.days} {value.seconds} {value.microseconds}"

    def decode(self, data: str) -> dt.timedelta:
        days, seconds, micro = map(int, data.split(" "))
        return dt.timedelta(days, seconds, micro)


class DecimalSerializer:
    """``str``: exact, with NaN, infinities and a negative zero."""

    text = True

    def encode(self, value: Decimal) -> str:
        return str(value)

    def decode(self, data: str) -> Decimal:
        return Decimal(data)


class UUIDSerializer:
    text = True

    def encode(self, value: uuid.UUID) -> str:
        return str(value)

    def decode(self, data: str) -> uuid.UUID:
        return uuid.UUID(data)


class SequenceSerializer:
    """A tuple, set or frozenset as the list of its items (which may be registered values); a
    set's sorted where its items compare, so that equal sets pack alike in every process (the
    order of a set of strs follows each process's hash seed) and a fields grouping hashes
    them alike."""

    text = False

    def __init__(self, kind: type):
        self.kind = kind
        self.ordered = kind is tuple

    def encode(self, value: Any) -> list:
        if self.ordered:
            return list(value)
        try:
            return sorted(value)
        except TypeError:    # items that do not compare: as they come
            return list(value)

    def decode(self, data: list) -> Any:
        return self.kind(data)


class DataclassSerializer:
    """A dataclass by its fields' values in order: Storm's ``FieldSerializer`` for a class
    registered without a serializer."""

    text = False

    def __init__(self, kind: type):
        self.kind = kind
        self.names = [f.name for f in dataclasses.fields(kind) if f.init]

    def encode(self, value: Any) -> list:
        return [getattr(value, name) for name in self.names]

    def decode(self, data: list) -> Any:
        return self.kind(*data)


#: The types every topology has registered, with their codes (fixed: a topology's own
#: registrations cannot move them).
DEFAULT_TYPES: tuple[tuple[int, type, Callable[[], Any]], ...] = (
    (1, dt.datetime, DatetimeSerializer),
    (2, dt.date, DateSerializer),
    (3, dt.time, TimeSerializer),
    (4, dt.timedelta, TimedeltaSerializer),
    (5, Decimal, DecimalSerializer),
    (6, uuid.UUID, UUIDSerializer),
    (7, tuple, lambda: SequenceSerializer(tuple)),
    (8, set, lambda: SequenceSerializer(set)),
    (9, frozenset, lambda: SequenceSerializer(frozenset)),
)

# Subclasses of msgpack's own types, which a packer of exact types hands to ``default``: encoded
# as their base type, as msgpack encodes them without strict types (an IntEnum as an int, an
# OrderedDict as a map, a namedtuple as a tuple).
_BASES: tuple[type, ...] = (bool, int, float, str, bytes, bytearray, dict, list, tuple)


def class_path(kind: type) -> str:
    """``module.QualName``: how a registration names a class."""
    return f"{kind.__module__}.{kind.__qualname__}"


def _load(path: Any, what: str) -> Any:
    """The object a class path names (``module.Name``, or ``module:Qual.Name``)."""
    if not isinstance(path, str) or not path.strip(". :"):
        raise RegistrationError(f"{TOPOLOGY_SERIALIZATION_REGISTER}: {what} {path!r} is not a "
                                f"class path (module.ClassName)")
    if ":" in path:
        module_name, _, qualname = path.partition(":")
        splits = [(module_name, qualname)]
    else:
        parts = path.split(".")
        splits = [(".".join(parts[:i]), ".".join(parts[i:])) for i in range(len(parts) - 1, 0, -1)]
    failure = "it names no module"
    for module_name, qualname in splits:
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue     # not this split: a shorter module name may be the one
            failure = f"importing {module_name} raised ModuleNotFoundError: {exc}"
            break
        except Exception as exc:
            failure = f"importing {module_name} raised {type(exc).__name__}: {exc}"
            break
        try:
            for name in qualname.split("."):
                obj = getattr(obj, name)
        except AttributeError:
            failure = f"module {module_name} has no {qualname}"
            continue
        return obj
    raise RegistrationError(f"{TOPOLOGY_SERIALIZATION_REGISTER}: cannot load {what} {path!r}: "
                            f"{failure}")


class Registration:
    """One registered type: its extension ``code``, its class path ``name``, its serializer."""

    __slots__ = ("code", "kind", "name", "serializer", "serializer_name", "text")

    def __init__(self, code: int, kind: type, serializer: Any, name: str | None = None):
        if not callable(getattr(serializer, "encode", None)) or \
                not callable(getattr(serializer, "decode", None)):
            raise RegistrationError(f"{TOPOLOGY_SERIALIZATION_REGISTER}: the serializer of "
                                    f"{class_path(kind)}, {type(serializer).__name__}, has no "
                                    f"encode(value) and decode(data)")
        self.code = code
        self.kind = kind
        self.name = name or class_path(kind)
        self.serializer = serializer
        self.serializer_name = class_path(type(serializer))
        self.text = getattr(serializer, "text", False) is True


# A packer's buffer grows to hold the largest value it packed, and never shrinks: one that packed
# more than this is dropped after, not kept for the thread's life.
PACKER_KEPT_BYTES = 1 << 20


class ThreadPackers:
    """Packers made by ``make``, each thread packing with its own: making one per value
    (``msgpack.packb``'s way) costs more than packing a batch's column, since it allocates
    its 256 KB buffer. A packer is taken off its thread's list while it packs, so a value
    packed inside (a registry's ``default``) gets another."""

    def __init__(self, make: Callable[[], msgpack.Packer]):
        self._make = make
        self._local = threading.local()   # each thread's free packers

    def pack(self, value: Any) -> bytes:
        """``value`` packed, with msgpack's errors (and ``default``'s) as they are raised."""
        try:
            free = self._local.free
        except AttributeError:
            free = self._local.free = []
        packer = free.pop() if free else self._make()
        try:
            packed = packer.pack(value)
        except BaseException:
            packer.reset()    # what it packed before the error
            free.append(packer)
            raise
        if len(packed) <= PACKER_KEPT_BYTES:
            free.append(packer)
        return packed


class Registry:
    """The types one topology's tuples may hold beyond msgpack's own, and the packing that
    knows them. Thread-safe: each thread packs with packers of its own."""

    def __init__(self, registrations: list[Registration]):
        self.by_type: dict[type, Registration] = {r.kind: r for r in registrations}
        self.by_code: dict[int, Registration] = {r.code: r for r in registrations}
        self.by_name: dict[str, Registration] = {r.name: r for r in registrations}
        self._packers = ThreadPackers(self.packer)   # packb's
        # Types whose default serializer never fails: the check at emit need not pack them.
        self.trusted = frozenset(kind for code, kind, _ in DEFAULT_TYPES
                                 if kind not in (tuple, set, frozenset)
                                 and type(self.by_type[kind].serializer).__module__ == __name__)

    # ----- msgpack

    def packer(self) -> msgpack.Packer:
        """A packer of this registry's types, for one thread."""
        # Exact types: else msgpack packs a tuple as an array itself, never asking ``default``.
        return msgpack.Packer(use_bin_type=True, strict_types=True, default=self.default)

    def packb(self, value: Any) -> bytes:
        """``value`` packed; ``SerializerError`` (a TypeError) for a type msgpack and these
        registrations cannot encode or a serializer that failed; msgpack's own errors (an int
        out of range, a lone surrogate) as msgpack raises them."""
        return self._packers.pack(value)

    def unpackb(self, data: bytes, **options: Any) -> Any:
        """``data`` unpacked, extension values decoded (an unknown code raises ValueError)."""
        return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=self.ext_hook,
                               **options)

    def default(self, value: Any) -> Any:
        """msgpack's ``default``: a registered value as its extension value."""
        registration = self.by_type.get(type(value))
        if registration is None:
            for base in _BASES:
                if isinstance(value, base):
                    plain = (bytes if base is bytearray else base)(value)
                    # msgpack asks ``default`` once a value: a tuple is made an ext value here.
                    return self.default(plain) if base is tuple else plain
            raise UnregisteredType(type(value))
        try:
            data = registration.serializer.encode(value)
            payload = data.encode("utf-8") if registration.text else self.packb(data)
        except Exception as exc:
            raise SerializerFailed(registration.serializer_name, type(value), exc) from exc
        return msgpack.ExtType(registration.code, payload)

    def ext_hook(self, code: int, payload: bytes) -> Any:
        """msgpack's ``ext_hook``: an extension value as the value it was."""
        registration = self.by_code.get(code)
        if registration is None:
            raise ValueError(f"extension type {code} is not registered here: every process of "
                             f"a topology must read the same {TOPOLOGY_SERIALIZATION_REGISTER}")
        data = payload.decode("utf-8") if registration.text else self.unpackb(payload)
        return registration.serializer.decode(data)

    # ----- named data (the failed-message log)

    def named(self, value: Any) -> tuple[str, Any] | None:
        """``(class path, serializer's data)`` for a value of a registered type; None for any
        other."""
        registration = self.by_type.get(type(value))
        if registration is None:
            return None
        try:
            return registration.name, registration.serializer.encode(value)
        except Exception as exc:
            raise SerializerFailed(registration.serializer_name, type(value), exc) from exc

    def from_named(self, name: str, data: Any) -> Any:
        """The value ``named`` made ``(name, data)`` of; KeyError if ``name`` is not
        registered."""
        return self.by_name[name].serializer.decode(data)


def _defaults() -> list[Registration]:
    return [Registration(code, kind, make()) for code, kind, make in DEFAULT_TYPES]


#: The registry of a topology that registers nothing of its own.
DEFAULT_REGISTRY = Registry(_defaults())


def registrations_problem(value: Any) -> str | None:
    """What ``topology.serialization.register`` must be, if ``value`` is not that (its shape
    only: the classes are loaded where the topology's code is)."""
    wanted = ("a list of class paths, or of one-entry maps of a class path to its serializer's "
              f"(at most {MAX_CODE - FIRST_USER_CODE + 1})")
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) > MAX_CODE - FIRST_USER_CODE + 1:
        return wanted
    for entry in value:
        if isinstance(entry, str):
            continue
        if not (isinstance(entry, dict) and len(entry) == 1
                and all(isinstance(x, str) for x in (*entry, *entry.values()))):
            return f"{wanted} ({entry!r} is neither)"
    return None


def registry_for(conf: dict[str, Any] | None) -> Registry:
    """The registry of a topology whose config is ``conf``: the defaults, then its
    ``topology.serialization.register`` in order. Loads the classes it names (the topology's
    code must be importable); ``RegistrationError`` naming the entry that cannot be used."""
    entries = (conf or {}).get(TOPOLOGY_SERIALIZATION_REGISTER) or []
    if not entries:
        return DEFAULT_REGISTRY
    problem = registrations_problem(entries)
    if problem is not None:
        raise RegistrationError(f"{TOPOLOGY_SERIALIZATION_REGISTER} must be {problem}, not "
                                f"{entries!r}")
    registrations = {r.kind: r for r in _defaults()}
    code = FIRST_USER_CODE
    for entry in entries:
        if isinstance(entry, str):
            name, serializer_path = entry, None
        else:
            ((name, serializer_path),) = entry.items()
        kind = _load(name, "class")
        if not isinstance(kind, type):
            raise RegistrationError(f"{TOPOLOGY_SERIALIZATION_REGISTER}: {name!r} is not a "
                                    f"class")
        if serializer_path is None:
            if not dataclasses.is_dataclass(kind):
                raise RegistrationError(
                    f"{TOPOLOGY_SERIALIZATION_REGISTER}: {name!r} is not a dataclass, so it "
                    f"needs a serializer: {{{name!r}: 'module.ItsSerializer'}}")
            serializer: Any = DataclassSerializer(kind)
        else:
            serializer_class = _load(serializer_path, "serializer")
            try:
                serializer = serializer_class()
            except Exception as exc:
                raise RegistrationError(
                    f"{TOPOLOGY_SERIALIZATION_REGISTER}: serializer {serializer_path!r} of "
                    f"{name!r} cannot be made with no arguments: {type(exc).__name__}: "
                    f"{exc}") from None
        previous = registrations.get(kind)
        if previous is not None and previous.code < FIRST_USER_CODE:
            # A default type's serializer replaced: its code stays.
            registrations[kind] = Registration(previous.code, kind, serializer, previous.name)
            continue
        if previous is not None:
            raise RegistrationError(f"{TOPOLOGY_SERIALIZATION_REGISTER}: {name!r} is "
                                    f"registered twice")
        registrations[kind] = Registration(code, kind, serializer, name)
        code += 1
    return Registry(list(registrations.values()))


def register_serialization(conf: dict[str, Any], kind: type,
                           serializer: type | None = None) -> None:
    """Add ``kind`` to ``conf``'s ``topology.serialization.register`` (Storm's
    ``Config.registerSerialization``): with ``serializer`` (a class with ``encode`` and
    ``decode``, made with no arguments), or, for a dataclass, field by field. Both must be
    importable by their module's name where the topology runs (a topology file's own classes
    are)."""
    if serializer is None and not dataclasses.is_dataclass(kind):
        raise RegistrationError(f"{class_path(kind)} is not a dataclass, so it needs a "
                                f"serializer: register_serialization(conf, {kind.__name__}, "
                                f"ItsSerializer)")
    entries = list(conf.get(TOPOLOGY_SERIALIZATION_REGISTER) or [])
    entries.append(class_path(kind) if serializer is None
                   else {class_path(kind): class_path(serializer)})
    conf[TOPOLOGY_SERIALIZATION_REGISTER] = entries


def how_to_register(kind: type) -> str:
    """The advice an error about an unregistered ``kind`` ends with."""
    name = class_path(kind)
    return (f"register it in the topology's config: {TOPOLOGY_SERIALIZATION_REGISTER}: "
            f"[{json.dumps({name: 'module.ItsSerializer'})}] (a dataclass needs no "
            f"serializer), or stormlet.register_serialization(config, {kind.__name__}, "
            f"ItsSerializer)")
