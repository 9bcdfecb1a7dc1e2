"""The UI's log viewer (Storm's logviewer, behind nimbus): a topology's worker log files, one
page at a time, searched on the node that holds them, and downloaded whole. The REST side of
``static/logs.html``; api.py adds these routes to its blueprint:

    GET /api/v1/topology/<id>/logs            its workers (host, port, executors) and their files
    GET /api/v1/topology/<id>/logs/page?supervisor=S&file=F[&start=N | &before=N][&length=L]
                                      [&inode=I][&grep=RE][&component=C][&task=T]
    GET /api/v1/topology/<id>/logs/download?supervisor=S&file=F[&inode=I]

A **page** is a range ``[start, next)`` of one file, of whole records (a line and the lines
continuing it: cluster/log_search.py), and of those only the ones a filter wants. Without
``start`` or ``before`` it is the file's last page; with ``start=N`` the one from byte N on
(the next page is ``start=<next>``: newer, or following the file as it grows); with
``before=N`` the one ending at byte N (the previous page is ``before=<start>``: older).
``length`` is how many bytes a page spans (``PAGE_BYTES``); with a filter, how many it looks
through for matches (``SEARCH_BYTES``). A reader passes the ``inode`` of the file it is reading:
when the file is rotated meanwhile, the page comes from the file it was reading under the
name it has now (the answer's "file"). Its answer::

    {"supervisor", "host", "port", "file", "inode", "size", "mtime", "start", "next", "eof",
     "restarted", "redacted",
     "records": [{"offset", "time", "level", "component", "task", "text"}]}

"offset" is where a record begins in the file (None in a filtered page: the node sends only
what matched); "time" and the rest are what its head says (None for a line without one: raw
output, a traceback's tail whose head is on the previous page).

A reader without the UI's token (access.py) gets the text with its credentials redacted, as the
API's other text; and a pattern must match the redacted text too, or a reader could find a
hidden password a character at a time by searching for it. (The node searches the text as it
is, so "<redacted>" itself is not found.)

Local mode has no worker files: the listing says why in "notice", and a read is refused.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Iterator, NamedTuple

from flask import Blueprint, Response, jsonify, request

from ..cluster.log_files import LOG, MAX_READ_BYTES, OUT, SAMPLES_KIND
from ..cluster.log_search import Record, RecordFilter, split_records
from ..cluster.logging_setup import NONE
from ..redaction import redact_text
from .access import holds_admin_token
from .source import UiSource

# How many bytes a page of a file spans, and how many a filtered page looks through (what a
# reader asks for is capped at what one read on a node can do: MAX_READ_BYTES, SCAN_BYTES).
PAGE_BYTES = 64 * 1024
SEARCH_BYTES = 2 * 1024 * 1024
# A download is at most a file's last this many bytes (files are bounded by rotation:
# stormlet.log.max.bytes; this bounds what one request can ask of the nodes).
DOWNLOAD_MAX_BYTES = 256 * 1024 * 1024
# The order of a worker's files in the listing: its log, its raw output, its samples.
KIND_ORDER = {LOG: 0, OUT: 1, SAMPLES_KIND: 2}
FILE_FIELDS = ("name", "kind", "generation", "size", "mtime", "inode")


class BadLogRequest(ValueError):
    """The request's parameters are wrong (HTTP 400)."""


class LogFileGone(LookupError):
    """The file being read is no longer there: rotated out of the kept count (HTTP 404)."""


def add_log_routes(api: Blueprint, source: UiSource) -> None:
    """The log viewer's routes (the module doc), on the API's blueprint."""

    @api.errorhandler(BadLogRequest)
    @api.errorhandler(LogFileGone)
    def refused(exc: Exception) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 400 if isinstance(exc, BadLogRequest) else 404

    @api.get("/topology/<key>/logs")
    def log_files(key: str) -> Response:
        listing = source.logs(key)
        topology_id = listing["topology_id"]
        name = next((row["name"] for row in source.topologies()
                     if topology_id in (row["id"], row["name"])), None)
        return jsonify(topologyId=topology_id, topologyName=name,
                       workers=worker_rows(listing["files"]),
                       unanswered=listing.get("unanswered", []), notice=listing.get("notice"))

    @api.get("/topology/<key>/logs/page")
    def log_page(key: str) -> Response:
        start, before = _whole("start"), _whole("before")
        if start is not None and before is not None:
            raise BadLogRequest("give start (the page from there on) or before (the page "
                                "ending there), not both")
        wanted = _wanted()
        reader = Reader(source, key, _required("supervisor"), _required("file"), _whole("inode"))
        length = _length(wanted)
        if start is not None:
            answer = reader.read(start, length, wanted)
        elif before is not None:
            answer = reader.read_before(before, length, wanted)
        else:
            answer = reader.read_last(length, wanted)
        return jsonify(page(answer, wanted, redact=not holds_admin_token()))

    @api.get("/topology/<key>/logs/download")
    def log_download(key: str) -> Response:
        reader = Reader(source, key, _required("supervisor"), _required("file"), _whole("inode"))
        # Asked before the answer begins, so that a file that is not there is a 404, not an
        # empty download.
        first = reader.read(0, 0, EVERYTHING)
        begin = max(0, first["size"] - DOWNLOAD_MAX_BYTES)
        base = first["file"].rsplit("/", 1)[-1]
        filename = _safe_name(f"{key}-{first.get('host')}-{first.get('port')}-{base}")
        return Response(download(reader, begin, first["size"], redact=not holds_admin_token()),
                        mimetype="text/plain",
                        headers={"Content-Disposition": f'attachment; filename="{filename}"',
                                 "X-Stormlet-First-Byte": str(begin)})


def worker_rows(files: list[dict]) -> list[dict]:
    """``logs_list``'s files by worker: its supervisor, host, port, the executors placed there
    now ([{"component", "tasks"}]), its components, and its files (log, output, samples; each
    current one before its rotated ones, newest first)."""
    workers: dict[tuple[str, int], dict] = {}
    for entry in files:
        key = (entry["supervisor"], int(entry["port"]))
        row = workers.get(key)
        if row is None:
            executors = [{"component": component, "tasks": tasks}
                         for component, tasks in entry.get("executors", [])]
            row = workers[key] = {
                "supervisor": entry["supervisor"], "host": entry.get("host"),
                "port": int(entry["port"]), "executors": executors,
                "components": sorted({e["component"] for e in executors}), "files": []}
        row["files"].append({field: entry.get(field) for field in FILE_FIELDS})
    for row in workers.values():
        row["files"].sort(key=lambda f: (KIND_ORDER.get(f["kind"], len(KIND_ORDER)),
                                         f["generation"] or 0))
    return sorted(workers.values(), key=lambda w: (w["host"] or "", w["port"]))


class Reader:
    """Reads of one file of a topology's worker through the source (nimbus), keeping to the
    file with ``inode`` (if given) when it is rotated."""

    def __init__(self, source: UiSource, key: str, supervisor: str, file: str,
                 inode: int | None):
        self.source = source
        self.key = key
        self.supervisor = supervisor
        self.file = file
        self.inode = inode

    def _read(self, **read: Any) -> dict[str, Any]:
        return self.source.log_read(self.key, self.supervisor, self.file, inode=self.inode,
                                    **read)

    def read(self, offset: int, length: int, wanted: Wanted) -> dict[str, Any]:
        """From ``offset`` on. The node follows a current file rotated since (to "file.1"); a
        rotated one renamed again (".1" to ".2") is found here, by its inode."""
        answer = self._read(offset=offset, length=length, **wanted.arguments)
        if self.inode is not None and answer["inode"] != self.inode:
            self._relocate()
            answer = self._read(offset=offset, length=length, **wanted.arguments)
        self.file, self.inode = answer["file"], answer["inode"]
        return answer

    def read_before(self, end: int, length: int, wanted: Wanted) -> dict[str, Any]:
        """The page ending at ``end`` (where a page shown begins, so a record's start): read
        forwards, as a read from the end would count from an end that moves as the file grows.
        A forward read holds back its last record (it may go on after the read), so that one
        comes with a second read, of the rest up to ``end``."""
        offset = max(0, end - length)
        answer = self.read(offset, end - offset, wanted)
        rest = answer["next"]
        if offset < rest < end:
            more = self.read(rest, end - rest, wanted)
            answer = {**more, "data": answer["data"] + more["data"], "start": answer["start"],
                      "pieces": [(answer["start"], answer["data"]), (more["start"], more["data"])]}
        return {**answer, "eof": False}

    def read_last(self, length: int, wanted: Wanted) -> dict[str, Any]:
        answer = self.source.log_read(self.key, self.supervisor, self.file, offset=0,
                                      length=length, from_end=True, **wanted.arguments)
        self.file, self.inode = answer["file"], answer["inode"]
        return answer

    def _relocate(self) -> None:
        """Find the file with our inode among the worker's files now, or say it is gone."""
        for entry in self.source.logs(self.key)["files"]:
            if entry["supervisor"] == self.supervisor and entry.get("inode") == self.inode:
                self.file = entry["name"]
                return
        raise LogFileGone(f"{self.file} (inode {self.inode}) is gone from {self.supervisor}: "
                          f"rotated out of the files kept; open the newest page")


def page(answer: dict[str, Any], wanted: Wanted, redact: bool) -> dict[str, Any]:
    """A page as the API serves it (the module doc)."""
    records: list[Record] = []
    # Offsets are known only of contiguous data: an unfiltered read (in up to two pieces).
    for start, data in answer.get("pieces", [(answer["start"], answer["data"])]):
        records += split_records(data, start)
    rows = []
    for record in records:
        text = record.data.decode("utf-8", "replace")
        if redact:
            text = redact_text(text)
            if wanted.filter.pattern is not None and not wanted.filter.wants(
                    Record(record.offset, text.encode("utf-8"), record.head)):
                continue   # it matched only what the reader may not see
        head = record.head
        rows.append({"offset": None if wanted.active else record.offset,
                     "time": head.time if head else None,
                     "level": head.level if head else None,
                     "component": _said(head.component) if head else None,
                     "task": _said(head.task) if head else None,
                     "text": text})
    return {"supervisor": answer.get("supervisor"),
            "host": answer.get("host"), "port": answer.get("port"), "file": answer["file"],
            "inode": answer["inode"], "size": answer["size"], "mtime": answer["mtime"],
            "start": answer["start"], "next": answer["next"], "eof": answer["eof"],
            "restarted": answer.get("restarted", False), "redacted": redact, "records": rows}


def download(reader: Reader, begin: int, end: int, redact: bool) -> Iterator[bytes]:
    """The file from ``begin`` to ``end`` (its size when asked: a file still written to ends
    there), read in the largest pieces a node serves. A failure part way ends the file with a
    line saying where and why: the status was sent with its first bytes."""
    offset = begin
    shown: Callable[[bytes], bytes] = (
        (lambda data: redact_text(data.decode("utf-8", "replace")).encode("utf-8"))
        if redact else (lambda data: data))
    while offset < end:
        try:
            answer = reader.read(offset, min(MAX_READ_BYTES, end - offset), EVERYTHING)
        except Exception as exc:   # whatever it is, the reader must see the file is cut short
            yield (f"\n[stormlet: the download stopped at byte {offset} of {end}: "
                   f"{exc}]\n").encode()
            return
        if answer["restarted"]:
            yield (f"\n[stormlet: the file was removed at byte {offset} of {end}; the "
                   f"download stops here]\n").encode()
            return
        yield shown(answer["data"])
        if answer["next"] <= offset:
            return   # what is left is a line still being written
        offset = answer["next"]


def _said(field: str) -> str | None:
    """A context field of a record's head, or None where the line names none."""
    return None if field in ("", NONE) else field


# ----- the query


class Wanted(NamedTuple):
    """What a reader wants of a file: the filter, and its arguments as logs_read takes them."""

    filter: RecordFilter
    arguments: dict[str, Any]

    @property
    def active(self) -> bool:
        return self.filter.active


EVERYTHING = Wanted(RecordFilter(), {})


def _wanted() -> Wanted:
    arguments: dict[str, Any] = {name: value for name, value in (
        ("grep", request.args.get("grep") or None),
        ("component", request.args.get("component") or None), ("task", _whole("task")))
        if value is not None}
    try:
        return Wanted(RecordFilter(**arguments), arguments)
    except ValueError as exc:
        raise BadLogRequest(str(exc)) from None


def _length(wanted: Wanted) -> int:
    """The page's span: a reader's ``length``, within what one read on a node does."""
    # Here: the node service's module brings the cluster's transport, which local mode's UI
    # does not otherwise load.
    from ..cluster.node_service import SCAN_BYTES

    most = SCAN_BYTES if wanted.active else MAX_READ_BYTES
    length = _whole("length")
    if length is None:
        return SEARCH_BYTES if wanted.active else PAGE_BYTES
    if not 1 <= length <= most:
        raise BadLogRequest(f"length must be from 1 to {most} bytes, got {length}")
    return length


def _required(name: str) -> str:
    value = request.args.get(name)
    if not value:
        raise BadLogRequest(f"{name} is missing: the listing (GET .../logs) gives each file's "
                            f"supervisor and name")
    return value


def _whole(name: str) -> int | None:
    text = request.args.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise BadLogRequest(f"{name} must be a whole number, got {text!r}") from None
    if value < 0:
        raise BadLogRequest(f"{name} must be at least 0, got {value}")
    return value


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe_name(name: str) -> str:
    """A download's file name: what a Content-Disposition header carries without quoting."""
    return _UNSAFE.sub("_", name) or f"log-{int(time.time())}"
