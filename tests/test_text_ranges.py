"""A local text input read by byte ranges in the workers (``stormlet.spark.backfill.text_ranges``)
gives Hadoop's lines, each once, however the files are dealt into ranges; inputs it cannot read
so (compressed, nested) are left to Spark's ``textFile``."""

from __future__ import annotations

import gzip

from hypothesis import given, settings
from hypothesis import strategies as st

from stormlet.spark.backfill import text_ranges
from stormlet.spark.backfill.inputs import InputOptions, resolve_input
from stormlet.spark.backfill.text_ranges import read_lines, split_ranges

line = st.sampled_from(["", "a", "bc", "é✓ 𝄞", "xyz" * 7])
ending = st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\r\r\n"])
text = st.lists(st.tuples(line, ending), max_size=12).map(
    lambda pairs: "".join(a + b for a, b in pairs))


@settings(max_examples=300, deadline=None)
@given(files=st.lists(st.tuples(text, st.booleans()), min_size=1, max_size=3),
       n=st.integers(1, 9), block=st.sampled_from([1, 2, 7, 1 << 20]))
def test_every_line_is_read_once_in_order_whatever_the_ranges(tmp_path_factory, files, n,
                                                              block):
    directory = tmp_path_factory.mktemp("in")
    listed, expected = [], []
    for i, (content, cut_last_ending) in enumerate(files):
        data = content.encode()
        if cut_last_ending:   # a last line without an ending
            data = data.rstrip(b"\r\n") + b"tail"
        path = directory / f"part-{i}.txt"
        path.write_bytes(data)
        listed.append((str(path), len(data)))
        expected += [line.decode() for line in data.splitlines()]   # Hadoop's lines
    original, text_ranges._BLOCK = text_ranges._BLOCK, block
    try:
        ranges = split_ranges(listed, n)
        got = [line for pieces in ranges for line in read_lines(pieces)]
    finally:
        text_ranges._BLOCK = original
    assert got == expected
    assert len(ranges) <= n and all(ranges)


def test_a_file_or_a_flat_directory_is_read_by_ranges_compressed_or_nested_input_is_not(
        tmp_path):
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.txt").write_text("x\n")
    (tmp_path / "flat" / "_SUCCESS").write_text("")
    assert resolve_input(InputOptions(str(tmp_path / "flat" / "a.txt")), "s").files == (
        (str(tmp_path / "flat" / "a.txt"), 2),)
    assert [p for p, _ in resolve_input(InputOptions(str(tmp_path / "flat")), "s").files] == [
        str(tmp_path / "flat" / "a.txt")]
    with gzip.open(tmp_path / "b.txt.gz", "wt") as f:
        f.write("y\n")
    assert resolve_input(InputOptions(str(tmp_path / "b.txt.gz")), "s").files == ()
    (tmp_path / "nested" / "deeper").mkdir(parents=True)
    (tmp_path / "nested" / "deeper" / "c.txt").write_text("z\n")
    assert resolve_input(InputOptions(str(tmp_path / "nested")), "s").files == ()
