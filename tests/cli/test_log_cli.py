"""`stormlet log create|append|describe`: through click's CliRunner, and once as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from stormlet.cli import main
from stormlet.sources import log_lines
from stormlet.sources.partitioned_log import PartialAppend, PartitionedLog, partition_for_key

ROOT = Path(__file__).resolve().parents[2]


def stormlet(*args: object, input: str | bytes | None = None):
    return CliRunner().invoke(main, ["log", *map(str, args)], input=input)


def error_line(result) -> str:
    """The one line an error prints (click puts it on stderr, prefixed with "Error: ")."""
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def values(path: Path) -> dict[int, list]:
    log = PartitionedLog(path)
    try:
        return {p: [(r.key, r.value) for r in log.read(p, 0, 10_000)]
                for p in range(log.partitions)}
    finally:
        log.close()


@pytest.fixture
def path(tmp_path) -> Path:
    path = tmp_path / "events"
    result = stormlet("create", path, "--partitions", 3)
    assert result.exit_code == 0, result.output
    assert result.output == f"created log {path} with 3 partitions\n"
    return path


def test_create_refuses_an_existing_log_and_a_bad_partition_count(path, tmp_path):
    assert "there is one already" in error_line(stormlet("create", path, "--partitions", 2))
    assert "must be a positive integer, not 0" in error_line(
        stormlet("create", tmp_path / "zero", "--partitions", 0))
    assert not (tmp_path / "zero").exists()
    assert PartitionedLog(path).partitions == 3


def test_append_lines_from_stdin_round_robin(path):
    lines = [f"line {i}" for i in range(9)]
    result = stormlet("append", path, input="\n".join(lines[:5]) + "\n\n  \n"
                      + "\r\n".join(lines[5:]))           # blank lines skipped, CRLF taken
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"appended 9 messages to {path} in ")
    for p in range(3):
        assert f"partition {p}: 3 (offsets 0-2)" in result.output
    stored = values(path)
    assert sorted(v for part in stored.values() for _, v in part) == sorted(lines)
    assert all(key is None for part in stored.values() for key, _ in part)


def test_append_with_a_key_field_routes_by_key(path, tmp_path):
    rows = [{"user": f"u{i % 7}", "n": i} for i in range(40)] + [{"user": 42, "n": 40}]
    file = tmp_path / "rows.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = stormlet("append", path, "--file", file, "--key-field", "user")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("appended 41 messages")
    stored = values(path)
    for p, part in stored.items():
        for key, value in part:
            assert partition_for_key(key, 3) == p
            assert key == str(json.loads(value)["user"])     # 42 is keyed by its JSON text "42"
    assert sorted(json.loads(v)["n"] for part in stored.values() for _, v in part) == list(
        range(41))


def test_append_to_one_partition(path):
    result = stormlet("append", path, "--partition", 1, input="a\nb\nc\n")
    assert result.exit_code == 0, result.output
    assert "partition 1: 3 (offsets 0-2)" in result.output
    assert values(path) == {0: [], 1: [(None, "a"), (None, "b"), (None, "c")], 2: []}
    assert "has no partition 3 (it has 3: 0 to 2)" in error_line(
        stormlet("append", path, "--partition", 3, input="a\n"))


@pytest.mark.parametrize("text,problem", [
    ('{"user": "a"}\n{"user": "b"}\nnot json\n{"user": "c"}\n', "line 3 is not JSON"),
    ('{"user": "a"}\n{"name": "b"}\n', "line 2 has no field 'user'"),
    ('{"user": "a"}\n\n["user"]\n', "line 3 is not a JSON object"),
])
def test_a_bad_line_names_its_number_and_appends_nothing(path, text, problem):
    stormlet("append", path, input="before\n")
    line = error_line(stormlet("append", path, "--key-field", "user", input=text))
    assert f"stdin: {problem}" in line and line.endswith("nothing was appended")
    assert sum(len(part) for part in values(path).values()) == 1


def test_a_line_that_is_not_utf8_is_refused_by_number(path, tmp_path):
    file = tmp_path / "bad.txt"
    file.write_bytes(b"ok\nfine\n\xff\xfe\n")
    line = error_line(stormlet("append", path, "--file", file))
    assert f"{file}: line 3 is not UTF-8 text; nothing was appended" in line
    assert sum(len(part) for part in values(path).values()) == 0


def test_checks_the_whole_input_before_writing_any_of_it(path, monkeypatch):
    monkeypatch.setattr(log_lines, "BLOCK_BYTES", 64)     # many blocks: the bad line is in the last
    text = "".join(json.dumps({"k": str(i)}) + "\n" for i in range(200)) + "{broken\n"
    assert "line 201 is not JSON" in error_line(stormlet("append", path, "-k", "k", input=text))
    assert sum(len(part) for part in values(path).values()) == 0
    result = stormlet("append", path, "-k", "k", input=text[:-len("{broken\n")])
    assert result.exit_code == 0 and "appended 200 messages" in result.output


def test_a_failed_write_says_what_was_appended(path, monkeypatch):
    monkeypatch.setattr(log_lines, "BLOCK_BYTES", 20)
    real = PartitionedLog.append_many
    calls = []

    def failing(self, values, keys=None, partition=None):
        calls.append(len(values))
        if len(calls) == 3:
            raise PartialAppend("appending to partition 0 of the log failed: disk full", {})
        return real(self, values, keys, partition)

    monkeypatch.setattr(PartitionedLog, "append_many", failing)
    line = error_line(stormlet("append", path, "--partition", 0,
                               input="".join(f"message {i}\n" for i in range(20))))
    written = sum(calls[:2])
    assert "disk full" in line
    assert f"{written} messages of stdin were appended in all: partition 0: {written} " \
           f"(offsets 0-{written - 1})" in line
    assert len(values(path)[0]) == written


def test_a_missing_log_or_input_file_is_named(tmp_path, path):
    missing = tmp_path / "nope"
    for args in (["append", missing], ["describe", missing]):
        assert f"no log at {missing}" in error_line(stormlet(*args, input="x\n"))
    assert f"cannot read {tmp_path / 'f'}: No such file" in error_line(
        stormlet("append", path, "--file", tmp_path / "f"))


def write_commit(path: Path, spout_id: str, partition: int, offset: int, topic: str) -> None:
    record = {"offset": offset, "partition": partition, "topic": topic, "time": time.time()}
    target = path / "_offsets" / spout_id / f"{partition}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record))


def test_describe_shows_offsets_counts_and_each_spouts_lag(tmp_path):
    path = tmp_path / "log"
    log = PartitionedLog.create(path, 2, segment_records=10)
    log.append_many([f"a{i}" for i in range(30)], partition=0)
    log.append_many([f"b{i}" for i in range(5)], partition=1)
    log.delete_before(0, 10)
    log.close()
    result = stormlet("describe", path)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert ["0", "10", "30", "20", "0"] in rows and ["1", "0", "5", "5", "0"] in rows
    assert ["total", "25", "0"] in rows
    assert "no committed offsets" in result.output

    topic = str(path.resolve())
    write_commit(path, "reader", 0, 25, topic)
    write_commit(path, "reader", 1, 5, topic)
    write_commit(path, "slow", 0, 4, topic)           # below the start: retention got there first
    result = stormlet("describe", path)
    assert result.exit_code == 0, result.output
    out = result.output
    reader = out[out.index("spout reader (commits in local):")
                 :out.index("spout slow (commits in local):")]
    rows = [line.split()[:4] for line in reader.splitlines()]
    assert ["0", "25", "30", "5"] in rows and ["1", "5", "5", "0"] in rows
    assert ["total", "5"] in rows
    slow = out[out.index("spout slow (commits in local):"):]
    assert any(line.split()[:4] == ["0", "4", "30", "26"]
               and "6 unread messages were deleted by retention" in line
               for line in slow.splitlines())
    assert any(line.split()[:4] == ["1", "none", "5", "-"] for line in slow.splitlines())
    # The _offsets directory is not taken for part of the log.
    assert PartitionedLog(path).describe() == {0: (10, 30), 1: (0, 5)}


def test_the_stormlet_command_has_the_log_group(tmp_path):
    path = tmp_path / "log"

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "stormlet.cli", "log", *args], input=input,
                              capture_output=True, text=True, timeout=60, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})

    assert run("create", str(path), "--partitions", "2").returncode == 0
    appended = run("append", str(path), input="".join(f"{i}\n" for i in range(10)))
    assert appended.returncode == 0, appended.stderr
    assert "appended 10 messages" in appended.stdout
    described = run("describe", str(path))
    assert described.returncode == 0
    assert ["total", "10", "0"] in [line.split() for line in described.stdout.splitlines()]
    failed = run("create", str(path), "--partitions", "2")
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [
        f"Error: cannot create a log at {path}: there is one already"]


def test_append_after_damage_keeps_intact_records_and_describe_and_check_count_the_loss(tmp_path):
    path = tmp_path / "log"
    log = PartitionedLog.create(path, 1)
    for i in range(0, 100, 10):
        log.append_many([f"r{j}" for j in range(i, i + 10)], partition=0)
    log.close()
    segment = path / "partition-0" / f"{0:020d}.seg"
    data = bytearray(segment.read_bytes())
    frame = len(data) // 10
    data[2 * frame + 40] ^= 0xFF                   # a middle frame (offsets 20-29)
    data[-20] ^= 0xFF                              # and the last (90-99)
    segment.write_bytes(bytes(data))
    (path / "partition-0" / "99999999999999999999999.seg").write_bytes(b"")
    result = stormlet("append", path, "--partition", 0, input="after\n")
    assert result.exit_code == 0, result.output
    assert "partition 0: 1 (offsets 100-100)" in result.output
    assert [v for _, v in values(path)[0]] == [f"r{i}" for i in [*range(20), *range(30, 90)]] + [
        "after"]
    result = stormlet("describe", path)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert ["0", "0", "101", "81", "20"] in rows and ["total", "81", "20"] in rows
    assert "partition 0: offsets 20-29 lost to damage in 00000000000000000000.seg" in result.output
    assert "partition 0: offsets 90-99 lost to damage" in result.output
    assert "partition 0: ignored 99999999999999999999999.seg: not a segment name" in result.output
    checked = stormlet("check", path)
    assert checked.exit_code == 1 and ["total", "81", "20"] in [
        line.split() for line in checked.output.splitlines()]
