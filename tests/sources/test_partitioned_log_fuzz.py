"""Fuzzing the partitioned log's reader and recovery: segments built frame by frame, then bits
flipped, files truncated, garbage appended and stray files added, thousands of times (seeded).

After each, the log must: raise nothing but its own LogError (naming the file); read back every
record of every frame the damage did not touch, with its offset, and of a frame with groups (more
than GROUP_RECORDS records) every group the damage did not touch, when its length, trailer and
checked head are whole; never return a record other than the one appended at its offset; hand
out, on the next append,
an offset above every one that may have been handed out before (all of them, unless a truncation
tore the last frame); and read in strictly increasing offsets before and after that append.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from support import compiled_run_only

from stormlet.sources.partitioned_log import LogError, PartitionedLog
from stormlet.sources.partitioned_log.frames import (
    BODY_HEAD,
    COUNT_MASK,
    GROUP_ENTRY,
    GROUP_HEAD,
    GROUP_RECORDS,
    GROUPED,
    PREFIX,
    array_header_size,
    encode_frame,
)

CASES = 2000
SEED = 20261130


class Frame:
    def __init__(self, segment: int, start: int, end: int, base: int, records: list,
                 data: bytes):
        self.segment, self.start, self.end = segment, start, end    # which file, which bytes
        self.base, self.records = base, records                     # [(key, value), ...]
        self.groups = groups(data)

    def readable(self, touched: set[tuple[int, int]]) -> list[int]:
        """The indexes of its records a reader must return after damage at ``touched``."""
        def clean(a: int, b: int) -> bool:
            return not any((self.segment, self.start + p) in touched for p in range(a, b))

        size = self.end - self.start
        if clean(0, size):
            return list(range(len(self.records)))
        if self.groups is None:
            return []
        head_end, spans = self.groups
        if not (clean(0, 4) and clean(size - 4, size) and clean(PREFIX.size, head_end)):
            return []
        return [i for a, b, first, n in spans if clean(a, b) for i in range(first, first + n)]


def groups(data: bytes) -> tuple[int, list[tuple[int, int, int, int]]] | None:
    """For a frame with groups: where its checked head ends, and each group's bytes and records
    (first byte, end byte, first record, records), relative to the frame; None without."""
    _base, raw, _time = BODY_HEAD.unpack_from(data, PREFIX.size)
    if not raw & GROUPED:
        return None
    count = raw & COUNT_MASK
    at = PREFIX.size + BODY_HEAD.size
    n_groups, _check = GROUP_HEAD.unpack_from(data, at)
    payload = at + GROUP_HEAD.size + GROUP_ENTRY.size * n_groups
    start, found = payload + array_header_size(2 * count), []
    for k in range(n_groups):
        end, _crc = GROUP_ENTRY.unpack_from(data, at + GROUP_HEAD.size + k * GROUP_ENTRY.size)
        first = k * GROUP_RECORDS
        found.append((start, payload + end, first, min(GROUP_RECORDS, count - first)))
        start = payload + end
    return payload, found


def build(directory: Path, rng: random.Random) -> tuple[list[Frame], dict[int, bytearray]]:
    """One or two segments of random frames in ``directory``; returns the frames and each
    segment's bytes by base offset."""
    frames: list[Frame] = []
    files: dict[int, bytearray] = {}
    offset = 0
    for _segment in range(rng.choice((1, 1, 2))):
        base, data = offset, bytearray()
        for _frame in range(rng.randint(0 if base else 1, 6)):
            count = rng.choice((rng.randint(1, 6), rng.randint(1, 6),
                                rng.randint(GROUP_RECORDS + 1, 3 * GROUP_RECORDS)))
            records = [(rng.choice((None, f"k{rng.randrange(9)}", b"\x00k")),
                        "x" * rng.randrange(30) if rng.random() < .5
                        else rng.randbytes(rng.randrange(30)))
                       for _ in range(count)]
            flat = [item for record in records for item in record]
            frame = encode_frame(offset, count, 1.5, flat)
            frames.append(Frame(base, len(data), len(data) + len(frame), offset, records,
                                frame))
            data += frame
            offset += count
        files[base] = data
    return frames, files


def segment(directory: Path, base: int) -> Path:
    return directory / f"{base:020d}.seg"


def damage(rng: random.Random, files: dict[int, bytearray], directory: Path,
           frames: list[Frame]) -> tuple[set[tuple[int, int]], bool]:
    """Damage the segments; returns the (segment, byte) positions changed, and whether the end
    of the last segment was cut (which may tear its last frame: its offsets may come back)."""
    touched: set[tuple[int, int]] = set()
    cut = False
    bases = sorted(files)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("flip", "flip", "flip", "truncate", "garbage", "name"))
        base = rng.choice(bases)
        data = files[base]
        if kind == "flip" and data:
            pos = rng.randrange(len(data))
            data[pos] ^= 1 << rng.randrange(8)
            touched.add((base, pos))
        elif kind == "truncate" and data:
            keep = rng.randrange(len(data))
            touched.update((base, p) for p in range(keep, len(data)))
            del data[keep:]
            cut = cut or base == bases[-1]
        elif kind == "garbage":
            extra = rng.choice((rng.randbytes(rng.randrange(1, 80)),
                                b"\x00" * rng.randrange(1, 80)))
            touched.update((base, p) for p in range(len(data), len(data) + len(extra)))
            data += extra
        elif kind == "name":
            name = rng.choice(("99999999999999999999999.seg", "abc.seg", "7.seg",
                               "18446744073709551615.seg", "00000000000000000001.seg.bak"))
            (directory / name).write_bytes(rng.randbytes(rng.randrange(40)))
    for base, data in files.items():
        segment(directory, base).write_bytes(bytes(data))
    return touched, cut


def read_everything(log: PartitionedLog, batch: int) -> list:
    records, offset = [], log.start_offset(0)
    while chunk := log.read(0, offset, batch):
        records += chunk
        offset = chunk[-1].offset + 1
    return records


def check_one(root: Path, rng: random.Random) -> None:
    """One case, in the one-partition log at ``root``, whose partition is emptied first."""
    directory = root / "partition-0"
    for name in os.listdir(directory):
        if name != "writer.lock":
            os.unlink(directory / name)
    frames, files = build(directory, rng)
    end = frames[-1].base + len(frames[-1].records) if frames else 0
    touched, cut = damage(rng, files, directory, frames)
    intact = [f for f in frames
              if not any((f.segment, p) in touched for p in range(f.start, f.end))]
    readable = {f.base + i: f.records[i] for f in frames for i in f.readable(touched)}
    appended = {f.base + i: record for f in frames for i, record in enumerate(f.records)}
    last = frames[-1] if frames else None
    # The one damage that cannot be told from a torn frame: the last frame's length and trailer
    # both changed (then its offsets may be handed out again; no reader ever saw them whole).
    hidden = last is not None and any((last.segment, p) in touched for p in range(last.start,
                                                                                  last.start + 4)) \
        and any((last.segment, p) in touched for p in range(last.end - 4, last.end))

    log = PartitionedLog(root)
    try:
        got = read_everything(log, rng.choice((2, 1000)))
        offsets = [r.offset for r in got]
        assert offsets == sorted(set(offsets)), offsets
        by_offset = {r.offset: (r.key, r.value) for r in got}
        for offset, record in readable.items():
            assert by_offset.get(offset) == record, (offset, offsets)
        for offset, record in by_offset.items():
            assert appended.get(offset) == record, ("a record not appended", offset)
        if intact:      # and from a fresh reader, seeking straight to a frame
            frame = rng.choice(intact)
            fresh = PartitionedLog(root)
            first = fresh.read(0, frame.base, 1)
            fresh.close()
            assert [(r.offset, r.key, r.value) for r in first] == [(frame.base,
                                                                    *frame.records[0])]
        new = log.append("new", partition=0)[1]
        floor = max((f.base + len(f.records) for f in intact), default=0)
        assert new >= floor
        if not cut and not hidden:
            assert new >= end, (new, end)
        assert new not in by_offset
        again = PartitionedLog(root)
        try:
            after = read_everything(again, 1000)
        finally:
            again.close()
        offsets = [r.offset for r in after]
        assert offsets == sorted(set(offsets))
        assert after[-1].offset == new and after[-1].value == "new"
    except LogError as exc:
        assert str(root) in str(exc), exc
    finally:
        log.close()


@pytest.fixture
def no_fsync(monkeypatch):
    """Thousands of logs: durability is not what is tested here."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@compiled_run_only
def test_damaged_segments_never_crash_lose_an_intact_record_or_reuse_an_offset(tmp_path, no_fsync,
                                                                               caplog):
    caplog.set_level("ERROR")       # each case warns about its damage; keep the output short
    rng = random.Random(SEED)
    PartitionedLog.create(tmp_path / "log", 1).close()
    for case in range(CASES):
        try:
            check_one(tmp_path / "log", rng)
        except AssertionError as exc:
            raise AssertionError(f"case {case} (seed {SEED}): {exc}") from exc
