"""What routing one emit costs for each stream grouping: the per-tuple call an emitting executor
makes (``StreamRoute.tasks_for``), on one thread.

    python benchmarks/groupings.py [--tuples 200000] [--runs 7]

For each grouping onto 2 and 8 tasks (shuffles plain and load-aware), prints the median of
``--runs`` runs in ns a tuple, the Python loop that calls it included (the first row, a route
that names one task without a call, is about that loop's cost). A word count routes every word
once, so a grouping's cost here is paid by every tuple that takes that edge.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import figures

from stormlet import groupings as g
from stormlet.runtime import build_mode, choosers
from stormlet.runtime.load_aware import WORKER_LOCAL, Balancer
from stormlet.runtime.routing import StreamRoute
from stormlet.tuples import StreamInfo

FIELDS = ["word", "n"]
ROWS = [(g.GLOBAL, ()), (g.SHUFFLE, ()), (g.LOCAL_OR_SHUFFLE, ()), (g.FIELDS, ("word",)),
        (g.FIELDS, ("word", "n")), (g.PARTIAL_KEY, ("word",)), (g.ALL, ())]
# Load-aware shuffle (the default on a cluster and in local mode), its ring as the runtime
# makes it once a second with every task unloaded: rows of their own.
LOAD_AWARE = (g.SHUFFLE, g.LOCAL_OR_SHUFFLE)


def route_for(kind: str, fields: tuple[str, ...], tasks: int,
              load_aware: bool = False) -> StreamRoute:
    route = StreamRoute(StreamInfo("split", "default", FIELDS), direct=False)
    # Local-or-shuffle with every target task in this worker: a shuffle among them.
    chooser = choosers.make_chooser(
        g.Grouping(kind, fields), FIELDS, list(range(tasks)), source_task=100,
        local_tasks=set(range(tasks)), rng=random.Random(1), load_aware=load_aware)
    assert chooser is not None   # None only for a direct grouping
    route.choosers.append(chooser)
    if isinstance(chooser, choosers.LoadAwareChooser):
        Balancer(chooser, 0.8, 0.2, random.Random(1)).refresh(
            dict.fromkeys(range(tasks), WORKER_LOCAL), lambda task: 0.0)
    route.seal()
    return route


def ns_a_tuple(route: StreamRoute, values: list[list], runs: int) -> float:
    tasks_for = route.tasks_for
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        for v in values:
            tasks_for(v)
        timings.append((time.perf_counter() - started) / len(values) * 1e9)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=7)
    figures.add_flag(parser)
    args = parser.parse_args()
    rng = random.Random(7)
    words = [f"word{rng.randrange(5000)}" for _ in range(1000)]
    values = [[words[i % 1000], i] for i in range(args.tuples)]
    print(f"routing one emit, ns a tuple (median of {args.runs} runs of {args.tuples:,} tuples, "
          f"the calling loop included); {build_mode.describe()}")
    print(f"{'grouping':<30}{'2 tasks':>10}{'8 tasks':>10}")
    onto_two = {}
    for kind, fields in ROWS:
        name = kind + (f"({', '.join(fields)})" if fields else "")
        ns = [ns_a_tuple(route_for(kind, fields, n), values, args.runs) for n in (2, 8)]
        onto_two[kind, fields] = ns[0]
        print(f"{name:<30}" + "".join(f"{f:>10.0f}" for f in ns))
        if kind in LOAD_AWARE:
            ns = [ns_a_tuple(route_for(kind, fields, n, True), values, args.runs)
                  for n in (2, 8)]
            print(f"{name + ' load-aware':<30}" + "".join(f"{f:>10.0f}" for f in ns))
    # LATEST.md's rows (benchmarks/diary.py renders them from the records).
    recorder = figures.Recorder("groupings", enabled=args.record)
    recorder.record("routing one emit, onto 2 tasks: shuffle / fields on one field / fields on "
                    "two fields (the calling loop, ~50 ns, included)",
                    [onto_two[g.SHUFFLE, ()], onto_two[g.FIELDS, ("word",)],
                     onto_two[g.FIELDS, ("word", "n")]], unit="ns a tuple",
                    detail=f"median of {args.runs} runs")
    recorder.record("routing one emit onto 2 tasks by partial key (one str field)",
                    onto_two[g.PARTIAL_KEY, ("word",)], unit="ns a tuple",
                    detail=f"median of {args.runs} runs")


if __name__ == "__main__":
    main()
