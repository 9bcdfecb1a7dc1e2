"""Fuzzing the failed-message log's readers: thousands of damaged files (bit flips, truncation,
zeroed runs, deep nesting, garbage, odd names) beside intact ones. No case may raise; every
intact record is read; whatever is skipped is named, and only in the damaged file."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import compiled_run_only

from stormlet import FailReason
from stormlet.cli import main
from stormlet.failed import FailedRecord, SourceRef, read_failed, summarize
from stormlet.failed.columnar import ColumnBuilder
from stormlet.failed.record import record_to_dict

SEED = 50
ODD_NAMES = ["s-2-victim", "s-2-with space é ☃", "s-2-%2F%25percent", "s-2-new\nline",
             os.fsdecode(b"s-2-not-utf8-\xff\xfe"), "s-2-" + "x" * 230]


def record(i: int) -> FailedRecord:
    values = [b"\x00\xffbytes", "text \u2603", None, 2**63, -1.5, [1, {"k": b"v"}],
              {1: "int key"}, float("nan")]
    return FailedRecord(message_id=[0, i], reason=FailReason("error", "split", f"bad {i}"),
                        attempts=i % 4 + 1, first_failed_at=1000.0 + i,
                        last_failed_at=1010.5 + i, key=f"k{i}", value=values[i % len(values)],
                        source=SourceRef(kind="log", name="words", partition=i % 3, offset=i),
                        record_id=f"r{i:04d}")


def as_dicts(first: int, n: int) -> list[dict]:
    return [record_to_dict(record(i), "wc", "s", 2, 2000.0 + i) for i in range(first, first + n)]


def parquet_bytes(dicts: list[dict]) -> bytes:
    builder = ColumnBuilder()
    for d in dicts:
        builder.add(d)
    return builder.to_parquet()


def json_lines(dicts: list[dict]) -> list[bytes]:
    import json
    return [json.dumps(d, separators=(",", ":")).encode() for d in dicts]


def damaged(rng: random.Random, data: bytes) -> bytes:
    """``data`` with one or two kinds of damage."""
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2))):
        how = rng.randrange(6)
        at = rng.randrange(len(out) + 1)
        if how == 0 and out:                                   # bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(out))
                out[i] ^= 1 << rng.randrange(8)
        elif how == 1:                                         # truncation
            del out[at:]
        elif how == 2:                                         # a zeroed run (a power cut)
            out[at:at + rng.randint(1, 64)] = bytes(len(out[at:at + rng.randint(1, 64)]))
        elif how == 3:                                         # deep nesting
            depth = rng.choice((150, 5_000, 100_000))
            out[at:at] = rng.choice((b"[" * depth, b'{"a":' * depth + b"1" + b"}" * depth))
        elif how == 4:                                         # garbage, invalid UTF-8
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
        else:                                                  # a line of the wrong shape
            out[at:at] = rng.choice((b"\n[1,2]\n", b'\n{"task":"x"}\n', b"\n1e999\n",
                                     b'\n{"record_id":' + b"9" * 5000 + b"}\n", b"\n\n"))
    return bytes(out)


@pytest.fixture(scope="module")
def originals():
    return {"parquet": parquet_bytes(as_dicts(20, 6)), "jsonl": json_lines(as_dicts(30, 6))}


@pytest.fixture
def log_dir(tmp_path):
    return intact_log(tmp_path / "log")


def intact_log(directory: Path) -> Path:
    """A log with an intact Parquet file and an intact JSON Lines file, records 0-9, of
    topology "zz": read after the damaged files of "wc"."""
    (directory / "wc").mkdir(parents=True)
    (directory / "zz").mkdir()
    (directory / "zz" / "s-1-intact.parquet").write_bytes(parquet_bytes(as_dicts(0, 5)))
    (directory / "zz" / "s-1-intact.jsonl").write_bytes(
        b"".join(line + b"\n" for line in json_lines(as_dicts(5, 5))))
    return directory


INTACT = {d["record_id"] for d in as_dicts(0, 10)}


def read_everything(directory: Path, case: int) -> tuple[list[dict], list]:
    """What the readers read and skip of ``directory``, and of the log beside it that holds
    the same damaged file and the intact ones too. Every case reads the damaged file alone;
    every tenth also the whole log, undecoded, and its summary."""
    bad: list = []
    got = list(read_failed(directory, on_bad=bad.append))
    if case % 10 == 0:
        whole = directory.parent / "log"
        whole_bad: list = []
        every = list(read_failed(whole, on_bad=whole_bad.append))
        ids = {r["record_id"] for r in every}
        assert INTACT <= ids, f"case {case}: an intact record was lost"
        assert len(every) == len(got) + len(INTACT)
        assert [b.where for b in whole_bad] == [b.where for b in bad]
        raw_bad: list = []
        raw = list(read_failed(whole, decode=False, on_bad=raw_bad.append))
        assert len(raw) == len(every) and len(raw_bad) == len(bad)    # one check, either way
        summary_bad: list = []
        summary = summarize(whole, on_bad=summary_bad.append)
        # ls reads only the columns it counts: it counts what show shows, or more
        assert summary.records >= len(every)
        assert {b.path.name for b in summary_bad} <= {b.path.name for b in bad}
    return got, bad


@compiled_run_only
@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
def test_damaged_files_never_stop_the_reading_of_intact_ones(tmp_path, originals, kind):
    log_dir = tmp_path / "alone"
    (log_dir / "wc").mkdir(parents=True)
    with_intact = intact_log(tmp_path / "log")
    rng = random.Random(f"{SEED}-{kind}")
    cases = 1200 if kind == "jsonl" else 800
    named = 0
    for case in range(cases):
        victim = log_dir / "wc" / f"{rng.choice(ODD_NAMES)}.{kind}"
        if kind == "jsonl":
            lines = originals["jsonl"]
            content = damaged(rng, b"".join(line + b"\n" for line in lines))
        else:
            content = damaged(rng, originals["parquet"])
        victim.write_bytes(content)
        beside = with_intact / "wc" / victim.name
        beside.write_bytes(content)
        got, bad = read_everything(log_dir, case)
        ids = [r["record_id"] for r in got]
        assert {b.path for b in bad} <= {victim}, f"case {case}: {bad}"
        from_victim = len(ids)
        if kind == "jsonl":
            pieces = content.split(b"\n")
            if pieces[-1] == b"":
                pieces.pop()
            # every line is read or named, and a line left as it was is read
            assert from_victim + len(bad) == len(pieces), f"case {case}"
            unchanged = {f"r{30 + i:04d}" for i, line in enumerate(lines) if line in pieces}
            assert unchanged <= set(ids), f"case {case}: an unchanged line was lost"
        else:
            whole = [b for b in bad if b.where is None]
            assert whole or from_victim + len(bad) == 6, f"case {case}: {bad}"
        assert all(b.problem and str(b).startswith(os.fspath(victim).encode(
            "utf-8", "backslashreplace").decode()) for b in bad)
        named += bool(bad)
        victim.unlink()
        beside.unlink()
    assert named > cases // 2     # the damage was mostly of the kind readers must notice


def test_the_commands_name_damage_and_show_the_rest(log_dir, originals):
    rng = random.Random(SEED)
    runner = CliRunner()
    for case in range(60):
        kind = rng.choice(("parquet", "jsonl"))
        victim = log_dir / "wc" / f"{rng.choice(ODD_NAMES)}.{kind}"
        data = (originals[kind] if kind == "parquet"
                else b"".join(line + b"\n" for line in originals[kind]))
        victim.write_bytes(damaged(rng, data))
        for args in (["ls"], ["show", "--limit", "100"], ["show", "--json", "--limit", "100"]):
            result = runner.invoke(main, ["failed", *args, "--failed-dir", str(log_dir)])
            assert result.exit_code == 0, (case, args, result.output[-2000:])
            assert "Traceback" not in result.output
        victim.unlink()


def test_a_tree_of_odd_entries_is_read_around(log_dir):
    tdir = log_dir / "wc"
    shutil.copy(log_dir / "zz" / "s-1-intact.jsonl", tdir / "s-1.jsonl")
    (tdir / "dir.parquet").mkdir()
    (tdir / "dir.parquet" / "inner.parquet").write_bytes(b"PAR1")
    (tdir / "dangling.jsonl").symlink_to(log_dir / "gone")
    (tdir / "empty.parquet").write_bytes(b"")
    (tdir / "empty.jsonl").write_bytes(b"")
    (tdir / "PAR1.parquet").write_bytes(b"PAR1PAR1")
    (log_dir / "a-file-not-a-topology").write_bytes(b"x")
    (log_dir / "%FF%FE").mkdir()
    shutil.copy(log_dir / "zz" / "s-1-intact.jsonl", log_dir / "%FF%FE" / "s-1.jsonl")
    bad: list = []
    got = list(read_failed(log_dir, on_bad=bad.append))
    assert len(got) == 20 and INTACT <= {r["record_id"] for r in got}
    assert sorted(b.path.name for b in bad) == ["PAR1.parquet", "dangling.jsonl",
                                                "dir.parquet", "empty.parquet"]
