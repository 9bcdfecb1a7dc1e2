"""The failed-message log: where spouts put messages that finally failed, for a Spark job to replay.

Files are Parquet (``columnar`` has the columns), written by one writer per spout task and either
complete or absent: a writer appends each record to a hidden journal and writes the Parquet file
under its final name only once it is complete, durably (written aside, fsynced, renamed, the
directory fsynced). So a reader, and ``spark.read.parquet``, never sees half a file. Layout::

    <directory>/<topology>/<component>-<task>-<writer start>-<writer id>-<seq>.parquet   complete
    <directory>/<topology>/.<same name without .parquet>.jsonl.inprogress             the journal

Names are percent-encoded where they hold a character unsafe in a file name (``/``, ``%``, a
leading ``.``); readers go by the fields inside the records, never by parsing file names. Hadoop
and Spark skip files whose names start with ``.``, so ``spark.read.parquet("<directory>/*")``
reads exactly the complete files. Files ending in ``.jsonl`` are the JSON Lines of the first
format: read here still, and turned into Parquet by ``stormlet failed convert``.

One record, as the reader gives it (and as one line of a journal holds it)::

    {"format": 2, "record_id": "5c0f...", "topology": "wc", "component": "sentences", "task": 3,
     "message_id": [0, 42],
     "source": {"kind": "kafka", "name": "words", "partition": 0, "offset": 42},
     "payload": {"key": b"key", "value": b"hello"},
     "reason": {"kind": "error", "component": "split", "message": "ValueError: bad word"},
     "attempts": 3, "first_failed_at": 1732323300.25, "last_failed_at": 1732323391.5,
     "written_at": 1732323391.52}

In the journal (and with ``read_failed(..., decode=False)``) values (the payload's key and value,
and the message id) are JSON, with these reversible encodings for what JSON cannot hold
(``decode_value`` undoes them); in the Parquet file a str or bytes payload has a column of its
own, and anything else is that JSON:

- ``bytes`` become ``{"base64": "<standard base64>"}``;
- a float NaN or infinity becomes ``{"float": "nan" | "inf" | "-inf"}``;
- a dict with a key that is not a str becomes ``{"pairs": [[key, value], ...]}``;
- a dict whose only key is one of those tags is wrapped as ``{"dict": {...}}``, so that no value
  of the message is ever mistaken for an encoding;
- a value of a registered type (``stormlet.serializers``: by default datetime, date, time,
  timedelta, Decimal, UUID, tuple, set, frozenset; a topology may register more) becomes
  ``{"ext": {"type": "<class path>", "data": <what its serializer made of it>}}``; it is read
  back with the topology's types (``read_failed(..., registry=...)``), or, for a type the
  reader's registry lacks, left as that dict;
- other tuples (namedtuples) become lists.

Usage::

    with FailedMessageWriter("failed", "wc", "sentences", task=3) as writer:
        writer.write(FailedRecord(message_id=[0, 42], reason=reason, attempts=3,
                                  first_failed_at=t0, last_failed_at=t1, key=b"key",
                                  value=b"hello", source=SourceRef(kind="kafka", name="words",
                                                                   partition=0, offset=42)))
        writer.flush()      # durable and visible: now the spout may commit offset 43
    for record in read_failed("failed", topology="wc", reason="error"):
        ...

Readers never stop at a damaged file or line: ``parse`` names what is wrong with it (deep
nesting, truncation, bytes that are not UTF-8, a field of the wrong type), and the reader skips
it, passes it to its ``on_bad`` (or logs it) and reads every other record.

A writer is not thread-safe: each spout task owns one and calls it from its own thread.
"""

from .dead_letters import DeadLetterBox
from .parse import BadInput, RecordError
from .reader import FailedSummary, final_files, inprogress_files, read_failed, summarize, topologies
from .record import FailedRecord, SourceRef, decode_record, decode_value, encode_value
from .writer import FailedMessageWriter, convert_legacy, recover_leftovers

__all__ = ["BadInput", "DeadLetterBox", "FailedMessageWriter", "FailedRecord", "FailedSummary",
           "RecordError", "SourceRef", "convert_legacy", "decode_record", "decode_value",
           "encode_value", "final_files", "inprogress_files", "read_failed", "recover_leftovers",
           "summarize", "topologies"]
