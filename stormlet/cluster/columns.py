"""A batch of tuples as columns and back: the per-tuple loops of the wire format (``wire.py``),
compiled with the hot path (see ``stormlet/build_mode.py``) so that a tuple crossing between
workers costs a few field reads on the way out and one tuple from the free list on the way in."""

from __future__ import annotations

from array import array
from typing import Any

import cython

from ..tuples import StreamInfo, Tuple, tracked


def to_columns(tuples: list) -> tuple[Any, list, bytes | list]:
    """``(streams, values, roots)`` of a non-empty batch: ``streams`` is the stream name when
    every tuple is on one stream, else each tuple's; ``roots`` is one blob of (root, edge) 64-bit
    pairs when every tuple has exactly one root (the usual case), else each tuple's flat roots
    (None when untracked)."""
    n = len(tuples)
    first = tuples[0]
    info = first.info
    values = [None] * n
    pairs = array("Q", bytes(16 * n))
    view = pairs
    same_stream = True
    one_root_each = True
    for i in range(n):
        t = tuples[i]
        values[i] = t.values
        if t.info is not info:
            same_stream = False
        if t.root:
            view[2 * i] = t.root
            view[2 * i + 1] = t.edge
        else:
            one_root_each = False
    streams = info.stream if same_stream else [t.info.stream for t in tuples]
    roots = pairs.tobytes() if one_root_each else [t.roots for t in tuples]
    return streams, values, roots


def from_columns(values_list: list, info: StreamInfo, src: int, pairs: array) -> list[Tuple]:
    """The tuples of one stream whose roots came as a blob of pairs (``to_columns``); the
    caller has checked the columns' lengths and that no root is 0."""
    n = len(values_list)
    out = [None] * n
    view = pairs
    for i in range(n):
        out[i] = tracked(values_list[i], info, src, view[2 * i], view[2 * i + 1])
    return out
