"""The blob store without a cluster: nimbus's store on disk (chunks in order, digests checked),
its operations behind a real RPC server on loopback (refusals, versions, the submit check), the
chunked transfers both ways, a supervisor's node cache (shared by digest, links swapped in one
rename, old versions removed) and the components' ``stormlet.blobs``."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import zipfile
from pathlib import Path

import pytest
from support import wait_until
from zookeeper_server import free_port

import stormlet.blobs
from stormlet import config as cfg
from stormlet.cluster import rpc
from stormlet.cluster.blob_cache import BlobCache
from stormlet.cluster.blob_service import BlobService
from stormlet.cluster.blob_store import CHUNK_BYTES, BlobError, BlobStore
from stormlet.cluster.blob_transfer import BlobTransferError, download, upload
from stormlet.cluster.names import InvalidName
from stormlet.cluster.security import Security
from stormlet.cluster.zk_state import BlobRecord


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----- nimbus's store on disk


def test_a_blob_arrives_in_chunks_and_is_stored_under_its_digest(tmp_path):
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(3 * 1000 + 7)
    upload_id = store.begin(len(data))
    for offset in range(0, len(data), 1000):
        store.receive(upload_id, offset, data[offset:offset + 1000])
    digest = store.finish(upload_id, sha(data))
    assert digest == sha(data) and store.path(digest).read_bytes() == data
    assert store.digests() == {digest}
    assert store.read(digest, 0) == data and store.read(digest, 3000) == data[3000:]
    assert store.path(digest).stat().st_mode & 0o222 == 0   # read only: shared by every key
    assert not [p for p in store.directory.iterdir() if p.name.startswith(".")]


def test_chunks_out_of_order_past_the_size_or_hashing_otherwise_are_refused(tmp_path):
    store = BlobStore(tmp_path / "blobs")
    upload_id = store.begin(10)
    store.receive(upload_id, 0, b"01234")
    with pytest.raises(BlobError, match="offset 7 does not follow"):
        store.receive(upload_id, 7, b"789")
    with pytest.raises(BlobError, match="past the 10 bytes"):
        store.receive(upload_id, 5, b"56789X")
    store.receive(upload_id, 5, b"56789")
    with pytest.raises(BlobError, match="something changed them on the way"):
        store.finish(upload_id, sha(b"0123456789x"))
    assert store.digests() == set()
    with pytest.raises(BlobError, match="no upload"):   # a failed upload is over
        store.receive(upload_id, 10, b"")
    short = store.begin(10)
    store.receive(short, 0, b"0123")
    with pytest.raises(BlobError, match="after 4 of the 10 bytes"):
        store.finish(short, sha(b"0123"))
    assert not list(store.directory.iterdir())   # no partial file left behind


def test_unused_blobs_are_removed_only_after_the_grace(tmp_path):
    store = BlobStore(tmp_path / "blobs")
    digests = []
    for data in (b"kept", b"old"):
        upload_id = store.begin(len(data))
        store.receive(upload_id, 0, data)
        digests.append(store.finish(upload_id, sha(data)))
    kept, old = digests
    assert store.remove_unused({kept}, older_than=60) == []   # just stored: may be unrecorded
    past = time.time() - 120
    os.utime(store.path(old), (past, past))
    assert store.remove_unused({kept}, older_than=60) == [old]
    assert store.digests() == {kept}


def test_a_store_forgets_what_a_previous_run_left_half_written(tmp_path):
    directory = tmp_path / "blobs"
    directory.mkdir()
    (directory / ".upload-abc").write_bytes(b"half")
    (directory / f".{sha(b'x')}.partial").write_bytes(b"ha")
    assert BlobStore(directory).digests() == set()
    assert not list(directory.iterdir())


# ----- nimbus's operations, served on loopback


class FakeState:
    """ClusterState's blob and topology records, in memory."""

    def __init__(self):
        self.records: dict[str, BlobRecord] = {}
        self.topology_records: dict[str, dict] = {}

    def blob(self, key):
        return self.records.get(key)

    def blobs(self):
        return dict(self.records)

    def set_blob(self, key, record):
        self.records[key] = record

    def remove_blob(self, key):
        self.records.pop(key, None)

    def topologies(self):
        return dict(self.topology_records)


class Client:
    """What ``blob_transfer.upload`` needs of a NimbusClient: ``call`` on one address."""

    def __init__(self, address: str):
        self.address = address

    def call(self, op, timeout=15, **args):
        return rpc.call(self.address, op, timeout=timeout, **args)


@pytest.fixture
def nimbus(tmp_path):
    """A BlobService with an in-memory ZooKeeper, behind a real RpcServer (as nimbus wires it)."""
    state = FakeState()
    service = BlobService(BlobStore(tmp_path / "nimbus-blobs"), lambda: state, lambda: None,
                          Security(), "tcp://127.0.0.1:0")
    Op = rpc.Operation
    operations = {
        "blob_upload_begin": Op(service.upload_begin, rpc.ADMIN),
        "blob_upload_chunk": Op(service.upload_chunk, rpc.ADMIN, max_payload_bytes=CHUNK_BYTES),
        "blob_upload_commit": Op(service.upload_commit, rpc.ADMIN),
        "blob_upload_abandon": Op(service.upload_abandon, rpc.ADMIN),
        "blob_delete": Op(service.delete, rpc.ADMIN),
        "blob_list": Op(service.list, rpc.READ),
        "get_blob_chunk": Op(service.get_chunk, rpc.DAEMON),
    }
    stopping = threading.Event()
    address = f"tcp://127.0.0.1:{free_port()}"
    server = rpc.RpcServer(address, operations, stopping)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield address, service, state
    stopping.set()
    thread.join(5)


def test_upload_update_list_and_delete_over_the_rpc_in_chunks(nimbus, tmp_path):
    address, service, state = nimbus
    client = Client(address)
    first = tmp_path / "model-v1.bin"
    first.write_bytes(os.urandom(2 * CHUNK_BYTES + 123))   # three chunks
    seen = []
    record = upload(client, "model", first, replace=False,
                    progress=lambda sent, size: seen.append(sent))
    assert seen == [CHUNK_BYTES, 2 * CHUNK_BYTES, 2 * CHUNK_BYTES + 123]
    assert (record["version"], record["size"], record["sha256"]) == (
        1, first.stat().st_size, sha(first.read_bytes()))
    with pytest.raises(rpc.RpcError, match="holds 'model' already: `stormlet blob update"):
        upload(client, "model", first, replace=False)
    with pytest.raises(rpc.RpcError, match="holds no key 'other': `stormlet blob upload"):
        upload(client, "other", first, replace=True)
    second = tmp_path / "model-v2.bin"
    second.write_bytes(b"version two")
    updated = upload(client, "model", second, replace=True)
    assert updated["version"] == 2 and updated["created"] == record["created"]
    rows = client.call("blob_list")
    assert [(r["key"], r["version"], r["size"], r["sha256"]) for r in rows] == [
        ("model", 2, len(b"version two"), sha(b"version two"))]
    assert service.store.uploads() == set()   # the refused ones were abandoned
    assert client.call("blob_delete", key="model") == {"key": "model", "version": 2}
    assert client.call("blob_list") == []
    with pytest.raises(rpc.RpcError, match="holds no key 'model'"):
        client.call("blob_delete", key="model")
    with pytest.raises(rpc.RpcError, match="invalid blob key"):
        client.call("blob_upload_begin", key="../x", size=1)


def test_a_download_is_checked_and_goes_on_at_another_nimbus(nimbus, tmp_path):
    address, service, _state = nimbus
    data = os.urandom(CHUNK_BYTES + 5)
    upload(Client(address), "table", _write(tmp_path / "table", data), replace=False)
    digest = sha(data)
    out = tmp_path / "copy"
    # The first "nimbus" does not answer: the copy goes on at the next.
    dead = f"tcp://127.0.0.1:{free_port()}"
    download([dead, address], digest, len(data), out, tmp_path / ".copy.partial", Security(),
             timeout=1)
    assert out.read_bytes() == data and not (tmp_path / ".copy.partial").exists()
    # Bytes that do not hash to the name asked for are refused, and nothing is left.
    bad = tmp_path / "bad"
    with pytest.raises(BlobTransferError, match="no nimbus could give"):
        download([address], sha(b"other"), len(data), bad, tmp_path / ".bad.partial",
                 Security())
    with pytest.raises(BlobTransferError, match="hash to"):
        download([address], digest, len(data) - 1, bad, tmp_path / ".bad.partial", Security())
    assert not bad.exists() and not (tmp_path / ".bad.partial").exists()


def test_a_mapped_blob_cannot_be_deleted_and_a_submission_must_map_known_keys(nimbus, tmp_path):
    address, service, state = nimbus
    upload(Client(address), "words", _write(tmp_path / "w", b"alpha\n"), replace=False)
    package = _package({"topology.py": "", "data/x.txt": ""})
    service.check_map("app", {cfg.TOPOLOGY_BLOBSTORE_MAP: {"words": "words.txt"}}, package)
    with pytest.raises(rpc.RpcError) as refused:
        service.check_map("app", {cfg.TOPOLOGY_BLOBSTORE_MAP: '{"nope": "n.txt"}'}, package)
    assert ("maps blob 'nope' (topology.blobstore.map), which the blob store does not hold (it "
            "holds: words); upload it first with `stormlet blob upload KEY FILE`"
            ) in str(refused.value)
    with pytest.raises(rpc.RpcError, match="'data'.*which its project directory has already"):
        service.check_map("app", {cfg.TOPOLOGY_BLOBSTORE_MAP: {"words": "data"}}, package)
    state.topology_records["app-1-abcdef"] = {
        "name": "app", "status": "active",
        "conf": {cfg.TOPOLOGY_BLOBSTORE_MAP: {"words": {"localname": "words.txt"}}}}
    with pytest.raises(rpc.RpcError, match="mapped by the running topology app"):
        Client(address).call("blob_delete", key="words")
    state.topology_records["app-1-abcdef"]["status"] = "killed"
    Client(address).call("blob_delete", key="words")


def test_the_map_takes_storms_form_its_short_form_and_json():
    assert cfg.blobstore_map({"a": {"localname": "a.bin"}, "b": "b.txt"}) == {
        "a": "a.bin", "b": "b.txt"}
    assert cfg.blobstore_map('{"a": {"localname": "x"}}') == {"a": "x"}
    assert cfg.blobstore_map({"a": {}}) == {"a": "a"}   # Storm's default: the key
    assert cfg.blobstore_map(None) == {}
    for wrong, said in [({"a": "../x"}, "not a plain file name"), ({"a": "d/x"}, "plain file"),
                        ({"a": "x", "b": "x"}, "both map to 'x'"), ("[1]", "not a map"),
                        ({"a": 3}, "must map to a local file name")]:
        with pytest.raises(ValueError, match=said):
            cfg.blobstore_map(wrong)
        assert cfg.problems({cfg.TOPOLOGY_BLOBSTORE_MAP: wrong})


# ----- a supervisor's cache


class Nimbus:
    """Blobs to fetch, by digest, counting each fetch."""

    def __init__(self):
        self.blobs: dict[str, bytes] = {}
        self.fetches: list[str] = []

    def put(self, key: str, data: bytes, version: int) -> BlobRecord:
        self.blobs[sha(data)] = data
        return BlobRecord(sha(data), version, len(data), 0.0, float(version))

    def fetch(self, digest, size, destination, partial):
        self.fetches.append(digest)
        partial.write_bytes(self.blobs[digest])
        os.replace(partial, destination)


def _cache(tmp_path, nimbus: Nimbus, keep_secs: float = 600.0) -> BlobCache:
    return BlobCache(tmp_path / "blobs", lambda tid: tmp_path / "code" / tid, nimbus.fetch,
                     keep_secs)


def test_two_topologies_share_one_copy_and_an_update_swaps_the_link(tmp_path):
    nimbus = Nimbus()
    records = {"words": nimbus.put("words", b"alpha\n", 1)}
    cache = _cache(tmp_path, nimbus, keep_secs=0)
    maps = {"a-1-aaaaaa": {"words": "words.txt"}, "b-1-bbbbbb": {"words": "w.txt"}}
    cache.sync(maps, records)
    wait_until(lambda: cache.has(records["words"].sha256), 5, "the copy", interval=0.01)
    cache.sync(maps, records)
    assert cache.ready("a-1-aaaaaa") and cache.ready("b-1-bbbbbb")
    for tid in maps:
        (tmp_path / "code" / tid).mkdir(parents=True)
        cache.link(tid)
    a = tmp_path / "code" / "a-1-aaaaaa" / "words.txt"
    b = tmp_path / "code" / "b-1-bbbbbb" / "w.txt"
    assert a.read_text() == b.read_text() == "alpha\n"
    assert a.stat().st_ino == b.stat().st_ino and nimbus.fetches == [sha(b"alpha\n")]

    held_open = open(a)   # a bolt holding the old version open
    records = {"words": nimbus.put("words", b"beta\n", 2)}
    cache.sync(maps, records)   # starts the copy; the links stay until it is here
    assert a.read_text() == "alpha\n"
    wait_until(lambda: cache.has(records["words"].sha256), 5, "the new version's copy",
               interval=0.01)
    cache.sync(maps, records)
    assert a.read_text() == b.read_text() == "beta\n"
    assert stormlet.blobs.version(a) == sha(b"beta\n")
    assert held_open.read() == "alpha\n"
    held_open.close()
    # The old version is unused now (keep_secs 0): gone at the next pass; the new one stays.
    cache.sync(maps, records)
    assert {p.name for p in cache.directory.iterdir()} == {sha(b"beta\n")}
    # A key gone from ZooKeeper, or ZooKeeper out of reach, changes nothing.
    cache.sync(maps, {})
    cache.sync(maps, None)
    assert a.read_text() == "beta\n" and cache.ready("a-1-aaaaaa")
    # A topology gone from here: its blob is unused, and removed after keep_secs.
    cache.sync({"a-1-aaaaaa": {}}, {})
    cache.sync({}, {})
    assert not list(cache.directory.iterdir())


def test_a_topology_waits_for_blobs_it_maps_and_not_for_others(tmp_path):
    nimbus = Nimbus()
    cache = _cache(tmp_path, nimbus)
    cache.sync({"a-1-aaaaaa": {"missing": "m.bin"}, "b-1-bbbbbb": {}}, {})
    assert not cache.ready("a-1-aaaaaa") and cache.ready("b-1-bbbbbb")
    assert "blob 'missing', which the blob store does not hold" in cache.waiting_for("a-1-aaaaaa")
    assert not cache.ready("c-1-cccccc")   # not told of it: its map is not known yet
    with pytest.raises(FileNotFoundError, match="waits for"):
        cache.link("a-1-aaaaaa")


def test_while_an_update_is_copied_workers_start_with_the_version_they_had(tmp_path):
    nimbus = Nimbus()
    release = threading.Event()

    def slow(digest, size, destination, partial):
        if nimbus.fetches:   # the first copy at once, the update's when released
            release.wait(10)
        nimbus.fetch(digest, size, destination, partial)

    cache = BlobCache(tmp_path / "blobs", lambda tid: tmp_path / "code" / tid, slow)
    maps = {"a-1-aaaaaa": {"k": "k.bin"}}
    records = {"k": nimbus.put("k", b"one", 1)}
    cache.sync(maps, records)
    wait_until(lambda: cache.has(records["k"].sha256), 5, "the first copy", interval=0.01)
    (tmp_path / "code" / "a-1-aaaaaa").mkdir(parents=True)
    cache.link("a-1-aaaaaa")
    cache.sync(maps, {"k": nimbus.put("k", b"two", 2)})   # the update's copy waits
    assert cache.ready("a-1-aaaaaa")   # a restarted worker need not wait for it
    cache.link("a-1-aaaaaa")
    link = tmp_path / "code" / "a-1-aaaaaa" / "k.bin"
    assert link.read_bytes() == b"one"
    release.set()
    wait_until(lambda: cache.has(sha(b"two")), 5, "the update's copy", interval=0.01)
    cache.sync(maps, {"k": nimbus.put("k", b"two", 2)})
    assert link.read_bytes() == b"two"


def test_a_failed_copy_is_tried_again(tmp_path, monkeypatch):
    monkeypatch.setattr("stormlet.cluster.blob_cache.RETRY_SECS", 0.0)
    nimbus = Nimbus()
    record = nimbus.put("k", b"data", 1)
    calls = []

    def flaky(digest, size, destination, partial):
        calls.append(digest)
        if len(calls) == 1:
            raise BlobTransferError("no nimbus could give it")
        nimbus.fetch(digest, size, destination, partial)

    cache = BlobCache(tmp_path / "blobs", lambda tid: tmp_path / "code" / tid, flaky)
    maps = {"a-1-aaaaaa": {"k": "k"}}

    def copied() -> bool:
        cache.sync(maps, {"k": record})
        return cache.ready("a-1-aaaaaa")

    wait_until(copied, 5, "the second try", interval=0.01)
    assert len(calls) == 2


# ----- a component's view


def test_version_and_watch_follow_the_link(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ("a" * 64)).write_text("one")
    (tmp_path / ("b" * 64)).write_text("two")
    os.symlink(tmp_path / ("a" * 64), "model.bin")
    assert stormlet.blobs.version("model.bin") == "a" * 64
    seen = []
    watch = stormlet.blobs.watch("model.bin", lambda path: seen.append(path.read_text()),
                                 interval=0.02)
    os.symlink(tmp_path / ("b" * 64), ".new")
    os.replace(".new", "model.bin")
    wait_until(lambda: seen == ["two"], 5, "the callback", interval=0.01)
    watch.stop()
    assert watch.version == "b" * 64
    plain = tmp_path / "plain.txt"   # under stormlet local: a file of one's own
    plain.write_text("x")
    before = stormlet.blobs.version(plain)
    plain.write_text("xy")
    assert stormlet.blobs.version(plain) != before
    with pytest.raises(FileNotFoundError):
        stormlet.blobs.version("absent")


def test_blob_keys_are_checked_before_they_name_a_node():
    from stormlet.cluster.names import check_blob_key
    assert check_blob_key("model-v1.bin") == "model-v1.bin"
    for bad in ("", "../x", ".hidden", "a/b", "x" * 201, 3):
        with pytest.raises(InvalidName):
            check_blob_key(bad)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _package(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()
