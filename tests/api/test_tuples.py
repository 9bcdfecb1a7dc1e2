"""A tuple's values: read as a slot when compiled, and never reassigned."""

from __future__ import annotations

import dis
import pickle
import sys
import types

import pytest

from stormlet.runtime import build_mode
from stormlet.tuples import VALUES_READ_AS_SLOT, StreamInfo, Tuple, tracked, untracked

INFO = StreamInfo("split", "default", ["word", "count"])


def made_every_way() -> list[Tuple]:
    return [tracked(["a", 1], INFO, 3, 11, 12), untracked(["b", 2], INFO, 3),
            Tuple(["c", 3], INFO, 4, (21, 22, 23, 24)), Tuple(["d", 4], INFO, 4)]


def test_compiled_tuples_read_values_as_a_slot_and_interpreted_ones_as_their_plain_slot():
    descriptor = Tuple.__dict__["values"]
    assert type(descriptor) is types.MemberDescriptorType
    assert VALUES_READ_AS_SLOT == (build_mode.mode() == "compiled")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="no specializing interpreter before 3.11")
def test_the_interpreter_reads_a_tuples_values_straight_from_its_slot():
    def read(tup):
        return tup.values

    tup = tracked(["a", 1], INFO, 3, 11, 12)
    for _ in range(200):   # past the interpreter's warm-up, so that it specializes the read
        read(tup)
    names = {instruction.opname for instruction in dis.get_instructions(read, adaptive=True)}
    assert "LOAD_ATTR_SLOT" in names, names


def test_values_read_the_same_through_the_slot_the_index_and_the_field_name():
    for _ in range(3):   # long enough for the interpreter to specialize the read
        for tup, expected in zip(made_every_way(), (["a", 1], ["b", 2], ["c", 3], ["d", 4])):
            for _ in range(20):
                assert tup.values == expected
            assert [tup[0], tup[1]] == [tup["word"], tup["count"]] == expected
            assert tup.as_dict() == {"word": expected[0], "count": expected[1]}


@pytest.mark.skipif(not VALUES_READ_AS_SLOT, reason="interpreted: values is a plain slot")
def test_compiled_values_cannot_be_reassigned_or_deleted():
    tup = tracked(["a", 1], INFO, 3, 11, 12)
    with pytest.raises(AttributeError, match="readonly"):
        tup.values = ["z", 9]
    with pytest.raises(AttributeError, match="readonly"):
        del tup.values
    assert tup.values == ["a", 1]


def test_a_tuple_survives_pickling_with_its_values_and_ids():
    for tup in made_every_way():
        copy = pickle.loads(pickle.dumps(tup))
        assert (copy.values, copy.roots, copy.source_task, copy.stream) == \
            (tup.values, tup.roots, tup.source_task, tup.stream)
