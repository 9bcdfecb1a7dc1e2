"""A local text input read by byte ranges in the workers (``stormlet.spark.backfill.text_ranges``)
gives Hadoop's lines, each once, however the files are dealt into ranges; inputs it cannot read
so (compressed, nested) are left to Spark's ``textFile``; a long line costs one pass."""

from __future__ import annotations

import gzip

from hypothesis import given, settings
from hypothesis import strategies as st
from support import compiled_run_only

from stormlet.spark.backfill import text_ranges
from stormlet.spark.backfill.inputs import InputOptions, resolve_input
from stormlet.spark.backfill.text_ranges import read_lines, split_ranges

line = st.sampled_from(["", "a", "bc", "é✓ 𝄞", "xyz" * 7])
ending = st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\r\r\n"])
text = st.lists(st.tuples(line, ending), max_size=12).map(
    lambda pairs: "".join(a + b for a, b in pairs))


BOM = b"\xef\xbb\xbf"


@compiled_run_only
@settings(max_examples=400, deadline=None)
@given(files=st.lists(st.tuples(text, st.booleans(), st.booleans(), st.booleans()),
                      min_size=1, max_size=3),
       n=st.integers(1, 9), block=st.sampled_from([1, 2, 7, 1 << 20]))
def test_every_line_is_read_once_in_order_whatever_the_ranges(tmp_path_factory, files, n,
                                                              block):
    directory = tmp_path_factory.mktemp("in")
    listed, expected = [], []
    for i, (content, cut_last_ending, bom, invalid) in enumerate(files):
        data = content.encode()
        if cut_last_ending:   # a last line without an ending
            data = data.rstrip(b"\r\n") + b"tail"
        if invalid:           # not UTF-8: Hadoop's Text reads U+FFFD
            data = data.replace(b"a", b"\xe9a")
        if bom:
            data = BOM + data
        path = directory / f"part-{i}.txt"
        path.write_bytes(data)
        listed.append((str(path), len(data)))
        # Hadoop's lines: a byte order mark at the file's start skipped (a file of only a
        # mark holds one empty line).
        lines = data.splitlines()
        if bom:
            lines[0] = lines[0].removeprefix(BOM)
        expected += [line.decode(errors="replace") for line in lines]
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


def test_a_range_inside_one_long_line_reads_no_further_than_its_end(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"x" * (8 << 20) + b"\nshort\n")
    size = path.stat().st_size
    reads = []

    class Counting:      # counts the bytes read through the file object
        def __init__(self, f):
            self.f = f

        def seek(self, offset):
            return self.f.seek(offset)

        def read(self, n):
            data = self.f.read(n)
            reads.append(len(data))
            return data

    with open(path, "rb") as f:
        assert list(text_ranges._lines(Counting(f), 1000, 2000)) == []
    assert sum(reads) <= 2 * text_ranges._BLOCK
    assert [line for pieces in split_ranges([(str(path), size)], 3)
            for line in read_lines(pieces)] == ["x" * (8 << 20), "short"]
