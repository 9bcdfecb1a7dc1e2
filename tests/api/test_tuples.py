"""A tuple's values: read as a slot and never reassigned, compiled and interpreted alike."""

from __future__ import annotations

import dis
import pickle
import sys
import types

import pytest

from stormlet.tuples import VALUES_READ_ONLY, StreamInfo, Tuple, tracked, untracked

INFO = StreamInfo("split", "default", ["word", "count"])


def made_every_way() -> list[Tuple]:
    return [tracked(["a", 1], INFO, 3, 11, 12), untracked(["b", 2], INFO, 3),
            Tuple(["c", 3], INFO, 4, (21, 22, 23, 24)), Tuple(["d", 4], INFO, 4)]


def test_both_builds_read_values_through_a_read_only_slot():
    descriptor = Tuple.__dict__["values"]
    assert type(descriptor) is types.MemberDescriptorType
    assert VALUES_READ_ONLY


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


def test_values_cannot_be_reassigned_or_deleted_in_either_build():
    for tup in made_every_way():
        before = tup.values
        with pytest.raises(AttributeError, match="readonly"):
            tup.values = ["z", 9]
        with pytest.raises(AttributeError, match="readonly"):
            del tup.values
        assert tup.values is before


def test_a_tuple_survives_pickling_with_its_values_and_ids():
    for tup in made_every_way():
        tup.ack_val = 99
        copy = pickle.loads(pickle.dumps(tup))
        assert (copy.values, copy.roots, copy.source_task, copy.stream, copy.ack_val) == \
            (tup.values, tup.roots, tup.source_task, tup.stream, 99)
        with pytest.raises(AttributeError, match="readonly"):
            copy.values = []
