"""A node's log files (stormlet/cluster/log_files.py, log_search.py): where they are, what a
name says, which names are refused and why, reads that return whole records and join up, the
filters, and the bounds on what a worker writes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from stormlet.cluster.log_files import (
    DAEMON,
    LOG,
    OUT,
    SAMPLES_KIND,
    RefusedName,
    bound_output,
    daemon_log_file,
    find_by_inode,
    identify,
    list_files,
    logs_dir,
    read_range,
    remove_old_workers,
    resolve,
    samples_file,
    worker_file_name,
    worker_log_dir,
    worker_log_file,
    worker_out_file,
)
from stormlet.cluster.log_search import RecordFilter, select, whole_records
from stormlet.cluster.names import InvalidName

TID = "wc-1764493200-a1b2c3"
OTHER = "other-1764493200-d4e5f6"


def line(seconds: int, component: str, task: str, text: str) -> str:
    return (f"2026-11-30T10:00:{seconds:02d}.000+00:00 INFO [{TID} {component} {task}] app: "
            f"{text}\n")


TRACEBACK = ("Traceback (most recent call last):\n  File \"split.py\", line 3, in execute\n"
             "ValueError: bad sentence\n")
LOG_TEXT = (line(1, "split", "3", "hello") + line(2, "count", "5-6", "counted 10")
            + line(3, "split", "4", "failed on a sentence") + TRACEBACK
            + line(4, "-", "-", "worker heartbeat") + line(5, "count", "6", "counted 20"))


# ----- where files are, and what their names say


def test_paths_follow_storms_workers_artifacts_layout(tmp_path):
    directory = worker_log_dir(tmp_path, TID, 6700)
    assert directory == tmp_path / "logs" / "workers" / TID / "6700"
    assert worker_log_file(directory).name == "worker.log"
    assert worker_out_file(directory).name == "worker.out"
    assert samples_file(directory).name == "samples.jsonl"
    assert daemon_log_file(tmp_path, "supervisor") == tmp_path / "logs" / "supervisor.log"
    assert worker_file_name(TID, 6700) == f"workers/{TID}/6700/worker.log"
    with pytest.raises(InvalidName):
        worker_log_dir(tmp_path, "../../etc", 6700)


@pytest.mark.parametrize("name, kind, topology, port, role, generation", [
    (f"workers/{TID}/6700/worker.log", LOG, TID, 6700, None, 0),
    (f"workers/{TID}/6700/worker.log.3", LOG, TID, 6700, None, 3),
    (f"workers/{TID}/6701/worker.out", OUT, TID, 6701, None, 0),
    (f"workers/{TID}/6701/worker.out.1", OUT, TID, 6701, None, 1),
    (f"workers/{TID}/6701/samples.jsonl.1", SAMPLES_KIND, TID, 6701, None, 1),
    ("supervisor.log", DAEMON, None, None, "supervisor", 0),
    ("nimbus.log.2", DAEMON, None, None, "nimbus", 2),
])
def test_a_files_name_says_whose_it_is_and_what_kind(name, kind, topology, port, role,
                                                     generation):
    described = identify(name)
    assert (described.kind, described.topology_id, described.port, described.role,
            described.generation) == (kind, topology, port, role, generation)
    assert described.current == name.rsplit(".", 1)[0] if generation else name


@pytest.mark.parametrize("name", [
    "workers/not-an-id/6700/worker.log", f"workers/{TID}/port/worker.log",
    f"workers/{TID}/6700/notes.txt", f"workers/{TID}/6700/sub/worker.log", ".log", "notes.txt",
])
def test_names_of_no_known_kind_say_nothing(name):
    assert identify(name) is None


def make_node(tmp_path: Path) -> Path:
    """A supervisor's data directory with two workers' files, a daemon log and a stray file."""
    for tid, port in ((TID, 6700), (TID, 6701), (OTHER, 6700)):
        directory = worker_log_dir(tmp_path, tid, port)
        directory.mkdir(parents=True)
        worker_log_file(directory).write_text(LOG_TEXT)
        worker_out_file(directory).write_text("")
    (worker_log_dir(tmp_path, TID, 6700) / "worker.log.1").write_text(line(0, "-", "-", "old"))
    daemon_log_file(tmp_path, "supervisor").write_text("x\n")
    (logs_dir(tmp_path) / "notes.txt").write_text("not a log\n")
    return logs_dir(tmp_path)


def test_a_listing_names_every_file_of_a_known_kind_or_a_topologys(tmp_path):
    root = make_node(tmp_path)
    everything = {f["name"] for f in list_files(root)}
    assert everything == {"supervisor.log", *(f"workers/{t}/{p}/{b}" for t, p in
                                              ((TID, 6700), (TID, 6701), (OTHER, 6700))
                                              for b in ("worker.log", "worker.out")),
                          f"workers/{TID}/6700/worker.log.1"}
    ours = list_files(root, TID)
    assert {f["topology_id"] for f in ours} == {TID} and len(ours) == 5
    current, rotated = [f for f in ours if f["name"].startswith(f"workers/{TID}/6700/worker.log")]
    assert (current["generation"], rotated["generation"]) == (0, 1)
    assert current["size"] == len(LOG_TEXT.encode()) and current["inode"] > 0
    assert list_files(root, "gone-1764493200-000000") == []


# ----- refusals


def test_refused_names_say_why(tmp_path):
    root = make_node(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("the cluster secret\n")
    log_dir = worker_log_dir(tmp_path, TID, 6700)
    (log_dir / "worker.log.7").symlink_to(secret)
    (log_dir / "worker.log.8").symlink_to(worker_log_file(log_dir))   # in, but a second name
    (root / "workers" / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    refused = {
        "../secret.txt": "'..' leads out of the logs directory",
        f"workers/{TID}/../../../secret.txt": "'..' leads out",
        str(secret): "an absolute path",
        "/etc/passwd": "an absolute path",
        f"workers/{TID}/6700/worker.log.7": "is a symbolic link",
        f"workers/{TID}/6700/worker.log.8": "is a symbolic link",
        "workers/elsewhere/secret.txt": "workers/elsewhere is a symbolic link",
        f"workers/{TID}/6700/missing.log": "no such file",
        f"workers/{TID}/6700": "not a regular file",
        "": "name a file by its path",
        "a\0b": "name a file by its path",
    }
    for name, why in refused.items():
        with pytest.raises(RefusedName, match=why):
            resolve(root, name)
    assert resolve(root, f"workers/{TID}/6700/worker.log") == worker_log_file(log_dir)
    assert resolve(root, "notes.txt").read_text() == "not a log\n"


# ----- reading


def chunk_of(path: Path, offset: int = 0, length: int = 1 << 20, from_end: bool = False):
    return read_range(path, offset, length, from_end)


def test_reads_in_small_pieces_join_up_into_the_whole_file(tmp_path):
    path = tmp_path / "worker.log"
    path.write_text(LOG_TEXT * 20)
    os.utime(path, (time.time() - 60, time.time() - 60))   # settled
    got, offset, reads = b"", 0, 0
    while True:
        records, offset = whole_records(chunk_of(path, offset, 300))
        got += b"".join(r.data for r in records)
        reads += 1
        if offset >= path.stat().st_size:
            break
    assert got == path.read_bytes() and reads > 10


def test_a_read_keeps_a_traceback_with_its_line_and_leaves_a_line_being_written(tmp_path):
    path = tmp_path / "worker.log"
    path.write_text(LOG_TEXT + "2026-11-30T10:00:06.000+00:00 INFO [x y 1] app: half a li")
    records, offset = whole_records(chunk_of(path))
    assert [r.head.component for r in records] == ["split", "count", "split", ""]
    assert records[2].data.decode().endswith("ValueError: bad sentence\n")
    # The unfinished line waits, and the record before it too: it may go on there (a large
    # record's write may reach the file in pieces).
    assert offset == len(LOG_TEXT.encode()) - len(line(5, "count", "6", "counted 20"))
    # Once the file has not changed for a while, its last line is complete as it is.
    records, offset = whole_records(chunk_of(path), now=time.time() + 60)
    assert records[-1].data.endswith(b"half a li") and offset == path.stat().st_size


def test_a_read_from_the_end_begins_at_a_record(tmp_path):
    path = tmp_path / "worker.log"
    path.write_text(LOG_TEXT)
    tail = len(line(4, "-", "-", "worker heartbeat") + line(5, "count", "6", "counted 20"))
    # The last bytes cut into the traceback: its lines are not shown without their head.
    records, offset = whole_records(chunk_of(path, 0, tail + 20, from_end=True), from_end=True)
    assert [r.data.decode() for r in records] == [line(4, "-", "-", "worker heartbeat"),
                                                  line(5, "count", "6", "counted 20")]
    assert offset == path.stat().st_size
    # Paging back: the chunk ending where that one began.
    before = path.stat().st_size - records[0].offset
    records, _ = whole_records(chunk_of(path, before, 10_000, from_end=True), from_end=True)
    assert records[-1].data.decode().endswith(TRACEBACK) and records[0].offset == 0


def test_filters_keep_whole_records_by_pattern_component_task_and_time(tmp_path):
    path = tmp_path / "worker.log"
    path.write_text(LOG_TEXT)
    records, _ = whole_records(chunk_of(path), now=time.time() + 60)

    def kept(**wanted) -> list[str]:
        chosen, _ = select(records, RecordFilter(**wanted), 1 << 20, time.monotonic() + 10)
        return [r.data.decode().split("app: ")[1].splitlines()[0] for r in chosen]

    assert kept(component="split") == ["hello", "failed on a sentence"]
    assert kept(grep="ValueError") == ["failed on a sentence"]   # found in its traceback
    assert kept(task=6) == ["counted 10", "counted 20"]           # 5-6 covers 6
    assert kept(component="count", task=5) == ["counted 10"]
    since = records[3].head.time
    assert kept(since=since) == ["worker heartbeat", "counted 20"]
    assert kept(grep="counted [0-9]+", component="count") == ["counted 10", "counted 20"]
    assert len(kept()) == 5


def test_a_pattern_that_never_ends_is_stopped_and_named(tmp_path):
    path = tmp_path / "worker.log"
    path.write_text(line(1, "split", "3", "a" * 5000 + "!"))
    records, _ = whole_records(chunk_of(path), now=time.time() + 60)
    with pytest.raises(ValueError, match="took over 1 s on one record"):
        select(records, RecordFilter(grep=r"(a|aa)+$"), 1 << 20, time.monotonic() + 10)
    with pytest.raises(ValueError, match="is not a regular expression"):
        RecordFilter(grep="(unclosed")


def test_a_filtered_read_stops_at_its_budget_and_says_where_to_go_on(tmp_path):
    path = tmp_path / "worker.log"
    path.write_text(LOG_TEXT * 100)
    records, _ = whole_records(chunk_of(path), now=time.time() + 60)
    chosen, stopped = select(records, RecordFilter(component="split"), 200,
                             time.monotonic() + 10)
    assert 1 <= len(chosen) <= 3 and stopped is not None
    assert stopped == records[[r.offset for r in records].index(stopped)].offset


def test_a_follower_finds_its_file_under_its_rotated_name(tmp_path):
    path = tmp_path / "worker.log"
    path.write_text("first\n")
    inode = path.stat().st_ino
    os.replace(path, tmp_path / "worker.log.1")
    path.write_text("second\n")
    assert find_by_inode(path, inode) == tmp_path / "worker.log.1"
    assert find_by_inode(path, path.stat().st_ino) == path
    (tmp_path / "worker.log.1").unlink()
    assert find_by_inode(path, inode) is None


# ----- bounds


def test_a_workers_raw_output_is_cut_to_its_last_part(tmp_path):
    out = tmp_path / "worker.out"
    with open(out, "ab") as writer:   # the worker's descriptor, appending
        writer.write(b"x" * 5000 + b"the last words\n")
        writer.flush()
        assert bound_output(out, 1000)
        assert out.stat().st_size == 0
        backup = (tmp_path / "worker.out.1").read_bytes()
        assert len(backup) == 1000 and backup.endswith(b"the last words\n")
        writer.write(b"more\n")
        writer.flush()
    assert out.read_bytes() == b"more\n"   # appended at the new end, not at the old offset
    assert not bound_output(out, 1000)


def test_old_workers_of_topologies_gone_are_removed_and_the_others_kept(tmp_path):
    root = make_node(tmp_path)
    old = time.time() - 30 * 24 * 3600
    for path in (root / "workers" / OTHER).rglob("*"):
        os.utime(path, (old, old))
    for path in (root / "workers" / TID).rglob("*"):
        os.utime(path, (old, old))
    assert remove_old_workers(root, keep={TID}) == [OTHER]
    assert not (root / "workers" / OTHER).exists() and (root / "workers" / TID).exists()


def test_raw_output_and_json_lines_are_records_a_line(tmp_path):
    """A worker's raw output has no heads: each line is a record, kept from the end too and
    matched alone; a JSON line (a sample, a JSON log line) is a whole record."""
    out = tmp_path / "worker.out"
    out.write_text("".join(f"raw line {i}\n" for i in range(100)))
    records, _ = whole_records(chunk_of(out, 0, 200, from_end=True), from_end=True)
    assert records and records[-1].data == b"raw line 99\n"
    assert all(r.data.count(b"\n") == 1 for r in records)
    records, _ = whole_records(chunk_of(out), now=time.time() + 60)
    chosen, _ = select(records, RecordFilter(grep="line 4[0-9]$"), 1 << 20,
                       time.monotonic() + 10)
    assert len(chosen) == 10
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(f'{{"time": {1764493200 + i}, "component": "split", '
                               f'"values": [{i}]}}\n' for i in range(50)))
    records, _ = whole_records(chunk_of(samples, 0, 300, from_end=True), from_end=True)
    assert records[-1].data.startswith(b'{"time": 1764493249,')
    assert all(r.head is not None for r in records)
    chosen, _ = select(records, RecordFilter(since=1764493248), 1 << 20, time.monotonic() + 10)
    assert len(chosen) == 2
