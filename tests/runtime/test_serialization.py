"""The emit-time value check: what it lets through, and what it leaves to the cyclic collector."""

from __future__ import annotations

import gc

import pytest

from stormlet import SerializationError
from stormlet.runtime import build_mode
from stormlet.runtime.serialization import checked
from stormlet.tuples import StreamInfo

compiled = "stormlet.runtime.serialization" in build_mode.compiled_modules()


def shape(*fields: str) -> StreamInfo:
    return StreamInfo("split", "default", list(fields))


def test_the_check_refuses_a_missing_stream_info_instead_of_reading_it():
    with pytest.raises(TypeError, match="StreamInfo"):
        checked(["word"], None, "split")


@pytest.mark.skipif(not compiled, reason="interpreted, the value check leaves lists tracked")
def test_a_list_of_plain_scalars_is_left_out_of_cyclic_collection_compiled():
    values = ["word", 7, 2.5, True, None, b"raw"]
    assert gc.is_tracked(values)
    assert checked(values, shape(*"abcdef"), "split") is values
    assert not gc.is_tracked(values)


def test_a_list_holding_a_container_stays_in_cyclic_collection():
    # A container may come to hold the list itself: such a cycle must stay collectable.
    for container in ([1, 2], {"k": 1}):
        values = ["word", container]
        assert checked(values, shape("word", "extra"), "split") is values
        assert gc.is_tracked(values)


def test_a_list_the_check_refuses_is_left_as_it_was():
    values = ["word", object()]
    with pytest.raises(SerializationError, match="extra"):
        checked(values, shape("word", "extra"), "split")
    assert gc.is_tracked(values)
