"""Word-count benchmark on a real one-machine cluster: ZooKeeper, nimbus, one supervisor with two
slots, and the topology on two workers (one per core), against one process in the same run.

    python benchmarks/cluster_wordcount.py [--seconds 10] [--rounds 2] [--secure] [--no-crossing]
        [--unpinned] [--pin-one-process]

Alternates ``--rounds`` windows of the cluster with runs of the same word count in one process
(benchmarks/wordcount.py, acking on, one task each), one before each window and one after the
last: the cluster's topology is deactivated while the one-process run takes the machine. This
machine's speed drifts by a third within minutes, so each window is compared with the runs on
either side of it.

Prints, per window and overall: acked words per second and the ratio to one process; acked
words per CPU-second of the workers against one process's; the spouts' complete latency p50/p99
over the window and since the topology's start, all tasks' and each worker's, from the workers'
metrics reports to nimbus at the window's two ends (``latency_window``).

The supervisor pins each worker to a CPU of its own, as it does by default with a CPU for each
slot (stormlet/cluster/cpu_pinning.py); --unpinned runs them unpinned (``--no-pin-workers``).
The one-process run is local mode's, whose executor threads share one CPU by default
(stormlet/runtime/cpu_affinity.py); --pin-one-process pins its whole process there, main thread
too, as a pinned worker runs. With --secure the cluster runs with a secret (CURVE on nimbus's
port and between the workers), to compare with the same run without it.

With --no-crossing each word is counted in its splitter's own worker, so no tuple and no ack
crosses between the workers (wordcount_no_crossing_topology.py): the same work per word, minus
the transport's. Its ratios against the same one-process runs tell how much of the gap to 2x is
crossing and how much is the workers themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import figures

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# Ports below the kernel's ephemeral range, as the tests' servers get (a bind-to-0 port can be
# taken as an outgoing connection's source port before a worker binds its slot).
sys.path.insert(0, str(REPO / "tests"))

from zookeeper_server import free_port  # noqa: E402

from stormlet.cluster.nimbus_client import NimbusClient  # noqa: E402
from stormlet.cluster.security import Security  # noqa: E402
from stormlet.metrics.histogram import merge_wire, summary_ms  # noqa: E402
from stormlet.metrics.windows import ALL_TIME  # noqa: E402
from stormlet.runtime import build_mode  # noqa: E402

CLI = [sys.executable, "-m", "stormlet.cli", "--log-level", "WARNING"]


def stop_workers(pattern: str, wait_secs: float = 10.0) -> None:
    """Stop the workers whose command line matches ``pattern`` and wait until they are gone,
    killing what is left after ``wait_secs``. A worker still draining when the next run starts
    holds its CPU there, and the next run's supervisor then leaves a worker unpinned."""
    subprocess.run(["pkill", "-f", pattern])
    deadline = time.monotonic() + wait_secs
    while subprocess.run(["pgrep", "-f", pattern], stdout=subprocess.DEVNULL).returncode == 0:
        if time.monotonic() > deadline:
            subprocess.run(["pkill", "-9", "-f", pattern])
            break
        time.sleep(0.1)


def stormlet(*args: str, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "ab") if log else subprocess.DEVNULL
    return subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def heartbeats_of(directory: Path) -> list[dict]:
    beats = []
    for path in directory.glob("*.json"):
        try:
            beats.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    return beats


def worker_metrics(directory: Path) -> list[dict]:
    return [beat.get("metrics", {}) for beat in heartbeats_of(directory)]


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    used = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            used += (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, IndexError, ValueError):
            pass
    return used


def worker_pids(directory: Path) -> list[int]:
    return [beat["pid"] for beat in heartbeats_of(directory) if "pid" in beat]


def total(metrics: list[dict], component: str, key: str) -> int:
    return sum(m.get(component, {}).get(key, 0) for m in metrics)


def one_process(seconds: float, pinned: bool = False) -> dict:
    """benchmarks/wordcount.py's acking-on run, in a process of its own: words/s and cores.
    ``pinned``: on one CPU, the highest this process may use."""
    cpu = max(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, str(HERE / "wordcount.py"), "--seconds", str(seconds),
                          "--acked-only"], check=True, capture_output=True, text=True,
                         preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if pinned else None
                         ).stdout
    return json.loads(out.splitlines()[-1])


def cli(*args: str, zk: str, secret: list[str], quiet: bool = True) -> None:
    """One command to the cluster, as a user would type it."""
    subprocess.run([*CLI, *args, "--zk", zk, *secret], check=True,
                   stdout=subprocess.DEVNULL if quiet else None)


def settle(heartbeats: Path, seconds: float = 30.0) -> None:
    """Wait until the workers count no more words (the spouts are paused, in-flight done)."""
    deadline = time.monotonic() + seconds
    last = -1
    while time.monotonic() < deadline:
        now = total(worker_metrics(heartbeats), "count", "executed")
        if now == last:
            return
        last = now
        time.sleep(1.5)


def measure_window(heartbeats: Path, seconds: float) -> dict:
    """The cluster's acked words/s and the cores its workers used."""
    start_words = total(worker_metrics(heartbeats), "count", "executed")
    pids = worker_pids(heartbeats)
    start_cpu = cpu_seconds(pids)
    start = time.monotonic()
    time.sleep(seconds)
    metrics = worker_metrics(heartbeats)
    words = total(metrics, "count", "executed") - start_words
    elapsed = time.monotonic() - start
    return {"words_per_sec": words / elapsed,
            "cpu_cores": (cpu_seconds(pids) - start_cpu) / elapsed,
            "failed": total(metrics, "sentences", "failed")}


def nimbus_client(zk: str, secret: list[str]) -> NimbusClient:
    """A client of the cluster's nimbus (``secret``: ``["--secret-file", PATH]`` or nothing)."""
    return NimbusClient(zk, security=Security.load(secret[1] if secret else None))


def fresh_reports(nimbus: NimbusClient, name: str, workers: int,
                  timeout: float = 30.0) -> list[dict]:
    """Nimbus's newest metrics report of each of ``name``'s workers, once ``workers`` of them
    have reported since this call (a worker reports every ``topology.metrics.report.secs``, 5 s
    by default): counters and latency histograms per task, cumulative in the ``"all"`` window.
    A window between two such calls starts and ends within one report interval of them."""
    since = time.time()   # a report's "time" is its worker's time.time(), on this machine
    deadline = time.monotonic() + timeout
    while True:
        reports = nimbus.call("metrics", name=name)
        if sum(1 for r in reports if not r.get("retired") and r["time"] > since) >= workers:
            return reports
        if time.monotonic() > deadline:
            raise SystemExit(f"nimbus got no metrics report from {workers} workers of {name} "
                             f"within {timeout:g} s")
        time.sleep(0.2)


def crossing_reports(reports: list[dict]) -> dict[int, tuple[float, int]]:
    """Each worker's report: port -> (when, tuples it sent other workers)."""
    return {s["worker"]["port"]: (s["time"], s["worker"].get("tuples_sent", 0))
            for s in reports if not s.get("retired")}


def spout_histograms(reports: list[dict], spout: str) -> dict[int, tuple[str, dict]]:
    """Per task of ``spout``: its worker ("host:port"; "retired" for tasks no worker reports
    now) and its complete latency histogram since the topology's start (wire form). Nimbus
    counts a replaced worker's counts in its task's row, so a task's histogram only grows."""
    found = {}
    for report in reports:
        worker = ("retired" if report.get("retired")
                  else f"{report['worker']['host']}:{report['worker']['port']}")
        for row in report["tasks"]:
            if row["component"] == spout:
                found[row["task"]] = (worker, row["windows"][ALL_TIME]["histograms"]["complete"])
    return found


def histogram_window(before: dict | None, after: dict) -> dict:
    """``after - before``: two cumulative histograms of one task (wire form, ``before`` None
    where the task had none yet) give the latencies recorded between them, in wire form."""
    if before is None:
        return after
    buckets = dict(after["buckets"])
    for bucket, count in before["buckets"]:
        buckets[bucket] = buckets.get(bucket, 0) - count
    if after["count"] < before["count"] or any(c < 0 for c in buckets.values()):
        raise ValueError(f"a histogram went back ({before['count']} latencies, then "
                         f"{after['count']}): not two readings of one task's histogram")
    return {"count": after["count"] - before["count"], "sum": after["sum"] - before["sum"],
            "buckets": [[b, c] for b, c in sorted(buckets.items()) if c]}


def latency_window(before: list[dict], after: list[dict], spout: str) -> dict:
    """Complete latency of ``spout`` between two sets of nimbus's reports (``fresh_reports``):
    ``"window"``, its percentiles over the window alone (each task's histogram at the end minus
    the one at the start), and ``"since_start"``, the cumulative ones at the end (what the
    heartbeats and ``stormlet local`` show, which a stall at start-up can set); each as
    ``{"count", "mean", "p50", "p99"}`` (ms) for all tasks and per worker (``"workers"``), and
    ``"seconds"``: the shortest and longest span between a worker's two reports."""
    start, end = spout_histograms(before, spout), spout_histograms(after, spout)
    windows: dict[str, list[dict]] = {}
    totals: dict[str, list[dict]] = {}
    for task, (worker, histogram) in sorted(end.items()):
        windows.setdefault(worker, []).append(histogram_window(start.get(task, (worker, None))[1],
                                                               histogram))
        totals.setdefault(worker, []).append(histogram)

    def summary(histograms: list[dict]) -> dict:
        count, secs, buckets = merge_wire(histograms)
        return {"count": count, **summary_ms(count, secs, buckets)}

    when = {r["worker"]["port"]: r["time"] for r in before if not r.get("retired")}
    spans = [r["time"] - when[r["worker"]["port"]] for r in after
             if not r.get("retired") and r["worker"]["port"] in when]
    return {"window": summary([h for hs in windows.values() for h in hs]),
            "since_start": summary([h for hs in totals.values() for h in hs]),
            "workers": {worker: {"window": summary(windows[worker]),
                                 "since_start": summary(totals[worker])}
                        for worker in sorted(windows) if worker != "retired"},
            "seconds": (min(spans), max(spans)) if spans else (0.0, 0.0)}


def latency_lines(latency: dict, indent: str = "  ") -> str:
    """``latency_window``'s figures as two lines: the window's, then since the start."""
    workers = latency["workers"].values()
    low, high = latency["seconds"]
    lines = []
    for key, what in (("window", f"over the window ({low:.1f}–{high:.1f} s of reports)"),
                      ("since_start", "since the topology's start")):
        every = latency[key]
        lines.append(f"{indent}complete latency {what}: p50 {every['p50']} ms, p99 "
                     f"{every['p99']} ms of {every['count']:,} (per worker p99 "
                     f"{', '.join(str(w[key]['p99']) for w in workers)} ms)")
    return "\n".join(lines)


def crossing_rate(before: dict, after: dict) -> float:
    """Tuples a second sent between the workers, from two sets of their reports."""
    rate = 0.0
    for port, (when, sent) in after.items():
        if port in before and when > before[port][0]:
            rate += (sent - before[port][1]) / (when - before[port][0])
    return rate


def per_cpu_second(run: dict) -> float:
    return run["words_per_sec"] / run["cpu_cores"] if run["cpu_cores"] else float("nan")


def record(args: argparse.Namespace, ratios: list[float], cpu_ratios: list[float]) -> None:
    """LATEST.md's rows (benchmarks/diary.py renders them from the records): the default
    placement's two topologies only, so that a run with other settings replaces neither."""
    if args.secure or args.unpinned or args.pin_one_process or args.conf or not ratios:
        return
    measure = {
        str(HERE / "wordcount_topology.py"): "cluster, two workers (one per core): acked words/s "
        "against one process in the same run, and per worker CPU-second against one process's",
        str(HERE / "wordcount_no_crossing_topology.py"): "the same with nothing crossing "
        "between the workers",
    }.get(args.topology)
    if measure is None:
        return

    def span(values: list[float], form: str) -> str:
        low, high = format(min(values), form), format(max(values), form)
        return low if low == high else f"{low}–{high}".replace("%–", "–")

    figures.Recorder("cluster_wordcount", enabled=args.record).record(
        measure, f"{span(ratios, '.2f')}×; {span(cpu_ratios, '.0%')}",
        detail=f"{len(ratios)} windows of {args.seconds:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of each cluster window and each one-process run")
    parser.add_argument("--rounds", type=int, default=2,
                        help="cluster windows, each between two one-process runs")
    parser.add_argument("--topology", default=None,
                        help="topology file (default: wordcount_topology.py)")
    parser.add_argument("--no-crossing", action="store_true",
                        help="count each word in its splitter's worker: nothing crosses")
    parser.add_argument("--secure", action="store_true",
                        help="run the cluster with a cluster secret (security on)")
    parser.add_argument("--unpinned", action="store_true",
                        help="run the workers unpinned (the supervisor's --no-pin-workers)")
    parser.add_argument("--pin-one-process", action="store_true",
                        help="run the one-process word count's whole process on one CPU "
                             "(its executors share one by default)")
    parser.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="topology config override, as for stormlet submit")
    figures.add_flag(parser)
    args = parser.parse_args()
    if args.topology is not None and args.no_crossing:
        parser.error("--no-crossing picks its own topology: give --topology or --no-crossing")
    if args.topology is None:
        args.topology = str(HERE / ("wordcount_no_crossing_topology.py" if args.no_crossing
                                    else "wordcount_topology.py"))
    base = Path(tempfile.mkdtemp(prefix="stormlet-bench-"))
    zk_port, nimbus_port = free_port(), free_port()
    slots = f"{free_port()},{free_port()}"
    zk = f"127.0.0.1:{zk_port}"
    secret = []
    if args.secure:
        subprocess.run([*CLI, "secret", "generate", str(base / "secret")], check=True,
                       stdout=subprocess.DEVNULL)
        secret = ["--secret-file", str(base / "secret")]
    subprocess.run(["bash", str(REPO / "deploy" / "zookeeper.sh"), "start", "--port", str(zk_port),
                    "--data-dir", str(base / "zk")], check=True, stdout=subprocess.DEVNULL)
    finished = False
    daemons = [
        stormlet("nimbus", "--zk", zk, "--port", str(nimbus_port), "--data-dir", str(base / "n"),
                 *secret, log=base / "nimbus.log"),
        stormlet("supervisor", "--zk", zk, "--slots", slots, "--data-dir", str(base / "s"),
                 "--service-port", "0",   # the default one may be another cluster's
                 *(["--no-pin-workers"] if args.unpinned else []), *secret,
                 log=base / "supervisor.log"),
    ]
    nimbus = nimbus_client(zk, secret)
    try:
        time.sleep(2)
        cli("submit", args.topology, "--name", "bench",
            *[arg for pair in args.conf for arg in ("-c", pair)], zk=zk, secret=secret,
            quiet=False)
        heartbeats = base / "s" / "heartbeats"
        deadline = time.monotonic() + 60
        while total(worker_metrics(heartbeats), "count", "executed") == 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"no words counted after 60 s; see the logs in {base}")
            time.sleep(0.5)
        crossing = ", nothing crossing between them" if args.no_crossing else ""
        affinities = [sorted(os.sched_getaffinity(pid)) for pid in worker_pids(heartbeats)]
        cpus = ", ".join(str(cpu) for cpu in affinities)
        if not args.unpinned and any(len(cpu) > 1 for cpu in affinities):
            print("warning: a worker is not pinned (another stormlet worker on this machine "
                  "holds its CPU?): this run does not measure the default placement",
                  flush=True)
        print(f"cluster word count: 2 workers on one supervisor (their CPUs: {cpus}), security "
              f"{'on' if args.secure else 'off'}{crossing}; {args.rounds} windows of "
              f"{args.seconds:g}s, each between runs of one process"
              f"{' (pinned to one CPU)' if args.pin_one_process else ''}; "
              f"{build_mode.describe()}")
        singles: list[dict] = []
        windows: list[dict] = []
        for round_ in range(args.rounds + 1):
            cli("deactivate", "bench", zk=zk, secret=secret)
            settle(heartbeats)
            singles.append(one_process(args.seconds, args.pin_one_process))
            print(f"one process:  {singles[-1]['words_per_sec']:>10,.0f} words/s, "
                  f"{per_cpu_second(singles[-1]):>10,.0f} per CPU-second", flush=True)
            if round_ == args.rounds:
                break
            cli("activate", "bench", zk=zk, secret=secret)
            time.sleep(3)  # warm-up
            before = fresh_reports(nimbus, "bench", len(affinities))
            window = measure_window(heartbeats, args.seconds)
            after = fresh_reports(nimbus, "bench", len(affinities))
            window["crossing"] = crossing_rate(crossing_reports(before), crossing_reports(after))
            window["latency"] = latency_window(before, after, "sentences")
            windows.append(window)
            print(f"cluster:      {window['words_per_sec']:>10,.0f} words/s, "
                  f"{per_cpu_second(window):>10,.0f} per CPU-second "
                  f"(the two workers used {window['cpu_cores']:.2f} cores; failed since the "
                  f"start: {window['failed']}); {window['crossing']:,.0f} tuples/s crossed "
                  f"between the workers ({window['crossing'] / window['words_per_sec']:.2f} a "
                  f"word)", flush=True)
            print(latency_lines(window["latency"]), flush=True)
        print("against the one-process runs on either side:")
        ratios, cpu_ratios = [], []
        for i, window in enumerate(windows):
            local = (singles[i]["words_per_sec"] + singles[i + 1]["words_per_sec"]) / 2
            local_cpu = (per_cpu_second(singles[i]) + per_cpu_second(singles[i + 1])) / 2
            ratios.append(window["words_per_sec"] / local)
            cpu_ratios.append(per_cpu_second(window) / local_cpu)
            print(f"  window {i + 1}: {ratios[-1]:.2f}x the words/s, "
                  f"{cpu_ratios[-1]:.0%} of the words per CPU-second")
        if len(windows) > 1:
            print(f"  median of {len(windows)} windows: {statistics.median(ratios):.2f}x the "
                  f"words/s, {statistics.median(cpu_ratios):.0%} of the words per CPU-second")
        record(args, ratios, cpu_ratios)
        finished = True
    finally:
        nimbus.close()
        for daemon in daemons:
            os.killpg(daemon.pid, signal.SIGTERM)
        time.sleep(1)
        stop_workers(f"stormlet worker --zk {zk}")
        subprocess.run(["bash", str(REPO / "deploy" / "zookeeper.sh"), "stop", "--data-dir",
                        str(base / "zk")], stdout=subprocess.DEVNULL)
        if finished:   # else keep the logs the error points to
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
