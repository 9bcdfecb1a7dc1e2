"""Where a paced cluster's CPU goes: CPU an event of each worker thread at paced rates and at full
speed, alternating in one sitting; and what a thread's wake-up costs on this machine.

    python benchmarks/paced_cpu.py [--rates 8000,0,2000] [--seconds 8] [--dial 1]
    python benchmarks/paced_cpu.py --wake-cost

The first form runs scaling.py's cluster (two workers pinned one per core) and submits its click
topology once per rate, in the order given (0: unpaced), each paced to that many events a second
in all: per window, events/s, CPU an event of both workers, context switches an event and the
window's complete latency (as scaling.py prints them), then each thread of each worker with its
CPU over the window per event of its worker (events/s over two: each worker sums about half) and
its voluntary and involuntary context switches a second. Threads are named by ``py-spy dump``
where py-spy is installed (their Python names), else by their kernel names.

``--wake-cost`` needs no cluster: the user work of an event (scaling_topology.enrich_event) on
one thread, back to back and in small batches each after a 1 ms timed wait, as a paced pipeline's
threads do it: the thread's CPU an event of each, and of the work alone. What a wake-up costs in
CPU, and how much slower the work right after one runs, is the machine's, not stormlet's.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scaling as sc  # noqa: E402
import scaling_topology as topo  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
# proc(5)'s stat fields, counted after the command's closing parenthesis: utime, stime.
UTIME, STIME = 14 - 3, 15 - 3


def thread_stats(pid: int) -> dict[int, tuple[str, float, int, int]]:
    """Each thread of ``pid``: kernel name, CPU seconds, voluntary and involuntary switches."""
    stats = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        switches = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
                    if "ctxt_switches" in line}
        stats[int(tid)] = (stat[stat.index("(") + 1:stat.rindex(")")],
                           (int(fields[UTIME]) + int(fields[STIME])) / TICKS,
                           switches.get("voluntary_ctxt_switches", 0),
                           switches.get("nonvoluntary_ctxt_switches", 0))
    return stats


def python_names(pid: int) -> dict[int, str]:
    """Thread id -> Python thread name, from ``py-spy dump`` (empty without py-spy)."""
    if shutil.which("py-spy") is None:
        return {}
    try:
        out = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    names = {}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("Thread ") and '"' in line and parts[1].isdigit():
            names[int(parts[1])] = line.split('"')[1]
    return names


def paced_windows(rates: list[float], seconds: float, dial: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="stormlet-paced-cpu-"))
    print(f"paced_cpu: click events, {sc.build_mode.describe()}; load "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    finished = False
    try:
        with sc.Cluster(base).running() as cluster:
            for i, rate in enumerate(rates):
                name = f"paced{i}"
                cluster.submit(name, dial, rate)
                time.sleep(3)   # warm-up
                pids = [beat["pid"] for beat in cluster.beats(name) if "pid" in beat]
                names = {pid: python_names(pid) for pid in pids}
                before = {pid: thread_stats(pid) for pid in pids}
                window = cluster.window(name, seconds)
                after = {pid: thread_stats(pid) for pid in pids}
                for pid in pids:   # threads started meanwhile (a shared thread's hand-off)
                    names[pid] = {**python_names(pid), **names[pid]}
                print(f"paced to {rate:,.0f} events/s in all" if rate else "unpaced", flush=True)
                sc.print_window(window)
                per_worker = max(window["events_per_sec"] * seconds / 2, 1)
                for pid in pids:
                    rows = []
                    for tid, (kernel, cpu, vol, invol) in after[pid].items():
                        _, cpu0, vol0, invol0 = before[pid].get(tid, (kernel, 0.0, 0, 0))
                        if cpu - cpu0 >= 0.01:
                            rows.append((cpu - cpu0, names[pid].get(tid, kernel), vol - vol0,
                                         invol - invol0))
                    for cpu, thread, vol, invol in sorted(rows, reverse=True):
                        print(f"    worker {pid} {thread[:26]:26} {cpu / per_worker * 1e6:7.1f} µs "
                              f"an event, switches/s {vol / seconds:6.0f} voluntary "
                              f"{invol / seconds:6.0f} involuntary", flush=True)
                cluster.cli("kill", name, "--wait", "0")
        finished = True
    finally:
        if finished:   # else keep the logs
            shutil.rmtree(base, ignore_errors=True)


def wake_cost(seconds: float = 3.0) -> None:
    events = topo.make_events()
    doorbell: queue.SimpleQueue[None] = queue.SimpleQueue()
    print(f"wake cost: enrich_event on one thread; load {os.getloadavg()[0]:.2f}")
    for batch, wait in ((1000, 0.0), (16, 0.001), (4, 0.001), (1, 0.001), (1000, 0.0)):
        done, work, i = 0, 0.0, 0
        start_cpu, start = time.thread_time(), time.monotonic()
        while time.monotonic() - start < seconds:
            began = time.thread_time()
            for _ in range(batch):
                topo.enrich_event(events[i % len(events)], 1)
                i += 1
            work += time.thread_time() - began
            done += batch
            if wait:
                try:
                    doorbell.get(timeout=wait)
                except queue.Empty:
                    pass
        cpu = time.thread_time() - start_cpu
        print(f"  {batch:>4} an event at a time, {wait * 1e3:g} ms wait between: thread CPU "
              f"{cpu / done * 1e6:6.1f} µs an event, of it the work {work / done * 1e6:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="8000,0,2000",
                        help="events/s in all for each window, in order (0: unpaced)")
    parser.add_argument("--seconds", type=float, default=8.0, help="each window's length")
    parser.add_argument("--dial", type=int, default=1, help="rounds of user work an event")
    parser.add_argument("--wake-cost", action="store_true",
                        help="the cost of a wake-up on one thread instead (no cluster)")
    args = parser.parse_args()
    if args.wake_cost:
        wake_cost()
    else:
        paced_windows([float(rate) for rate in args.rates.split(",")], args.seconds, args.dial)


if __name__ == "__main__":
    main()
