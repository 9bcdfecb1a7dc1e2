"""``JoinBolt``: windowed SQL-style joins of two or more streams by field, with Storm 2.x's
semantics (its docs/Joins.md and org.apache.storm.bolt.JoinBolt).

    from stormlet.joins import JoinBolt
    from stormlet.windowing import Duration

    joiner = (JoinBolt("orders", "user_id")            # from orders
              .join("users", "id", "orders")           # inner join users on id = orders.user_id
              .left_join("coupons", "user", "users")   # left join coupons on user = users.id
              .select("user_id, name, orders:total, coupons:code")
              .with_tumbling_window(Duration(seconds=10)))
    builder.set_bolt("joiner", joiner).fields_grouping("orders", ["user_id"]) \\
        .fields_grouping("users", ["id"]).fields_grouping("coupons", ["user"])

Each time its window fires, the bolt joins the window's tuples in the order the joins were
given: the first stream's tuples are the probe side, each later stream is hashed on its join
field and joined to the records so far on the field of the stream it names (which must have
been introduced before). An inner join keeps the records with a match (one output per
match); a left join keeps the others too, with that stream's fields None. A record whose join
value for the next join is None (a missing field, or a stream a left join did not match) is
dropped by that join, as in Storm. Streams are told apart by their source component (the
default, ``Selector.SOURCE``) or by stream id (``JoinBolt(Selector.STREAM, "s1", "key")``:
the same stream id from several components is one stream).

``select("a, s2:b, c.d")`` names the output fields: a field from whichever joined stream has it
(the first in join order, not None), ``stream:field`` from that stream only (the output field is
then named ``stream:field``), ``outer.inner`` a key of a dict-valued field. Each output tuple is
anchored to the input tuples it was made of, not to the whole window; it goes on the default
stream, or on ``with_output_stream(name)``'s. The window is configured as any windowed bolt's
(``with_window``, ``with_tumbling_window``, event time, late tuples: stormlet/windowing.py).

Each joined stream should be fields-grouped on its join field, so that the tuples that match
meet in one task (the bolt does not check the grouping: Storm does not either). The topology
refuses to build if a joined stream is not among the bolt's inputs, an input is not joined,
or a join or select field is one its stream does not declare.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, overload

from .components import OutputFieldsDeclarer
from .errors import TopologyError
from .streams import DEFAULT_STREAM
from .tuples import Tuple
from .windowing import Window, WindowedBolt

if TYPE_CHECKING:
    from typing import Self


class Selector(enum.Enum):
    """What names a joined stream: its source component (``SOURCE``) or its stream id
    (``STREAM``), as Storm's ``JoinBolt.Selector``."""

    STREAM = "stream"
    SOURCE = "source"


class JoinType(enum.Enum):
    INNER = "inner"
    LEFT = "left"


class FieldSelector:
    """One field of a join or a select: ``"field"``, ``"outer.inner"`` (a key of a dict-valued
    field) or ``"stream:field"``. ``name`` is how it is declared as an output field."""

    __slots__ = ("stream", "path", "name")

    def __init__(self, descriptor: str, stream: str | None = None):
        if not isinstance(descriptor, str):
            raise TopologyError(f"a JoinBolt field must be a string, got {descriptor!r}")
        qualifier, colon, rest = descriptor.partition(":")
        if colon and stream is not None:
            raise TopologyError(f"join field {descriptor!r} of stream {stream!r}: no 'stream:' "
                                f"qualifier here (the stream is {stream!r} already)")
        if colon and qualifier.strip():
            self.stream: str | None = qualifier.strip()
            self.name = descriptor.strip()
            field = rest
        else:   # ":x" is "x", as in Storm
            self.stream = stream
            self.name = (rest if colon else descriptor).strip()
            field = self.name
        self.path = tuple(part.strip() for part in field.split("."))
        if not all(self.path):
            raise TopologyError(f"JoinBolt field {descriptor!r} has an empty name in it")

    def __repr__(self) -> str:
        return f"FieldSelector({self.name!r})"


class _Join:
    """How one stream joins the ones before it: on its ``field`` equal to ``prior``'s join
    field (absent for the first stream)."""

    __slots__ = ("stream", "field", "kind", "prior")

    def __init__(self, stream: str, field: FieldSelector, kind: JoinType | None = None,
                 prior: FieldSelector | None = None):
        self.stream = stream
        self.field = field
        self.kind = kind
        self.prior = prior


def _hashable(value: Any) -> Any:
    """A dict key equal for equal values: msgpack gives lists and dicts, which do not hash."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return frozenset((k, _hashable(v)) for k, v in value.items())
    return value


_Selector = Selector   # for JoinBolt's annotations, where its own attribute hides the class


class JoinBolt(WindowedBolt):
    """Joins the streams it is given, window by window (see the module's docstring).

    ``JoinBolt("spout1", "key1")`` starts from the tuples of component ``spout1``, joined on
    their ``key1``; ``JoinBolt(Selector.STREAM, "stream1", "key1")`` from stream ``stream1``.
    """

    Selector = _Selector   # Storm's spelling: JoinBolt.Selector.STREAM

    @overload
    def __init__(self, source: str, field: str, /) -> None: ...
    @overload
    def __init__(self, selector: _Selector, stream: str, field: str, /) -> None: ...

    def __init__(self, *args: Any) -> None:
        if args and isinstance(args[0], Selector):
            selector, args = args[0], args[1:]
        else:
            selector = Selector.SOURCE
        if len(args) != 2 or not all(isinstance(a, str) and a for a in args):
            raise TopologyError("JoinBolt takes a source component (or a Selector and a stream) "
                                f"and its join field, got {args!r}")
        self.selector = selector
        self.joins: list[_Join] = [_Join(args[0], FieldSelector(args[1], args[0]))]
        self.output_fields: list[FieldSelector] | None = None
        self.output_stream = DEFAULT_STREAM
        self._plan()

    def join(self, stream: str, field: str, prior: str) -> Self:
        """Inner join: ``... inner join stream on stream.field = prior.<prior's join field>``.
        ``prior`` must have been introduced before."""
        return self._add(stream, field, prior, JoinType.INNER)

    def left_join(self, stream: str, field: str, prior: str) -> Self:
        """Left join: as ``join``, but a record with no match in ``stream`` is kept, its
        ``stream`` fields None."""
        return self._add(stream, field, prior, JoinType.LEFT)

    def _add(self, stream: str, field: str, prior: str, kind: JoinType) -> Self:
        names = [j.stream for j in self.joins]
        if stream in names:
            raise TopologyError(f"JoinBolt: {stream!r} is already part of the join; a stream "
                                f"is joined once")
        if prior not in names:
            raise TopologyError(f"JoinBolt: {stream!r} joins {prior!r}, which was not "
                                f"introduced before it (streams so far: {names})")
        prior_join = self.joins[names.index(prior)]
        prior_field = FieldSelector(".".join(prior_join.field.path), prior)
        self.joins.append(_Join(stream, FieldSelector(field, stream), kind, prior_field))
        self._plan()
        return self

    def select(self, fields: str | Sequence[str]) -> Self:
        """The output fields: ``"a, s2:b, c.d"`` (or a list of the same), in order."""
        names = fields.split(",") if isinstance(fields, str) else list(fields)
        selected = [FieldSelector(name) for name in names]
        if not selected or len({f.name for f in selected}) != len(selected):
            raise TopologyError(f"JoinBolt.select: give distinct output fields, got {fields!r}")
        self.output_fields = selected
        self._plan()
        return self

    def with_output_stream(self, stream: str) -> Self:
        """Emit the joined tuples on ``stream`` instead of the default stream."""
        if not isinstance(stream, str) or not stream:
            raise TopologyError(f"JoinBolt: an output stream must be a non-empty name, "
                                f"got {stream!r}")
        self.output_stream = stream
        return self

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        if self.output_fields is None:
            raise TopologyError("JoinBolt has no output fields: call select(...)")
        declarer.declare([f.name for f in self.output_fields], stream=self.output_stream)

    def name_of(self, tup: Tuple) -> str:
        """The name ``tup``'s stream has in the joins: its component or its stream id."""
        return tup.stream if self.selector is Selector.STREAM else tup.source_component

    def input_problems(self, component_id: str,
                       inputs: Iterable[tuple[str, str, Sequence[str]]]) -> list[str]:
        """What is wrong with joining ``inputs`` (``(source, stream, fields)`` of each
        subscription) this way, for the topology's build errors."""
        where = f"JoinBolt {component_id!r}"
        by_name: dict[str, set[str]] = {}
        for source, stream, fields in inputs:
            name = stream if self.selector is Selector.STREAM else source
            by_name.setdefault(name, set()).update(fields)
        joined = [j.stream for j in self.joins]
        what = "stream" if self.selector is Selector.STREAM else "component"
        problems = [f"{where} joins {what} {name!r}, which it does not subscribe to"
                    for name in joined if name not in by_name]
        problems += [f"{where} subscribes to {what} {name!r}, which is in none of its joins"
                     for name in by_name if name not in joined]
        for j in self.joins:
            if j.stream in by_name and j.field.path[0] not in by_name[j.stream]:
                problems.append(f"{where}: {what} {j.stream!r} has no field {j.field.path[0]!r} "
                                f"to join on (it has {sorted(by_name[j.stream])})")
        for f in self.output_fields or ():
            if f.stream is None:
                found = any(f.path[0] in by_name.get(name, ()) for name in joined)
            else:
                named = [n for n in joined if n.lower() == f.stream.lower()]
                if not named:
                    problems.append(f"{where} selects {f.name!r}, but {f.stream!r} is not "
                                    f"one of its joined streams {joined}")
                    continue
                found = f.path[0] in by_name.get(named[0], ())
            if not found:
                problems.append(f"{where} selects {f.name!r}, which no joined stream has")
        return problems

    def execute(self, window: Window) -> None:  # type: ignore[override]  # as WindowedBolt
        for tuples, values in self.join_window(window.get()):
            self.collector.emit(values, tuples, self.output_stream)

    def join_window(self, tuples: Iterable[Tuple]) -> list[tuple[list[Tuple], list[Any]]]:
        """The join of ``tuples``: each output record as (the input tuples it joins, one per
        stream it matched, in join order, and its selected values)."""
        joins = self.joins
        # A record is a list with a place for each stream in join order (None where a left
        # join matched nothing): each field is then looked for at known places.
        empty: list[Tuple | None] = [None] * len(joins)
        hashed: list[dict[Any, list[Tuple]]] = [{} for _ in joins]
        position = self._positions
        keys = [j.field.path for j in joins]
        records: list[list[Any]] = []
        for tup in tuples:
            info = tup.info
            place = position.get(info)
            if place is None:
                place = position[info] = self._position_of(tup)
            if place == 0:
                record = empty[:]
                record[0] = tup
                records.append(record)
            elif place > 0:
                key = _value(tup, keys[place])
                try:
                    hashed[place].setdefault(key, []).append(tup)
                except TypeError:
                    hashed[place].setdefault(_hashable(key), []).append(tup)
            # place -1: a stream outside the joins (the build refuses such inputs).
        for place in range(1, len(joins)):
            j = joins[place]
            table = hashed[place]
            left = j.kind is JoinType.LEFT
            prior = self._priors[place]
            joined: list[list[Any]] = []
            for record in records:
                key = _first(record, prior)
                if key is None:
                    continue
                try:
                    matches = table.get(key)
                except TypeError:
                    matches = table.get(_hashable(key))
                if matches:
                    for match in matches:
                        merged = record[:]
                        merged[place] = match
                        joined.append(merged)
                elif left:
                    joined.append(record)
            records = joined
        outputs = self._outputs
        return [([t for t in record if t is not None], [_first(record, where) for where in outputs])
                for record in records]

    def _position_of(self, tup: Tuple) -> int:
        """The place of ``tup``'s stream in the joins, -1 if none."""
        name = self.name_of(tup)
        for place, j in enumerate(self.joins):
            if j.stream == name:
                return place
        return -1

    def _plan(self) -> None:
        """Where each field is looked for in a record, by place in join order and path: each
        join's prior field at its prior stream's place; a selected field qualified by a stream
        at that stream's place (Storm matches the qualifier without case), an unqualified one
        at every place, the first not None winning."""
        names = [j.stream for j in self.joins]
        first: Place = ((0,), ())
        self._priors: list[Place] = [first] + [
            ((names.index(j.prior.stream),), j.prior.path)  # type: ignore[arg-type]  # see _add
            for j in self.joins[1:] if j.prior]
        self._outputs: list[Place] = [
            (tuple(i for i, name in enumerate(names)
                   if f.stream is None or name.lower() == f.stream.lower()), f.path)
            for f in self.output_fields or ()]
        self._positions: dict[Any, int] = {}   # an input's StreamInfo -> its place, or -1


# Where a field is looked for in a record: its places in join order, and its path.
Place = tuple[tuple[int, ...], tuple[str, ...]]


def _value(tup: Tuple, path: tuple[str, ...]) -> Any:
    """``tup``'s field ``path[0]``, then its keys ``path[1:]``; None where any is missing."""
    i = tup.info.index.get(path[0])
    if i is None:
        return None
    value = tup.values[i]
    for key in path[1:]:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _first(record: list[Any], where: Place) -> Any:
    """The first value of a field that is not None among ``record``'s tuples at its places."""
    places, path = where
    name = path[0]
    for place in places:
        tup = record[place]
        if tup is None:
            continue
        i = tup.info.index.get(name)
        if i is None:
            continue
        value = tup.values[i]
        if len(path) > 1:
            value = _value(tup, path)
        if value is not None:
            return value
    return None
