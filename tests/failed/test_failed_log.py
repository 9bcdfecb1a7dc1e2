"""The failed-message log: records round-trip, files rotate and appear only when complete, a
writer killed with SIGKILL loses nothing it flushed, and its leftover is recovered."""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from support import SteppedClock, compiled_run_only

from stormlet import FailReason
from stormlet.cli import main
from stormlet.failed import (
    FailedMessageWriter,
    FailedRecord,
    SourceRef,
    final_files,
    inprogress_files,
    read_failed,
    summarize,
    topologies,
)
from stormlet.failed import writer as writer_module
from stormlet.failed.record import record_to_dict

ROOT = Path(__file__).resolve().parents[2]


def record(i: int, *, value=b"value", key=b"key", reason=None, message_id=None, source=True,
           last_failed_at=None) -> FailedRecord:
    return FailedRecord(
        message_id=[0, i] if message_id is None else message_id,
        reason=reason or FailReason("error", "split", f"ValueError: bad {i}"),
        attempts=3, first_failed_at=1000.0 + i, last_failed_at=last_failed_at or 1010.5 + i,
        key=key, value=value,
        source=SourceRef(kind="kafka", name="words", partition=0, offset=i) if source else None)


def message_ids(records) -> list:
    return [r["message_id"][1] for r in records]


# ----- records


ODD_VALUES = [
    b"\x00\xff binary",
    "h\u00e9llo \u2603 \ud800",                  # non-ASCII and a lone surrogate
    None, True, 2**64 - 1, -1.5, math.inf,
    [b"nested", {"deep": [b"\x01", "x"]}],
    {"base64": "not bytes, a user dict"},       # looks like an encoding: must stay a dict
    {"dict": {"base64": b"bytes"}, "other": 1},
    {"dict": 5},
    {1: b"int keys", 2: None},
]


def test_round_trip_keeps_every_field(tmp_path):
    before = time.time()
    with FailedMessageWriter(tmp_path, "wc", "sentences", 3) as writer:
        written = [record(0, key=b"k\x00", value=b"\xfe\xff" * 10)]
        written += [record(i + 1, key=value, value=value) for i, value in enumerate(ODD_VALUES)]
        written.append(FailedRecord(message_id=b"\x07id", reason={"kind": "poison",
                                                                     "message": "undecodable"},
                                    attempts=1, first_failed_at=5.0, last_failed_at=5.0,
                                    value=("a", b"b")))
        for r in written:
            writer.write(r)
    after = time.time()
    read = list(read_failed(tmp_path))
    assert len(read) == len(written)
    for original, got in zip(written, read):
        assert got["format"] == 2
        assert got["record_id"] == original.record_id
        assert (got["topology"], got["component"], got["task"]) == ("wc", "sentences", 3)
        assert got["source"] == original.source
        # A tuple is a registered type (stormlet.serializers): it comes back a tuple.
        assert got["payload"] == {"key": original.key, "value": original.value}
        reason = original.reason
        expected_reason = ({"kind": reason.kind, "component": reason.component,
                            "message": reason.message} if isinstance(reason, FailReason)
                           else {"kind": "poison", "component": None, "message": "undecodable"})
        assert got["reason"] == expected_reason
        assert (got["attempts"], got["first_failed_at"], got["last_failed_at"]) == (
            original.attempts, original.first_failed_at, original.last_failed_at)
        assert before <= got["written_at"] <= after
    assert read[0]["message_id"] == [0, 0] and read[-1]["message_id"] == b"\x07id"
    assert len({r["record_id"] for r in read}) == len(read)


def test_file_is_parquet_with_typed_columns(tmp_path):
    with FailedMessageWriter(tmp_path, "wc", "sentences", 3) as writer:
        writer.write(record(0, key=b"key", value=math.nan))
        writer.write(record(1, key="k\ud800", value="plain"))
    (path,) = final_files(tmp_path)
    assert path.parent == tmp_path / "wc" and path.suffix == ".parquet"
    table = pq.read_table(path)
    assert table.schema.metadata[b"stormlet.failed.format"] == b"2"
    assert table.num_rows == 2 and table["task"].to_pylist() == [3, 3]
    assert table["source"].to_pylist()[1] == {"kind": "kafka", "name": "words", "partition": 0,
                                               "offset": 1}
    # Bytes as bytes, a str as a str; what neither column holds is canonical, strict JSON.
    assert table["key"].to_pylist() == [{"str": None, "bytes": b"key", "json": None},
                                        {"str": None, "bytes": None, "json": '"k\\ud800"'}]
    assert table["value"].to_pylist() == [{"str": None, "bytes": None, "json": '{"float":"nan"}'},
                                          {"str": "plain", "bytes": None, "json": None}]
    assert table["message_id"].to_pylist() == ["[0,0]", "[0,1]"]
    first, second = read_failed(tmp_path)
    assert math.isnan(first["payload"]["value"]) and second["payload"]["key"] == "k\ud800"
    assert next(read_failed(tmp_path, decode=False))["payload"] == {  # as encode_value has it
        "key": {"base64": "a2V5"}, "value": {"float": "nan"}}


def test_unwritable_values_and_bad_sources_are_refused_by_name(tmp_path):
    with FailedMessageWriter(tmp_path, "wc", "sentences", 3) as writer:
        with pytest.raises(TypeError, match="'sentences', payload value: a object cannot"):
            writer.write(record(0, value=[object()]))
        with pytest.raises(ValueError, match="lacks offset"):
            writer.write(FailedRecord(0, "fail", 1, 0.0, 0.0,
                                      source={"kind": "log", "name": "x", "partition": 0}))
        with pytest.raises(TypeError, match="reason must be"):
            writer.write(FailedRecord(0, "fail", 1, 0.0, 0.0))
    assert list(read_failed(tmp_path)) == []


def test_names_unsafe_in_paths_are_encoded_and_read_back(tmp_path):
    with FailedMessageWriter(tmp_path, "team/wc", ".hidden-spout", 1) as writer:
        writer.write(record(0))
    (path,) = final_files(tmp_path)
    assert not path.name.startswith(".") and path.parent.parent == tmp_path
    assert topologies(tmp_path) == ["team/wc"]
    (got,) = read_failed(tmp_path, topology="team/wc", component=".hidden-spout")
    assert (got["topology"], got["component"]) == ("team/wc", ".hidden-spout")


def test_filters_and_summary(tmp_path):
    timeout = FailReason("timeout", "count")
    with FailedMessageWriter(tmp_path, "wc", "a", 1) as w1, \
            FailedMessageWriter(tmp_path, "wc", "a-1", 2) as w2, \
            FailedMessageWriter(tmp_path, "other", "a", 1) as w3:
        for i in range(5):
            w1.write(record(i, last_failed_at=100.0 + i))
        for i in range(3):
            w2.write(record(i, reason=timeout))
        w3.write(record(0, reason={"kind": "fail", "component": "b"}))
    assert message_ids(read_failed(tmp_path, topology="wc", component="a")) == [0, 1, 2, 3, 4]
    assert len(list(read_failed(tmp_path, component="a-1"))) == 3
    assert len(list(read_failed(tmp_path, reason="timeout"))) == 3
    assert message_ids(read_failed(tmp_path, component="a", since=101, until=103)) == [1, 2]
    summary = summarize(tmp_path)
    assert (summary.files, summary.records, summary.in_progress) == (3, 9, 0)
    assert summary.counts == {("wc", "a", "error"): 5, ("wc", "a-1", "timeout"): 3,
                              ("other", "a", "fail"): 1}
    assert summary.by_topology() == {"wc": 8, "other": 1}
    assert summary.by_component() == {("wc", "a"): 5, ("wc", "a-1"): 3, ("other", "a"): 1}
    assert summary.by_reason() == {"error": 5, "timeout": 3, "fail": 1}
    assert summarize(tmp_path, topology="wc", reason="error").records == 5


def test_reader_skips_lines_that_are_not_records_in_a_json_lines_file(tmp_path, caplog):
    path = tmp_path / "wc" / "sentences-3-20240101T000000.000Z-abcdef-000001.jsonl"
    path.parent.mkdir()
    path.write_bytes(lines_of(record(0)) + b"[1, 2]\nnot json\n")   # the first format
    assert message_ids(read_failed(tmp_path)) == [0]
    assert f"{path} line 2: not a record: a JSON array; skipped" in caplog.text
    assert f"{path} line 3: not JSON" in caplog.text


def test_reader_skips_a_damaged_parquet_file(tmp_path, caplog):
    with FailedMessageWriter(tmp_path, "wc", "sentences", 3) as writer:
        writer.write(record(0))
        writer.flush()
        writer.write(record(1))
    first, second = final_files(tmp_path)
    first.write_bytes(first.read_bytes()[:-20])
    assert message_ids(read_failed(tmp_path)) == [1]
    assert f"{first}: not a readable Parquet file" in caplog.text


# ----- files: complete or absent


def test_reader_never_sees_the_in_progress_file(tmp_path):
    writer = FailedMessageWriter(tmp_path, "wc", "sentences", 3)
    for i in range(50):
        writer.write(record(i))
    writer._file.flush()  # the bytes are in the file, just not complete
    (inprogress,) = inprogress_files(tmp_path)
    assert inprogress.name.startswith(".") and inprogress.stat().st_size > 0
    assert list(read_failed(tmp_path)) == [] and final_files(tmp_path) == []
    assert list(tmp_path.glob("*/*.parquet")) == []       # what spark.read.parquet globs
    assert summarize(tmp_path).in_progress == 1
    made = writer.flush()
    assert made is not None and made.exists() and not inprogress.exists()
    assert message_ids(read_failed(tmp_path)) == list(range(50))
    assert writer.flush() is None                        # nothing new: no empty file
    writer.close()
    assert len(final_files(tmp_path)) == 1 and inprogress_files(tmp_path) == []


def test_a_file_is_complete_and_synced_before_its_final_name_appears(tmp_path, monkeypatch):
    # What a kill cannot show but a power cut would: fsync the data, rename, fsync the directory.
    # The journal goes only after that: until then a crash leaves it for recovery.
    events = []
    real_fsync, real_replace, real_unlink = os.fsync, os.replace, os.unlink

    def fsync(fd):
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", Path(dst).name, rows(Path(src))))
        real_replace(src, dst)

    def unlink(path):
        events.append(("unlink", Path(path).name))
        real_unlink(path)

    writer = FailedMessageWriter(tmp_path, "wc", "sentences", 3)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    for i in range(100):
        writer.write(record(i))
    (journal,) = inprogress_files(tmp_path)
    made = writer.flush()
    assert events == ["fsync file", ("rename", made.name, 100), "fsync dir",
                      ("unlink", journal.name)]
    monkeypatch.undo()
    writer.close()


def test_each_flush_starts_a_new_file(tmp_path):
    with FailedMessageWriter(tmp_path, "wc", "sentences", 3) as writer:
        for i in range(6):
            writer.write(record(i))
            if i % 2:
                writer.flush()
    files = final_files(tmp_path)
    assert len(files) == 3
    assert [rows(f) for f in files] == [2, 2, 2]
    assert message_ids(read_failed(tmp_path)) == list(range(6))


def test_rotation_by_size(tmp_path):
    # The size is the journal's: a record's JSON line.
    line = len(lines_of(record(0), topology="wc", component="sentences", task=3))
    max_bytes = 3 * line + line // 2                      # room for three records
    writer = FailedMessageWriter(tmp_path, "wc", "sentences", 3, max_bytes=max_bytes)
    for i in range(10):
        writer.write(record(i))
    files = final_files(tmp_path)
    assert len(files) == 3                                # 9 records rotated, one in progress
    assert message_ids(read_failed(tmp_path)) == list(range(9))
    writer.write(record(10, value=b"x" * (2 * max_bytes)))  # bigger than a file: a file of its own
    writer.write(record(11))
    writer.close()
    sizes = [rows(f) for f in final_files(tmp_path)]
    assert sizes == [3, 3, 3, 1, 1, 1]
    assert message_ids(read_failed(tmp_path)) == list(range(12))


def test_rotation_by_age(tmp_path, monkeypatch):
    clock = SteppedClock()
    monkeypatch.setattr(writer_module, "time", clock)
    writer = FailedMessageWriter(tmp_path, "wc", "sentences", 3, max_age_secs=0.5)
    writer.write(record(0))
    clock.now += 0.25
    assert writer.rotate_if_due() is None                 # too young
    clock.now += 0.25
    writer.write(record(1))                               # finds the file old: completes it first
    assert message_ids(read_failed(tmp_path)) == [0]
    clock.now += 0.25
    assert writer.rotate_if_due() is None
    clock.now += 0.25
    assert writer.rotate_if_due() is not None             # an idle writer's records show too
    assert message_ids(read_failed(tmp_path)) == [0, 1]
    assert inprogress_files(tmp_path) == []
    writer.close()
    assert len(final_files(tmp_path)) == 2


# ----- crashes and recovery


def leftover(tmp_path: Path, component: str, task: int, seq: int, content: bytes) -> Path:
    """An in-progress file named as a writer of component:task names them."""
    name = f"{component}-{task}-20240101T000000.000Z-abcdef-{seq:06d}"
    path = tmp_path / "wc" / f".{name}.jsonl.inprogress"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return path


def lines_of(*records: FailedRecord, topology="wc", component="s", task=1) -> bytes:
    """Records as a writer's journal (and the first format's files) hold them."""
    return b"".join(json.dumps(record_to_dict(r, topology, component, task, time.time()),
                               separators=(",", ":")).encode() + b"\n" for r in records)


def rows(path: Path) -> int:
    return pq.read_metadata(path).num_rows


def test_recovery_keeps_complete_lines_and_drops_torn_and_garbage_ones(tmp_path):
    good, last = lines_of(record(0), record(1)), lines_of(record(3))
    torn = lines_of(record(2))[:40]
    path = leftover(tmp_path, "s", 1, 7, good + b"\x00" * 30 + b"\n" + last + torn)
    writer = FailedMessageWriter(tmp_path, "wc", "s", 1)
    assert not path.exists()
    (made,) = writer.recovered
    assert made.name == path.name[1:-len(".jsonl.inprogress")] + ".parquet"  # its writer's name
    assert rows(made) == 3
    assert message_ids(read_failed(tmp_path)) == [0, 1, 3]
    writer.close()


def test_recovery_leaves_live_writers_and_other_tasks_alone(tmp_path):
    live = FailedMessageWriter(tmp_path, "wc", "s", 1)
    live.write(record(0))
    (live_file,) = inprogress_files(tmp_path)
    other_task = leftover(tmp_path, "s", 2, 1, lines_of(record(1)))
    other_component = leftover(tmp_path, "s-1", 3, 1, lines_of(record(2)))  # ".s-1-3-..."
    empty = leftover(tmp_path, "s", 1, 1, b"")
    second = FailedMessageWriter(tmp_path, "wc", "s", 1)
    assert second.recovered == []
    assert live_file.exists() and other_task.exists() and other_component.exists()
    assert not empty.exists()                             # a dead writer's empty file just goes
    live.close()
    second.close()
    assert message_ids(read_failed(tmp_path)) == [0]


def test_recovery_interrupted_after_making_the_final_file_does_not_duplicate(tmp_path):
    path = leftover(tmp_path, "s", 1, 1, lines_of(record(0)))
    FailedMessageWriter(tmp_path, "wc", "s", 1).close()
    (final,) = final_files(tmp_path)
    content = final.read_bytes()
    path.write_bytes(lines_of(record(0)))  # as if a recovery died between its rename and unlink
    FailedMessageWriter(tmp_path, "wc", "s", 1).close()
    assert not path.exists() and final.read_bytes() == content
    assert message_ids(read_failed(tmp_path)) == [0]


CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from stormlet.failed import FailedMessageWriter, FailedRecord
    writer = FailedMessageWriter(sys.argv[1], "wc", "sentences", 3)
    i = 0
    while True:
        writer.write(FailedRecord(message_id=[0, i], reason={"kind": "timeout"}, attempts=2,
                                  first_failed_at=1.0, last_failed_at=2.0, key=b"k",
                                  value=b"v" * 200,
                                  source={"kind": "log", "name": "in", "partition": 0,
                                          "offset": i}))
        i += 1
        if i % 5000 == 0:
            writer.flush()
            print(i, flush=True)  # every record below i is durable
""")


@compiled_run_only
def test_writer_killed_mid_stream_loses_nothing_it_flushed(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(ROOT)],
                             stdout=subprocess.PIPE, text=True)
    try:
        flushed = [int(child.stdout.readline()) for _ in range(3)]
        assert flushed == [5000, 10000, 15000]
        # Kill while the in-progress file holds data: stop the writer, look, and go on if empty.
        deadline = time.monotonic() + 10
        while True:
            child.send_signal(signal.SIGSTOP)
            sizes = [p.stat().st_size for p in inprogress_files(tmp_path)]
            if sizes and sizes[0] > 0:
                break
            assert time.monotonic() < deadline, "the writer never had unflushed data on disk"
            child.send_signal(signal.SIGCONT)
            time.sleep(0.002)
        child.kill()
        child.wait(timeout=10)
        flushed += [int(line) for line in child.stdout.read().split()]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    last_flush = flushed[-1]

    visible = list(read_failed(tmp_path))
    ids = message_ids(visible)
    # Every record flushed is there; what is there is whole files of whole records, in order: at
    # most one batch more than reported (flushed, then killed before printing).
    assert ids == list(range(len(ids)))
    assert last_flush <= len(ids) <= last_flush + 5000 and len(ids) % 5000 == 0
    assert all(r["payload"]["value"] == b"v" * 200 and r["source"]["offset"] == r["message_id"][1]
               for r in visible)

    (left,) = inprogress_files(tmp_path)
    content = left.read_bytes()
    complete = [json.loads(line) for line in content[:content.rfind(b"\n") + 1].splitlines()]
    assert complete, "the kill left no complete line to recover"

    writer = FailedMessageWriter(tmp_path, "wc", "sentences", 3)
    assert len(writer.recovered) == 1 and inprogress_files(tmp_path) == []
    after = list(read_failed(tmp_path))
    assert message_ids(after) == list(range(len(ids) + len(complete)))
    assert [r["record_id"] for r in after[len(ids):]] == [r["record_id"] for r in complete]
    assert len({r["record_id"] for r in after}) == len(after)
    writer.write(record(99))                              # and the new writer carries on
    writer.close()
    assert len(list(read_failed(tmp_path))) == len(after) + 1


# ----- the command line


@pytest.fixture
def failed_dir(tmp_path):
    with FailedMessageWriter(tmp_path, "wc", "sentences", 1) as writer:
        for i in range(4):
            writer.write(record(i))
        writer.write(record(4, reason=FailReason("timeout", "count")))
    with FailedMessageWriter(tmp_path, "clicks", "events", 2) as writer:
        writer.write(record(0, reason={"kind": "poison", "message": "bad json"}, source=False,
                            key=None, value="{not json"))
    return tmp_path


def failed_cli(*args: str):
    return CliRunner().invoke(main, ["failed", *args])


def test_cli_ls_counts_by_topology_component_and_reason(failed_dir):
    unfinished = FailedMessageWriter(failed_dir, "wc", "sentences", 9)
    unfinished.write(record(0))
    result = failed_cli("ls", "--failed-dir", str(failed_dir))
    unfinished.close()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"{failed_dir}: 6 failed messages in 2 files, 2 topologies"
    assert lines[1].split() == ["topology", "component", "timeout", "fail", "error", "poison",
                                "total"]
    assert lines[2].split() == ["clicks", "events", "0", "0", "0", "1", "1"]
    assert lines[3].split() == ["wc", "sentences", "1", "0", "4", "0", "5"]
    assert lines[4].split() == ["total", "1", "0", "4", "1", "6"]
    assert "not counted: 1 in-progress file" in lines[5]
    result = failed_cli("ls", "--failed-dir", str(failed_dir), "--topology", "clicks")
    assert result.output.splitlines()[0].endswith("1 failed message in 1 file, 1 topology")


def test_cli_show_prints_readable_records_filtered_and_limited(failed_dir):
    result = failed_cli("show", "--failed-dir", str(failed_dir), "--topology", "wc",
                        "--reason", "error", "--limit", "2")
    assert result.exit_code == 0, result.output
    blocks = result.output.strip().split("\n\n")
    assert len(blocks) == 2
    first = blocks[0].splitlines()
    assert first[0].startswith("wc sentences:1  record ")
    assert first[1].split(None, 1) == ["reason", "error in 'split': ValueError: bad 0"]
    assert "attempts  3, failed first 1970-01-01 00:16:40.000 UTC" in first[2]
    assert first[3:] == ["  message   [0, 0]", "  source    kafka words partition 0 offset 0",
                         "  key       b'key'", "  value     b'value'"]
    result = failed_cli("show", "--failed-dir", str(failed_dir), "--component", "events")
    assert "  reason    poison: bad json" in result.output and "  source    -" in result.output
    result = failed_cli("show", "--failed-dir", str(failed_dir), "--json", "--limit", "50")
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert len(rows) == 6 and rows[-1]["payload"]["key"] == {"base64": "a2V5"}


def test_cli_says_when_nothing_matches(failed_dir):
    result = failed_cli("show", "--failed-dir", str(failed_dir), "--topology", "wcc")
    assert result.exit_code == 0
    assert ("no failed messages in" in result.output
            and "(topologies with failed messages: clicks, wc)" in result.output)
    result = failed_cli("show", "--failed-dir", str(failed_dir), "--reason", "timeout",
                        "--component", "events")
    assert "for component 'events', reason 'timeout'" in result.output


def test_cli_refuses_a_missing_directory_clearly(tmp_path):
    missing = tmp_path / "nowhere"
    result = subprocess.run([sys.executable, "-m", "stormlet.cli", "failed", "ls",
                             "--failed-dir", str(missing)], capture_output=True, text=True,
                            cwd=ROOT, timeout=60)
    assert result.returncode == 1
    assert f"failed-message directory {missing} does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    a_file = tmp_path / "file"
    a_file.write_text("")
    result = failed_cli("show", "--failed-dir", str(a_file))
    assert result.exit_code == 1 and "is not a directory" in result.output
    result = failed_cli("ls")
    assert result.exit_code == 2 and "--failed-dir" in result.output


def test_cli_convert_turns_the_first_format_into_parquet_record_for_record(tmp_path):
    # Files of the first format, as earlier versions wrote them, beside a Parquet one.
    with FailedMessageWriter(tmp_path, "wc", "s", 1) as writer:
        writer.write(record(0))
    legacy = tmp_path / "wc" / "s-2-20240101T000000.000Z-abcdef-000001.jsonl"
    legacy.write_bytes(lines_of(record(1, key=None, value="text"), record(2, value=math.inf),
                                task=2) + b"not json\n")
    before = sorted(read_failed(tmp_path), key=lambda r: r["record_id"])
    assert len(before) == 3

    result = failed_cli("convert", "--failed-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert f"{legacy.name} -> {legacy.stem}.parquet: 2 records (1 line that were not records " \
           f"dropped)" in result.output
    assert result.output.splitlines()[-1] == f"1 file converted in {tmp_path}"
    assert not legacy.exists() and all(f.suffix == ".parquet" for f in final_files(tmp_path))
    after = sorted(read_failed(tmp_path), key=lambda r: r["record_id"])
    assert after == [{**r, "format": 2} for r in before]
    # Interrupted after the Parquet file was made: run again, and nothing is duplicated.
    legacy.write_bytes(lines_of(record(1), task=2))
    result = failed_cli("convert", "--failed-dir", str(tmp_path))
    assert result.exit_code == 0 and not legacy.exists()
    assert len(list(read_failed(tmp_path))) == 3


# ----- damaged files and lines: named, counted, skipped; every intact record still read


def legacy_file(tmp_path: Path, content: bytes, name="s-2-20240101T000000.000Z-abcdef-000001"):
    path = tmp_path / "wc" / f"{name}.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return path


def test_cli_ls_and_show_name_a_line_of_deep_nesting_and_read_every_other_file(failed_dir):
    # Issue 50, item 5: one .jsonl line of 100,000 "[" raised RecursionError out of ls and show.
    bad = legacy_file(failed_dir, lines_of(record(7), task=2) + b"[" * 100_000 + b"\n")
    result = failed_cli("ls", "--failed-dir", str(failed_dir))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        f"{failed_dir}: 7 failed messages in 3 files, 2 topologies")
    assert f"skipped {bad} line 2: nested deeper than 100 levels" in result.output
    assert "skipped 1 bad record: the other records are read" in result.output
    result = failed_cli("show", "--failed-dir", str(failed_dir), "--limit", "50")
    assert result.exit_code == 0, result.output
    assert result.output.count("  reason    ") == 7
    assert f"{bad} line 2: nested deeper than" in result.output
    result = failed_cli("show", "--failed-dir", str(failed_dir), "--limit", "50", "--json")
    assert result.exit_code == 0, result.output
    assert sum(line.startswith("{") for line in result.output.splitlines()) == 7


DAMAGED_LINES = [
    # (the line, what the warning says about it)
    (b"[" * 100_000, "nested deeper than"),
    (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested deeper than"),
    (b'{"format":1,"record_id":"r","topology":"wc"', "not JSON"),            # truncated
    (b"\xff\xfe not utf-8", "not JSON"),
    (b"not json", "not JSON"),
    (b"[1, 2]", "not a record: a JSON array"),
    (b"", "not JSON"),
]


@pytest.mark.parametrize("line, problem", DAMAGED_LINES, ids=range(len(DAMAGED_LINES)))
def test_reader_names_each_damaged_line_and_keeps_the_rest(tmp_path, line, problem):
    path = legacy_file(tmp_path, lines_of(record(0), task=2) + line + b"\n"
                       + lines_of(record(1), task=2))
    bad = []
    assert message_ids(read_failed(tmp_path, on_bad=bad.append)) == [0, 1]
    assert [(b.path, b.where) for b in bad] == [(path, "line 2")]
    assert problem in bad[0].problem


def wrong(field: str, value) -> bytes:
    """A record line whose ``field`` (dotted for a nested one) holds ``value``."""
    data = record_to_dict(record(5), "wc", "s", 2, 1.0)
    *parents, last = field.split(".")
    target = data
    for name in parents:
        target = target[name]
    target[last] = value
    return json.dumps(data).encode()


WRONG_FIELDS = [
    ("task", "3", "task is a str, not a whole number"),
    ("task", 2**40, "task is out of range"),
    ("attempts", True, "attempts is a bool, not a whole number"),
    ("topology", 5, "topology is a int, not text"),
    ("record_id", None, "record_id is a NoneType, not text"),
    ("last_failed_at", "yesterday", "last_failed_at is a str, not a number"),
    ("reason", "error", "reason is a str, not an object"),
    ("reason.kind", ["error"], "reason.kind is a list, not text"),
    ("source", [1], "source is a list, not an object or null"),
    ("source.offset", 2**70, "source.offset is out of range"),
    ("payload", 3, "payload is a int, not an object"),
    ("payload.value", {"base64": "!!!"}, "payload.value cannot be decoded"),
    ("payload.key", {"pairs": [[{"a": 1}, 2]]}, "payload.key cannot be decoded"),
    ("message_id", {"float": "x"}, "message_id cannot be decoded"),
]


@pytest.mark.parametrize("field, value, problem", WRONG_FIELDS,
                         ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(WRONG_FIELDS)])
def test_reader_names_a_field_of_the_wrong_type_and_keeps_the_rest(tmp_path, field, value,
                                                                     problem):
    path = legacy_file(tmp_path, lines_of(record(0), task=2) + wrong(field, value) + b"\n")
    bad = []
    assert message_ids(read_failed(tmp_path, on_bad=bad.append)) == [0]
    assert [(b.path, b.where) for b in bad] == [(path, "line 2")]
    assert problem in bad[0].problem
    # ls counts what show shows (its columns' checks), and neither raises
    assert summarize(tmp_path).records <= 2


def test_huge_numbers_are_named_not_raised(tmp_path):
    path = legacy_file(tmp_path, lines_of(record(0), task=2)
                       + wrong("last_failed_at", 1e300) + b"\n"
                       + b'{"task": 1' + b"0" * 5000 + b"}\n"
                       + wrong("first_failed_at", 10**400) + b"\n")
    path.write_bytes(path.read_bytes().replace(b"1e+300", b"1e999"))   # parsed as infinity
    bad = []
    assert message_ids(read_failed(tmp_path, on_bad=bad.append)) == [0]
    assert [b.where for b in bad] == ["line 2", "line 3", "line 4"]
    assert "last_failed_at is not finite" in bad[0].problem
    assert "not JSON" in bad[1].problem and "first_failed_at is out of range" in bad[2].problem


def test_cli_show_prints_a_time_outside_the_calendar_as_a_number(tmp_path):
    legacy_file(tmp_path, wrong("last_failed_at", 1e300) + b"\n")
    result = failed_cli("show", "--failed-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "last 1e+300 (out of range)" in result.output


def parquet_with(tmp_path: Path, name: str, **columns) -> Path:
    """A Parquet file of the log's schema holding records 0 and 1, with ``columns`` replaced
    (each a list of two values, as the table holds them)."""
    import pyarrow as pa

    from stormlet.failed.columnar import ColumnBuilder, schema
    builder = ColumnBuilder()
    for i in range(2):
        builder.add(record_to_dict(record(i), "wc", "s", 2, 1.0))
    table = pq.read_table(pa.BufferReader(builder.to_parquet()))
    for column, values in columns.items():
        index = table.schema.get_field_index(column)
        kind = schema().field(column).type if column in schema().names else None
        table = table.set_column(index, column, pa.array(values, type=kind))
    path = tmp_path / "wc" / f"{name}.parquet"
    path.parent.mkdir(exist_ok=True)
    pq.write_table(table, path)
    return path


def test_a_parquet_row_whose_json_is_damaged_is_named_by_row_and_the_others_kept(tmp_path):
    path = parquet_with(tmp_path, "s-2-a", message_id=["[0,0]", "[" * 100_000])
    other = parquet_with(tmp_path, "s-2-b", message_id=["[0,0]", "{not json"])
    bad = []
    assert message_ids(read_failed(tmp_path, on_bad=bad.append)) == [0, 0]
    assert [(b.path, b.where) for b in bad] == [(path, "row 2"), (other, "row 2")]
    assert "message_id: nested deeper than" in bad[0].problem
    assert "message_id: not JSON" in bad[1].problem


def test_a_parquet_row_of_invalid_utf8_is_named_and_the_others_kept(tmp_path):
    import pyarrow as pa
    raw = pa.array([b"wc", b"w\xffc"], type=pa.binary())
    path = parquet_with(tmp_path, "s-2-a",
                        topology=pa.Array.from_buffers(pa.string(), 2, raw.buffers()))
    bad = []
    assert message_ids(read_failed(tmp_path, on_bad=bad.append)) == [0]
    assert [(b.path, b.where) for b in bad] == [(path, "row 2")]
    assert "not UTF-8" in bad[0].problem


def test_a_parquet_file_with_other_columns_is_named_as_a_whole(tmp_path):
    import pyarrow as pa
    path = tmp_path / "wc" / "s-2-a.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"topology": [1, 2], "component": ["a", "b"]}), path)
    good = parquet_with(tmp_path, "s-2-b")
    bad = []
    assert message_ids(read_failed(tmp_path, on_bad=bad.append)) == [0, 1]
    assert [(b.path, b.where) for b in bad] == [(path, None)]
    assert "not a failed-message file" in bad[0].problem and good.exists()
    bad = []
    assert summarize(tmp_path, on_bad=bad.append).records == 2
    assert [b.path for b in bad] == [path]


def test_odd_entries_in_the_log_are_named_and_skipped(tmp_path):
    good = parquet_with(tmp_path, "s-2-b")
    (tmp_path / "wc" / "a-directory.parquet").mkdir()
    (tmp_path / "wc" / "a-directory.jsonl").mkdir()
    (tmp_path / "wc" / "dangling.parquet").symlink_to(tmp_path / "nowhere")
    (tmp_path / "wc" / "loop.jsonl").symlink_to(tmp_path / "wc" / "loop.jsonl")
    odd = os.fsdecode(b"s-\xff\n\x01.jsonl")
    (tmp_path / "wc" / odd).write_bytes(lines_of(record(3), task=2))
    bad = []
    assert sorted(message_ids(read_failed(tmp_path, on_bad=bad.append))) == [0, 1, 3]
    assert sorted(b.path.name for b in bad) == ["a-directory.jsonl", "a-directory.parquet",
                                                "dangling.parquet", "loop.jsonl"]
    assert {b.problem for b in bad} == {"not a regular file"}
    assert good.exists()
    result = failed_cli("ls", "--failed-dir", str(tmp_path))
    assert result.exit_code == 0 and "3 failed messages" in result.output


def test_recovery_names_and_drops_a_journal_line_of_deep_nesting(tmp_path):
    # A journal is parsed by the same function: a writer of the task still starts.
    leftover(tmp_path, "s", 1, 1, lines_of(record(0)) + b"[" * 100_000 + b"\n"
             + wrong("task", "x") + b"\n" + lines_of(record(1)))
    writer = FailedMessageWriter(tmp_path, "wc", "s", 1)
    writer.close()
    assert len(writer.recovered) == 1
    assert message_ids(read_failed(tmp_path)) == [0, 1]


def test_a_value_nested_deeper_than_readers_accept_is_refused_at_write(tmp_path):
    from stormlet.failed.record import MAX_DEPTH
    deep = "leaf"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    with FailedMessageWriter(tmp_path, "wc", "s", 1) as writer:
        writer.write(record(0, value=deep))     # as deep as readers read: written
        with pytest.raises(TypeError, match="payload value: nested deeper than"):
            writer.write(record(1, value=[deep]))
    assert message_ids(read_failed(tmp_path)) == [0]
