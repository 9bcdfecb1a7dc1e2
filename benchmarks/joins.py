"""What a JoinBolt costs per tuple: the join alone, and a join in local mode against the same
window doing no join.

    python benchmarks/joins.py            # all figures
    python benchmarks/joins.py --quick    # shorter runs

The join alone: ``JoinBolt.join_window`` on a window of N tuples (orders and users in equal
parts, each order matching one user; for three streams, a third of coupons, left-joined, half
the users having one), on one thread: ns per input tuple and per output record, the median of
the runs, in CPU time. Local mode, acking on: one spout emitting orders and users on two
streams, tracked, into a tumbling Count(1000) window that joins them (JoinBolt,
Selector.STREAM, every output emitted anchored to its two inputs, to a bolt that acks) or only
counts its tuples; acked input tuples/s of each and the join's cost per input tuple, the
difference of their CPU time per tuple.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import figures  # noqa: E402

from stormlet import Bolt, JoinBolt, LocalCluster, Selector, Spout, TopologyBuilder  # noqa: E402
from stormlet.runtime import build_mode  # noqa: E402
from stormlet.runtime.tuning import tune_for_streaming  # noqa: E402
from stormlet.tuples import StreamInfo, Tuple  # noqa: E402
from stormlet.windowing import Count, WindowedBolt  # noqa: E402

ORDERS = StreamInfo("shop", "orders", ["user", "item"])
USERS = StreamInfo("shop", "users", ["id", "name"])
COUPONS = StreamInfo("shop", "coupons", ["user", "code"])


def window(n: int, streams: int) -> list[Tuple]:
    """``n`` tuples: orders and users (and coupons for half the users), one user per order."""
    per = n // streams
    out = [Tuple([f"u{i}", f"item{i}"], ORDERS, 1, None) for i in range(per)]
    out += [Tuple([f"u{i}", f"name{i}"], USERS, 1, None) for i in range(per)]
    if streams == 3:
        out += [Tuple([f"u{2 * i}", f"c{i}"], COUPONS, 1, None) for i in range(per)]
    return out


def join_alone(n: int, streams: int, runs: int) -> None:
    bolt = JoinBolt(Selector.STREAM, "orders", "user").join("users", "id", "orders")
    if streams == 3:
        bolt.left_join("coupons", "user", "users").select("user, item, name, code")
    else:
        bolt.select("user, item, name")
    tuples = window(n, streams)
    times, out = [], 0
    for _ in range(runs):
        started = time.process_time()   # CPU time: the machine may be shared
        out = len(bolt.join_window(tuples))
        times.append(time.process_time() - started)
    best = statistics.median(times)
    what = "orders + users" + (" + coupons (left)" if streams == 3 else "")
    print(f"join alone, {what:<32} window {n:>7,}: {best / n * 1e9:7,.0f} ns/input tuple, "
          f"{best / out * 1e9:7,.0f} ns/output record ({out:,} records)")


class Shop(Spout):
    """Orders and users on two streams, alternately, every one tracked."""

    outputs = {"orders": ["user", "item"], "users": ["id", "name"]}

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        self.acked = 0

    def next_tuple(self):
        i = self.n // 2
        if self.n % 2:
            self.collector.emit([f"u{i % 500}", "name"], msg_id=self.n, stream="users")
        else:
            self.collector.emit([f"u{i % 500}", "item"], msg_id=self.n, stream="orders")
        self.n += 1

    def ack(self, msg_id):
        self.acked += 1


class Counted(WindowedBolt):
    """The same window, no join: one emit per window."""

    outputs = ["n"]

    def execute(self, window):
        self.collector.emit([len(window.get())])


class Acks(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def local_mode(bolt: WindowedBolt, seconds: float) -> tuple[float, float]:
    """Acked input tuples/s and CPU seconds per acked tuple."""
    builder = TopologyBuilder()
    builder.set_spout("shop", Shop())
    builder.set_bolt("w", bolt.with_tumbling_window(Count(1000))) \
        .global_grouping("shop", "orders").global_grouping("shop", "users")
    builder.set_bolt("acks", Acks()).shuffle_grouping("w")
    conf = {"topology.max.spout.pending": 5000, "topology.acker.executors": 1}
    with LocalCluster() as cluster:
        cluster.submit("join", conf, builder.build())
        spout = cluster.instances("join", "shop")[0]
        time.sleep(1.0)   # warm-up: windows full
        acked0, cpu0, t0 = spout.acked, time.process_time(), time.monotonic()
        time.sleep(seconds)
        acked, cpu, elapsed = (spout.acked - acked0, time.process_time() - cpu0,
                               time.monotonic() - t0)
        cluster.kill("join", wait_secs=0)
    return acked / elapsed, cpu / max(acked, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    figures.add_flag(parser)
    args = parser.parse_args()
    runs, seconds = (5, 2.0) if args.quick else (15, 5.0)
    tune_for_streaming()
    print(f"JoinBolt, python {sys.version.split()[0]}, pid {os.getpid()}; "
          f"{build_mode.describe()}")
    for n in (1_000, 10_000, 100_000):
        join_alone(n, 2, runs)
    for n in (1_000, 10_000, 100_000):
        join_alone(n, 3, runs)
    joined = (JoinBolt(Selector.STREAM, "orders", "user").join("users", "id", "orders")
              .select("user, item, name"))
    rate_plain, cpu_plain = local_mode(Counted(), seconds)
    rate_join, cpu_join = local_mode(joined, seconds)
    print(f"local mode, tumbling Count(1000), no join: {rate_plain:>9,.0f} acked tuples/s "
          f"({cpu_plain * 1e6:5.1f} us CPU/tuple)")
    print(f"local mode, tumbling Count(1000), join:    {rate_join:>9,.0f} acked tuples/s "
          f"({cpu_join * 1e6:5.1f} us CPU/tuple; the join adds "
          f"{(cpu_join - cpu_plain) * 1e6:.1f} us/tuple, its outputs' emits and acks included)")
    # LATEST.md's row (benchmarks/diary.py renders it from the records).
    figures.Recorder("joins", enabled=args.record).record(
        "a `JoinBolt` joining two streams over a tumbling `Count(1000)` window, local mode, "
        "acking on: CPU a tuple against the same window doing no join",
        f"{cpu_join * 1e6:.1f} against {cpu_plain * 1e6:.1f} µs ({rate_join:,.0f} against "
        f"{rate_plain:,.0f} acked tuples/s)", detail=f"one run of {seconds:g} s each")


if __name__ == "__main__":
    main()
