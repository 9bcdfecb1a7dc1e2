"""The replay planning job's task code (``stormlet.spark.replay.plan_tasks``) on its own, without
Spark: records that files of other writers may hold (no reason, a source missing a part), and
earlier plans of every format, are planned without error and as the Spark SQL plan did."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from stormlet.failed.columnar import ColumnBuilder
from stormlet.spark.replay.plan_tasks import REPLAY, REPLAYED_BEFORE, plan_partitions, scan_files


def record(i: int, *, reason: dict | None, source: dict | None, key=None) -> dict:
    return {"record_id": f"r{i}", "topology": "t", "component": "c", "task": 1,
            "message_id": i, "source": source, "payload": {"key": key, "value": f"v{i}"},
            "reason": reason, "attempts": 1, "first_failed_at": 1.0,
            "last_failed_at": 2.0, "written_at": 3.0}


def write_log(path: Path, records: list[dict]) -> str:
    builder = ColumnBuilder()
    for r in records:
        builder.add(r)
    path.write_bytes(builder.to_parquet())
    return str(path)


def scanned(files: list[str], filters: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for p, blob in scan_files(files, filters, ("log", "/here"), 4, "source"):
        out.setdefault(p, []).extend(ipc.open_stream(blob).read_all().to_pylist())
    return out


def test_a_record_without_a_reason_counts_as_reason_unknown_but_no_filter_matches_it(tmp_path):
    error = {"kind": "error", "component": "c", "message": "x"}
    log = write_log(tmp_path / "a.parquet", [record(0, reason=None, source=None, key="k"),
                                             record(1, reason=error, source=None, key="k")])
    rows = [r for rs in scanned([log], {}).values() for r in rs]
    assert sorted(r["reason"] for r in rows) == ["?", "error"]
    assert scanned([log], {"reason": "?"}) == {}        # as Spark's filter on the raw field
    assert [r["reason"] for rs in scanned([log], {"reason": "error"}).values() for r in rs] \
        == ["error"]


def test_a_source_missing_its_partition_reads_as_null_and_goes_by_its_identity(tmp_path):
    source = {"kind": "kafka", "name": "x", "partition": None, "offset": 3}
    log = write_log(tmp_path / "a.parquet", [record(0, reason=None, source=source)])
    blobs = list(scan_files([log], {}, ("log", "/here"), 4, "source"))
    identity = '["source","kafka","x",null,3]'
    assert [p for p, _ in blobs] == [zlib.crc32(identity.encode()) % 4]
    assert {"matched": 1} in list(plan_partitions(iter(blobs), [], str(tmp_path)))
    planned = pq.read_table(tmp_path / f"part-{blobs[0][0]:05d}.parquet").to_pylist()
    assert [r["dedup_key"] for r in planned] == [identity]


def test_earlier_plans_of_both_formats_mark_messages_replayed_empty_files_and_long_lines_too(
        tmp_path):
    here = {"kind": "log", "name": "/here", "partition": 0}
    records = [record(i, reason=None, source={**here, "offset": i}) for i in range(3)]
    log = write_log(tmp_path / "a.parquet", records)
    blobs = list(scan_files([log], {}, ("log", "/here"), 1, "source"))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    list(plan_partitions(iter(blobs[:1]), [], str(first)))
    # Plan 1 holds all three; keep offset 0 there, offset 1 in a JSON Lines plan whose line is
    # longer than pyarrow's default block, next to the empty file Spark wrote for partition 0.
    planned = pq.read_table(first / "part-00000.parquet").to_pylist()
    pq.write_table(pq.read_table(first / "part-00000.parquet").slice(0, 1),
                   first / "part-00000.parquet")
    (second / "part-00000-x.json").write_bytes(b"")
    (second / "part-00001-x.json").write_text(json.dumps(
        {**planned[1], "value_s": "y" * 3_000_000}) + "\n")
    counts = list(plan_partitions(iter(blobs), [(str(first), False), (str(second), False)], None))
    by_status = {row["status"]: row["n"] for row in counts if "n" in row}
    assert by_status == {REPLAYED_BEFORE: 2, REPLAY: 1}


def test_an_earlier_plan_partitioned_alike_is_read_only_in_the_partitions_own_file(tmp_path):
    here = {"kind": "log", "name": "/here", "partition": 0}
    log = write_log(tmp_path / "a.parquet", [record(0, reason=None, source={**here, "offset": 0})])
    blobs = list(scan_files([log], {}, ("log", "/here"), 2, "source"))
    assert [p for p, _ in blobs] == [0]
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    list(plan_partitions(iter(blobs), [], str(earlier)))
    # The message's identity, misfiled under partition 1: a plan partitioned alike cannot hold
    # it there, so it is not looked for there; any other plan is read whole.
    (earlier / "part-00000.parquet").rename(earlier / "part-00001.parquet")

    def status(alike: bool) -> str:
        counts = list(plan_partitions(iter(blobs), [(str(earlier), alike)], None))
        return next(row["status"] for row in counts if "n" in row)

    assert status(alike=True) == REPLAY
    assert status(alike=False) == REPLAYED_BEFORE
