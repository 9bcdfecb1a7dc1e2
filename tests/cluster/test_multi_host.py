"""A cluster across hosts (issue 51): ZooKeeper, nimbus, two supervisors and the client each on
a host of its own (network namespaces, tests/multi_host.py), with a cluster secret, running the
chaos suite's topology over a live log; the network is then broken the way a real one breaks.

Every scenario keeps a history (tests/history.py) and prints its row of the scenario table:
messages, faults, lost, duplicates, when the cluster noticed the fault (and by what sign), when
throughput came back, and the longest stretch a spout task ran in two workers at once. Every
message must be processed (lost == 0), every offset below the final commits seen by a sink, and
none below a commit missing from the sinks when it was made; the rest is printed, and asserted
only where it holds today.

Each scenario is short, for CI (the file stays within a few minutes on 2 cores), and four whose
proof the others largely share run in the full form only (``full_form_only``). The full form,
every scenario with three times the messages and faults twice as long, runs by hand:
``STORMLET_MULTI_HOST_FULL=1 python -m pytest -s tests/cluster/test_multi_host.py``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import wait_until
from multi_host import MultiHostChaosRun, MultiHostCluster, multi_host_available, unavailable_reason
from zookeeper_server import zookeeper_available

from stormlet import config as cfg

LOCAL_STATEFUL_TOPOLOGY = (Path(__file__).resolve().parents[1] / "chaos" /
                           "chaos_stateful_local_topology.py")

pytestmark = [
    pytest.mark.skipif(not zookeeper_available(),
                       reason="ZooKeeper is not installed: run deploy/zookeeper.sh install"),
    pytest.mark.skipif(not multi_host_available(),
                       reason=f"no hosts can be made here: {unavailable_reason()}"),
]

RATE = 400   # messages a second; two workers on the 2-core machine keep up with it easily
FULL = os.environ.get("STORMLET_MULTI_HOST_FULL", "") not in ("", "0")


# Scenarios whose proof the others largely share run in the full form only, to keep CI's run
# short: a slow link (the cut link and the cut-off host prove detection), a crash and return with
# the data directory (the crashed host's work moving back covers a return), packet loss, and a
# ZooKeeper ensemble member cut off (the leading nimbus cut off covers losing a quorum peer).
full_form_only = pytest.mark.skipif(not FULL, reason="the full form's only: "
                                    "STORMLET_MULTI_HOST_FULL=1 runs it")


def scaled(messages: int, down_secs: float) -> tuple[int, float]:
    """A scenario's messages and fault length: as given (CI), or the full form's."""
    return (messages * 3, down_secs * 2) if FULL else (messages, down_secs)


def checked(report) -> None:
    """Print the run's row and lines, and assert what every scenario must hold."""
    print("\n" + "\n".join([*report.table(), *report.lines()]))
    assert report.lost == 0, report.lines()
    assert report.unprocessed == 0, report.lines()
    assert report.acked_unseen == 0, report.lines()


@pytest.fixture
def multi_host(request, tmp_path) -> Iterator[MultiHostCluster]:
    """A cluster with supervisors s1 and s2 (two slots each) on hosts of their own, a nimbus
    leading; every daemon's log printed if the test failed; every host gone afterwards."""
    with MultiHostCluster(tmp_path / "cluster") as cluster:
        try:
            cluster.add_supervisor("s1", 2)
            cluster.add_supervisor("s2", 2)
            cluster.wait_for_leader()
        except BaseException:
            print(cluster.logs())
            raise
        yield cluster
        report = getattr(request.node, "report_call", None)
        if report is None or report.failed:
            print(cluster.logs())


def test_a_topology_runs_across_hosts_with_the_secret(multi_host, tmp_path):
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=4_000, rate=RATE, workers=2,
                            seed=1, scenario="no fault")
    run.start()
    # One worker on each supervisor's host, each with a spout, a relay and a sink task: the
    # sinks' fields grouping sends about half of each relay's messages to the other host.
    assert {sid for sid, _port in run.topology_workers()} == {"s1", "s2"}
    wait_until(lambda: multi_host.metric("sink", "executed") >= run.messages, 60,
               "the sinks' counts to cover the stream")
    executed = {sid: beat["metrics"]["sink"]["executed"]
                for (sid, _port), beat in run.topology_workers().items()}
    emitted = {sid: beat["metrics"]["relay"]["emitted"]
               for (sid, _port), beat in run.topology_workers().items()}
    report = run.finish(timeout=60)
    checked(report)
    print(f"relays emitted {emitted}; sinks executed {executed}")
    assert report.twice.task is None, report.twice
    # Both hosts' relays and sinks worked: tuples crossed between the hosts, over CURVE.
    assert all(executed.values()) and all(emitted.values()), (emitted, executed)


def test_a_supervisor_host_cut_off_for_15s_loses_nothing(multi_host, tmp_path):
    """s1 goes off the network for 15 s mid-stream (30 s of it) and comes back. Its worker
    keeps running alone meanwhile (split brain: its spout still reads the shared log), so
    duplicates are expected today; nothing may be lost."""
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=12_000, rate=RATE, workers=2,
                            seed=2, scenario="supervisor host cut off")
    run.start()
    time.sleep(6)
    down = 15
    fault = run.inject("cut_off", host="s1", down_secs=down)
    report = run.finish(timeout=120)
    checked(report)
    assert fault.recovered_after is not None, report.lines()   # the stream outlasts the cut
    when = ("while s1 was still cut off: its work moved to s2" if fault.recovered_after < down
            else f"{fault.recovered_after - down:.1f}s after s1 came back")
    print(f"throughput back {fault.recovered_after:.1f}s after the cut, {when}; "
          f"duplicates: {report.duplicates}")


def link_events(run: MultiHostChaosRun, text: str) -> list[str]:
    """The link events the topology's workers report now (their heartbeats' errors)."""
    return [error["error"] for beat in run.topology_workers().values()
            for error in beat.get("errors", []) if text in error["error"]]


def test_a_cut_link_between_worker_hosts_is_reported_and_traffic_resumes_soon_after(
        multi_host, tmp_path):
    """Issue 51: with the link between the two worker hosts cut, acks fell to 0 and nothing
    said so, not `stormlet errors`, not a log line; after it came back acks returned only
    47-55 s later (no heartbeats, and a reconnection waiting out TCP's backoff). Now each end
    says within seconds which link it lost, naming both ends, and traffic resumes within
    seconds of the link's return."""
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=10_000, rate=RATE, workers=2,
                            seed=3, scenario="worker link cut")
    multi_host.add_ui()
    run.start()
    time.sleep(5)
    down = 16
    cut = time.monotonic()
    fault = run.inject("link_cut", a="s1", b="s2", down_secs=down)
    wait_until(lambda: len(link_events(run, "lost its link")) >= 2, down,
               "both workers to report the lost link")
    detected = time.monotonic() - cut
    ends = {multi_host.host(h).address for h in ("s1", "s2")}
    for line in link_events(run, "lost its link"):
        assert all(address in line for address in ends), line
    # The same through nimbus, from the supervisors' reports in ZooKeeper (every few seconds).
    wait_until(lambda: "lost its link" in multi_host.cli("errors", "chaos").stdout, 20,
               "`stormlet errors` to show the lost link")
    # And in the UI on nimbus's host, read from the client's: each worker's row names the
    # peer it cannot reach, and /metrics counts it.
    s1, s2 = (f"{multi_host.host(h).address}:6700" for h in ("s1", "s2"))

    def ui_shows_both_ends() -> bool:
        page = multi_host.ui_get("/api/v1/topology/chaos")
        workers = json.loads(page)["workers"] if page else []
        named = {f"{w['host']}:{w['port']}": w.get("peers_unreachable") or [] for w in workers}
        return named.get(s1) == [s2] and named.get(s2) == [s1]

    wait_until(ui_shows_both_ends, 20, "the UI to name both ends of the lost link")
    metrics = multi_host.ui_get("/metrics")
    assert sum(line.startswith("stormlet_worker_peers_unreachable{") and line.endswith(" 1.0")
               for line in metrics.splitlines()) == 2, metrics
    wait_until(lambda: len(link_events(run, "is back after")) >= 2, down + 20,
               "both workers to report the link back")
    back = time.monotonic() - cut - down
    report = run.finish(timeout=150)
    checked(report)
    print(f"link loss reported {detected:.1f}s after the cut; "
          f"link back {back:.1f}s after it returned; duplicates: {report.duplicates}")
    assert fault.detected is not None and fault.detected.signal == "link lost", fault
    assert back < 10, f"the link came back {back:.1f}s after the network did"
    assert fault.recovered_after is not None and fault.recovered_after < down + 15, \
        report.lines()


@full_form_only
@pytest.mark.multi_host   # its own cluster: the daemons' default session, ZooKeeper's 1 s ticks
def test_a_slow_link_is_not_taken_for_a_dead_host(tmp_path):
    """Issue 51: with the ZooKeeper session fixed at 6 s, a congested but working link (64 kbit,
    a 2 s queue) expired a supervisor's session and moved all its work. Here an 8 kbit link does
    (64 kbit did not, in this harness); with the default session (20 s, Storm's) the same link
    only slows that host: nothing moves."""
    with MultiHostCluster(tmp_path / "cluster", zk_session_timeout=None,
                          zk_tick_ms=1000) as cluster:
        try:
            cluster.add_supervisor("s1", 2)
            cluster.add_supervisor("s2", 2)
            cluster.wait_for_leader()
            run = MultiHostChaosRun(cluster, tmp_path / "run", messages=8_000, rate=RATE,
                                    workers=2, seed=4, scenario="slow link (8 kbit)")
            run.start()
            time.sleep(5)
            before = {slot: beat["pid"] for slot, beat in run.topology_workers().items()}
            run.inject("slow_link", host="s1", down_secs=25, rate="8kbit")
            report = run.finish(timeout=150)
            after = {slot: beat["pid"] for slot, beat in run.topology_workers().items()}
        except BaseException:
            print(cluster.logs())
            raise
    checked(report)
    print(f"workers before {before}, after {after}")
    assert after == before, "a worker moved or restarted: the slow link was taken for a dead host"


def spout_emitted(run: MultiHostChaosRun, host: str) -> dict[int, int]:
    """The spout's emitted count in each worker of ``host``, by pid, from its heartbeats."""
    return {beat["pid"]: beat["metrics"].get("source", {}).get("emitted", 0)
            for (sid, _port), beat in run.topology_workers().items() if sid == host}


def test_a_worker_cut_off_from_zookeeper_stops_its_spouts_before_its_tasks_run_elsewhere(
        multi_host, tmp_path):
    """Issue 51's split brain: a supervisor host cut off from ZooKeeper and nimbus only (its
    workers still reach the others). Nimbus gives its tasks to another worker; the orphaned
    worker kept running for the whole minute, its spout reading the same partitions as its
    successor's. Now it stops its spouts once out of touch with ZooKeeper for a third of its
    session (6 s here: ~2 s after kazoo calls the link down, at ~4 s), before its session
    expires and its tasks are given away, and says so."""
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=10_000, rate=RATE, workers=2,
                            seed=5, scenario="host cut from ZK and nimbus")
    run.start()
    time.sleep(5)
    cut = time.monotonic()
    run.inject("isolate", host="s1", down_secs=20)
    wait_until(lambda: link_events(run, "out of touch with ZooKeeper"), 15,
               "the cut-off worker to say it stopped its spouts")
    fenced = time.monotonic() - cut
    time.sleep(2)   # a heartbeat's counts are a second or two old
    frozen = spout_emitted(run, "s1")
    series = []
    for _ in range(6):
        time.sleep(1)
        series.append(spout_emitted(run, "s1"))
    print("emitted after the fence:", frozen, series)
    still = {pid: n for pid, n in series[-1].items() if pid in frozen}
    report = run.finish(timeout=150)
    checked(report)
    print(f"spouts stopped {fenced:.1f}s after the cut; duplicates: {report.duplicates}")
    assert frozen and still == frozen, ("the cut-off worker's spout kept emitting", frozen, still)


@full_form_only
def test_packet_loss_on_a_supervisor_host_loses_nothing(multi_host, tmp_path):
    """15 % of the packets in and out of s1 dropped for 12 s mid-stream (nftables' numgen:
    this kernel has no netem). TCP retransmits under it; what the cluster does about it (move
    nothing, or take the host for dead) is printed."""
    messages, down = scaled(8_000, 12)
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=messages, rate=RATE,
                            workers=2, seed=6, scenario="15% loss on a host")
    run.start()
    time.sleep(4)
    before = {slot: beat["pid"] for slot, beat in run.topology_workers().items()}
    run.inject("loss", host="s1", percent=15, down_secs=down)
    report = run.finish(timeout=150)
    after = {slot: beat["pid"] for slot, beat in run.topology_workers().items()}
    checked(report)
    print(f"workers before {before}, after {after}")


@full_form_only
def test_a_host_crash_and_return_with_its_data_directory_loses_nothing(multi_host, tmp_path):
    """s1 loses power mid-stream: off the network and every process on it SIGKILLed, its
    workers with its supervisor. Its tasks move to s2 once its session expires; after 12 s the
    host is back and its supervisor starts again on the same data directory (the dead workers'
    heartbeat files and code still in it) and registers again."""
    messages, down = scaled(8_000, 12)
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=messages, rate=RATE,
                            workers=2, seed=7, scenario="host crash and return")
    run.start()
    time.sleep(4)
    fault = run.inject("host_crash", host="s1", down_secs=down)
    wait_until(lambda: "s1" in (run._zookeeper_now().get("supervisors") or []) and
               time.time() > fault.wall + down, down + 30, "s1's supervisor to register again")
    back = time.time() - fault.wall - down
    report = run.finish(timeout=150)
    checked(report)
    print(f"s1's supervisor registered again {back:.1f}s after the host came back; "
          f"workers at the end: {sorted(run.history.workers_seen()[-2:])}")
    assert fault.detected is not None, report.lines()
    # Nothing of the crashed host outlived it: no task ran in two live workers.
    assert report.twice.task is None, report.twice


def listed_workers(cluster: MultiHostCluster) -> tuple[int, int] | None:
    """Workers running and asked for, as `stormlet list` shows the chaos topology."""
    for line in cluster.cli("list").stdout.splitlines():
        if line.startswith("chaos "):
            fields = line.split()
            return int(fields[2]), int(fields[3])
    return None


def test_a_crashed_hosts_work_moves_into_running_workers_and_spreads_back_on_return(
        multi_host, tmp_path):
    """Issue 51's "repair does harm", with every slot taken (4 workers on 2 hosts of 2 slots):
    a reassignment restarted the healthy workers too, dropping their in-flight trees, and the
    topology stayed packed into 2 workers until someone ran rebalance. Now s1's executors
    start inside s2's running workers (same processes), `stormlet list` shows 2 running of 4
    asked for, and once s1 is back and has stayed up a while the topology spreads back to 4
    workers on its own, s2's still the same processes."""
    messages, down = scaled(14_000, 12)
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=messages, rate=RATE,
                            workers=4, seed=8, scenario="crash, all slots taken")
    run.start()
    time.sleep(4)
    healthy = {slot: beat["pid"] for slot, beat in run.topology_workers().items()
               if slot[0] == "s2"}
    assert len(healthy) == 2, run.topology_workers()
    fault = run.inject("host_crash", host="s1", down_secs=down)
    wait_until(lambda: listed_workers(multi_host) == (2, 4), down + 20,
               "s1's executors to be taken on by s2's workers")
    piled = time.time() - fault.wall
    assert {slot: beat["pid"] for slot, beat in run.topology_workers().items()
            if slot[0] == "s2"} == healthy, "a healthy worker was restarted"
    wait_until(lambda: listed_workers(multi_host) == (4, 4), down + 60,
               "the topology to spread back over 4 workers")
    spread = time.time() - fault.wall
    report = run.finish(timeout=150)
    checked(report)
    print(f"s1's work taken on by s2's workers {piled:.1f}s after the crash; spread back over "
          f"4 workers {spread:.1f}s after it ({spread - down:.1f}s after s1 returned)")
    assert {slot: beat["pid"] for slot, beat in run.topology_workers().items()
            if slot[0] == "s2"} == healthy, "spreading back restarted a worker that stayed"
    assert report.twice.task is None, report.twice


@pytest.mark.multi_host   # its own cluster: a standby nimbus on the client's host
def test_the_leading_nimbus_cut_off_a_standby_leads_and_the_topology_runs_on(tmp_path):
    """Two nimbuses: nimbus0 leading on a host of its own, nimbus1 standing by on the client's
    host. nimbus0's host is cut off for 12 s mid-stream: once its session expires nimbus1 must
    lead (the CLI answered by it), and the topology must not notice (its data path never goes
    through nimbus). When nimbus0's host is back, nimbus1 still leads."""
    messages, down = scaled(8_000, 12)
    with MultiHostCluster(tmp_path / "cluster") as cluster:
        try:
            cluster.add_supervisor("s1", 2)
            cluster.add_supervisor("s2", 2)
            cluster.wait_for_leader()
            cluster.add_nimbus(host="client")
            run = MultiHostChaosRun(cluster, tmp_path / "run", messages=messages, rate=RATE,
                                    workers=2, seed=8, scenario="leader nimbus cut off")
            run.start()
            leader = run._zookeeper_now()["leader"]
            assert leader["host"] == cluster.host("nimbus0").address, leader
            time.sleep(4)
            before = {slot: beat["pid"] for slot, beat in run.topology_workers().items()}
            fault = run.inject("leader_cut_off", down_secs=down)
            client = cluster.host("client").address
            wait_until(lambda: (run._zookeeper_now().get("leader") or {}).get("host") == client,
                       down + 10, "the standby nimbus to lead")
            led = time.time() - fault.wall
            listed = cluster.cli("list")
            report = run.finish(timeout=150)
            after = {slot: beat["pid"] for slot, beat in run.topology_workers().items()}
            leader_at_end = run._zookeeper_now()["leader"]
        except BaseException:
            print(cluster.logs())
            raise
    checked(report)
    print(f"nimbus1 led {led:.1f}s after the cut; `stormlet list` then: {listed.stdout!r}; "
          f"leader at the end: {leader_at_end}; workers before {before}, after {after}")
    assert fault.detected is not None and fault.detected.signal == "new leader", report.lines()
    assert listed.returncode == 0 and "chaos" in listed.stdout, listed
    assert leader_at_end["host"] == client, leader_at_end
    assert after == before, "a worker moved or restarted because nimbus changed"


@full_form_only
@pytest.mark.multi_host   # its own cluster: a ZooKeeper ensemble of three
def test_a_zookeeper_ensemble_member_cut_off_loses_nothing(tmp_path):
    """ZooKeeper as an ensemble of three, a member on each of three hosts. The ensemble's
    leader is cut off for 10 s mid-stream: the two left elect a new leader, every client
    (daemons and workers) reconnects to one of them, and the run loses nothing. Whether the
    workers stopped their spouts meanwhile (fencing) and whether anything moved is printed."""
    messages, down = scaled(8_000, 10)
    with MultiHostCluster(tmp_path / "cluster", zk_members=3) as cluster:
        try:
            cluster.add_supervisor("s1", 2)
            cluster.add_supervisor("s2", 2)
            cluster.wait_for_leader()
            run = MultiHostChaosRun(cluster, tmp_path / "run", messages=messages, rate=RATE,
                                    workers=2, seed=9, scenario="ZK ensemble leader cut off")
            run.start()
            time.sleep(4)
            before = {slot: beat["pid"] for slot, beat in run.topology_workers().items()}
            fault = run.inject("zk_member_cut_off", down_secs=down)
            report = run.finish(timeout=150)
            after = {slot: beat["pid"] for slot, beat in run.topology_workers().items()}
            modes = run._zookeeper_now().get("modes")
        except BaseException:
            print(cluster.logs())
            raise
    checked(report)
    print(f"{fault.detail}; ensemble at the end: {modes}; workers before {before}, "
          f"after {after}")
    assert fault.detected is not None, report.lines()


def fenced_lines(cluster: MultiHostCluster, host: str) -> list[str]:
    """The lines of ``host``'s workers' logs that say a state write was refused."""
    return [line for path in sorted((cluster.base / host / "logs").glob("worker-*.log"))
            for line in path.read_text(errors="replace").splitlines()
            if "writes it now, not this worker" in line]


def test_an_orphan_cut_off_from_zookeeper_commits_no_checkpoint_over_its_successor(
        multi_host, tmp_path):
    """Issue 51, stateful: a stateful topology (a bolt counting each message in its
    checkpointed state, on a Redis server on a host of its own that every host reaches) on a
    worker on each of s1 and s2; s1's holds the checkpoint spout and the stateful bolt, with
    every checkpoint action's path (tests/chaos/chaos_stateful_local_topology.py: with the
    chaos suite's stateful topology, spread over both workers, an orphan's checkpoints stall
    on the frames the other worker refuses, and never reach its state). s1 is cut off from
    ZooKeeper and nimbus until its session expires and nimbus moves its tasks to s2, then comes
    back. Its worker runs on meanwhile, an orphan that reaches Redis and checkpoints on its
    own: whatever it writes after its successor opened its tasks' state must be refused
    (FencedState). Checked from Redis's own record of every script it ran (MONITOR): no write
    to a namespace landed from any but the worker that last claimed it, so no checkpoint was
    committed by two copies; and every message is in the committed state, once or more."""
    redis = multi_host.add_redis()
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=8_000, rate=RATE, workers=2,
                            seed=10, scenario="stateful orphan (s1 cut)", redis=redis,
                            topology=LOCAL_STATEFUL_TOPOLOGY)
    run.start()
    executors = next(iter(run._zookeeper_now()["assignments"].values()))
    on_s1 = {e[0] for e in executors if e[2] == "s1"}
    assert {"__checkpointspout", "tally"} <= on_s1, executors
    orphaned = {f"chaos/{e[0]}" + (f"/{e[1][0]}" if e[0] == "tally" else "")
                for e in executors if e[0] in ("__checkpointspout", "tally")}
    time.sleep(5)
    run.inject("isolate", host="s1", down_secs=14)
    report = run.finish(timeout=150)
    counts = run.committed_counts()
    checked(report)
    state = report.state
    refused = fenced_lines(multi_host, "s1")
    print(f"committed counts: {len(counts)} messages, min {min(counts.values(), default=0)}, "
          f"max {max(counts.values(), default=0)}, counted more than once "
          f"{sum(n > 1 for n in counts.values())}")
    print(f"s1's worker logged {len(refused)} refused state writes, e.g.", *refused[:3],
          sep="\n  ")
    assert report.uncounted == 0, report.lines()
    assert all(counts.get(f"{i:09d}", 0) >= 1 for i in range(run.messages))
    # The scenario did what it is for: s1's namespaces changed hands, and the orphan tried to
    # write them afterwards.
    handed = {claim.namespace for claim, old in state.handovers if old is not None}
    assert orphaned <= handed, (orphaned, state.lines(run.started_wall))
    assert any(call.host == "s1" for call, _holder in state.refused + state.foreign), \
        state.lines(run.started_wall)
    assert not state.double_commits, state.lines(run.started_wall)
    assert not state.foreign, state.lines(run.started_wall)


@full_form_only
@pytest.mark.parametrize("fault", ["cut_off", "link_cut"])
def test_effectively_once_counts_every_message_exactly_once_across_a_partition(
        multi_host, tmp_path, fault):
    """Issue 55: the stateful topology in effectively-once, its state on a Redis server on a
    host of its own, while s1 is cut off from the network (its worker runs on alone, split
    brain) or the link between s1 and s2 is cut both ways (each still reaches ZooKeeper). The
    chaos checker with exact equality: every message counted exactly once in the committed
    state, as a failure-free run counts it, and the committed records of the topology's sink
    (a RedisUpsertBolt on the same server: each message's id -> its count) a failure-free
    run's, every id once with 1 and nothing else."""
    redis = multi_host.add_redis()
    messages, down = scaled(8_000, 14)
    run = MultiHostChaosRun(multi_host, tmp_path / "run", messages=messages, rate=RATE,
                            workers=2, seed=55, scenario=f"effectively-once, {fault}",
                            redis=redis, guarantee=cfg.EFFECTIVELY_ONCE)
    run.start()
    time.sleep(5)
    run.inject(fault, down_secs=down, **({"host": "s1"} if fault == "cut_off" else {}))
    report = run.finish(timeout=240)
    checked(report)
    assert report.sink_records is not None, "the run had no sink of effectively-once"
    assert report.exact, report.lines()
