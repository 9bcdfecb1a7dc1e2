"""Word-count benchmark on a real one-machine cluster: ZooKeeper, nimbus, one supervisor with two
slots, and the topology on two workers (one per core).

    python benchmarks/cluster_wordcount.py [--seconds 20] [--secure]

With --secure the cluster runs with a secret (CURVE on nimbus's port and between the workers),
to compare with the same run without it.

Prints acked words per second and complete latency p50/p99, read from the workers' heartbeats.
Compare with the one-process figure of benchmarks/wordcount.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stormlet import build_mode

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stormlet(*args: str, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "ab") if log else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "stormlet.cli", "--log-level", "WARNING", *args],
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--topology", default=str(HERE / "wordcount_topology.py"))
    parser.add_argument("--secure", action="store_true",
                        help="run the cluster with a cluster secret (security on)")
    parser.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="topology config override, as for stormlet submit")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stormlet-bench-"))
    zk_port, nimbus_port = free_port(), free_port()
    slots = f"{free_port()},{free_port()}"
    zk = f"127.0.0.1:{zk_port}"
    secret = []
    if args.secure:
        subprocess.run([sys.executable, "-m", "stormlet.cli", "secret", "generate",
                        str(base / "secret")], check=True, stdout=subprocess.DEVNULL)
        secret = ["--secret-file", str(base / "secret")]
    subprocess.run(["bash", str(REPO / "deploy" / "zookeeper.sh"), "start", "--port", str(zk_port),
                    "--data-dir", str(base / "zk")], check=True, stdout=subprocess.DEVNULL)
    daemons = [
        stormlet("nimbus", "--zk", zk, "--port", str(nimbus_port), "--data-dir", str(base / "n"),
                 *secret, log=base / "nimbus.log"),
        stormlet("supervisor", "--zk", zk, "--slots", slots, "--data-dir", str(base / "s"),
                 *secret, log=base / "supervisor.log"),
    ]
    try:
        time.sleep(2)
        subprocess.run([sys.executable, "-m", "stormlet.cli", "--log-level", "WARNING", "submit",
                        args.topology, "--name", "bench", "--zk", zk, *secret,
                        *[arg for pair in args.conf for arg in ("-c", pair)]],
                       check=True)
        heartbeats = base / "s" / "heartbeats"
        deadline = time.monotonic() + 60
        while total(worker_metrics(heartbeats), "count", "executed") == 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"no words counted after 60 s; see the logs in {base}")
            time.sleep(0.5)
        time.sleep(3)  # warm-up
        start_words = total(worker_metrics(heartbeats), "count", "executed")
        pids = worker_pids(heartbeats)
        start_cpu = cpu_seconds(pids)
        start = time.monotonic()
        time.sleep(args.seconds)
        metrics = worker_metrics(heartbeats)
        words = total(metrics, "count", "executed") - start_words
        elapsed = time.monotonic() - start
        cores = (cpu_seconds(pids) - start_cpu) / elapsed
        # Each spout's percentiles, from its own worker (heartbeats carry summaries only).
        latencies = [m["sentences"]["complete_latency_ms"] for m in metrics if "sentences" in m]
        print(f"cluster word count: 2 workers on one supervisor, {args.seconds:g}s measured, "
              f"security {'on' if args.secure else 'off'}; {build_mode.describe()}")
        print(f"acked words per second: {words / elapsed:,.0f} "
              f"(the two workers used {cores:.2f} cores)")
        for i, latency in enumerate(latencies):
            print(f"spout in worker {i + 1}: complete latency p50 {latency['p50']} ms, "
                  f"p99 {latency['p99']} ms")
        print(f"failed: {total(metrics, 'sentences', 'failed')}")
    finally:
        for daemon in daemons:
            os.killpg(daemon.pid, signal.SIGTERM)
        time.sleep(1)
        subprocess.run(["pkill", "-f", f"stormlet worker --zk {zk}"])
        subprocess.run(["bash", str(REPO / "deploy" / "zookeeper.sh"), "stop", "--data-dir",
                        str(base / "zk")], stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
