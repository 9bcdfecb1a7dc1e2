"""The log viewer's REST endpoints (stormlet/ui/log_viewer.py) over real files: a source that
answers as nimbus does, reading through a node service's own code on a directory of worker logs
(no network). Pages join up into the whole file, going back and forward; searches run on the
node and are redacted for a reader without the UI's token (and cannot find what it hides); a
reader keeps its file across a rotation; a download is the whole file. Local mode says it has
no worker files."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from ui_support import FINITE, topology

from stormlet import LocalCluster
from stormlet.cluster import log_files
from stormlet.cluster.log_files import logs_dir, worker_file_name, worker_log_dir
from stormlet.cluster.node_service import NodeService
from stormlet.ui import log_viewer
from stormlet.ui.access import UiAccess
from stormlet.ui.app import create_app
from stormlet.ui.source import ActionRefused, LocalSource, UnknownTopology

TID = "talk-1764493200-a1b2c3"
TOKEN = "the-ui-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
# Where the workers are: (supervisor, host, port) and the executors each runs.
WORKERS = {("s1", "10.0.0.1", 6700): [["shout", [1, 2]], ["words", [3]]],
           ("s2", "10.0.0.2", 6701): [["shout", [4, 4]], ["quiet", [5]]]}


def line(n: int, component: str, task: int, text: str) -> str:
    return (f"2026-11-30T10:{n // 60 % 60:02d}:{n % 60:02d}.{n % 1000:03d}+00:00 INFO "
            f"[{TID} {component} {task}] talker: {text}\n")


class NodeSource:
    """The UiSource's log operations as ClusterSource answers them, nimbus and each node being
    the real code (log_service's answers' shapes, node_service's reads) on local directories."""

    mode = "cluster"

    def __init__(self, base: Path):
        self.nodes = {sid: (host, NodeService(logs_dir(base / sid), "127.0.0.1", 0, host))
                      for sid, host, _port in WORKERS}

    def topologies(self) -> list[dict[str, Any]]:
        return [{"id": TID, "name": "talk"}]

    def _check(self, key: str) -> None:
        if key not in (TID, "talk"):
            raise UnknownTopology(f"no topology with id or name {key!r} is running")

    def logs(self, key: str) -> dict[str, Any]:
        self._check(key)
        files = []
        for (sid, host, port), executors in WORKERS.items():
            files += [{**entry, "supervisor": sid, "host": host, "executors": executors}
                      for entry in self.nodes[sid][1].list_files(TID) if entry["port"] == port]
        return {"topology_id": TID, "files": files, "unanswered": [], "notice": None}

    def log_read(self, key: str, supervisor: str, file: str, **read: Any) -> dict[str, Any]:
        self._check(key)
        host, node = self.nodes[supervisor]
        try:
            answer = node.read_file(file, **read)
        except ValueError as exc:   # as nimbus relays a node's refusal
            raise ActionRefused(str(exc)) from None
        identified = log_files.identify(file)
        assert identified is not None, file   # read above: a log file's name
        return {**answer, "supervisor": supervisor, "host": host, "port": identified.port}


def write(base: Path, sid: str, port: int, text: str, name: str = log_files.WORKER_LOG) -> Path:
    """A worker's file, settled (unchanged for a while: its last line is whole)."""
    directory = worker_log_dir(base / sid, TID, port)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    settle(path)
    return path


def settle(path: Path) -> None:
    past = time.time() - 60
    os.utime(path, (past, past))


# s1's log: many records, a traceback among them, and a line with a password.
S1_LINES = [line(n, "shout" if n % 3 else "words", 1 if n % 3 else 3, f"record {n}")
            for n in range(300)]
S1_LINES[40] = line(40, "shout", 2, "failed:") + "Traceback (most recent call last):\n" \
    "  File \"talker.py\", line 9, in execute\nValueError: no\n"
S1_LINES[77] = line(77, "shout", 1, "connecting with password=hunter2 to the store")
S1_LOG = "".join(S1_LINES)


@pytest.fixture
def base(tmp_path) -> Path:
    write(tmp_path, "s1", 6700, S1_LOG)
    write(tmp_path, "s1", 6700, "raw output\n", log_files.WORKER_OUT)
    write(tmp_path, "s2", 6701, "".join(line(n, "shout", 4, f"other {n}") for n in range(5)))
    return tmp_path


@pytest.fixture
def client(base):
    app = create_app(NodeSource(base), UiAccess.for_host("127.0.0.1", token=TOKEN))
    return app.test_client()


S1_FILE = worker_file_name(TID, 6700)


def get(client, path: str, headers: dict | None = None, status: int = 200, **query: Any) -> Any:
    response = client.get(f"/api/v1/topology/talk/{path}", query_string=query,
                          headers=ADMIN if headers is None else headers)
    assert response.status_code == status, response.get_json()
    return response.get_json()


def page(client, headers: dict | None = None, **query: Any) -> dict:
    return get(client, "logs/page", headers, supervisor="s1", file=S1_FILE, **query)


def text(answer: dict) -> str:
    return "".join(record["text"] for record in answer["records"])


def test_the_listing_has_each_worker_with_its_executors_and_files(client):
    listing = get(client, "logs")
    assert (listing["topologyId"], listing["topologyName"]) == (TID, "talk")
    assert listing["notice"] is None and listing["unanswered"] == []
    first, second = listing["workers"]
    assert (first["supervisor"], first["host"], first["port"]) == ("s1", "10.0.0.1", 6700)
    assert first["components"] == ["shout", "words"]
    assert first["executors"] == [{"component": "shout", "tasks": [1, 2]},
                                  {"component": "words", "tasks": [3]}]
    # The log before the raw output, each with its size.
    assert [(f["name"], f["kind"], f["size"]) for f in first["files"]] == [
        (S1_FILE, "log", len(S1_LOG)),
        (worker_file_name(TID, 6700, log_files.WORKER_OUT), "out", len("raw output\n"))]
    assert second["port"] == 6701 and second["components"] == ["quiet", "shout"]
    assert client.get("/api/v1/topology/nope/logs", headers=ADMIN).status_code == 404


def test_older_pages_walk_back_to_the_start_and_newer_ones_forward_to_the_end(client):
    last = page(client, length=2000)
    assert last["next"] == last["size"] == len(S1_LOG) and last["eof"]
    assert S1_LOG.endswith(text(last)) and 1500 < len(text(last)) <= 2000
    # Each record's offset is where it begins in the file.
    assert all(S1_LOG[r["offset"]:].startswith(r["text"]) for r in last["records"])
    pages = [last]
    while pages[0]["start"] > 0:
        pages.insert(0, page(client, before=pages[0]["start"], inode=last["inode"], length=2000))
        assert pages[0]["next"] == pages[1]["start"]   # they join up
        assert len(pages) < 100
    # Back to byte 0, every byte once: the traceback whole, in one record of its page.
    assert "".join(text(p) for p in pages) == S1_LOG
    assert any(r["text"].startswith(S1_LINES[40].split("\n")[0]) and "ValueError: no" in r["text"]
               for p in pages for r in p["records"])
    # And forward again from the start, the same pages' worth of text.
    forward = [page(client, start=0, inode=last["inode"], length=2000)]
    while not forward[-1]["eof"]:
        forward.append(page(client, start=forward[-1]["next"], inode=last["inode"], length=2000))
        assert forward[-1]["start"] == forward[-2]["next"] and len(forward) < 100
    assert "".join(text(p) for p in forward) == S1_LOG


def test_a_search_runs_on_the_node_and_pages_back_through_the_matches(client):
    found = page(client, grep=r"record 2\d\d$", length=4000)
    assert {r["text"] for r in found["records"]} <= set(S1_LINES) and found["records"]
    assert all(re.search(r"record 2\d\d$", r["text"]) for r in found["records"])
    assert all(r["offset"] is None for r in found["records"])   # only what matched came
    # Paging back through the whole file gathers every match once.
    seen = [r["text"] for r in found["records"]]
    while found["start"] > 0:
        found = page(client, grep=r"record 2\d\d$", before=found["start"], length=4000,
                     inode=found["inode"])
        seen = [r["text"] for r in found["records"]] + seen
    assert seen == [line_ for line_ in S1_LINES if re.search(r"record 2\d\d$", line_)]
    # A pattern over a whole record: the traceback's last line finds its head too.
    traceback = page(client, grep="ValueError: no", length=len(S1_LOG))
    assert [r["text"] for r in traceback["records"]] == [S1_LINES[40]]


def test_component_and_task_filters_keep_that_executors_records(client):
    words = page(client, component="words", length=len(S1_LOG))["records"]
    assert words and all(r["component"] == "words" and r["task"] == "3" for r in words)
    assert len(words) == sum(" words 3] " in x for x in S1_LINES)
    two = page(client, component="shout", task=2, length=len(S1_LOG))["records"]
    assert [r["text"] for r in two] == [S1_LINES[40]]


def test_bad_requests_say_what_is_wrong(client):
    assert "regular expression" in page(client, grep="(", status=400)["error"]
    assert "not both" in page(client, start=0, before=10, status=400)["error"]
    assert "task" in page(client, task="x", status=400)["error"]
    assert "length" in page(client, length=10**9, status=400)["error"]
    missing = get(client, "logs/page", status=400, file=S1_FILE)
    assert "supervisor is missing" in missing["error"]
    # A file of another topology, or outside the logs directory, is refused by the node.
    outside = get(client, "logs/page", status=409, supervisor="s1", file="../../etc/passwd")
    assert "refused" in outside["error"]


def test_a_reader_without_the_token_sees_credentials_redacted_and_cannot_search_them(client):
    shown = text(page(client, headers={}, length=len(S1_LOG)))
    assert "hunter2" not in shown and "password=<redacted>" in shown
    assert page(client, headers={})["redacted"] and not page(client)["redacted"]
    assert "hunter2" in text(page(client, length=len(S1_LOG)))
    # Searching for the hidden value finds nothing: it would tell it a character at a time.
    assert page(client, headers={}, grep="password=h")["records"] == []
    assert page(client, headers={}, grep="password=hunter2")["records"] == []
    assert len(page(client, grep="password=h")["records"]) == 1
    # The rest of the record can be searched for, and is shown redacted.
    [found] = page(client, headers={}, grep="connecting with password")["records"]
    assert "password=<redacted>" in found["text"] and "hunter2" not in found["text"]


def test_a_reader_keeps_its_file_across_a_rotation(client, base):
    current = worker_log_dir(base / "s1", TID, 6700) / log_files.WORKER_LOG
    last = page(client, length=2000)
    # Rotated: the file read is worker.log.1 now, a new worker.log is begun.
    current.rename(current.with_name("worker.log.1"))
    write(base, "s1", 6700, line(999, "shout", 1, "after the rotation"))
    older = page(client, before=last["start"], inode=last["inode"], length=2000)
    assert older["file"] == S1_FILE + ".1" and older["inode"] == last["inode"]
    assert older["next"] == last["start"] and S1_LOG[:last["start"]].endswith(text(older))
    # Rotated again (.1 to .2): found by its inode all the same.
    current.with_name("worker.log.1").rename(current.with_name("worker.log.2"))
    again = page(client, before=older["start"], inode=last["inode"], length=2000)
    assert again["file"] == S1_FILE + ".2" and again["next"] == older["start"]
    # The newest page is the new file's.
    assert "after the rotation" in text(page(client))
    # Gone altogether: the reader is told, not shown another file.
    current.with_name("worker.log.2").unlink()
    gone = page(client, before=again["start"], inode=last["inode"], status=404)
    assert "rotated out" in gone["error"]


def test_a_download_is_the_whole_file_named_for_its_worker(client, monkeypatch):
    monkeypatch.setattr(log_viewer, "MAX_READ_BYTES", 1000)   # many reads
    response = client.get(f"/api/v1/topology/talk/logs/download?supervisor=s1&file={S1_FILE}",
                          headers=ADMIN)
    assert response.status_code == 200
    assert response.data.decode() == S1_LOG
    assert response.headers["Content-Disposition"] == \
        'attachment; filename="talk-10.0.0.1-6700-worker.log"'
    redacted = client.get(f"/api/v1/topology/talk/logs/download?supervisor=s1&file={S1_FILE}")
    text = redacted.data.decode()
    assert "hunter2" not in text and "password=<redacted>" in text
    assert len(redacted.data.decode().splitlines()) == len(S1_LOG.splitlines())
    missing = client.get(f"/api/v1/topology/talk/logs/download?supervisor=s1&file={S1_FILE}.7",
                         headers=ADMIN)
    assert missing.status_code == 409 and "no such file" in missing.get_json()["error"]


def test_a_download_is_bounded_to_the_files_last_part(client, monkeypatch):
    monkeypatch.setattr(log_viewer, "DOWNLOAD_MAX_BYTES", 5000)
    response = client.get(f"/api/v1/topology/talk/logs/download?supervisor=s1&file={S1_FILE}",
                          headers=ADMIN)
    first = int(response.headers["X-Stormlet-First-Byte"])
    assert first == len(S1_LOG) - 5000
    # From the first whole line in them on.
    shown = response.data.decode()
    assert S1_LOG.endswith(shown) and len(S1_LOG) - len(shown) == S1_LOG.index("\n", first) + 1


def test_local_mode_says_its_logs_are_not_files_to_read_here():
    with LocalCluster() as cluster:
        cluster.submit("finite", FINITE, topology())
        client = create_app(LocalSource(cluster)).test_client()
        listing = client.get("/api/v1/topology/finite/logs").get_json()
        assert listing["workers"] == [] and listing["topologyName"] == "finite"
        assert listing["notice"].startswith("local mode") and "cluster" in listing["notice"]
        refused = client.get("/api/v1/topology/finite/logs/page?supervisor=local&file=x")
        assert refused.status_code == 409 and refused.get_json()["error"] == listing["notice"]
        assert client.get("/api/v1/topology/nope/logs").status_code == 404
