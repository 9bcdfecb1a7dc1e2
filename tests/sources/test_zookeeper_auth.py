"""The ZooKeeper credentials an offset store uses by default (``stormlet/zookeeper_auth.py``):
the process's own, found without importing the daemons, and the same as the cluster's
``Security`` gives for the same secret, worker or read-only credentials. No ZooKeeper: the
secured cluster's tests (tests/cluster/test_cluster_security.py) use them against a real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.security import OPEN_ACL_UNSAFE

from stormlet.cluster.security import Security
from stormlet.sources.offset_store import ZooKeeperOffsetStore
from stormlet.zookeeper_auth import (
    SECRET_FILE_ENV,
    WORKER_CREDENTIALS_ENV,
    SecurityError,
    ZooKeeperCredentials,
)

REPO = Path(__file__).resolve().parents[2]
SECRET = bytes(range(32))


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def same_credentials(ours: ZooKeeperCredentials | Security, theirs: Security) -> None:
    """``ours`` authenticates and makes nodes as ``theirs`` does, and trusts the same nodes."""
    assert ours.zk_auth() == theirs.zk_auth()
    assert ours.zk_acl() == theirs.zk_acl()
    for acl in (theirs.zk_acl() or [], list(OPEN_ACL_UNSAFE)):
        assert ours.zk_node_problem(acl) == theirs.zk_node_problem(acl)


def store_default(monkeypatch, **env: str) -> object:
    """The credentials an offset store connects with when given none, under ``env``."""
    for name in (WORKER_CREDENTIALS_ENV, SECRET_FILE_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return ZooKeeperOffsetStore("127.0.0.1:1", "/offsets")._security()


def test_the_derived_identities_are_those_clusters_already_hold():
    """A known answer: nodes made before the split still grant these identities."""
    ours = ZooKeeperCredentials(cluster_secret=SECRET)
    assert ours.zk_auth() == [("digest", "stormlet-daemon:f71f1874496d2d63ed49aff5bf4cb918"
                                         "91df6008d8d15e05983314030afc348b")]
    assert ours.worker_record("t")["zk_acl_ids"] == [
        "stormlet-daemon:zdx2FUa07Qm8TIv78vf9gcHi92w=",
        "stormlet-topology-t:Dm5J89ViSHt5lkfAsNIrppaCiws="]
    daemons = Security(cluster_secret=SECRET)
    for name in ("t", "other"):
        for write in (False, True):
            assert daemons.zk_topology_acl(name, write) == ours.zk_topology_acl(name, write)
    assert daemons.zk_shared_acl() == ours.zk_shared_acl()
    other = ours.zk_topology_acl("other", write=True)
    assert ours.zk_topology_owner(other) == daemons.zk_topology_owner(other) == "other"
    assert ours.zk_acl_problem(list(OPEN_ACL_UNSAFE)) == daemons.zk_acl_problem(
        list(OPEN_ACL_UNSAFE))


def test_a_workers_store_connects_with_its_topologys_credentials(monkeypatch, tmp_path):
    cluster = Security(cluster_secret=SECRET)
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(cluster.worker_credentials("victim-1-abcdef", "victim")))
    default = store_default(monkeypatch, **{WORKER_CREDENTIALS_ENV: str(path)})
    assert isinstance(default, ZooKeeperCredentials) and default.enabled
    worker = Security.for_worker(path)
    same_credentials(default, worker)
    # Its own offsets nodes are trusted; another topology's are not.
    assert default.zk_node_problem(cluster.zk_topology_acl("victim", write=True)) is None
    assert "not this topology's" in default.zk_node_problem(
        cluster.zk_topology_acl("other", write=True))


def test_a_daemons_or_read_only_clients_store_uses_the_secret_file(monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    Security.generate(secret)
    default = store_default(monkeypatch, **{SECRET_FILE_ENV: str(secret)})
    assert default.holds_secret
    same_credentials(default, Security.load(secret))

    read_only = private_file(tmp_path / "read-only.json",
                             json.dumps(Security.load(secret).read_only_credentials()))
    default = store_default(monkeypatch, **{SECRET_FILE_ENV: str(read_only)})
    assert default.enabled and not default.holds_secret
    same_credentials(default, Security.load(read_only))

    assert not store_default(monkeypatch).enabled
    assert store_default(monkeypatch).zk_acl() is None


@pytest.mark.parametrize("text, error", [
    ("{}", "neither a cluster secret nor read-only credentials"),
    ('{"kind": "stormlet-read-only"}', "neither a cluster secret nor read-only credentials"),
    ("abcd", "does not hold a stormlet cluster secret"),
])
def test_both_refuse_the_same_unusable_files(tmp_path, text, error):
    path = private_file(tmp_path / "secret", text)
    for load in (ZooKeeperCredentials.load, Security.load):
        with pytest.raises(SecurityError, match=error):
            load(path)
    path.chmod(0o644)
    for load in (ZooKeeperCredentials.load, Security.load):
        with pytest.raises(SecurityError, match="readable by others"):
            load(path)


def test_a_store_finds_its_credentials_without_importing_the_daemons(tmp_path):
    """The layer contract, at run time: a worker's offset store loads no cluster module."""
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(Security(cluster_secret=SECRET).worker_credentials("t-1-a", "t")))
    code = ("import sys\n"
            "from stormlet.sources.offset_store import ZooKeeperOffsetStore\n"
            "assert ZooKeeperOffsetStore('127.0.0.1:1', '/o')._security().enabled\n"
            "print(sorted(m for m in sys.modules if m.startswith('stormlet.cluster')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO),
                                 WORKER_CREDENTIALS_ENV: str(path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
