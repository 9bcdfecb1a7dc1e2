"""A cluster with a secret: real ZooKeeper, nimbus, supervisor and worker processes on loopback,
all authenticated from one secret file; clients without it, or with only a worker's
credentials, get no further than their role allows."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq
from cluster_support import (
    LEADER_PATH,
    LEDGER,
    REPO,
    new_secret_file,
    serve_cluster,
    wait_until,
)
from support import compiled_run_only
from zookeeper_server import zookeeper_available

from stormlet.cluster import rpc
from stormlet.cluster.code import package_topology
from stormlet.cluster.log_files import WORKER_LOG
from stormlet.cluster.security import (
    SECRET_FILE_ENV,
    WORKER_CREDENTIALS_ENV,
    Security,
    SecurityError,
)
from stormlet.cluster.wire import encode_frame
from stormlet.cluster.zk_state import ClusterState, connect, rpc_address
from stormlet.loader import load_topology_file
from stormlet.runtime.protocol import BACKPRESSURE, SYSTEM_TASK

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")



def stormlet(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stormlet.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=env)


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory) -> Path:
    return new_secret_file(tmp_path_factory.mktemp("secret"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, secret_file):
    base = tmp_path_factory.mktemp("secured")
    yield from serve_cluster(base, 1, {"s1": 2}, secret_file)


@pytest.fixture(scope="module")
def running(cluster, tmp_path_factory) -> str:
    """A ledger topology running on the secured cluster; its id."""
    ledger = tmp_path_factory.mktemp("ledger")
    result = cluster.cli("submit", str(LEDGER), "--name", "secured", "-c", f"ledger.dir={ledger}",
                         "-c", "ledger.rate=300", "-c", "topology.metrics.report.secs=1",
                         "-c", "topology.workers=2",
                         # Plain shuffle: the forged pause below could stall only tuples that
                         # cross between the workers, which load-aware shuffle keeps local.
                         "-c", "topology.disable.loadaware.messaging=true",
                         "-c", "ledger.messages=1000000")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: list(ledger.glob("acked-*.log")), 60, "the first acks")
    wait_until(lambda: len(cluster.heartbeats()) == 2, 60, "both workers")
    return next(iter(cluster.heartbeats().values()))["topology_id"]


def acked(cluster) -> int:
    return cluster.metric("source", "acked")


@pytest.fixture
def leader(cluster, secret_file) -> str:
    client = connect(cluster.zk.hosts, security=Security.load(secret_file))
    try:
        leading = ClusterState(client).leader()
        assert leading is not None, "no nimbus leads"
        return rpc_address(leading)
    finally:
        client.stop()
        client.close()


def test_a_topology_runs_and_reports_its_metrics_on_a_secured_cluster(cluster, running, leader,
                                                                       secret_file):
    admin = Security.load(secret_file).rpc_client_keys("admin")
    wait_until(lambda: rpc.call(leader, "metrics", timeout=5, credentials=admin,
                                name="secured"), 30, "the workers' metrics to reach nimbus")
    listing = cluster.cli("list")
    assert listing.returncode == 0 and "secured" in listing.stdout, listing.stderr


def test_forged_backpressure_with_the_right_topology_id_pauses_nothing(cluster, running,
                                                                       leader, secret_file):
    # Pause every task of the topology, as an overloaded worker of it would ask its peers: only
    # its real tasks, or the frame would be refused for naming others, secured or not.
    tasks = [t for ts in load_topology_file(LEDGER)[0].task_ids().values() for t in ts]
    pause_all = encode_frame([(BACKPRESSURE, SYSTEM_TASK, SYSTEM_TASK,
                               [value for task in tasks for value in (task, 1)])], running)
    pushes = []
    for _supervisor, port in cluster.heartbeats():
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(f"tcp://127.0.0.1:{port}")
        pushes.append(push)
    try:
        before = acked(cluster)
        # Renewed every 0.1 s for 6 s, the pause would stop every spout (300 ids/s) within the
        # first second if it were taken.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            for push in pushes:
                try:
                    push.send(pause_all, zmq.NOBLOCK)
                except zmq.Again:   # never connected: refused at the handshake
                    pass
            time.sleep(0.1)
        assert acked(cluster) > before + 600, "acks stalled while the forged pause was sent"
    finally:
        for push in pushes:
            push.close(0)
    admin = Security.load(secret_file).rpc_client_keys("admin")
    wait_until(lambda: all(s["worker"].get("frames_rejected", 0) > 0 for s in
                           rpc.call(leader, "metrics", timeout=5, credentials=admin,
                                    name="secured") if not s.get("retired")), 30,
               "frames_rejected in both workers")


def test_a_worker_gets_its_topologys_credentials_and_not_the_cluster_secret(cluster, running):
    pid = next(iter(cluster.heartbeats().values()))["pid"]
    environment = dict(line.split("=", 1) for line in
                       Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in line)
    assert SECRET_FILE_ENV not in environment
    credentials = Path(environment[WORKER_CREDENTIALS_ENV])
    assert credentials.stat().st_mode & 0o077 == 0
    assert json.loads(credentials.read_text())["topology_id"] == running
    assert cluster.secret_file.read_text().strip() not in credentials.read_text()


def test_code_logs_heartbeats_and_state_are_not_world_readable(cluster, running):
    """Issue 50: code packages, unpacked code, worker logs, heartbeats and state files were
    created 644 on a cluster whose topologies' code and data only its users should see."""
    made = [path for daemon in ("nimbus0", "s1")
            for path in (cluster.base / daemon).rglob("*")]
    kinds = {"code package": [p for p in made if p.suffix == ".zip"],
             "unpacked code": [p for p in made if p.name == "ledger.py"],
             "worker log": [p for p in made if p.name == WORKER_LOG],
             "heartbeat": [p for p in made if p.parent.name == "heartbeats"]}
    for kind, paths in kinds.items():
        assert paths, f"no {kind} found under {cluster.base}"
    world = [str(p) for p in made if p.stat().st_mode & 0o007]
    assert not world, f"readable by anyone: {world}"


def test_clients_without_the_secret_get_no_service(cluster, running, leader, tmp_path):
    plain = stormlet("list", "--zk", cluster.zk.hosts)
    assert plain.returncode != 0 and "--secret-file" in plain.stderr, plain.stderr
    other = tmp_path / "other.secret"
    Security.generate(other)
    wrong = stormlet("list", "--zk", cluster.zk.hosts, "--secret-file", str(other))
    assert wrong.returncode != 0
    assert "refused this client's credentials" in wrong.stderr
    with pytest.raises(rpc.NimbusUnavailable):
        rpc.call(leader, "list", timeout=2)


def test_a_workers_credentials_cannot_submit_kill_or_read_another_topologys_code(
        cluster, running, leader, secret_file, tmp_path):
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(Security.load(secret_file).worker_credentials(running, "secured")))
    worker = Security.for_worker(path).rpc_client_keys()
    assert rpc.call(leader, "get_code", timeout=5, credentials=worker, topology_id=running)
    with pytest.raises(rpc.RpcError, match="permission denied"):
        rpc.call(leader, "submit", timeout=30, credentials=worker, name="sneaky",
                 payload=package_topology(LEDGER))
    with pytest.raises(rpc.RpcError, match="permission denied"):
        rpc.call(leader, "kill", timeout=5, credentials=worker, name="secured")
    with pytest.raises(rpc.RpcError, match="permission denied"):
        rpc.call(leader, "get_code", timeout=5, credentials=worker, topology_id="x-1-abcdef")
    read = Security.load(secret_file).rpc_client_keys("read")
    assert rpc.call(leader, "list", timeout=5, credentials=read)
    with pytest.raises(rpc.RpcError, match="permission denied"):
        rpc.call(leader, "kill", timeout=5, credentials=read, name="secured")
    assert "sneaky" not in cluster.cli("list").stdout


@compiled_run_only
def test_daemons_refuse_to_serve_beyond_loopback_without_a_secret(tmp_path):
    for args in (["nimbus", "--host", "0.0.0.0"], ["nimbus", "--bind", "0.0.0.0"],
                 ["supervisor", "--host", "0.0.0.0", "--data-dir", str(tmp_path)],
                 ["supervisor", "--bind", "0.0.0.0", "--data-dir", str(tmp_path)],
                 ["ui", "--host", "0.0.0.0"]):
        result = stormlet(*args, "--zk", "127.0.0.1:1")
        assert result.returncode != 0
        assert "no cluster secret" in result.stderr and "secret generate" in result.stderr, args


def test_a_secret_file_must_be_private_well_formed_and_never_overwritten(tmp_path):
    path = tmp_path / "s"
    Security.generate(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert Security.load(path).enabled
    with pytest.raises(SecurityError, match="exists already"):
        Security.generate(path)
    path.chmod(0o644)
    with pytest.raises(SecurityError, match="chmod 600"):
        Security.load(path)
    bad = tmp_path / "bad"
    bad.write_text("not hex\n")
    bad.chmod(0o600)
    with pytest.raises(SecurityError, match="does not hold"):
        Security.load(bad)
    assert not Security.load(None).enabled


def worker_security(cluster_security: Security, directory: Path, topology_id: str,
                    name: str) -> Security:
    """What a worker of topology ``name`` holds (its supervisor writes the same file)."""
    path = directory / f"{name}.json"
    path.write_text(json.dumps(cluster_security.worker_credentials(topology_id, name)))
    return Security.for_worker(path)


def test_zookeeper_refuses_anonymous_clients_and_workers_read_only_their_topology(
        cluster, running, secret_file, tmp_path):
    from kazoo.exceptions import NoAuthError

    anonymous = connect(cluster.zk.hosts)
    try:
        for attempt in (lambda: anonymous.get_children("/stormlet/assignments"),
                        lambda: anonymous.get(LEADER_PATH),
                        lambda: anonymous.create("/stormlet/evil", b"x"),
                        lambda: anonymous.set(f"/stormlet/topologies/{running}", b"{}"),
                        lambda: anonymous.create("/stormlet/offsets/evil", b"x")):
            with pytest.raises(NoAuthError):
                attempt()
    finally:
        anonymous.stop()
        anonymous.close()

    cluster_security = Security.load(secret_file)
    ours = connect(cluster.zk.hosts, security=worker_security(
        cluster_security, tmp_path, running, "secured"))
    theirs = connect(cluster.zk.hosts, security=worker_security(
        cluster_security, tmp_path, "other-1-abcdef", "other"))
    try:
        for client in (ours, theirs):   # where to report metrics
            assert json.loads(client.get(LEADER_PATH)[0])["port"]
        record = json.loads(ours.get(f"/stormlet/topologies/{running}")[0])
        assert record["name"] == "secured" and ours.get(f"/stormlet/assignments/{running}")
        for attempt in (lambda: theirs.get(f"/stormlet/topologies/{running}"),
                        lambda: theirs.get(f"/stormlet/assignments/{running}"),
                        lambda: theirs.get_children("/stormlet/topologies"),
                        lambda: theirs.get_children("/stormlet/heartbeats"),
                        lambda: ours.set(f"/stormlet/assignments/{running}", b"{}"),
                        lambda: ours.create("/stormlet/supervisors/fake", b"{}")):
            with pytest.raises(NoAuthError):
                attempt()
    finally:
        for client in (ours, theirs):
            client.stop()
            client.close()


def test_a_topologys_offsets_are_its_own_whatever_other_workers_do(
        cluster, running, secret_file, tmp_path):
    """Issue 50's attack: another topology's workers pre-create the victim's offsets node with
    their own ACL (its spouts failed in open) or write an offset into it (it skipped 1,800 of
    2,000 messages)."""
    from kazoo.exceptions import NoAuthError
    from kazoo.security import OPEN_ACL_UNSAFE

    from stormlet.cluster.zk_state import offset_path, offsets_path, spout_offsets_path

    cluster_security = Security.load(secret_file)
    spout_node = spout_offsets_path(offsets_path("/stormlet"), "log-word-count")
    victim_commit = offset_path(offsets_path("/stormlet"), "log-word-count", 0)
    theirs = connect(cluster.zk.hosts, security=worker_security(
        cluster_security, tmp_path, "other-1-abcdef", "other"))
    admin = connect(cluster.zk.hosts, security=cluster_security)
    submit = ("submit", str(REPO / "topologies" / "log_word_count.py"), "--name", "victim",
              "-c", f"sentences.log={tmp_path / 'sentences'}")
    try:
        # Before the victim is submitted: another topology's workers may create nothing there.
        with pytest.raises(NoAuthError):
            theirs.create(victim_commit, b'{"offset": 450}', makepath=True)
        # A node planted as the code before this fix allowed (with another topology's ACL) is
        # refused at submit, naming it, and never read.
        admin.create(spout_node, acl=cluster_security.zk_topology_acl("other", write=True))
        admin.create(victim_commit, b'{"offset": 450}',
                     acl=cluster_security.zk_topology_acl("other", write=True))
        refused = cluster.cli(*submit)
        assert refused.returncode != 0
        assert spout_node in refused.stderr and "'other'" in refused.stderr, refused.stderr
        assert "victim" not in cluster.cli("list").stdout
        admin.delete(spout_node, recursive=True)

        accepted = cluster.cli(*submit)
        assert accepted.returncode == 0, accepted.stderr
        ours = connect(cluster.zk.hosts, security=worker_security(
            cluster_security, tmp_path, "victim-1-abcdef", "victim"))
        try:
            ours.create(victim_commit, b'{"offset": 3}')
            for attempt in (lambda: theirs.create(f"{spout_node}/1", b'{"offset": 450}'),
                            lambda: theirs.set(victim_commit, b'{"offset": 450}'),
                            lambda: theirs.get(victim_commit),
                            lambda: theirs.delete(victim_commit),
                            lambda: theirs.set_acls(spout_node, OPEN_ACL_UNSAFE)):
                with pytest.raises(NoAuthError):
                    attempt()
            assert ours.get(victim_commit)[0] == b'{"offset": 3}'
        finally:
            ours.stop()
            ours.close()
    finally:
        cluster.cli("kill", "victim", "--wait", "0")
        for client in (theirs, admin):
            client.stop()
            client.close()


@pytest.mark.zookeeper
def test_a_worker_refuses_a_commit_that_is_not_its_topologys(tmp_path):
    """A node planted where a spout with a root of its own commits (or left by the code before
    this fix) is never read as the topology's position."""
    from kazoo.security import OPEN_ACL_UNSAFE
    from zookeeper_server import ZooKeeperServer

    from stormlet.sources.offset_store import ForeignOffsetError, ZooKeeperOffsetStore

    secret = tmp_path / "secret"
    Security.generate(secret)
    cluster_security = Security.load(secret)
    worker = worker_security(cluster_security, tmp_path, "victim-1-abcdef", "victim")
    with ZooKeeperServer(tmp_path / "zk") as zk:
        admin = connect(zk.hosts, security=cluster_security)
        store = ZooKeeperOffsetStore(zk.hosts, "/custom", worker)
        try:
            admin.create("/custom/open/0", b'{"offset": 450}', acl=OPEN_ACL_UNSAFE,
                         makepath=True)
            admin.create("/custom/theirs/0", b'{"offset": 450}', makepath=True,
                         acl=cluster_security.zk_topology_acl("other", write=True))
            for spout_id, why in (("open", "world:anyone"), ("theirs", "may not read")):
                with pytest.raises(ForeignOffsetError, match=f"/custom/{spout_id}") as raised:
                    store.load(spout_id, 0)
                assert why in str(raised.value)
            store.save("mine", 0, {"offset": 7})
            assert store.load("mine", 0) == {"offset": 7}
            assert store.load("mine", 1) is None
        finally:
            store.close()
            admin.stop()
            admin.close()


def test_read_only_credentials_may_list_but_not_act(cluster, running, secret_file, tmp_path):
    read_only = tmp_path / "monitor.json"
    made = stormlet("secret", "read-only", str(read_only), "--secret-file", str(secret_file))
    assert made.returncode == 0, made.stderr
    assert read_only.stat().st_mode & 0o077 == 0
    assert cluster.secret_file.read_text().strip() not in read_only.read_text()
    listing = stormlet("list", "--zk", cluster.zk.hosts, "--secret-file", str(read_only))
    assert listing.returncode == 0 and "secured" in listing.stdout, listing.stderr
    kill = stormlet("kill", "secured", "--zk", cluster.zk.hosts, "--secret-file", str(read_only))
    # It reads a topology's offsets too, as `stormlet log describe` does.
    from stormlet.cluster.zk_state import connect, offset_path, offsets_path
    from stormlet.sources.offset_store import ZooKeeperOffsetStore
    cluster_security = Security.load(secret_file)
    admin = connect(cluster.zk.hosts, security=cluster_security)
    try:
        admin.create(offset_path(offsets_path("/stormlet"), "monitored-spout", 0),
                     b'{"offset": 7}', makepath=True,
                     acl=cluster_security.zk_topology_acl("secured", write=True))
    finally:
        admin.stop()
        admin.close()
    store = ZooKeeperOffsetStore(cluster.zk.hosts, offsets_path("/stormlet"),
                                 Security.load(read_only))
    try:
        assert store.all()["monitored-spout"][0]["offset"] == 7
    finally:
        store.close()
    assert kill.returncode != 0 and "permission denied" in kill.stderr
    assert "secured" in cluster.cli("list").stdout


@pytest.mark.zookeeper
def test_nimbus_refuses_a_root_it_did_not_make_until_an_operator_adopts_it(tmp_path):
    """Issue 50: an anonymous client squats the root before the first nimbus starts. A root
    with a foreign ACL made nimbus exit on an uncaught NoAuthError; open records planted there
    (a fake leader, a topology) were adopted and shown by `stormlet list`."""
    from kazoo.exceptions import NoAuthError
    from kazoo.security import make_digest_acl
    from zookeeper_server import ZooKeeperServer, free_port

    from stormlet.cluster.nimbus import Nimbus
    from stormlet.cluster.zk_state import ForeignNodeError

    secret = tmp_path / "secret"
    Security.generate(secret)
    security = Security.load(secret)
    with ZooKeeperServer(tmp_path / "zk") as zk:
        anonymous = connect(zk.hosts, security=None)
        try:
            # A root no daemon of the cluster may use: one line naming it, no traceback.
            anonymous.create("/squatted", acl=[make_digest_acl("evil", "pw", all=True)])
            nimbus = stormlet("nimbus", "--zk", zk.hosts, "--zk-root", "/squatted",
                              "--port", str(free_port()), "--data-dir", str(tmp_path / "n0"),
                              env={**_environment(), SECRET_FILE_ENV: str(secret)})
            assert nimbus.returncode != 0
            assert "/squatted" in nimbus.stderr and "Traceback" not in nimbus.stderr, \
                nimbus.stderr

            # Open records planted under the default root: refused, not adopted.
            anonymous.create(LEADER_PATH, b'{"host": "10.9.9.9", "port": 1}',
                             makepath=True)
            anonymous.create("/stormlet/topologies/fake-1-abcdef", b'{"name": "fake"}',
                             makepath=True)
            anonymous.create("/stormlet/offsets/old-spout/0", b'{"offset": 3}', makepath=True)
            nimbus = Nimbus(zk.hosts, port=free_port(), data_dir=tmp_path / "nimbus",
                            security=security)
            with pytest.raises(ForeignNodeError, match="adopt-zookeeper"):
                nimbus.start()

            # An operator who trusts them adopts them once; nimbus then starts, and nobody
            # but the daemons may use the adopted nodes, the offsets included, until a topology
            # with that spout id is submitted.
            adopted = stormlet("secret", "adopt-zookeeper", "--zk", zk.hosts,
                               "--secret-file", str(secret))
            assert adopted.returncode == 0, adopted.stderr
            assert "gave 8 open nodes" in adopted.stdout, adopted.stdout
            nimbus.start()
            try:
                for path in ("/stormlet/topologies/fake-1-abcdef", "/stormlet/offsets/old-spout/0",
                             "/stormlet/topologies", "/stormlet"):
                    with pytest.raises(NoAuthError):
                        anonymous.get(path)
                worker = connect(zk.hosts, security=worker_security(
                    security, tmp_path, "t-1-abcdef", "t"))
                try:
                    with pytest.raises(NoAuthError):
                        worker.set("/stormlet/offsets/old-spout/0", b'{"offset": 4}')
                finally:
                    worker.stop()
                    worker.close()
            finally:
                nimbus.stop()
        finally:
            anonymous.stop()
            anonymous.close()


def _environment() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != SECRET_FILE_ENV}


@compiled_run_only
def test_a_ui_with_read_only_credentials_stays_on_loopback(secret_file, tmp_path):
    read_only = tmp_path / "monitor.json"
    assert stormlet("secret", "read-only", str(read_only),
                    "--secret-file", str(secret_file)).returncode == 0
    for args in (["--host", "0.0.0.0"], ["--protect-reads"]):
        result = stormlet("ui", *args, "--zk", "127.0.0.1:1", "--secret-file", str(read_only))
        assert result.returncode != 0 and "access token" in result.stderr, result.stderr
    # Without any secret, --protect-reads has no token to ask for: refused, not ignored.
    plain = stormlet("ui", "--protect-reads", "--zk", "127.0.0.1:1")
    assert plain.returncode != 0 and "access token" in plain.stderr, plain.stderr


def test_blob_writes_need_the_admin_and_blob_bytes_go_to_daemons_only(cluster, running,
                                                                        secret_file, leader,
                                                                        tmp_path):
    from stormlet.cluster.blob_transfer import download

    model = tmp_path / "model.bin"
    model.write_bytes(b"weights " * 1000)
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    read_only = tmp_path / "monitor.json"
    assert stormlet("secret", "read-only", str(read_only), "--secret-file",
                    str(secret_file)).returncode == 0
    for credentials, said in ((["--secret-file", str(read_only)], "read may not call "
                                                                  "blob_upload_begin"),
                              ([], "--secret-file")):
        refused = stormlet("blob", "upload", "model", str(model), "--zk", cluster.zk.hosts,
                           *credentials)
        assert refused.returncode != 0 and said in refused.stderr, refused.stderr
    uploaded = cluster.cli("blob", "upload", "model", str(model))   # with the secret: admin
    assert uploaded.returncode == 0, uploaded.stderr
    listing = stormlet("blob", "list", "--zk", cluster.zk.hosts, "--secret-file", str(read_only))
    assert listing.returncode == 0 and digest[:16] in listing.stdout, listing.stderr
    security = Security.load(secret_file)
    for user in ("read", f"worker:{running}"):   # a worker gets its blobs from its supervisor
        with pytest.raises(rpc.RpcError, match="permission denied"):
            rpc.call(leader, "get_blob_chunk", timeout=5, sha256=digest, offset=0,
                     credentials=security.rpc_client_keys(user))
    # A supervisor's copy, as the daemon: over CURVE, checked against the digest.
    copy = tmp_path / "copy"
    download([leader], digest, model.stat().st_size, copy, tmp_path / ".copy.partial", security)
    assert copy.read_bytes() == model.read_bytes()
    assert cluster.cli("blob", "delete", "model").returncode == 0
