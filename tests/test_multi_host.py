"""A cluster across hosts (issue 51): ZooKeeper, nimbus, two supervisors and the client each on
a host of its own (network namespaces, tests/multi_host.py), with a cluster secret, running the
chaos suite's topology over a live log; the network is then broken the way a real one breaks.

Every scenario keeps a history (tests/history.py) and prints its row of the scenario table:
messages, faults, lost, duplicates, when the cluster noticed the fault (and by what sign), when
throughput came back, and the longest stretch a spout task ran in two workers at once. Every
message must be processed (lost == 0), every offset below the final commits seen by a sink, and
none below a commit missing from the sinks when it was made; the rest is printed, and asserted
only where it holds today."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cluster_support import wait_until
from multi_host import MultiHostChaosRun, MultiHostCluster, multi_host_available, \
    unavailable_reason
from zookeeper_server import zookeeper_available

pytestmark = [
    pytest.mark.skipif(not zookeeper_available(),
                       reason="ZooKeeper is not installed: run deploy/zookeeper.sh install"),
    pytest.mark.skipif(not multi_host_available(),
                       reason=f"no hosts can be made here: {unavailable_reason()}"),
]

RATE = 400   # messages a second; two workers on the 2-core machine keep up with it easily


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
    run.start()
    time.sleep(5)
    down = 12
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

