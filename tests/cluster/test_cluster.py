"""The distributed runtime end to end: real ZooKeeper, two nimbus processes, two supervisors with
two slots each, worker processes talking over ZeroMQ, driven through the `stormlet` CLI."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from cluster_support import (
    LEADER_PATH,
    LEDGER,
    REPO,
    LoopbackCluster,
    acked_ids,
    after_test,
    json_outputs,
    leader_port,
    serve_cluster,
    wait_until,
)
from cluster_topologies import cycle
from kazoo.client import KazooClient
from zookeeper_server import zookeeper_available

from stormlet.cluster.cpu_pinning import CpuPinning
from stormlet.cluster.log_files import worker_log_dir, worker_log_file
from stormlet.cluster.security import Security
from stormlet.cluster.wire import WIRE_VERSION
from stormlet.cluster.zk_state import assignments_path
from stormlet.sources.offset_store import ZooKeeperOffsetStore
from stormlet.sources.partitioned_log import PartitionedLog

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

TOPOLOGIES = REPO / "topologies"
CYCLE = Path(cycle.__file__)
SLOTS = 2   # per supervisor


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster")
    yield from serve_cluster(base, 2, {"s1": SLOTS, "s2": SLOTS})


@pytest.fixture(autouse=True)
def logs_on_failure(request, cluster):
    yield
    after_test(request, cluster)


def test_word_count_on_four_workers_gives_exact_counts(cluster, tmp_path):
    sys.path.insert(0, str(TOPOLOGIES))
    import word_count
    sys.path.remove(str(TOPOLOGIES))

    cluster.submit(TOPOLOGIES / "word_count.py", "wc", "topology.workers=4",
                   f"wordcount.output.dir={tmp_path}", "wordcount.repeats=1000")
    workers: dict = {}

    def four_workers() -> bool:
        workers.clear()
        workers.update(cluster.topology_workers("wc"))
        return len(workers) == 4

    wait_until(four_workers, 40, "four workers")
    listing = cluster.cli("list").stdout
    row = next(line.split() for line in listing.splitlines() if line.startswith("wc "))
    assert row[1] == "active" and row[2] == "4" and row[3] == "4", listing   # run and asked
    assert_pinned_one_to_a_free_cpu([beat["pid"] for beat in workers.values()])

    wait_until(lambda: cluster.metric("sentences", "acked") == 2 * 1000 * 5, 60,
               "every sentence to be acked")
    # Four ackers, one per worker. A spout's roots go to the acker in its own worker, so the
    # ackers that work are those of the spouts' workers, and the others see nothing.
    # (Heartbeats are a second apart and the run can be shorter: wait for them to catch up.)
    def acker_work() -> dict[bool, set[bool]]:
        beats = cluster.topology_workers("wc").values()
        by_spout: dict[bool, set[bool]] = {True: set(), False: set()}
        for beat in beats:
            metrics = beat["metrics"]
            by_spout["sentences" in metrics].add(metrics["__acker"].get("executed", 0) > 0)
        return by_spout if len(beats) == 4 else {}

    wait_until(lambda: acker_work() in ({True: {True}, False: {False}},
                                        {True: {True}, False: set()}), 15,
               "the ackers in the spouts' workers, and only those, to report acks")
    workers = cluster.topology_workers("wc")
    # The counting tasks live in other workers than all of the splitters: words crossed ZeroMQ.
    split_slots = {s for s, b in workers.items() if "split" in b["metrics"]}
    count_slots = {s for s, b in workers.items() if "count" in b["metrics"]}
    assert count_slots - split_slots

    cluster.kill_and_wait("wc")
    wait_until(lambda: not list(cluster.base.glob("*/code/wc-*")), 20,
               "supervisors to delete the removed topology's code")
    counts: Counter = Counter()
    for path in tmp_path.glob("counts-*.json"):
        counts.update(json.loads(path.read_text()))
    assert counts == word_count.expected_counts(spout_tasks=2, repeats=1000)


def assert_pinned_one_to_a_free_cpu(pids: list[int]) -> None:
    """With a CPU for each of its slots, a supervisor pins each worker to a CPU no other worker
    on the machine is pinned to while there is one, and starts the rest unpinned
    (cpu_pinning.py): the two supervisors here spread their workers over the CPUs together."""
    assert len(pids) == 4
    pinning = CpuPinning(SLOTS, None)   # as each supervisor here decides
    cpus = pinning.cpus
    affinities = [sorted(os.sched_getaffinity(pid)) for pid in pids]
    pinned = [a[0] for a in affinities if len(a) == 1 and len(cpus) > 1]
    unpinned = [a for a in affinities if a == cpus]
    assert len(pinned) + len(unpinned) == len(pids), affinities
    assert len(set(pinned)) == len(pinned), affinities
    others = set(pinning.running_workers()) - set(pids)
    if not others:   # no other cluster's workers (another test run's) took CPUs first
        expected = min(len(cpus), len(pids)) if pinning.enabled else 0
        assert len(pinned) == expected, affinities


def test_deactivate_activate_and_rebalance_lose_nothing(cluster, tmp_path):
    total = 6000
    cluster.submit(LEDGER, "ledger", "topology.workers=4", f"ledger.dir={tmp_path}",
                   f"ledger.messages={total}", "ledger.rate=300")
    wait_until(lambda: len(acked_ids(tmp_path)) > 300, 40, "the first acks")

    assert cluster.cli("deactivate", "ledger").returncode == 0
    time.sleep(2.0)  # in-flight tuples finish; nothing new is emitted
    stalled = len(acked_ids(tmp_path))
    emitted = cluster.metric("source", "emitted")
    time.sleep(2.0)
    assert len(acked_ids(tmp_path)) == stalled
    assert cluster.metric("source", "emitted") == emitted
    assert " inactive " in cluster.cli("list").stdout

    assert cluster.cli("activate", "ledger").returncode == 0
    wait_until(lambda: len(acked_ids(tmp_path)) > stalled + 200, 30, "emission to resume")

    result = cluster.cli("rebalance", "ledger", "--workers", "2")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: len(cluster.topology_workers("ledger")) == 2, 60, "two workers")
    wait_until(lambda: len(acked_ids(tmp_path)) == total, 120, "every message to be acked")
    assert acked_ids(tmp_path) == set(range(total))
    cluster.kill_and_wait("ledger")


def test_a_killed_worker_is_restarted_and_its_tuples_replayed(cluster, tmp_path):
    # A relay holds one tuple (id 5000) until its worker is killed: at least that one is lost in
    # a worker without spouts (the layout puts the relays apart from the spouts). Its root's
    # acker is in its spout's worker, which lives on: the tuple times out and is replayed.
    total = 30000
    cluster.submit(LEDGER, "crash", "topology.workers=4", f"ledger.dir={tmp_path}",
                   f"ledger.messages={total}", "ledger.hold.id=5000")
    wait_until(lambda: len(cluster.topology_workers("crash")) == 4, 40, "four workers")
    wait_until(lambda: (tmp_path / "held.pid").exists(), 40, "a relay to hold its tuple")
    holder = int((tmp_path / "held.pid").read_text())
    victim_slot, victim = next((slot, beat)
                               for slot, beat in cluster.topology_workers("crash").items()
                               if beat["pid"] == holder)
    assert "source" not in victim["metrics"], "the layout put a relay and a spout in one worker"
    os.kill(victim["pid"], signal.SIGKILL)
    wait_until(lambda: cluster.topology_workers("crash").get(victim_slot, {}).get("pid",
               victim["pid"]) != victim["pid"], 40, "the supervisor to restart the worker")
    wait_until(lambda: len(acked_ids(tmp_path)) == total, 120, "every message to be acked")
    # The lost tuples timed out and were replayed. (Replays are acked within milliseconds of
    # their fail, and heartbeats are a second apart: wait for the spouts' to say so.)
    wait_until(lambda: cluster.metric("source", "failed") > 0, 10,
               "the spouts to report the lost tuples failed")
    cluster.kill_and_wait("crash")


@pytest.mark.parametrize("source, message", [
    ("def broken(:\n", "syntax error"),
    ("x = 1\n", "defines no module-level `topology`"),
    ("from stormlet import TopologyBuilder, Bolt\n"
     "class B(Bolt):\n    outputs = ['x']\n"
     "b = TopologyBuilder()\nb.set_bolt('b', B()).shuffle_grouping('nowhere')\n"
     "topology = b.build()\n", "no component 'nowhere'"),
])
def test_a_bad_topology_file_is_refused_and_changes_nothing(cluster, tmp_path, source, message):
    before = cluster.cli("list").stdout
    path = tmp_path / "bad.py"
    path.write_text(source)
    result = cluster.cli("submit", str(path), "--name", "bad")
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert cluster.cli("list").stdout == before


def test_a_setting_that_changes_nothing_is_named_when_it_is_submitted(cluster, tmp_path):
    result = cluster.submit(LEDGER, "typo", f"ledger.dir={tmp_path}", "ledger.rate=50",
                            "topology.max.spout.pendng=10")
    assert ("warning: topology.max.spout.pendng is not a setting stormlet reads, so it changes "
            "nothing (did you mean topology.max.spout.pending?)") in result.stderr, result.stderr
    cluster.kill_and_wait("typo")


def test_duplicate_names_and_unknown_topologies_get_clear_errors(cluster, tmp_path):
    cluster.submit(LEDGER, "dup", f"ledger.dir={tmp_path}", "ledger.rate=50")
    again = cluster.cli("submit", str(LEDGER), "--name", "dup", "-c", f"ledger.dir={tmp_path}")
    assert again.returncode != 0 and "already running" in again.stderr
    for command in (["kill", "nope"], ["activate", "nope"], ["deactivate", "nope"],
                    ["rebalance", "nope", "--workers", "1"]):
        result = cluster.cli(*command)
        assert result.returncode != 0
        assert "no topology named 'nope'" in result.stderr, result.stderr
    cluster.kill_and_wait("dup")


def test_garbage_sent_to_nimbus_and_to_a_worker_is_refused_and_they_keep_serving(cluster, tmp_path):
    import socket

    import msgpack
    import zmq

    cluster.submit(LEDGER, "junk", f"ledger.dir={tmp_path}", "ledger.rate=100")
    wait_until(lambda: len(acked_ids(tmp_path)) > 50, 40, "the first acks")
    zk = KazooClient(hosts=cluster.zk.hosts)
    zk.start()
    leader = json.loads(zk.get(LEADER_PATH)[0])
    zk.stop()
    zk.close()
    req = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.RCVTIMEO, 10000)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(f"tcp://{leader['host']}:{leader['port']}")
    listing = msgpack.packb({"op": "list"})
    for junk in (b"\xc1\xff not msgpack", msgpack.packb([1, 2, 3]), msgpack.packb({"op": "nope"}),
                 listing[:-3]):   # truncated
        req.send(junk)
        reply = msgpack.unpackb(req.recv())
        assert reply["ok"] is False and reply["error"], reply
    req.close()
    (slot, beat), = cluster.topology_workers("junk").items()
    tid = beat["topology_id"]
    stranger = zmq.Context.instance().socket(zmq.PUSH)   # not naming the topology
    stranger.setsockopt(zmq.LINGER, 0)
    stranger.connect(f"tcp://127.0.0.1:{slot[1]}")
    stranger.send(b"\xc1\xff refused at the handshake, never read")
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    Security().transport_client(push, tid)   # names the topology, so its frames are read
    push.connect(f"tcp://127.0.0.1:{slot[1]}")
    # From a slot no assignment this worker knows names yet, so its fence lets it by.
    data = msgpack.packb([WIRE_VERSION, tid, "s:1", 10**9, [[0, 1, 1, ["default", [[7]], [None]]]]])
    try:
        for junk in (b"\xc1\xff not msgpack", data[: len(data) // 2], b"",
                     msgpack.packb([WIRE_VERSION, tid, "s:1", 10**9,
                                    [[0, 10**6, 1, ["default", [[7]], [None]]]]]),
                     msgpack.packb([tid, []])):   # a worker of the release before wire versions
            push.send(junk)
        for port in (leader["port"], slot[1]):  # raw bytes that are not even ZeroMQ
            with socket.create_connection(("127.0.0.1", port)) as raw:
                raw.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(range(256)) * 50)
        progress = len(acked_ids(tmp_path))
        wait_until(lambda: len(acked_ids(tmp_path)) > progress + 50, 30,
                   "the worker to keep going")
        assert cluster.cli("list").returncode == 0
        assert cluster.topology_workers("junk")[slot]["pid"] == beat["pid"]
    finally:
        push.close()
        stranger.close()
    cluster.kill_and_wait("junk")
    logs = "".join(path.read_text() for path in cluster.base.rglob("*.log"))
    assert logs.count("rejected a frame") >= 4, "each bad frame is logged by the worker"
    assert "refused a peer of another topology" in logs
    assert "malformed request" in logs


def test_killing_the_leading_nimbus_leaves_topologies_running(cluster, tmp_path):
    cluster.submit(LEDGER, "ha", "topology.workers=2", f"ledger.dir={tmp_path}",
                   "ledger.messages=100000", "ledger.rate=200")
    wait_until(lambda: len(acked_ids(tmp_path)) > 100, 40, "the first acks")
    zk = KazooClient(hosts=cluster.zk.hosts)
    zk.start()
    try:
        leader = json.loads(zk.get(LEADER_PATH)[0])
        (tid,) = [t for t in zk.get_children(assignments_path()) if t.startswith("ha-")]
        version = json.loads(zk.get(f"{assignments_path()}/{tid}")[0])["version"]
        victim = next(d for d in cluster.nimbuses if f"--port\x00{leader['port']}" in
                      "\x00".join(d.args))
        victim.kill(signal.SIGKILL)
        progress = len(acked_ids(tmp_path))
        wait_until(lambda: len(acked_ids(tmp_path)) > progress + 200, 30,
                   "the topology to keep processing with its nimbus dead")
        listing = cluster.cli("list")  # a standby answers while the election settles
        assert listing.returncode == 0 and "ha " in listing.stdout, listing.stderr
        wait_until(lambda: leader_port(zk) not in (None, leader["port"]), 40,
                   "the standby to take over")
        assert cluster.cli("list").returncode == 0
        new_leader = json.loads(zk.get(LEADER_PATH)[0])
        assert new_leader["port"] != leader["port"]
        # Taking over does not move running workers.
        assert json.loads(zk.get(f"/stormlet/assignments/{tid}")[0])["version"] == version
    finally:
        zk.stop()
        zk.close()
    cluster.kill_and_wait("ha")


def test_a_dead_supervisor_s_work_moves_to_the_others(cluster, tmp_path):
    cluster.add_supervisor("s3", 2)  # room to move to
    total = 6000
    cluster.submit(LEDGER, "orphan", "topology.workers=2", f"ledger.dir={tmp_path}",
                   f"ledger.messages={total}", "ledger.rate=300")
    wait_until(lambda: len(cluster.topology_workers("orphan")) == 2, 40, "two workers")
    wait_until(lambda: len(acked_ids(tmp_path)) > 300, 40, "the first acks")
    (victim_sid, _port), _beat = next(iter(cluster.topology_workers("orphan").items()))
    # The whole node dies: its supervisor and every worker it runs.
    doomed = [beat["pid"] for (sid, _), beat in cluster.heartbeats().items() if sid == victim_sid]
    cluster.supervisors[victim_sid].kill(signal.SIGKILL)
    for pid in doomed:
        os.kill(pid, signal.SIGKILL)
    del cluster.supervisors[victim_sid]
    wait_until(lambda: len(cluster.topology_workers("orphan")) == 2
               and all(sid != victim_sid for sid, _ in cluster.topology_workers("orphan")), 60,
               "nimbus to move the dead supervisor's workers")
    wait_until(lambda: len(acked_ids(tmp_path)) == total, 120, "every message to be acked")
    assert acked_ids(tmp_path) == set(range(total))
    cluster.kill_and_wait("orphan")


def zk_commits(cluster: LoopbackCluster, spout_id: str) -> dict[int, int]:
    store = ZooKeeperOffsetStore(cluster.zk.hosts, "/stormlet/offsets")
    try:
        return {p: r["offset"] for p, r in store.all().get(spout_id, {}).items()}
    finally:
        store.close()


def test_the_log_word_count_survives_a_killed_spout_worker_with_no_message_lost(cluster, tmp_path):
    """topologies/log_word_count.py over a 4-partition log, on four workers: SIGKILL the worker
    of one spout task mid-run. Its supervisor restarts it, the new spout resumes from the offsets
    this topology committed to ZooKeeper, and the messages in flight at the kill time out and
    are read again. Done means every partition committed to its end and nothing dead-lettered."""
    path = tmp_path / "sentences"
    log = PartitionedLog.create(path, 4)
    words = "the quick brown fox jumps over the lazy dog".split()
    half = 30_000
    sentences = [" ".join(words[(i + k) % len(words)] for k in range(5)) for i in range(half)]
    log.append_many(sentences)
    log.flush()

    cluster.submit(TOPOLOGIES / "log_word_count.py", "lwc", "topology.workers=4",
                   f"sentences.log={path}", "topology.message.timeout.secs=4",
                   "topology.max.spout.pending=200")
    wait_until(lambda: len(cluster.topology_workers("lwc")) == 4, 40, "four workers")
    # Every partition committed once: whichever spout dies, its successor has a commit of
    # this topology to resume from.
    wait_until(lambda: len(zk_commits(cluster, "log-word-count")) == 4
               and all(zk_commits(cluster, "log-word-count").values()), 60,
               "a first commit of every partition")
    # A fast machine may have read the first half by now: the kill comes with the second half
    # just appended, so it comes mid-run however fast the spouts are.
    log.append_many(sentences)
    log.flush()
    ends = {p: log.end_offset(p) for p in range(4)}
    assert sum(ends.values()) == 2 * half and all(ends.values())
    victim_slot, victim = next((slot, beat)
                               for slot, beat in cluster.topology_workers("lwc").items()
                               if "sentences" in beat["metrics"])
    os.kill(victim["pid"], signal.SIGKILL)
    at_kill = zk_commits(cluster, "log-word-count")
    assert sum(at_kill.values()) < 2 * half, "the kill must come mid-run"
    wait_until(lambda: cluster.topology_workers("lwc").get(victim_slot, {}).get("pid",
               victim["pid"]) != victim["pid"], 40, "the supervisor to restart the worker")
    wait_until(lambda: zk_commits(cluster, "log-word-count") == ends, 120,
               "every partition to be committed to its end")
    assert not [p for p in (path / "_failed").rglob("*") if p.is_file()], \
        "nothing may be dead-lettered"
    restarted = worker_log_file(worker_log_dir(cluster.base / victim_slot[0],
                                               victim["topology_id"], victim_slot[1]))
    # The new spout resumed from the commit, not from the start.
    wait_until(lambda: "(this topology's commit)" in restarted.read_text(), 20,
               "the restarted spout to say where it resumed")
    described = cluster.cli("log", "describe", str(path))
    assert described.returncode == 0, described.stderr
    assert "spout log-word-count (commits in ZooKeeper):" in described.stdout
    cluster.kill_and_wait("lwc")


def test_corrupt_zookeeper_nodes_are_skipped_and_the_assignment_repaired(cluster, tmp_path):
    """Garbage in an assignment, a supervisor's heartbeat report and a topology node: every
    daemon logs it and goes on, no worker is stopped or moved, and nimbus puts the last good
    assignment back."""
    total = 3000
    cluster.submit(LEDGER, "corrupt", "topology.workers=2", f"ledger.dir={tmp_path}",
                   f"ledger.messages={total}", "ledger.rate=300")
    wait_until(lambda: len(cluster.topology_workers("corrupt")) == 2, 40, "two workers")
    wait_until(lambda: len(acked_ids(tmp_path)) > 100, 40, "the first acks")
    workers = {slot: beat["pid"] for slot, beat in cluster.topology_workers("corrupt").items()}
    daemons = [d for d in [*cluster.nimbuses, *cluster.supervisors.values()] if d.alive()]
    tid = next(iter(cluster.topology_workers("corrupt").values()))["topology_id"]
    client = KazooClient(hosts=cluster.zk.hosts)
    client.start(timeout=15)
    try:
        good, _ = client.get(f"/stormlet/assignments/{tid}")
        client.set(f"/stormlet/assignments/{tid}", b'{"executors": "not a list"}')
        client.set("/stormlet/heartbeats/s1", b"\xff\xfe not json")
        client.create("/stormlet/topologies/bogus", b"[1, 2, 3]")
        # Some daemon must meet the malformed object before it is overwritten with garbage
        # (a fixed pause lost that race on a loaded machine).
        refused: list[str] = []

        def refusal_logged() -> bool:
            logs = cluster.logs()   # the tail of each log: keep the one that has the line
            if "not a valid assignment" in logs:
                refused.append(logs)
            return bool(refused)

        wait_until(refusal_logged, 20, "a daemon to refuse the malformed assignment")
        client.set(f"/stormlet/assignments/{tid}", b"\x00garbage")

        def repaired() -> bool:
            data, _ = client.get(f"/stormlet/assignments/{tid}")
            try:
                return json.loads(data).get("executors") == json.loads(good)["executors"]
            except ValueError:
                return False

        wait_until(repaired, 20, "nimbus to put the last good assignment back")
        assert cluster.cli("list").returncode == 0
        time.sleep(3)
        assert {slot: beat["pid"] for slot, beat
                in cluster.topology_workers("corrupt").items()} == workers
        assert all(d.alive() for d in daemons)
        wait_until(lambda: len(acked_ids(tmp_path)) == total, 60, "every message to be acked")
        client.delete("/stormlet/topologies/bogus")
    finally:
        client.stop()
        client.close()
    assert f"/stormlet/assignments/{tid}: not a valid assignment" in refused[0]
    cluster.kill_and_wait("corrupt")


def test_a_worker_whose_slot_was_given_again_is_replaced_and_the_others_keep_running(
        cluster, tmp_path):
    """Issue 51's fencing: a slot that left the assignment (its supervisor's session expired)
    and was given again has a new tenure. The worker still running there from before is
    stale: it ends and its supervisor starts a new one, while workers whose standing did not
    change keep running; nothing is lost."""
    total = 3000
    cluster.submit(LEDGER, "tenure", "topology.workers=2", f"ledger.dir={tmp_path}",
                   f"ledger.messages={total}", "ledger.rate=300")
    wait_until(lambda: len(cluster.topology_workers("tenure")) == 2, 40, "two workers")
    wait_until(lambda: len(acked_ids(tmp_path)) > 100, 40, "the first acks")
    before = {slot: beat["pid"] for slot, beat in cluster.topology_workers("tenure").items()}
    stale, kept = sorted(before)
    tid = next(iter(cluster.topology_workers("tenure").values()))["topology_id"]
    client = KazooClient(hosts=cluster.zk.hosts)
    client.start(timeout=15)
    try:
        path = f"/stormlet/assignments/{tid}"
        assignment = json.loads(client.get(path)[0])
        version = assignment["version"] + 1
        # As nimbus writes it when the slot comes back: same executors, a tenure of now.
        assignment["tenures"][f"{stale[0]}:{stale[1]}"] = version
        client.set(path, json.dumps({**assignment, "version": version}).encode())
    finally:
        client.stop()
        client.close()

    def replaced() -> bool:
        now = {slot: beat["pid"] for slot, beat in cluster.topology_workers("tenure").items()}
        return now.get(stale) not in (None, before[stale])

    wait_until(replaced, 30, "a new worker in the slot given again")
    assert cluster.topology_workers("tenure")[kept]["pid"] == before[kept]
    wait_until(lambda: len(acked_ids(tmp_path)) == total, 90, "every message to be acked")
    assert "its slot left the assignment and was given again" in cluster.logs()
    cluster.kill_and_wait("tenure")


def listed(cluster, name: str) -> tuple[int, int]:
    """Workers running and asked for, as `stormlet list` shows topology ``name``."""
    row = next(line.split() for line in cluster.cli("list").stdout.splitlines()
               if line.startswith(name + " "))
    return int(row[2]), int(row[3])


def test_a_lost_supervisors_work_piles_onto_running_workers_and_spreads_back_when_it_returns(
        cluster, tmp_path):
    """Issue 51's "repair does harm": a reassignment restarted healthy workers too, dropping
    their in-flight trees, and the topology stayed packed into fewer workers until someone ran
    rebalance. Now with every slot taken and s2 lost, s2's executors start inside s1's workers,
    which run on (same processes); `stormlet list` shows 2 running of 4 asked for; once s2 is
    back (and has stayed up a while), the topology is spread back over 4 workers, s1's still
    the same processes. Nothing is lost."""
    total = 12_000
    cluster.submit(LEDGER, "repair", "topology.workers=4", f"ledger.dir={tmp_path}",
                   f"ledger.messages={total}", "ledger.rate=200")
    wait_until(lambda: len(cluster.topology_workers("repair")) == 4, 40, "four workers")
    wait_until(lambda: len(acked_ids(tmp_path)) > 200, 40, "the first acks")
    before = {slot: beat["pid"] for slot, beat in cluster.topology_workers("repair").items()}
    survivors = {slot: pid for slot, pid in before.items() if slot[0] == "s1"}
    lost = [pid for slot, pid in before.items() if slot[0] == "s2"]
    supervisor = cluster.supervisors["s2"]
    supervisor.kill()
    for pid in lost:
        os.kill(pid, signal.SIGKILL)
    try:
        wait_until(lambda: listed(cluster, "repair") == (2, 4), 40,
                   "the lost executors to be given to s1's workers")
        progress = len(acked_ids(tmp_path))
        wait_until(lambda: len(acked_ids(tmp_path)) > progress + 400, 60,
                   "acks from the repaired topology")
        assert {slot: beat["pid"] for slot, beat in cluster.topology_workers("repair").items()
                if slot[0] == "s1"} == survivors, "a healthy worker was restarted"
    finally:
        supervisor.start()
    wait_until(lambda: listed(cluster, "repair") == (4, 4), 60, "the topology spread back")
    wait_until(lambda: len(cluster.topology_workers("repair")) == 4, 40, "four workers again")
    assert {slot: beat["pid"] for slot, beat in cluster.topology_workers("repair").items()
            if slot[0] == "s1"} == survivors, "spreading back restarted a worker that stayed"
    wait_until(lambda: len(acked_ids(tmp_path)) == total, 120, "every message to be acked")
    logs = cluster.logs()
    assert "taken on; the rest ran on" in logs and "spreading" in logs
    cluster.kill_and_wait("repair")


FAULTY = Path(__file__).resolve().parents[1] / "cluster_topologies" / "faulty.py"


def test_a_bolt_raising_on_every_tuple_is_reported_and_its_workers_stay_up(cluster, tmp_path):
    """Bolt `explode` raises on every tuple, on both workers. `stormlet errors` shows where
    (component, task, host:port), `stormlet list` counts the errors, standbys answer too, and
    the topology's healthy path (the ledger) keeps acking on the same worker processes."""
    # Plain shuffle: load-aware shuffle would keep the spout's tuples in its own worker, and the
    # other worker's explode task would have nothing to raise on.
    cluster.submit(FAULTY, "faulty", "topology.workers=2", f"ledger.dir={tmp_path}",
                   "ledger.messages=100000", "ledger.rate=200", "faulty.rate=2000",
                   "topology.error.throttle.interval.secs=2",
                   "topology.disable.loadaware.messaging=true")
    wait_until(lambda: len(cluster.topology_workers("faulty")) == 2, 40, "two workers")
    workers = {slot: beat["pid"] for slot, beat in cluster.topology_workers("faulty").items()}
    addresses = {f"127.0.0.1:{port}" for _sid, port in workers}
    wait_until(lambda: len(acked_ids(tmp_path)) > 100, 40, "the first acks")
    wait_until(lambda: "more like it" in cluster.cli("errors", "faulty").stdout, 40,
               "a summary of the throttled errors to reach nimbus")

    result = cluster.cli("errors", "faulty", "--limit", "6")
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == ["time", "component", "task", "worker", "error"]
    assert len(lines) == 6, result.stdout
    for line in lines:
        _date, _time, component, task, worker, *error = line.split()
        assert component == "explode" and task.isdigit(), line
        assert worker in addresses, (line, addresses)
        assert "ValueError: cannot handle" in " ".join(error), line

    listed = {}

    def both_workers_report() -> bool:
        listed["stack"] = stack = cluster.cli("errors", "faulty", "--limit", "40",
                                              "--stack").stdout
        return addresses == {line.split()[4] for line in stack.splitlines()[1:]
                             if " explode " in line}

    # The worker without the spout raises only once tuples reach it, and its errors reach nimbus
    # with its next heartbeat: under load that can come after the first worker's summary.
    wait_until(both_workers_report, 40, "both workers' explode tasks to report")
    assert "raise ValueError(f\"cannot handle {tup['n']}\")" in listed["stack"]

    zk = KazooClient(hosts=cluster.zk.hosts)
    zk.start()
    try:
        def standbys() -> list[int]:
            leader = json.loads(zk.get(LEADER_PATH)[0])["port"]
            ports = [json.loads(zk.get(f"/stormlet/nimbus/hosts/{n}")[0])["port"]
                     for n in zk.get_children("/stormlet/nimbus/hosts")]
            return [p for p in ports if p != leader]

        if not standbys():   # an earlier test killed one
            cluster.add_nimbus()
            wait_until(standbys, 30, "a standby nimbus")
        standby = standbys()[0]
        reports = [len(zk.get(f"/stormlet/heartbeats/{sid}")[0]) for sid in cluster.supervisors]
    finally:
        zk.stop()
        zk.close()
    answer = cluster.cli("errors", "faulty", "--limit", "3", "--nimbus", f"127.0.0.1:{standby}")
    assert answer.returncode == 0 and len(answer.stdout.splitlines()) == 4, answer.stderr
    assert max(reports) < 100_000   # the supervisors' reports stay small

    def listed_errors() -> int:
        row = next(line.split() for line in cluster.cli("list").stdout.splitlines()
                   if line.startswith("faulty "))
        # name status workers asked executors uptime errors last: X ago
        assert row[8] == "ago", row
        return int(row[6])

    first = listed_errors()
    assert first > 1000
    wait_until(lambda: listed_errors() > first + 1000, 30, "the error count to keep growing")
    progress = len(acked_ids(tmp_path))
    wait_until(lambda: len(acked_ids(tmp_path)) > progress + 200, 30,
               "the healthy path to keep acking")
    assert {slot: beat["pid"] for slot, beat
            in cluster.topology_workers("faulty").items()} == workers

    unknown = cluster.cli("errors", "nope")
    assert unknown.returncode != 0 and "no topology named 'nope'" in unknown.stderr
    cluster.kill_and_wait("faulty")


def test_a_worker_whose_executor_dies_says_why_before_it_is_restarted(cluster, tmp_path):
    """An `explode` task raises SystemExit, which ends its executor's thread: the worker logs
    it, writes one last heartbeat and exits; the supervisor restarts it, logs the worker's last
    error and keeps it, so `stormlet errors` still shows it after the restart."""
    cluster.submit(FAULTY, "quits", f"ledger.dir={tmp_path}", "ledger.rate=100",
                   "faulty.rate=100", "faulty.quit=true")
    wait_until(lambda: (tmp_path / "quit").exists(), 40, "explode to quit")

    def death() -> list[str]:
        listing = cluster.cli("errors", "quits", "--limit", "100").stdout.splitlines()
        return [line for line in listing if "died: SystemExit: explode quits" in line]

    wait_until(death, 40, "the dead executor's error to reach nimbus")
    (line,) = death()
    _date, _time, component, task, worker, *_ = line.split()
    assert component == "explode" and task.isdigit()
    # The dead worker's heartbeat goes with it; its replacement's comes after the restart delay.
    wait_until(lambda: cluster.topology_workers("quits"), 40, "the restarted worker's heartbeat")
    (slot, beat), = cluster.topology_workers("quits").items()
    assert worker == f"127.0.0.1:{slot[1]}"
    progress = len(acked_ids(tmp_path))
    wait_until(lambda: len(acked_ids(tmp_path)) > progress + 100, 40,
               "the restarted worker to ack again")
    assert death() == [line]   # kept by the supervisor after the new worker started
    worker_log = worker_log_file(worker_log_dir(cluster.base / slot[0], beat["topology_id"],
                                                slot[1])).read_text()
    said = f"component explode task {task}: executor "
    assert said in worker_log
    supervisor_log = (cluster.base / f"{slot[0]}.log").read_text()
    assert f"exited with 1; restarting in 2s; it said: {said}" in supervisor_log, \
        supervisor_log[-3000:]
    cluster.kill_and_wait("quits")


def test_a_slow_bolt_in_another_worker_throttles_the_spout_without_timeouts(cluster, tmp_path):
    """Backpressure across workers, no max spout pending: the spout is held back by the slow
    bolt's worker, so messages in flight and memory stay bounded and nothing times out."""
    slow = Path(__file__).resolve().parents[1] / "cluster_topologies" / "slow_bolt.py"
    # A message timeout of 5 s: the run below outlasts twice that, the most a tuple stuck
    # from the start could wait before timing out (the spout's clock runs while it may emit).
    cluster.submit(slow, "slow", f"slow.dir={tmp_path}", "slow.ms=2",
                   "topology.message.timeout.secs=5")

    def status(name):
        try:
            return json.loads((tmp_path / f"{name}.json").read_text())
        except (OSError, ValueError):
            return {}

    wait_until(lambda: status("bolt").get("executed", 0) > 0, 60, "the bolt to start")
    time.sleep(5)
    early = status("spout")
    time.sleep(9)   # 14 s in all: more than twice the message timeout
    spout, bolt = status("spout"), status("bolt")
    cluster.kill_and_wait("slow")
    # The spout alone could emit some 50,000 a second; the bolt takes 500. Without backpressure
    # between the workers, what is in flight would grow by the difference every second: over a
    # million by now. Bounded queues hold some tens of thousands (an inbox holds 64 batches of
    # up to 512), and in the last 9 s they did not grow.
    assert spout["max_in_flight"] < 200_000, spout
    assert spout["max_in_flight"] - early["max_in_flight"] < 40_000, (early, spout)
    assert spout["acked"] - early["acked"] > 2_000, (early, spout)
    assert bolt["max_rss"] < 200 * 2**20, bolt
    assert spout["timeouts"] == 0, spout


def test_bolts_feeding_each_other_across_two_workers_complete_every_tree(cluster, tmp_path):
    """A cycle whose bolts have a task in each worker, with inboxes of one batch: the edges
    closing it never wait for room (locally or across workers), so it cannot deadlock."""
    n = 3000

    def total(component: str, key: str) -> int:
        return sum(beat["metrics"].get(component, {}).get(key, 0)
                   for beat in cluster.topology_workers("cycle").values())

    # A short timeout: a frame sent before the peer's port is free of the last test's worker is
    # refused there, and its tree fails and is replayed.
    cluster.submit(CYCLE, "cycle", f"test.count={n}", "topology.message.timeout.secs=5")
    wait_until(lambda: len(cluster.topology_workers("cycle")) == 2, 40, "two workers")
    wait_until(lambda: total("numbers", "acked") == n, 60, "every number to be acked")
    workers = cluster.topology_workers("cycle").values()
    assert all({"fan-out", "back"} <= set(beat["metrics"]) for beat in workers), \
        "each worker runs a task of both bolts, so the cycle crosses between them"
    # Every tree went all the way round (replayed ones more than once); heartbeats a second
    # apart may lag the spout's.
    wait_until(lambda: total("fan-out", "executed") >= n * cycle.laps_of_fan_out(), 15,
               "the fan-out bolt's count in the heartbeats")
    cluster.kill_and_wait("cycle")


def test_task_hooks_on_every_task_see_every_event_across_two_workers(cluster, tmp_path):
    """topology.auto.task.hooks on a cluster: each task's hook (in whichever worker) writes
    the events it saw; together they hold every emit, execute, ack and fail."""
    out = tmp_path / "hooks"
    out.mkdir()
    n = 100
    cluster.submit(REPO / "tests" / "cluster_topologies" / "hooked.py", "hooked",
                   "topology.workers=2", f"hooks.dir={out}", f"hooks.count={n}",
                   "topology.message.timeout.secs=5")
    sevens = {i for i in range(n) if i % 10 == 7}
    rest = set(range(n)) - sevens

    def seen(component: str, event: str) -> list[dict]:
        return [e for path in out.glob("hooks-*.jsonl") for line in path.read_text().splitlines()
                if (e := json.loads(line))["component"] == component and e["event"] == event]

    def ids(component: str, event: str) -> set:
        return {e["id"] for e in seen(component, event)}

    wait_until(lambda: ids("ids", "spout_ack") == rest and ids("tail", "bolt_ack") == rest
               and sevens <= ids("ids", "spout_fail"), 60, "every verdict in the hooks' files")
    cluster.kill_and_wait("hooked")
    assert {e["values"][0] for e in seen("ids", "emit")} == set(range(n))
    assert {e["kind"] for e in seen("ids", "spout_fail") if e["id"] in sevens} == {"fail"}
    assert ids("judge", "bolt_fail") >= sevens
    assert {e["reason"] for e in seen("judge", "bolt_fail") if e["id"] in sevens} == {
        "ends in 7"}
    assert ids("judge", "bolt_ack") == rest == ids("tail", "bolt_execute")
    assert rest <= ids("judge", "bolt_execute")
    assert {e["values"][0] for e in seen("judge", "emit")} == rest
    tasks = {e["task"] for e in seen("ids", "emit")} | {e["task"] for e in seen("judge", "emit")}
    assert len(tasks) == 4 and all(e["from_task"] == e["task"] for e in seen("judge", "emit"))
    assert all(e["latency"] >= 0 for e in seen("ids", "spout_ack"))


def test_a_bolt_on_a_worker_reads_a_data_file_beside_its_topology(cluster, tmp_path):
    """Issue 52: the package carries the project's data files, not only its Python, and a
    worker runs in the unpacked project directory, so ``open("data/words.txt")`` in a bolt's
    prepare finds the file there, as under `stormlet local` started beside the topology."""
    project = Path(__file__).resolve().parents[1] / "cluster_topologies" / "with_data"
    words = (project / "data" / "words.txt").read_text().split()
    n = 30
    cluster.submit(project / "topology.py", "files", f"files.dir={tmp_path}", f"files.count={n}")

    def outputs() -> list[dict]:
        return json_outputs(tmp_path, "lookup")

    wait_until(lambda: sum(sum(o["seen"].values()) for o in outputs()) == n, 60,
               "every number to be looked up")
    cluster.kill_and_wait("files")
    tasks = outputs()
    assert len(tasks) == 2
    for task in tasks:
        assert task["words"] == words
        # The unpacked copy, <base>/<supervisor>/code/<topology id>, not the source.
        cwd = Path(task["cwd"])
        assert cwd.parent.name == "code" and cwd.parent.parent.parent == cluster.base, cwd
    seen = Counter()
    for task in tasks:
        seen.update(task["seen"])
    assert seen == Counter(words[i % len(words)] for i in range(n))
