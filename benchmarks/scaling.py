"""Scaling benchmark: realistic events on two pinned workers against the same topology in one
process, with a dial for the user work an event.

    python benchmarks/scaling.py [--work 6] [--seconds 8] [--rounds 2]
    python benchmarks/scaling.py --sweep [--seconds 6] [--rounds 1] [--chart PATH]
    python benchmarks/scaling.py --rate EVENTS_PER_SEC [--work 6] [--seconds 8] [--rounds 2]
    python benchmarks/scaling.py --no-crossing [--work 6] ...

The topology (scaling_topology.py): JSON click events, each tracked, parsed and enriched
(``json.loads``, a regular expression over the user agent, a hash of the URL) and summed per user
under a fields grouping. It runs on a real one-machine cluster (ZooKeeper, nimbus, one supervisor
with two slots, the two workers pinned one per core, as cluster_wordcount.py starts them) and,
alternating with its windows, in one process (local mode, one task each, in a fresh process):
``--rounds`` cluster windows, each between two one-process runs, the cluster's topology
deactivated meanwhile.

Prints per window: events/s of each and their ratio; the CPU per event of each (the CPU time of
the workers, or of the one process, over the window, from /proc and getrusage, divided by the
events summed); and the distributed overhead per event, the two workers' CPU per event minus
the one process's: what going distributed costs on top of the work itself; and 2 × the one
process's CPU an event / the two workers', what two whole cores would give at those costs (the
ratio of rates falls short of it where other work on the machine takes part of the cores).
With the cluster's figures go its context switches an event (every thread of both workers),
the loopback bytes and packets an event (the frames between the workers, plus whatever else
on the machine used loopback meanwhile), and the spouts' complete latency p50/p99 over the
window alone (the workers' histograms reported to nimbus at its two ends, subtracted:
cluster_wordcount.latency_window) and since the topology's start, which a stall at start-up
can set.

``--work`` is microseconds of user code an event (the enrichment as scaling_topology.py does it,
timed here on one thread before the runs and rounded to whole rounds of its dial). ``--sweep``
runs user work from ~1 µs to ~50 µs and writes a PNG chart of the two-worker ratio against it
(needs matplotlib: ``pip install .[bench]``). ``--rate`` runs the cluster alone with its spouts
paced to that many events a second in all: for complete latency below the peak (half of the
peak that a run without it prints, say).

With ``--no-crossing`` the totals take each event in its enricher's worker
(scaling_no_crossing_topology.py): no tuple and no ack crosses between the workers, and the
ratio against the same one-process runs is what two workers give with the transport out of the
way; the gap between it and the run with the fields grouping is what crossing costs.

With --record (or STORMLET_BENCH_RECORD=1) a run at one --work level (no --sweep, --dial,
--rate or --no-crossing) also appends its ratios and CPU costs to
benchmarks/results/scaling.jsonl, the row of LATEST.md's table for that level
(benchmarks/figures.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

import cluster_wordcount as cw  # noqa: E402
import figures  # noqa: E402
import scaling_topology as topo  # noqa: E402
from zookeeper_server import free_port  # noqa: E402

from stormlet import LocalCluster  # noqa: E402
from stormlet.cluster.rpc import RpcError  # noqa: E402
from stormlet.runtime import build_mode  # noqa: E402

SWEEP_US = (1.0, 3.0, 6.0, 12.0, 25.0, 50.0)
PENDING = 2000


def work_cost(rounds: int, repeat: int = 9) -> float:
    """Microseconds of ``enrich_event`` an event with ``rounds``, the best of ``repeat``."""
    events = topo.make_events()
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        for raw in events:
            topo.enrich_event(raw, rounds)
        best = min(best, (time.thread_time() - start) / len(events))
    return best * 1e6


def rounds_for(work_us: float) -> tuple[int, float]:
    """The dial's rounds nearest ``work_us`` of user work an event, and their measured cost."""
    if work_us <= (work_cost(0) + work_cost(1)) / 2:
        return 0, work_cost(0)
    one = work_cost(1)
    per_round = max((work_cost(41) - one) / 40, 1e-3)
    rounds = max(1, round(1 + (work_us - one) / per_round))
    return rounds, work_cost(rounds)


def one_process(rounds: int, seconds: float) -> dict:
    """The topology in local mode in a fresh process: events/s and CPU µs an event."""
    out = subprocess.run([sys.executable, str(Path(__file__)), "--one-process-run",
                          "--rounds-of-work", str(rounds), "--seconds", str(seconds)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def _one_process_run(rounds: int, seconds: float) -> dict:
    from stormlet.runtime.tuning import tune_for_streaming
    tune_for_streaming()   # as `stormlet local` and workers do
    conf = {"topology.max.spout.pending": PENDING, "topology.acker.executors": 1,
            topo.ROUNDS_KEY: rounds}
    with LocalCluster() as cluster:
        cluster.submit("scaling", conf, topo.build(parallelism=1))
        time.sleep(min(2.0, seconds / 3))

        def summed() -> int:
            return cluster.metrics("scaling")["totals"]["executed"]

        start_events, start = summed(), time.monotonic()
        start_cpu, start_busy = _own_cpu(), busy(cluster.metrics("scaling"))
        time.sleep(seconds)
        events, elapsed = summed() - start_events, time.monotonic() - start
        cpu = _own_cpu() - start_cpu
        busy_us = busy_per_event(start_busy, busy(cluster.metrics("scaling")))
        cluster.kill("scaling", wait_secs=2)
    return {"events_per_sec": events / elapsed, "cpu_us": cpu / events * 1e6,
            "cores": cpu / elapsed, "busy_us": busy_us}


# The components whose time executing each run prints, an event: the user's work is enrich's.
BUSY_COMPONENTS = ("events", "enrich", "totals", "__acker")


def busy(metrics: list[dict] | dict) -> dict[str, float]:
    """Seconds busy executing (a bolt's batches, a spout's bursts) per component of
    ``BUSY_COMPONENTS``, and the events summed (``"summed"``: totals' tuples executed), over the
    summaries (``LocalCluster.metrics``, or each worker's heartbeat)."""
    summaries = [metrics] if isinstance(metrics, dict) else metrics
    found = {c: sum(m.get(c, {}).get("busy_secs", 0.0) for m in summaries)
             for c in BUSY_COMPONENTS}
    found["summed"] = sum(m.get("totals", {}).get("executed", 0) for m in summaries)
    found["throttled"] = sum(m.get(c, {}).get("throttled_secs", 0.0) for m in summaries
                             for c in BUSY_COMPONENTS)
    return found


def busy_per_event(before: dict, after: dict) -> dict[str, float]:
    """Per component: microseconds busy an event summed, between two ``busy`` readings."""
    events = max(after["summed"] - before["summed"], 1)
    return {c: (after[c] - before[c]) / events * 1e6 for c in (*BUSY_COMPONENTS, "throttled")}


def busy_line(busy_us: dict[str, float]) -> str:
    busy = {c: us for c, us in busy_us.items() if c != "throttled"}
    return ("busy an event: " + ", ".join(f"{c} {us:.2f}" for c, us in busy.items())
            + f" µs, {sum(busy.values()):.2f} in all; throttled {busy_us['throttled']:.2f} µs")


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Cluster:
    """ZooKeeper, nimbus and one supervisor with two slots (its workers pinned one per core),
    started for the run and stopped after it."""

    def __init__(self, base: Path):
        self.base = base
        self.zk = f"127.0.0.1:{free_port()}"
        self.heartbeats = base / "s" / "heartbeats"
        self.nimbus = cw.nimbus_client(self.zk, [])   # connects on its first call

    @contextlib.contextmanager
    def running(self) -> Iterator[Cluster]:
        zk_port = self.zk.rsplit(":", 1)[1]
        subprocess.run(["bash", str(REPO / "deploy" / "zookeeper.sh"), "start", "--port", zk_port,
                        "--data-dir", str(self.base / "zk")], check=True,
                       stdout=subprocess.DEVNULL)
        slots = f"{free_port()},{free_port()}"
        daemons = [
            cw.stormlet("nimbus", "--zk", self.zk, "--port", str(free_port()), "--data-dir",
                        str(self.base / "n"), log=self.base / "nimbus.log"),
            # Its node service on any free port: another cluster on this machine (a test's,
            # another benchmark's) may hold the default one.
            cw.stormlet("supervisor", "--zk", self.zk, "--slots", slots, "--data-dir",
                        str(self.base / "s"), "--service-port", "0",
                        log=self.base / "supervisor.log"),
        ]
        try:
            self.wait_ready()
            yield self
        finally:
            self.nimbus.close()
            for daemon in daemons:
                os.killpg(daemon.pid, signal.SIGTERM)
            time.sleep(1)
            cw.stop_workers(f"stormlet worker --zk {self.zk}")
            subprocess.run(["bash", str(REPO / "deploy" / "zookeeper.sh"), "stop", "--data-dir",
                            str(self.base / "zk")], stdout=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until nimbus answers and the supervisor has registered: on a busy machine that takes
        longer than any fixed pause (one of 2 s left a submit finding no nimbus at load 7)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(RpcError):
                if self.nimbus.call("cluster").get("supervisors"):
                    return
            if time.monotonic() > deadline:
                raise SystemExit(f"scaling: no nimbus with a supervisor after {timeout:g} s; "
                                 f"logs in {self.base}")
            time.sleep(0.2)

    def cli(self, *args: str) -> None:
        cw.cli(*args, zk=self.zk, secret=[])

    def beats(self, name: str) -> list[dict]:
        # A topology's id is its name, a time and a token (stormlet.cluster.names); a killed
        # topology's beat may still be in its port's file when the next one starts.
        return [beat for beat in cw.heartbeats_of(self.heartbeats)
                if str(beat.get("topology_id", "")).rsplit("-", 2)[0] == name]

    def summed(self, name: str) -> int:
        return cw.total([beat.get("metrics", {}) for beat in self.beats(name)], "totals",
                        "executed")

    def submit(self, name: str, rounds: int, rate: float = 0.0,
               settings: tuple[str, ...] = (), crossing: bool = True) -> None:
        """Submit the topology with ``rounds`` of user work, its two spout tasks paced to
        ``rate`` events a second between them (0: unpaced), and ``settings`` (KEY=VALUE); wait
        for its first events. Without ``crossing``, its variant where nothing crosses."""
        code = "scaling_topology.py" if crossing else "scaling_no_crossing_topology.py"
        self.cli("submit", str(HERE / code), "--name", name, "-c",
                 f"{topo.ROUNDS_KEY}={rounds}", "-c", f"{topo.RATE_KEY}={rate / 2}",
                 *(arg for setting in settings for arg in ("-c", setting)))
        deadline = time.monotonic() + 60
        while self.summed(name) == 0 or len(self.beats(name)) < 2:
            if time.monotonic() > deadline:
                raise SystemExit(f"no events summed after 60 s; see the logs in {self.base}")
            time.sleep(0.5)

    def settle(self, name: str, seconds: float = 30.0) -> None:
        """Wait until the workers sum no more events (spouts paused, in-flight done)."""
        deadline, last = time.monotonic() + seconds, -1
        while time.monotonic() < deadline:
            now = self.summed(name)
            if now == last:
                return
            last = now
            time.sleep(1.5)

    def window(self, name: str, seconds: float) -> dict:
        pids = [beat["pid"] for beat in self.beats(name) if "pid" in beat]
        before = cw.fresh_reports(self.nimbus, name, len(pids))
        start_events, start_cpu = self.summed(name), cw.cpu_seconds(pids)
        start_busy = busy([beat.get("metrics", {}) for beat in self.beats(name)])
        start_switches, start_lo = switches(pids), loopback()
        start = time.monotonic()
        time.sleep(seconds)
        events, elapsed = self.summed(name) - start_events, time.monotonic() - start
        cpu = cw.cpu_seconds(pids) - start_cpu
        lo_bytes, lo_packets = (now - then for now, then in zip(loopback(), start_lo))
        events = max(events, 1)
        metrics = [beat.get("metrics", {}) for beat in self.beats(name)]
        busy_us = busy_per_event(start_busy, busy(metrics))
        after = cw.fresh_reports(self.nimbus, name, len(pids))
        latency = cw.latency_window(before, after, "events")
        crossed = [sum(worker_count(report, key) for report in after)
                   - sum(worker_count(report, key) for report in before)
                   for key in ("tuples_sent", "batches_sent", "frames_sent", "overloads")]
        return {"events_per_sec": events / elapsed, "cpu_us": cpu / events * 1e6,
                "cores": cpu / elapsed, "switches": (switches(pids) - start_switches) / events,
                "lo_bytes": lo_bytes / events, "lo_packets": lo_packets / events,
                "latency": latency, "crossed": crossed, "busy_us": busy_us,
                "failed": cw.total(metrics, "events", "failed"),
                "cpus": [sorted(os.sched_getaffinity(pid)) for pid in pids]}


def worker_count(report: dict, key: str) -> int:
    """A worker's transport count from its metrics report (0 once it retired)."""
    return 0 if report.get("retired") else report["worker"].get(key, 0)


def switches(pids: list[int]) -> int:
    """Context switches of every thread of ``pids`` so far (each one the OS put to sleep or
    took off its CPU: a transport's handover between threads shows here)."""
    count = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                status = Path(f"/proc/{pid}/task/{task}/status").read_text()
            except OSError:
                continue
            count += sum(int(line.split()[1]) for line in status.splitlines()
                         if line.endswith(tuple("0123456789")) and "ctxt_switches" in line)
    return count


def loopback() -> tuple[int, int]:
    """Bytes and packets sent on loopback so far, by every process on the machine (the two
    workers' frames go this way; others' traffic is noise the run's other figures bound)."""
    stats = Path("/sys/class/net/lo/statistics")
    return (int((stats / "tx_bytes").read_text()), int((stats / "tx_packets").read_text()))


def print_window(window: dict) -> None:
    print(f"  two workers: {window['events_per_sec']:>9,.0f} events/s, "
          f"{window['cpu_us']:5.2f} µs CPU an event ({window['cores']:.2f} cores, CPUs "
          f"{window['cpus']}, failed {window['failed']})\n"
          f"               an event: {window['switches']:.3f} context switches, loopback "
          f"{window['lo_bytes']:.0f} bytes in {window['lo_packets']:.3f} packets\n"
          f"               crossing: {crossing_line(*window['crossed'])}\n"
          f"               {busy_line(window['busy_us'])}\n"
          f"{cw.latency_lines(window['latency'], indent='               ')}", flush=True)


def crossing_line(tuples: int, batches: int, frames: int, overloads: int) -> str:
    """What crossed between the workers over a window (between two metrics reports)."""
    return (f"{tuples:,} tuples in {batches:,} batches ({tuples / max(batches, 1):.1f} a batch), "
            f"{frames:,} frames ({batches / max(frames, 1):.1f} batches a frame); "
            f"{overloads:,} inbox overloads")


def paced(cluster: Cluster, name: str, seconds: float, windows: int) -> None:
    """``windows`` windows of the cluster alone, its spouts paced (``--rate``): complete
    latency below the peak, over each window and since the topology's start."""
    time.sleep(3)   # warm-up
    for _ in range(windows):
        print_window(cluster.window(name, seconds))


def compare(cluster: Cluster, name: str, rounds: int, seconds: float, windows: int) -> dict:
    """``windows`` cluster windows, each between one-process runs: the medians."""
    singles, results = [], []
    for i in range(windows + 1):
        cluster.cli("deactivate", name)
        cluster.settle(name)
        singles.append(one_process(rounds, seconds))
        print(f"  one process: {singles[-1]['events_per_sec']:>9,.0f} events/s, "
              f"{singles[-1]['cpu_us']:5.2f} µs CPU an event; "
              f"{busy_line(singles[-1]['busy_us'])}", flush=True)
        if i == windows:
            break
        cluster.cli("activate", name)
        time.sleep(3)   # warm-up
        window = cluster.window(name, seconds)
        print_window(window)
        results.append(window)
    ratios, overheads = [], []
    for i, window in enumerate(results):
        local_rate = (singles[i]["events_per_sec"] + singles[i + 1]["events_per_sec"]) / 2
        local_cpu = (singles[i]["cpu_us"] + singles[i + 1]["cpu_us"]) / 2
        ratios.append(window["events_per_sec"] / local_rate)
        overheads.append(window["cpu_us"] - local_cpu)
        print(f"  window {i + 1}: {ratios[-1]:.2f}x one process; distributed overhead "
              f"{overheads[-1]:+.2f} µs CPU an event", flush=True)
    cluster_cpu = statistics.median(w["cpu_us"] for w in results)
    local_cpu = statistics.median(s["cpu_us"] for s in singles)
    return {"ratio": statistics.median(ratios), "overhead_us": statistics.median(overheads),
            "cluster_cpu_us": cluster_cpu, "local_cpu_us": local_cpu,
            # What two whole cores would give if each worker's CPU an event stayed as it is:
            # steadier than the ratio of rates where other work takes part of the cores.
            "two_core_ratio": 2 * local_cpu / cluster_cpu}


def record(args: argparse.Namespace, result: dict, windows: int, seconds: float) -> None:
    """LATEST.md's row for a run at one ``--work`` level (benchmarks/diary.py renders it from
    the records); a sweep, a dial, a paced run or one with nothing crossing replaces none."""
    if args.sweep or args.dial is not None or args.rate or args.no_crossing:
        return
    figures.Recorder("scaling", enabled=args.record).record(
        f"realistic events on a cluster, ~{args.work:g} µs of user work an event: two pinned "
        "workers against one process, events/s (and on two whole cores at these CPU costs); "
        "CPU an event, one process / two workers",
        f"{result['ratio']:.2f}× ({result['two_core_ratio']:.2f}×); "
        f"{result['local_cpu_us']:.1f} / {result['cluster_cpu_us']:.1f} µs",
        detail=f"medians of {windows} windows of {seconds:g} s")


def chart(points: list[tuple[float, float, float]], path: Path) -> None:
    """Points of (user work µs, ratio of events/s, two-core ratio from CPU an event)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs, ys, from_cpu = zip(*points)
    ax.plot(xs, ys, marker="o", label="two pinned workers / one process, events/s")
    ax.plot(xs, from_cpu, marker="s", linestyle="--",
            label="2 × one process's CPU an event / two workers'")
    ax.axhline(2.0, color="grey", linestyle=":", label="2x (two cores)")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xticks([1, 2, 5, 10, 20, 50], labels=["1", "2", "5", "10", "20", "50"])
    ax.minorticks_off()
    ax.set_xlabel("user work an event (µs, one thread)")
    ax.set_ylabel("events/s ratio")
    ax.set_ylim(0, 2.2)
    ax.set_title("JSON click events, fields grouping, every event tracked", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=float, default=6.0,
                        help="microseconds of user work an event (default 6)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="each window's length (default 8; 6 with --sweep)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="cluster windows a work level (default 2; 1 with --sweep)")
    parser.add_argument("--sweep", action="store_true",
                        help=f"user work {', '.join(f'{w:g}' for w in SWEEP_US)} µs; a chart")
    parser.add_argument("--chart", type=Path, default=REPO / "docs" / "images" / "scaling.png",
                        help="where --sweep writes its chart")
    parser.add_argument("--dial", type=int, default=None,
                        help="rounds of user work an event, as set, instead of --work's "
                             "(the same work in runs to compare)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="the cluster alone, its spouts paced to this many events/s in all")
    parser.add_argument("-c", "--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a topology setting for the cluster, as `stormlet submit -c` takes "
                             "it (say, stormlet.transport.shared.memory=false)")
    parser.add_argument("--no-crossing", action="store_true",
                        help="the totals take each event in its enricher's worker: nothing "
                             "crosses between the workers")
    figures.add_flag(parser)
    parser.add_argument("--one-process-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds-of-work", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = args.seconds or (6.0 if args.sweep else 8.0)
    windows = args.rounds or (1 if args.sweep else 2)
    if args.one_process_run:
        print(json.dumps(_one_process_run(args.rounds_of_work, seconds)))
        return
    levels = list({rounds: (rounds, cost) for rounds, cost in
                   (rounds_for(work) for work in (SWEEP_US if args.sweep else [args.work]))
                   }.values()) if args.dial is None else [(args.dial, work_cost(args.dial))]
    # (one run a dial setting: the smallest levels may share one)
    base = Path(tempfile.mkdtemp(prefix="stormlet-scaling-"))
    crossing = ", nothing crossing between the workers" if args.no_crossing else ""
    print(f"scaling: click events{crossing}, {windows} window(s) of {seconds:g}s a work level, "
          f"each between one-process runs; {build_mode.describe()}; load {os.getloadavg()[0]:.2f}",
          flush=True)
    points = []
    finished = False
    # Stopped by a signal, still stop the cluster: its daemons run in sessions of their own.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"stopped; logs in {base}"))
    try:
        with Cluster(base).running() as cluster:
            for i, (rounds, cost) in enumerate(levels):
                name = f"scaling{i}"
                print(f"user work {cost:.1f} µs an event (rounds {rounds}):", flush=True)
                cluster.submit(name, rounds, args.rate, tuple(args.conf),
                               crossing=not args.no_crossing)
                if args.rate:
                    paced(cluster, name, seconds, windows)
                    cluster.cli("kill", name, "--wait", "0")
                    continue
                result = compare(cluster, name, rounds, seconds, windows)
                cluster.cli("kill", name, "--wait", "0")
                points.append((cost, result["ratio"], result["two_core_ratio"]))
                print(f"  => {result['ratio']:.2f}x ({result['two_core_ratio']:.2f}x on two "
                      f"whole cores at these CPU costs); CPU an event: one process "
                      f"{result['local_cpu_us']:.2f} µs, two workers "
                      f"{result['cluster_cpu_us']:.2f} µs; distributed overhead "
                      f"{result['overhead_us']:+.2f} µs", flush=True)
                record(args, result, windows, seconds)
        if args.sweep:
            chart(points, args.chart)
            print(f"chart: {args.chart}")
        finished = True
    finally:
        if finished:   # else keep the logs the error points to
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
