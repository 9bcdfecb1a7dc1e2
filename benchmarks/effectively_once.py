"""Effectively-once against at-least-once on the same topology, in local mode.

    python benchmarks/effectively_once.py [--sentences 60000] [--rate 1000] [--seconds 20]
                                          [--interval-ms 1000]

The topology: a ``LogSpout`` over a 2-partition local log -> a split bolt (shuffle) -> a
stateful count (fields grouping on the word; the embedded SQLite store, checkpointed every
``--interval-ms``; ``topology.max.spout.pending`` 20,000). Each guarantee
(``topology.guarantee`` at-least-once, effectively-once) runs:

- throughput: the log filled with ``--sentences`` beforehand; sentences/s from the submit until
  the committed state holds every word of them (both guarantees commit state at a checkpoint,
  so this is the rate at which input becomes committed state);
- latency, on a live stream of ``--rate`` sentences/s for ``--seconds``: the committed state's
  lag (now minus the append time of the newest sentence whose words the committed state holds,
  sampled every 20 ms; p50 and p99), and the spout's complete latency (p50, p99: in
  at-least-once a stateful bolt acks when the checkpoint commits, in effectively-once at once);
- recovery, on the same live stream: the split bolt raises once, mid-stream (its tuple fails),
  and in another run drops a tuple unacked (it times out after ``topology.message.timeout.secs``,
  5 here): seconds from the failure until the committed state holds a sentence appended after
  it (state current again), and whether the final committed totals equal the true ones
  (``exact``) or how many words too many they count.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import figures

from stormlet import Bolt, LocalCluster, TopologyBuilder
from stormlet import config as cfg
from stormlet.runtime import build_mode
from stormlet.runtime.tuning import tune_for_streaming
from stormlet.sources import LogSpout
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.state import StatefulBolt
from stormlet.state.embedded import state_file
from stormlet.state.store import decode_key, decode_value

WORDS = 3            # words a sentence
NEWEST = "newest"    # the count's state key: the newest append time it counted
TOTAL = "total"      # and how many words it counted in all
# Set by the benchmark, cleared by the split when it strikes.
FAULT: dict[str, Any] = {"kind": "", "at": 0.0}
FAULT_LOCK = threading.Lock()
# In at-least-once a stateful bolt acks at the checkpoint's commit, so the spout's pending
# tuples bound its rate at MAX_PENDING a checkpoint interval: high enough not to be the limit.
MAX_PENDING = 20_000


def sentence(i: int, stamp: float) -> str:
    return f"{stamp:.6f} w{i % 11} x{i % 7} y{i % 5}"


class Split(Bolt):
    outputs = ["word", "stamp"]

    def execute(self, tup):
        stamp, *words = tup["value"].split()
        for word in words:
            self.collector.emit([word, float(stamp)], anchors=[tup])
        with FAULT_LOCK:
            kind = FAULT["kind"]
            if kind:
                FAULT.update(kind="", at=time.time())
        if kind == "raise":
            raise RuntimeError("injected by the benchmark")
        if kind != "lose":   # a lost tuple is never acked: its tree times out
            self.collector.ack(tup)


class Count(StatefulBolt):
    outputs = []

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        word, stamp = tup["word"], tup["stamp"]
        self.state.put(word, self.state.get(word, 0) + 1)
        self.state.put(TOTAL, self.state.get(TOTAL, 0) + 1)
        if stamp > self.state.get(NEWEST, 0.0):
            self.state.put(NEWEST, stamp)
        self.collector.ack(tup)


def topology(log_path: Path):
    builder = TopologyBuilder()
    builder.set_spout("sentences", LogSpout(str(log_path), spout_id="bench",
                                            commit_interval=0.5))
    builder.set_bolt("split", Split()).shuffle_grouping("sentences")
    builder.set_bolt("count", Count()).fields_grouping("split", ["word"])
    return builder.build()


def conf(guarantee: str, state_dir: Path, interval_ms: int) -> dict:
    return {cfg.TOPOLOGY_GUARANTEE: guarantee, cfg.TOPOLOGY_STATE_PROVIDER: "embedded",
            cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: {"dir": str(state_dir)},
            cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS: interval_ms,
            cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS: 5, cfg.TOPOLOGY_MAX_SPOUT_PENDING: MAX_PENDING}


def committed(state_dir: Path) -> dict:
    """The count's committed state (its one task's), {} before the first commit."""
    path = state_file(state_dir, "bench")
    if not path.exists():
        return {}
    db = sqlite3.connect(path, timeout=10)
    try:
        rows = db.execute("SELECT k, v FROM kv WHERE ns LIKE 'bench/count/%'").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        db.close()
    return {decode_key(k): decode_value(v) for k, v in rows}


def true_totals(n: int) -> dict:
    totals: dict = {}
    for i in range(n):
        for word in sentence(i, 0.0).split()[1:]:
            totals[word] = totals.get(word, 0) + 1
    return totals


def new_log(directory: Path) -> Path:
    path = directory / "log"
    PartitionedLog.create(path, 2).close()
    return path


def throughput(guarantee: str, sentences: int, interval_ms: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        log_path = new_log(Path(tmp))
        log = PartitionedLog(log_path)
        stamp = time.time()
        log.append_many([sentence(i, stamp) for i in range(sentences)])
        log.flush()
        log.close()
        state_dir = Path(tmp) / "state"
        with LocalCluster() as cluster:
            started = time.perf_counter()
            cluster.submit("bench", conf(guarantee, state_dir, interval_ms), topology(log_path))
            cluster.wait_for(lambda: committed(state_dir).get(TOTAL, 0) >= sentences * WORDS,
                             timeout=900, interval=0.05)
            elapsed = time.perf_counter() - started
            cluster.kill("bench", wait_secs=2)
    return sentences / elapsed


def live(guarantee: str, rate: int, seconds: float, interval_ms: int, fault: str = "") -> dict:
    """A live stream at ``rate`` for ``seconds``; with ``fault``, injected at a third of it."""
    with tempfile.TemporaryDirectory() as tmp:
        log_path = new_log(Path(tmp))
        state_dir = Path(tmp) / "state"
        appended = [0]
        stop = threading.Event()

        def feed() -> None:
            log = PartitionedLog(log_path)
            start = time.monotonic()
            while not stop.is_set() and appended[0] < rate * seconds:
                due = min(int(rate * seconds), int((time.monotonic() - start) * rate) + 1)
                if due > appended[0]:
                    stamp = time.time()
                    log.append_many([sentence(i, stamp) for i in range(appended[0], due)])
                    log.flush()
                    appended[0] = due
                time.sleep(0.01)   # the stream's pace
            log.close()

        lags: list[tuple[float, float]] = []   # (when, committed lag)
        with LocalCluster() as cluster:
            cluster.submit("bench", conf(guarantee, state_dir, interval_ms), topology(log_path))
            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            began = time.time()
            struck = None
            stream_end = None
            deadline = time.monotonic() + seconds + 120
            # Sampled until the stream has ended and its every word is committed.
            while (feeder.is_alive() or committed(state_dir).get(TOTAL, 0)
                   < appended[0] * WORDS) and time.monotonic() < deadline:
                now = time.time()
                if fault and struck is None and now - began > seconds / 3:
                    with FAULT_LOCK:
                        FAULT.update(kind=fault, at=0.0)
                    struck = True
                if stream_end is None and not feeder.is_alive():
                    stream_end = now
                newest = committed(state_dir).get(NEWEST)
                if newest is not None and now - began > 2:   # past the start-up
                    lags.append((now, now - newest))
                time.sleep(0.02)
            expected = true_totals(appended[0])
            final = committed(state_dir)
            report = cluster.kill("bench", wait_secs=2)
        stop.set()
    latency = report.metrics["sentences"]["complete_latency_ms"]
    steady = [lag for when, lag in lags if stream_end is None or when < stream_end]
    result = {"lag_p50": statistics.median(steady),
              "lag_p99": statistics.quantiles(steady, n=100)[98],
              "complete_p50": latency["p50"], "complete_p99": latency["p99"],
              "extra_words": final.get(TOTAL, 0) - appended[0] * WORDS,
              "exact": {w: n for w, n in final.items() if w not in (TOTAL, NEWEST)} == expected}
    if fault:
        at = FAULT["at"]
        # Current again: the first sample whose committed newest sentence came after the fault.
        back = next((when for when, lag in lags if when > at and when - lag > at), None)
        result["recovery_secs"] = None if back is None or not at else back - at
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=60_000)
    parser.add_argument("--rate", type=int, default=1000, help="live stream, sentences/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="each live run's length")
    parser.add_argument("--interval-ms", type=int, default=1000, help="checkpoint interval")
    figures.add_flag(parser)
    args = parser.parse_args()
    tune_for_streaming()
    print(f"stateful word count, local mode, log spout -> split -> stateful count (embedded), "
          f"checkpoint every {args.interval_ms} ms, python {sys.version.split()[0]}, "
          f"pid {os.getpid()}; {build_mode.describe()}")
    rates, lags, recoveries, outcomes = [], [], [], []
    for guarantee in (cfg.AT_LEAST_ONCE, cfg.EFFECTIVELY_ONCE):
        rate = throughput(guarantee, args.sentences, args.interval_ms)
        rates.append(rate)
        print(f"{guarantee:<17} throughput {rate:>8,.0f} sentences/s into committed state "
              f"({args.sentences} sentences)")
        run = live(guarantee, args.rate, args.seconds, args.interval_ms)
        print(f"{guarantee:<17} live {args.rate}/s: committed-state lag p50 "
              f"{run['lag_p50']:.2f} s p99 {run['lag_p99']:.2f} s; spout complete latency p50 "
              f"{run['complete_p50']} ms p99 {run['complete_p99']} ms")
        lags.append(run["lag_p50"])
        faults = []
        for fault in ("raise", "lose"):
            run = live(guarantee, args.rate, args.seconds, args.interval_ms, fault)
            secs = run["recovery_secs"]
            print(f"{guarantee:<17} a tuple {'failed' if fault == 'raise' else 'lost':<6}: "
                  f"state current again after "
                  f"{'(not seen)' if secs is None else f'{secs:.2f} s'}; final state "
                  f"{'exact' if run['exact'] else 'NOT exact'}"
                  f" ({run['extra_words']:+d} words)")
            faults.append(run)
        recoveries.append(" / ".join("not seen" if r["recovery_secs"] is None
                                     else f"{r['recovery_secs']:.1f}" for r in faults) + " s")
        extra = max(r["extra_words"] for r in faults)
        outcomes.append("exact" if all(r["exact"] for r in faults) and not extra
                        else f"{extra:+d} words")
    # LATEST.md's row (benchmarks/diary.py renders it from the records).
    figures.Recorder("effectively_once", enabled=args.record).record(
        "stateful word count, at-least-once / effectively-once, checkpoints every second: "
        "sentences/s into committed state; committed-state lag p50 at 1,000/s; state current "
        "again after a failed / a lost tuple",
        f"{rates[0]:,.0f} / {rates[1]:,.0f}; {lags[0]:.2f} / {lags[1]:.2f} s; "
        f"{recoveries[0]} ({outcomes[0]}) against {recoveries[1]} ({outcomes[1]})",
        detail=f"live at {args.rate:,}/s, checkpoints every {args.interval_ms} ms")


if __name__ == "__main__":
    main()
