"""What a replay's Spark tasks run: Arrow over whole batches of records, no Python per record
(except a key's CRC-32 when a message must go by its key).

The planning job has two stages, joined by Spark's shuffle:

1. ``scan_files`` (a task per group of the log's files) reads the records that match the filters,
   works out each one's identity (``dedup_key``) and target partition, and yields, per batch and
   target partition, those rows as one Arrow IPC blob keyed by the partition.
2. ``plan_partitions`` (a task per target partition) gets every blob of its partition, so every
   copy of each of its messages; it keeps each message's latest copy, tells apart the messages to
   replay from those an earlier run planned and those no target can hold, writes the messages to
   replay as the partition's plan file in the order to write them, and yields its counts.

Spark moves byte strings of thousands of records each, so the JVM does almost nothing per
record: the job costs about the same in a new JVM as in a warm one (Spark SQL spent most of a new
JVM's replay compiling its per-record code). Memory: a reading task holds the blobs PySpark
buffers before it hands them to the shuffle (at most about ten batches' worth for a target of
few partitions); a planning task holds its target partitions' matching records compressed (one
partition's, unless the target has more than four per core), one partition's at a time as a
table, and, of earlier runs' identities, those in that partition; the driver holds only the
counts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from ...durable import replace_atomically
from ...sources.partitioned_log import partition_for_key

# Plan statuses of a de-duplicated message.
REPLAY, REPLAYED_BEFORE, UNREPLAYABLE = "replay", "replayed before", "unreplayable"
STATUSES = (REPLAY, REPLAYED_BEFORE, UNREPLAYABLE)

#: The plan file's columns (what ``plan.read_plan`` reads).
PLAN_COLUMNS = ("partition", "dedup_key", "topology", "component", "reason",
                "key_s", "key_b", "value_s", "value_b")
#: What a dry run counts its messages by (with ``n``).
COUNT_BY = ("topology", "component", "reason", "status", "partition")
_BATCH_ROWS = 131_072
_READ = ["record_id", "topology", "component", "message_id", "source", "key", "value", "reason",
         "last_failed_at", "written_at"]
#: A message's place in the plan: its target partition, then its source in order (messages
#: without a source first, by topology, component and id).
_PLAN_ORDER = ("partition", "src_kind", "src_name", "src_partition", "src_offset",
               "msg_topology", "msg_component", "msg_id")


def plan_file(plan: Path, partition: int) -> Path:
    """The plan file of one target partition: names sort in partition order."""
    return plan / f"part-{partition:05d}.parquet"


# ----- stage 1


def scan_files(files: list[str], filters: dict[str, Any], target: tuple[str, str],
               partitions: int, partition_by: str, read: Any = None,
               matched: Any = None) -> Iterator[tuple[int, bytes]]:
    """The matching records of ``files``, as ``(target partition, Arrow IPC stream)`` pairs: one
    per batch read and target partition in it. ``target`` is the target's (kind, name);
    ``read`` and ``matched`` (Spark accumulators, or None) count the records."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for file in files:
        for batch in pq.ParquetFile(file).iter_batches(_BATCH_ROWS, columns=_READ):
            rows = _matching(_flat(batch), filters)
            if read is not None:
                read.add(batch.num_rows)
                matched.add(rows.num_rows)
            if rows.num_rows:
                rows = rows.set_column(rows.column_names.index("reason"), "reason",
                                       pc.fill_null(rows.column("reason"), "?"))
                rows = rows.append_column("partition", _targets(rows, target, partitions,
                                                                partition_by))
                yield from _by_partition(rows)


def _flat(batch: Any) -> Any:
    """A batch of log rows as a table of the flat columns planning needs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def fields(name: str) -> dict[str, Any]:
        column = batch.column(name)
        # flatten() nulls a field where its struct is null.
        return dict(zip((f.name for f in column.type), column.flatten()))

    source, key, value = fields("source"), fields("key"), fields("value")
    has_key_payload = pc.or_(pc.is_valid(key["str"]), pc.is_valid(key["bytes"]))
    replayable = pc.and_(pc.or_(pc.is_valid(value["str"]), pc.is_valid(value["bytes"])),
                         pc.or_(pc.is_null(batch.column("key")), has_key_payload))
    no_source = pc.is_null(source["kind"])

    def if_no_source(column: Any) -> Any:
        return pc.if_else(no_source, column, pa.scalar(None, column.type))

    return pa.table({
        "record_id": batch.column("record_id"),
        "topology": batch.column("topology"),
        "component": batch.column("component"),
        "reason": fields("reason")["kind"],   # "?" where null, once filtered
        "src_kind": source["kind"], "src_name": source["name"],
        "src_partition": source["partition"], "src_offset": source["offset"],
        "msg_topology": if_no_source(batch.column("topology")),
        "msg_component": if_no_source(batch.column("component")),
        "msg_id": if_no_source(batch.column("message_id")),
        "last_failed_at": batch.column("last_failed_at"),
        "written_at": batch.column("written_at"),
        "replayable": replayable,
        "key_s": key["str"], "key_b": key["bytes"],
        "value_s": value["str"], "value_b": value["bytes"],
    })


def _matching(rows: Any, filters: dict[str, Any]) -> Any:
    import pyarrow.compute as pc

    conditions = [pc.equal(rows.column(name), filters[name])
                  for name in ("topology", "component") if filters.get(name) is not None]
    if filters.get("reason") is not None:
        conditions.append(pc.equal(rows.column("reason"), filters["reason"]))
    failed_at = pc.fill_null(rows.column("last_failed_at"), 0.0)
    if filters.get("since") is not None:
        conditions.append(pc.greater_equal(failed_at, float(filters["since"])))
    if filters.get("until") is not None:
        conditions.append(pc.less(failed_at, float(filters["until"])))
    if not conditions:
        return rows
    keep = conditions[0]
    for condition in conditions[1:]:
        keep = pc.and_(keep, condition)
    return rows.filter(keep)


def _targets(rows: Any, target: tuple[str, str], partitions: int, partition_by: str) -> Any:
    """Each row's target partition (see "Where each message goes" in ``plan``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = [-1] * rows.num_rows
    if partition_by == "source":
        src = rows.column("src_partition")
        same = pc.and_(pc.and_(pc.equal(rows.column("src_kind"), target[0]),
                               pc.equal(rows.column("src_name"), target[1])),
                       pc.and_(pc.greater_equal(src, 0), pc.less(src, partitions)))
        same = pc.fill_null(same, False)
        from_source = pc.if_else(same, src, -1).to_pylist()
        if pc.all(same).as_py():
            return pa.array(from_source, pa.int32())
        out = from_source
    # The rest go by key (CRC-32, as the log and librdkafka do), or without one by their identity.
    rest = [i for i, p in enumerate(out) if p < 0]
    keys = pc.coalesce(rows.column("key_b"), pc.cast(rows.column("key_s"), pa.binary()))
    keys = keys.take(rest).to_pylist()
    unkeyed = [j for j, key in enumerate(keys) if key is None]
    if unkeyed:
        identities = dedup_keys(rows.take([rest[j] for j in unkeyed])).to_pylist()
        for j, identity in zip(unkeyed, identities):
            keys[j] = identity
    for i, key in zip(rest, keys):
        out[i] = partition_for_key(key, partitions)
    return pa.array(out, pa.int32())


def _by_partition(rows: Any) -> Iterator[tuple[int, bytes]]:
    import pyarrow.compute as pc

    rows = rows.take(pc.sort_indices(rows.column("partition")))
    runs = pc.run_end_encode(rows.column("partition").combine_chunks())
    start = 0
    for p, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
        yield p, _ipc(rows.slice(start, end - start))
        start = end


def _ipc(table: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    # Compressed, a blob is half the bytes to shuffle and for the planning task to hold.
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


# ----- a message's identity


def dedup_keys(rows: Any) -> Any:
    """Each row's message identity as the JSON text plans and Kafka headers hold:
    ``["source",kind,name,partition,offset]``, or ``["message",topology,component,id]`` for a
    record without a source (the id is canonical JSON already). The text is what Spark's
    ``to_json`` made of the same values, so plans of earlier versions still match."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def join(*parts: Any) -> Any:
        return pc.binary_join_element_wise(*parts, "")

    def number(name: str) -> Any:
        # A missing part (only in files another writer made) reads as JSON's null.
        return pc.fill_null(pc.cast(rows.column(name), pa.string()), "null")

    comma = ","
    by_source = join('["source",', _json_strings(rows.column("src_kind")), comma,
                     _json_strings(rows.column("src_name")), comma, number("src_partition"),
                     comma, number("src_offset"), "]")
    by_message = join('["message",', _json_strings(rows.column("msg_topology")), comma,
                      _json_strings(rows.column("msg_component")), comma,
                      pc.fill_null(rows.column("msg_id"), "null"), "]")
    return pc.if_else(pc.is_valid(rows.column("src_kind")), by_source, by_message)


_LOWER_HEX_ESCAPE = re.compile(r"(\\\\)|\\u([0-9a-f]{4})")


def _json_string(text: str) -> str:
    # Jackson (Spark's to_json) writes control characters' escapes in upper-case hex.
    return _LOWER_HEX_ESCAPE.sub(lambda m: m.group(1) or "\\u" + m.group(2).upper(),
                                 json.dumps(text, ensure_ascii=False))


def _json_strings(column: Any) -> Any:
    """A string column as JSON literals (a null as ``null``): each distinct value once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column).combine_chunks() if isinstance(
        column, pa.ChunkedArray) else pc.dictionary_encode(column)
    literals = pa.array([_json_string(s) for s in encoded.dictionary.to_pylist()], pa.string())
    return pc.fill_null(pc.take(literals, encoded.indices), "null")


# ----- stage 2


def plan_partitions(blobs: Iterator[tuple[int, bytes]], earlier_plans: list[tuple[str, bool]],
                    plan: str | None, planned: Any = None) -> Iterator[dict[str, Any]]:
    """Plan each target partition whose rows ``blobs`` hold (all of them: Spark's shuffle put
    them here), writing its plan file under ``plan`` (None: a dry run, nothing written); yields
    a count per (``COUNT_BY``) group with ``n``, and ``{"matched": n}`` per partition.
    ``earlier_plans``: earlier runs' plan directories, each with whether it went to this target
    partitioned alike. ``planned`` (a Spark accumulator, or None) counts the messages to replay."""
    import pyarrow as pa
    import pyarrow.compute as pc

    by_partition: dict[int, list[bytes]] = {}
    for p, blob in blobs:
        by_partition.setdefault(p, []).append(blob)
    for p in sorted(by_partition):
        parts = by_partition.pop(p)
        rows = pa.concat_tables(pa.ipc.open_stream(blob).read_all() for blob in parts)
        del parts
        yield {"matched": rows.num_rows}
        winners = _latest_copies(rows)
        # The payloads are copied once, for the plan; the rest is decided on the small columns.
        messages = rows.drop_columns(list(_PAYLOAD)).take(winners)
        keys = dedup_keys(messages)
        status = pc.if_else(_planned_before(earlier_plans, p, keys), REPLAYED_BEFORE,
                            pc.if_else(messages.column("replayable"), REPLAY, UNREPLAYABLE))
        messages = messages.append_column("dedup_key", keys).append_column("status", status)
        counted = messages.group_by(list(COUNT_BY)).aggregate([("partition", "count")])
        for row in counted.to_pylist():
            n = row.pop("partition_count")
            yield {**row, "n": n}
        to_replay = pc.equal(status, REPLAY)
        if planned is not None:
            planned.add(pc.sum(to_replay.cast("int64")).as_py() or 0)
        if plan is not None:
            if not pc.all(to_replay).as_py():
                winners, messages = winners.filter(to_replay), messages.filter(to_replay)
            payloads = rows.select(list(_PAYLOAD)).take(winners)
            _write_plan(pa.Table.from_arrays(
                [*messages.select(list(PLAN_COLUMNS[:-len(_PAYLOAD)])).columns,
                 *payloads.columns], names=list(PLAN_COLUMNS)), plan_file(Path(plan), p))


_PAYLOAD = PLAN_COLUMNS[-4:]


def _latest_copies(rows: Any) -> Any:
    """The indices of each message's latest copy, in plan order: of its copies, the latest
    ``last_failed_at`` wins, then the latest ``written_at``, then the greatest record id (only
    to be deterministic)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # Rows here share a partition; an identity column that holds one value in all of them (as a
    # spout's kind and name most often do) neither orders nor tells messages apart.
    identity = [c for c in _PLAN_ORDER[1:]
                if pc.count_distinct(rows.column(c), mode="all").as_py() > 1]
    # A message without a source sorts first; a missing time as the earliest.
    order = pc.sort_indices(rows, sort_keys=[*((c, "ascending", "at_start") for c in identity),
                                             ("last_failed_at", "descending", "at_end"),
                                             ("written_at", "descending", "at_end"),
                                             ("record_id", "descending", "at_end")])
    if rows.num_rows < 2:
        return order
    # A row whose identity differs from the one before is its message's first, so its latest.
    changed = pa.array([False] * (rows.num_rows - 1))
    for column in rows.select(identity).take(order).columns:
        column = column.combine_chunks()
        a, b = column.slice(1), column.slice(0, len(column) - 1)
        differs = pc.fill_null(pc.not_equal(a, b), True)
        # Null against null is the same identity part; null against a value is not.
        differs = pc.if_else(pc.and_(pc.is_null(a), pc.is_null(b)), False, differs)
        changed = pc.or_(changed, differs)
    return order.filter(pa.concat_arrays([pa.array([True]), changed]))


def _planned_before(plans: list[tuple[str, bool]], partition: int, keys: Any) -> Any:
    """Whether each of ``keys`` (identities of messages for ``partition``) is in an earlier
    run's plan (Parquet, or JSON Lines from before the log was Parquet): in a plan partitioned
    alike, only that partition's file can hold them. Only the earlier identities among ``keys``
    are kept, a batch of a plan at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    def batches(file: Path) -> Iterator[Any]:
        if file.name.endswith(".parquet"):
            for batch in pq.ParquetFile(file).iter_batches(_BATCH_ROWS, columns=["dedup_key"]):
                yield batch.column(0)
        elif file.name.endswith(".json") and (size := file.stat().st_size):
            # Spark wrote one object a line, a line as long as its payload: a block must hold
            # the longest, and the file is one run's partition.
            read = pj.ReadOptions(block_size=max(1 << 20, size + 1))
            parse = pj.ParseOptions(explicit_schema=pa.schema([("dedup_key", pa.string())]),
                                    unexpected_field_behavior="ignore")
            yield from pj.read_json(file, read_options=read, parse_options=parse).column(0).chunks

    wanted = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    found = [pa.array([], pa.string())]
    for plan, alike in plans:
        if alike:
            files = [f for f in [plan_file(Path(plan), partition)] if f.exists()]
        else:
            files = sorted(Path(plan).glob("part-*"))
        for file in files:
            for chunk in batches(file):
                found.append(chunk.filter(pc.is_in(chunk, value_set=wanted)))
    return pc.is_in(keys, value_set=pa.concat_arrays(found))


def _write_plan(rows: Any, path: Path) -> None:
    """``rows`` as the plan file ``path``, whole or not at all: a task run twice (retried, or
    speculatively) replaces the file with the same one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if rows.num_rows:
        sink = pa.BufferOutputStream()
        pq.write_table(rows.select(list(PLAN_COLUMNS)), sink, compression="zstd",
                       use_dictionary=["topology", "component", "reason"])
        # Its temporary file's leading "." keeps it out of the plan's "part-*".
        replace_atomically(path, sink.getvalue().to_pybytes())
