"""A batch of tuples as columns and back: the per-tuple loops of the wire format (``wire.py``),
compiled with the hot path (see ``stormlet/runtime/build_mode.py``) so that a tuple crossing between
workers costs a few field reads on the way out and one tuple from the free list on the way in.

A batch on one stream travels field by field: one list per field, each holding that field of
every tuple. msgpack packs and unpacks a flat list of values in about half the time it takes
for the same values as one small list per tuple, and the receiving side builds each tuple's
value list in the same loop that builds the tuple. A column of strings (a word count's words)
travels as one string, its values joined by the unit separator (U+001F) when none of them holds
that character: msgpack packs and unpacks one string of a thousand words in a fraction of the
time it takes for a thousand strings, and ``str.split`` makes the words again faster than
msgpack does.
"""

from __future__ import annotations

from array import array
from typing import Any

from ..tuples import StreamInfo, Tuple, tracked

# What a column of strings is joined by: a control character that text rarely holds.
SEPARATOR = "\x1f"


def to_columns(tuples: list) -> tuple[Any, list, bytes | list]:
    """``(streams, values, roots)`` of a non-empty batch. When every tuple is on one stream and
    has its fields' count of values (the usual case), ``streams`` is that stream's name and
    ``values`` its columns, one per field (a list, or a column of strings ``joined``); else
    ``streams`` and ``values`` are each tuple's stream and value list. ``roots`` is one blob of
    (root, edge) 64-bit pairs when every tuple has exactly one root (the usual case), else each
    tuple's flat roots (None when untracked)."""
    n = len(tuples)
    first = tuples[0]
    info = first.info
    nfields = len(info.fields)
    columns: list[Any] = [[None] * n for _ in range(nfields)]
    pairs = array("Q", bytes(16 * n))
    view = pairs
    by_field = True
    one_root_each = True
    for i in range(n):
        t = tuples[i]
        values = t.values
        if by_field:
            if t.info is not info or type(values) is not list or len(values) != nfields:
                by_field = False
            else:
                for j in range(nfields):
                    column = columns[j]
                    column[i] = values[j]
        if t.root:
            view[2 * i] = t.root
            view[2 * i + 1] = t.edge
        else:
            one_root_each = False
    roots = pairs.tobytes() if one_root_each else [t.roots for t in tuples]
    if by_field:
        for j in range(nfields):
            columns[j] = joined(columns[j])
        return info.stream, columns, roots
    return [t.info.stream for t in tuples], [t.values for t in tuples], roots


def joined(column: list) -> str | list:
    """A column whose values are all strings, none holding ``SEPARATOR``, as one string of
    them joined by it; else the column as it is."""
    try:
        text = SEPARATOR.join(column)
    except TypeError:   # a value that is not a string
        return column
    if text.count(SEPARATOR) != len(column) - 1:
        return column
    return text


def rows(columns: list, n: int) -> list:
    """Each tuple's value list from a batch's ``columns`` (``to_columns``): each a list of
    ``n`` values, or a ``joined`` string of them, which is split in place in ``columns``.
    ``ValueError`` if a column is neither."""
    nfields = len(columns)
    for j in range(nfields):
        candidate = columns[j]
        if type(candidate) is str:
            # At most n + 1 pieces: a peer's string of a million separators makes no million
            # strings, and the length check below refuses it.
            candidate = candidate.split(SEPARATOR, n)
            columns[j] = candidate
        if type(candidate) is not list or len(candidate) != n:
            raise ValueError("a column is not a list of the batch's length")
    out: list[Any] = [None] * n
    if nfields == 1:
        first = columns[0]
        for i in range(n):
            out[i] = [first[i]]
        return out
    for i in range(n):
        values = [None] * nfields
        for j in range(nfields):
            column = columns[j]
            values[j] = column[i]
        out[i] = values
    return out


def from_columns(values_list: list, info: StreamInfo, src: int, pairs: array) -> list[Tuple] | None:
    """The tuples of one stream whose roots came as a blob of pairs (``to_columns``), made in
    place of their value lists (``rows``); None, and ``values_list`` untouched, if a root is 0.
    The caller has checked that there is a pair per value list."""
    n = len(values_list)
    view = pairs
    for i in range(n):
        if view[2 * i] == 0:
            return None
    for i in range(n):
        values_list[i] = tracked(values_list[i], info, src, view[2 * i], view[2 * i + 1])
    return values_list
