"""Event histories in a real ZooKeeper (stormlet/cluster/events.py): order, reads after a seq
and of one kind, writers on several sessions at once losing nothing, the bound, a history kept
after its topology and then deleted, a recorder that never raises, who may read with security
on, redaction for readers without admin access, and nimbus's `events` op answering each role."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from cluster_support import wait_until
from kazoo.exceptions import NoAuthError
from zookeeper_server import ZooKeeperServer, free_port, zookeeper_available

from stormlet.cluster import events, rpc
from stormlet.cluster.events import (
    EventRecorder,
    EventService,
    EventStore,
    NoHistory,
    redact_history,
    trim_above,
)
from stormlet.cluster.nimbus import Nimbus
from stormlet.cluster.security import Security
from stormlet.cluster.submissions import accepted
from stormlet.cluster.zk_state import ClusterState, connect, events_path

pytestmark = [pytest.mark.zookeeper,
              pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")]

TID = "word_count-1700000000-abcdef"
ROOT = "/stormlet"


@pytest.fixture(scope="module")
def zk(tmp_path_factory):
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server


@pytest.fixture
def root(request):
    """A root of this test's own, so that the tests share one server and nothing else."""
    return f"/events-test/{request.node.name}"


@pytest.fixture
def client(zk):
    client = connect(zk.hosts)
    yield client
    client.stop()
    client.close()


def store_of(client, root) -> EventStore:
    return EventStore(client, root)


def event(kind: str, text: str, writer: str = "nimbus:n1", **detail) -> dict:
    return events.Event.stored(kind, text, writer, detail)


def test_events_are_read_in_order_after_a_seq_and_of_one_kind(client, root):
    store = store_of(client, root)
    store.open(TID, "word_count", limit=100)
    seqs = [store.append(TID, event(kind, f"{kind} {i}", port=6700 + i))
            for i, kind in enumerate(["submitted", "assigned", "worker-started",
                                      "worker-exited", "worker-started", "killed"])]
    assert seqs == sorted(seqs) and len(set(seqs)) == 6

    read = store.read(TID, limit=100)
    assert [e.kind for e in read] == ["submitted", "assigned", "worker-started",
                                      "worker-exited", "worker-started", "killed"]
    first = read[0]
    assert (first.seq, first.text, first.writer, first.detail) == (
        seqs[0], "submitted 0", "nimbus:n1", {"port": 6700})
    assert isinstance(first.time, float)
    assert [e.text for e in store.read(TID, limit=2)] == ["worker-started 4", "killed 5"]
    assert [e.text for e in store.read(TID, limit=100, since=seqs[3])] == [
        "worker-started 4", "killed 5"]
    assert [e.text for e in store.read(TID, limit=1, kind="worker-started")] == [
        "worker-started 4"]
    assert store.read(TID, limit=10, since=seqs[-1]) == []
    # The nodes are where zk_state's table says.
    assert client.get_children(f"{events_path(root)}/{TID}")[0].startswith("e-")
    assert json.loads(client.get(f"{events_path(root)}/{TID}")[0])["name"] == "word_count"


def test_an_event_is_one_bounded_line_and_its_kind_is_checked():
    stored = event("worker-exited", "exited\nwith code 1  " + "x" * 5000, big="y" * 10_000)
    assert "\n" not in stored["text"] and len(stored["text"]) == events.MAX_TEXT
    assert stored["text"].startswith("exited with code 1 x") and stored["text"].endswith("...")
    assert list(stored["detail"]) == ["dropped"]
    for bad in ("Worker", "worker exited", "", "-x", "x" * 41, None):
        with pytest.raises(ValueError, match="invalid event kind"):
            event(bad, "text")


def test_writers_on_separate_sessions_at_once_lose_no_event(zk, client, root):
    """Nimbus and several supervisors each write with their own ZooKeeper session: every event
    of every writer is there once, each writer's in the order it wrote them."""
    store_of(client, root).open(TID, "word_count", limit=1000)
    writers, each = 6, 40
    barrier = threading.Barrier(writers)
    problems = []

    def write(n: int) -> None:
        own = connect(zk.hosts)
        try:
            recorder = EventRecorder(lambda: EventStore(own, root), f"supervisor:s{n}@host{n}")
            barrier.wait()
            for i in range(each):
                if recorder.record(TID, "worker-started", f"w{n} e{i}", n=n, i=i) is None:
                    problems.append((n, i))
        finally:
            own.stop()
            own.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert problems == []
    read = store_of(client, root).read(TID, limit=1000)
    assert len(read) == writers * each
    assert len({e.seq for e in read}) == writers * each
    for n in range(writers):
        mine = [e.detail["i"] for e in read if e.detail["n"] == n]
        assert mine == list(range(each))
        assert {e.writer for e in read if e.detail["n"] == n} == {f"supervisor:s{n}@host{n}"}


def test_a_history_keeps_its_newest_events_within_its_bound_with_writers_at_once(zk, client,
                                                                                  root):
    limit = 20
    store_of(client, root).open(TID, "word_count", limit=limit)
    writers, each = 4, 60
    barrier = threading.Barrier(writers)

    def write(n: int) -> None:
        own = connect(zk.hosts)
        try:
            store = EventStore(own, root)
            barrier.wait()
            for i in range(each):
                store.append(TID, event("worker-started", f"w{n} e{i}", n=n, i=i))
        finally:
            own.stop()
            own.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    head = f"{events_path(root)}/{TID}"
    kept = len(client.get_children(head))
    assert limit <= kept <= trim_above(limit)
    read = store_of(client, root).read(TID, limit=1000)
    assert len(read) == kept
    # Only the oldest went: each writer's last events are all there.
    for n in range(writers):
        mine = [e.detail["i"] for e in read if e.detail["n"] == n]
        assert mine == list(range(each - len(mine), each))
    # One more write by one writer alone brings it back within the bound, newest kept.
    store = store_of(client, root)
    for i in range(trim_above(limit)):
        store.append(TID, event("worker-exited", f"last {i}"))
    assert len(client.get_children(head)) <= trim_above(limit)
    assert [e.text for e in store.read(TID, limit=3)] == [
        f"last {i}" for i in range(trim_above(limit) - 3, trim_above(limit))]


def test_a_supervisor_never_makes_a_history_and_nimbus_makes_a_missing_one(zk, client, root):
    state = ClusterState(client, root)
    supervisor = EventRecorder(lambda: EventStore(client, root), "supervisor:s1@h")
    assert supervisor.record(TID, "worker-stopped", "stopped: its topology was killed") is None
    assert not client.exists(f"{events_path(root)}/{TID}")

    # A topology submitted before nimbus kept histories: its first event makes one.
    state.set_topology(TID, {"name": "word_count", "status": "active", "launched": 5.0,
                             "conf": {"topology.events.max": 7}})
    service = EventService(lambda: state, "nimbus:n1")
    assert service.record(TID, "activated", "activated") is not None
    assert store_of(client, root).head(TID) == {"name": "word_count", "limit": 7,
                                                "submitted": 5.0, "removed": None}
    assert supervisor.record(TID, "worker-started", "started") is not None
    assert [e.writer for e in store_of(client, root).read(TID, 10)] == [
        "nimbus:n1", "supervisor:s1@h"]


def test_a_recorder_never_raises_and_says_so_once(zk, root, caplog):
    lost = connect(zk.hosts)
    lost.stop()   # what a writer whose ZooKeeper is out of reach holds
    recorder = EventRecorder(lambda: EventStore(lost, root), "nimbus:n1")
    with caplog.at_level(logging.WARNING, logger="stormlet.cluster.events"):
        for i in range(5):
            assert recorder.record(TID, "killed", f"killed {i}") is None
        assert recorder.record(TID, "Not A Kind", "x") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "could not record events in ZooKeeper" in warnings[0]
    assert any("invalid event kind" in r.getMessage() for r in caplog.records
               if r.levelno == logging.ERROR)
    lost.close()

    broken = EventRecorder(lambda: 1 / 0, "nimbus:n1")   # anything at all
    assert broken.record(TID, "killed", "killed") is None


def test_a_lasting_condition_is_recorded_when_it_begins_and_when_it_changes(client, root):
    store_of(client, root).open(TID, "word_count", limit=100)
    recorder = EventRecorder(lambda: EventStore(client, root), "nimbus:n1")
    for _ in range(3):
        recorder.condition(("unscheduled", TID), TID, "waiting", "no free slots")
    recorder.condition(("unscheduled", TID), TID, "waiting", "no free slots on s2")
    assert recorder.over(("unscheduled", TID))
    recorder.condition(("unscheduled", TID), TID, "waiting", "no free slots")
    assert [e.text for e in store_of(client, root).read(TID, 10)] == [
        "no free slots", "no free slots on s2", "no free slots"]


def test_a_history_outlives_its_topology_then_is_deleted(client, root):
    state = ClusterState(client, root)
    other = "other-1700000001-abcdef"
    service = EventService(lambda: state, "nimbus:n1", keep_secs=3600, tidy_secs=0)
    for tid, name in ((TID, "word_count"), (other, "other")):
        state.set_topology(tid, {"name": name, "status": "active", "conf": {}})
        service.open(tid, name, {})
        service.record(tid, "submitted", f"submitted {name}")
    state.remove_topology(TID)
    service.removed(TID, "removed")

    # Still readable by name after the removal, as removed.
    answer = service.history("word_count")
    assert (answer["id"], answer["status"]) == (TID, "removed")
    assert isinstance(answer["removed"], float)
    assert [e["kind"] for e in answer["events"]] == ["submitted", "removed"]
    assert service.history(other)["status"] == "active"

    # A topology that went without the mark (a nimbus that died meanwhile) gets it.
    state.remove_topology(other)
    service.tidy(set())
    assert isinstance(store_of(client, root).head(other)["removed"], float)
    service.tidy(set())
    assert set(store_of(client, root).heads()) == {TID, other}   # kept for keep_secs

    service.keep_secs = 0
    service.tidy(set())
    assert store_of(client, root).heads() == {}
    with pytest.raises(NoHistory, match="no topology named 'word_count' is running or has"):
        service.history("word_count")


def test_the_running_topology_s_history_is_read_before_an_older_one_of_its_name(client, root):
    state = ClusterState(client, root)
    service = EventService(lambda: state, "nimbus:n1")
    old, new = "wc-1700000000-aaaaaa", "wc-1700000100-bbbbbb"
    state.set_topology(old, {"name": "wc", "status": "killed", "conf": {}})
    service.open(old, "wc", {})
    service.record(old, "killed", "the old one")
    state.remove_topology(old)
    service.removed(old, "removed")
    state.set_topology(new, {"name": "wc", "status": "inactive", "conf": {}})
    service.open(new, "wc", {})
    service.record(new, "submitted", "the new one")
    answer = service.history("wc")
    assert (answer["id"], answer["status"]) == (new, "inactive")
    assert [e["text"] for e in answer["events"]] == ["the new one"]
    assert service.history(old)["events"][0]["text"] == "the old one"
    with pytest.raises(ValueError, match="limit must be"):
        service.history("wc", limit=0)
    with pytest.raises(ValueError, match="since must be"):
        service.history("wc", since=-1)


def test_with_security_daemons_write_readers_read_and_workers_cannot(zk, tmp_path, root):
    secret = tmp_path / "secret"
    Security.generate(secret)
    cluster = Security.load(secret)
    daemon = connect(zk.hosts, security=cluster)
    clients = [daemon]
    try:
        state = ClusterState(daemon, root, cluster)
        state.set_topology(TID, {"name": "word_count", "status": "active", "conf": {}})
        service = EventService(lambda: state, "nimbus:n1")
        service.open(TID, "word_count", {})
        service.record(TID, "submitted", "submitted")
        # Nothing the cluster made under its root is refused as foreign.
        state.check_root()

        supervisor = connect(zk.hosts, security=cluster)   # every daemon holds the secret
        clients.append(supervisor)
        assert EventRecorder(lambda: EventStore(supervisor, root), "supervisor:s1@h").record(
            TID, "worker-started", "started") is not None

        read_only = tmp_path / "read-only.json"
        read_only.write_text(json.dumps(cluster.read_only_credentials()))
        read_only.chmod(0o600)
        reader = connect(zk.hosts, security=Security.load(read_only))
        clients.append(reader)
        assert [e.kind for e in EventStore(reader, root).read(TID, 10)] == [
            "submitted", "worker-started"]
        with pytest.raises(NoAuthError):
            EventStore(reader, root).append(TID, event("killed", "forged"))

        credentials = tmp_path / "worker.json"
        credentials.write_text(json.dumps(cluster.worker_credentials(TID, "word_count")))
        worker = connect(zk.hosts, security=Security.for_worker(credentials))
        clients.append(worker)
        with pytest.raises(NoAuthError):
            EventStore(worker, root).read(TID, 10)
        with pytest.raises(NoAuthError):
            EventStore(worker, root).append(TID, event("killed", "forged"))
    finally:
        for client in clients:
            client.stop()
            client.close()


def test_readers_without_admin_access_get_credentials_redacted():
    answer = events.history_answer(TID, "word_count", "active", None, [events.Event(
        3, 1.0, "worker-exited", "worker exited; its last error: cannot reach "
        "redis://app:hunter2@cache:6379/0", "supervisor:s1@h",
        {"password": "hunter2", "port": 6700, "why": "password=hunter2"})])
    shown = redact_history(answer)["events"][0]
    assert "hunter2" not in json.dumps(shown)
    assert shown["text"].endswith("redis://app:<redacted>@cache:6379/0")
    assert shown["detail"]["port"] == 6700
    assert answer["events"][0]["detail"]["password"] == "hunter2"   # the original is untouched


def test_nimbus_answers_events_redacted_to_readers_whole_to_its_admin_and_not_to_workers(
        zk, tmp_path, root):
    secret = tmp_path / "secret"
    Security.generate(secret)
    security = Security.load(secret)
    nimbus = Nimbus(zk.hosts, port=free_port(), data_dir=tmp_path / "nimbus", zk_root=root,
                    nimbus_id="n1", security=security)
    nimbus.start()
    try:
        wait_until(nimbus.is_leader.is_set, 20, "nimbus to lead")
        # A topology with nowhere to run (no supervisor): nimbus says so once, not every pass.
        nimbus.state.set_topology(TID, {
            "name": "word_count", "status": "active", "workers": 1, "executors": {},
            "conf": {"topology.acker.executors": 0},
            "summary": {"numbers": {"tasks": 1, "executors": 1, "spout": True}}})
        nimbus.record_event(TID, "worker-exited", "its last error: cannot reach "
                            "redis://app:hunter2@cache:6379/0", password="hunter2")
        wait_until(lambda: "waiting" in [e.kind for e in EventStore(nimbus.client, root).read(
            TID, 10)], 10, "nimbus to record that the topology waits for slots")
        time.sleep(2.5)   # two more monitor passes find it waiting still

        def ask(keys) -> dict:
            return rpc.call(nimbus.address, "events", timeout=10, credentials=keys,
                            topology="word_count", limit=10)

        whole = ask(security.rpc_client_keys("admin"))
        assert [e["kind"] for e in whole["events"]] == ["worker-exited", "waiting"]
        assert "hunter2" in json.dumps(whole["events"][0])
        assert whole["events"][1]["text"].startswith("cannot be placed yet: no free worker slots")
        assert whole["events"][1]["writer"] == "nimbus:n1"

        redacted = ask(security.rpc_client_keys("read"))
        assert "hunter2" not in json.dumps(redacted)
        assert redacted["events"][0]["detail"] == {"password": "<redacted>"}

        credentials = tmp_path / "worker.json"
        credentials.write_text(json.dumps(security.worker_credentials(TID, "word_count")))
        with pytest.raises(rpc.RpcError, match="permission denied"):
            ask(Security.for_worker(credentials).rpc_client_keys())

        # A submission not yet a topology (submit --no-wait) has no events yet, and says so.
        later = "later-1700000000-abcdef"
        nimbus.state.set_submission(accepted(later, "later", {}, "0" * 64, time.time()))
        answer = rpc.call(nimbus.address, "events", timeout=10, topology="later",
                          credentials=security.rpc_client_keys("read"))
        assert (answer["id"], answer["events"]) == (later, [])
        assert answer["status"] in ("preparing", "refused")
        with pytest.raises(rpc.RpcError, match="no topology named 'nope'"):
            rpc.call(nimbus.address, "events", timeout=10, topology="nope",
                     credentials=security.rpc_client_keys("read"))
    finally:
        nimbus.stop()
