"""The blob store on a real cluster (issue 52, Large artifacts): ZooKeeper, two nimbus processes
and a supervisor on loopback, driven through `stormlet blob` and `stormlet submit` as a user
drives them. A bolt reads a blob by its local name and, after `stormlet blob update`, the new
version, in the same worker process; a second topology mapping the same key shares the node's
one copy; a standby nimbus keeps a copy; a submission mapping a key the store lacks is refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cluster_support import after_test, json_outputs, serve_cluster, wait_until
from zookeeper_server import zookeeper_available

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

READER = Path(__file__).resolve().parents[1] / "cluster_topologies" / "with_blob" / "topology.py"
MAP = "topology.blobstore.map"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("blobs")
    yield from serve_cluster(base, 2, {"s1": 2})


@pytest.fixture(autouse=True)
def logs_on_failure(request, cluster):
    yield
    after_test(request, cluster, kill_left=False)


def blob_cli(cluster, *args: str):
    return cluster.cli("blob", *args)


def test_a_running_bolt_reads_a_blob_by_its_local_name_then_its_update(cluster, tmp_path):
    v1, v2 = "alpha beta\n", "gamma delta\n"
    (tmp_path / "v1.txt").write_text(v1)
    (tmp_path / "v2.txt").write_text(v2)
    digest1, digest2 = (hashlib.sha256(v.encode()).hexdigest() for v in (v1, v2))
    uploaded = blob_cli(cluster, "upload", "words", str(tmp_path / "v1.txt"))
    assert uploaded.returncode == 0, uploaded.stderr
    assert "uploaded blob words: version 1" in uploaded.stdout
    again = blob_cli(cluster, "upload", "words", str(tmp_path / "v2.txt"))
    assert again.returncode != 0 and "stormlet blob update words FILE" in again.stderr
    # The standby keeps a copy, as it does of code.
    nimbus_copies = [cluster.base / f"nimbus{n}" / "blobs" / digest1 for n in (0, 1)]
    wait_until(lambda: all(p.is_file() for p in nimbus_copies), 15, "both nimbuses' copies")

    out = tmp_path / "out"
    out.mkdir()
    cluster.submit(READER, "blob-a", f"blobs.dir={out}", "blobs.tag=a",
                   f'{MAP}={{"words": "words.txt"}}')
    cluster.submit(READER, "blob-b", f"blobs.dir={out}", "blobs.tag=b",
                   "blobs.localname=lookup.txt",
                   f'{MAP}={{"words": {{"localname": "lookup.txt"}}}}')
    wait_until(lambda: len(json_outputs(out, "a")) == 1 and len(json_outputs(out, "b")) == 1, 30,
               "both topologies' readers to read the blob")
    (a,), (b,) = json_outputs(out, "a"), json_outputs(out, "b")
    assert a["read"] == [v1] and b["read"] == [v1] and a["versions"] == [digest1]
    # One copy on the node, shared by digest: both local names resolve to the same file.
    cached = cluster.base / "s1" / "blobs" / digest1
    assert Path(a["resolved"]) == Path(b["resolved"]) == cached
    assert a["inode"] == b["inode"] == cached.stat().st_ino
    assert Path(a["cwd"]).parent.name == "code" and Path(a["cwd"]) != Path(b["cwd"])

    updated = blob_cli(cluster, "update", "words", str(tmp_path / "v2.txt"))
    assert updated.returncode == 0, updated.stderr
    assert "updated blob words: version 2" in updated.stdout
    listing = blob_cli(cluster, "list")
    assert listing.returncode == 0 and "words" in listing.stdout and digest2[:16] in listing.stdout

    def both_read_v2() -> bool:
        return all(o["read"][-1:] == [v2] and v2 in o["watched"]
                   for o in json_outputs(out, "a") + json_outputs(out, "b"))

    wait_until(both_read_v2, 20, "the running readers to read the update")
    (a,), (b,) = json_outputs(out, "a"), json_outputs(out, "b")
    for name, reader in (("blob-a", a), ("blob-b", b)):
        assert reader["read"] == [v1, v2] and reader["versions"] == [digest1, digest2]
        assert Path(reader["resolved"]) == cluster.base / "s1" / "blobs" / digest2
        # The worker process that read the first version read the second: no restart.
        pids = {beat["pid"] for beat in cluster.topology_workers(name).values()}
        assert pids == {reader["pid"]}, (name, pids, reader["pid"])
    deleted = blob_cli(cluster, "delete", "words")
    assert deleted.returncode != 0 and "kill it first" in deleted.stderr
    cluster.kill_and_wait("blob-a")
    cluster.kill_and_wait("blob-b")
    deleted = blob_cli(cluster, "delete", "words")
    assert deleted.returncode == 0, deleted.stderr
    assert "no blobs" in blob_cli(cluster, "list").stdout


def test_a_submission_mapping_a_key_the_store_lacks_is_refused(cluster, tmp_path):
    result = cluster.cli("submit", str(READER), "--name", "blob-missing", "-c",
                         f"blobs.dir={tmp_path}", "-c", f'{MAP}={{"no-such-key": "x.bin"}}')
    assert result.returncode != 0
    assert ("maps blob 'no-such-key' (topology.blobstore.map), which the blob store does not "
            "hold") in result.stderr
    assert "stormlet blob upload" in result.stderr
    assert "blob-missing" not in cluster.cli("list").stdout
