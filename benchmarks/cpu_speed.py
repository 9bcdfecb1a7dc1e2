"""How steady this machine's CPUs are: the scaling benchmark's user work, and a walk through
memory, timed slice by slice on each CPU, all CPUs busy at once; and the work on one CPU with the
others busy or idle in turn.

    python benchmarks/cpu_speed.py [--seconds 30] [--slice 0.5] [--rounds 40] [--memory-kib 8192]

The scaling benchmarks (scaling.py, cluster_wordcount.py) compare two workers, one on each CPU,
with one process on one CPU, in windows that take turns. Their ratio assumes that a CPU's speed
does not change between those windows. On a virtual machine it may: the host can give a virtual
CPU less of a core for seconds at a time. This measures that, with none of stormlet involved:

- **all at once**: a process pinned to each CPU runs ``scaling_topology.enrich_event`` (dial
  ``--rounds``) for ``--seconds``, and prints per CPU the thread CPU time an event, slice by
  slice (``--slice`` seconds each): the median, the 10th and 90th percentiles, and the share of
  slices over 1.2 times the CPU's fastest tenth (its slow spells); then the same for a walk
  through a random cycle over ``--memory-kib`` KiB (past the core's own caches), nanoseconds
  a step: code that waits on memory, as the runtime's work between the user's batches does
  once those batches pushed its data out of the core's caches;
- **with a neighbour or alone**: the first CPU times the same work while the others' processes
  are busy in every other slice and idle in between, and prints the median ratio of the busy
  slices to the idle ones beside them: what the CPUs cost each other.

A slow spell shows as a CPU's thread CPU time a unit growing, since the thread is charged for
the time its virtual CPU runs slower (or waits longer on a cache the host shares). Where the
spells are long and frequent, compare scaling figures over many alternating windows, or within
one window per CPU (the busy time an event of the user's bolt, which scaling.py prints, is such
a reading).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scaling_topology as topo  # noqa: E402

# A slice this many times slower than its CPU's fastest tenth of slices is a slow one.
SLOW = 1.2
# Events between looks at the clock: short beside a slice, long beside the look.
BATCH = 20
# The memory walk: bytes a step touches (a list slot and an int object), the shuffle's seed, and
# what each slot's index is offset by (past the small ints CPython shares).
MEMORY_BYTES_A_STEP = 8 + 32
SEED = 1
OFFSET = 1_000_000


def slices(step: Callable[[], None], units: int, seconds: float, slice_secs: float) -> list[float]:
    """Calls ``step`` (which does ``units`` units of work a call) for ``seconds``: the thread
    CPU time a unit in each ``slice_secs`` slice, in microseconds. A slice's worth of calls
    before, untimed: what the set-up left in the caches would make the first slices fast."""
    warm_until = time.monotonic() + slice_secs
    while time.monotonic() < warm_until:
        step()
    figures = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cpu_start, wall_start, n = time.thread_time(), time.monotonic(), 0
        while time.monotonic() - wall_start < slice_secs:
            step()
            n += units
        figures.append((time.thread_time() - cpu_start) / n * 1e6)
    return figures


def work_step(rounds: int) -> Callable[[], None]:
    """A step of ``BATCH`` events' ``enrich_event`` with dial ``rounds``, the next events each
    call."""
    events = topo.make_events()
    position = iter(range(1 << 62))

    def step() -> None:
        for _ in range(BATCH):
            topo.enrich_event(events[next(position) % len(events)], rounds)

    return step


def work_slices(seconds: float, slice_secs: float, rounds: int) -> list[float]:
    """Microseconds of ``enrich_event`` an event, with dial ``rounds``, a slice."""
    return slices(work_step(rounds), BATCH, seconds, slice_secs)


def memory_slices(seconds: float, slice_secs: float, kib: int) -> list[float]:
    """Nanoseconds a step of a walk through a random cycle over ``kib`` KiB of a list's slots
    and its integers (each step waits for the one before: memory latency), a slice."""
    n = max(2, kib * 1024 // MEMORY_BYTES_A_STEP)
    order = list(range(n))
    random.Random(SEED).shuffle(order)
    after = [0] * n
    for here, there in zip(order, order[1:] + order[:1]):
        after[here] = there
    # Each slot holds the next index plus an offset, so that each is an int object of its own,
    # made in the slots' order: the walk meets them in random order too, not one after another.
    following = [there + OFFSET for there in after]
    del after
    at = [0]

    def step() -> None:
        i = at[0]
        for _ in range(BATCH * 100):
            i = following[i] - OFFSET
        at[0] = i

    return [figure * 1000 for figure in slices(step, BATCH * 100, seconds, slice_secs)]


def pinned(cpu: int, probe: str, seconds: float, slice_secs: float, size: int) -> list[float]:
    """``PROBES[probe]`` with this process pinned to ``cpu`` (it stays there)."""
    os.sched_setaffinity(0, {cpu})
    return PROBES[probe](seconds, slice_secs, size)


PROBES = {"work": work_slices, "memory": memory_slices}


def neighbour(cpu: int, busy, stop, rounds: int) -> None:
    """Runs the work on ``cpu`` while ``busy`` is set, idles while it is not, until ``stop``."""
    os.sched_setaffinity(0, {cpu})
    step = work_step(rounds)
    while not stop.value:
        if busy.value:
            step()
        else:
            time.sleep(0.001)


def alone_and_beside(cpus: list[int], pairs: int, slice_secs: float,
                     rounds: int) -> list[float]:
    """For ``pairs`` pairs of slices on the first CPU, one with the others' processes idle and
    one with them busy: each pair's ratio, busy over idle."""
    os.sched_setaffinity(0, {cpus[0]})
    context = multiprocessing.get_context("spawn")
    busy, stop = context.Value("i", 0), context.Value("i", 0)
    others = [context.Process(target=neighbour, args=(cpu, busy, stop, rounds))
              for cpu in cpus[1:]]
    for process in others:
        process.start()
    ratios = []
    step = work_step(rounds)
    try:
        time.sleep(1.0)   # the neighbours imported and idle
        for _ in range(pairs):
            idle_and_busy = []
            for state in (0, 1):
                busy.value = state
                time.sleep(0.05)   # the neighbours noticed
                idle_and_busy.append(statistics.median(
                    slices(step, BATCH, slice_secs, slice_secs / 5)))
            ratios.append(idle_and_busy[1] / idle_and_busy[0])
    finally:
        stop.value = 1
        for process in others:
            process.join()
    return ratios


def describe(figures: list[float], unit: str) -> str:
    """A CPU's slices in one line: their median, 10th and 90th percentiles, and the share of
    slow ones (``SLOW`` times the mean of the fastest tenth, or more)."""
    deciles = statistics.quantiles(figures, n=10) if len(figures) > 1 else figures * 9
    fastest = statistics.mean(sorted(figures)[:max(1, len(figures) // 10)])
    slow = sum(figure > SLOW * fastest for figure in figures) / len(figures)
    return (f"median {statistics.median(figures):6.2f} {unit}, 10th-90th percentile "
            f"{deciles[0]:6.2f}-{deciles[-1]:6.2f}, slow slices (over {SLOW}x the fastest "
            f"tenth) {slow:4.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--slice", type=float, default=0.5, help="seconds a figure")
    parser.add_argument("--rounds", type=int, default=40,
                        help="the user work's dial (scaling_topology.enrich_event)")
    parser.add_argument("--memory-kib", type=int, default=8192,
                        help="the memory walk's size: past the core's second-level cache")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    print(f"cpu speed: enrich_event at dial {args.rounds}, slices of {args.slice} s, CPUs {cpus}; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    for probe, size, unit in (("work", args.rounds, "µs an event"),
                              ("memory", args.memory_kib, "ns a step")):
        with multiprocessing.get_context("spawn").Pool(len(cpus)) as pool:
            series = pool.starmap(pinned, [(cpu, probe, args.seconds, args.slice, size)
                                           for cpu in cpus])
        print(f"{probe}, all CPUs at once, {args.seconds:.0f} s:")
        for cpu, figures in zip(cpus, series):
            print(f"  CPU {cpu}: {describe(figures, unit)}")
    if len(cpus) < 2:
        print("one CPU: no neighbour to measure")
        return
    pairs = max(1, int(args.seconds / (2 * args.slice)))
    ratios = alone_and_beside(cpus, pairs, args.slice, args.rounds)
    print(f"CPU {cpus[0]} with the others busy against idle, {pairs} pairs of slices: median "
          f"{statistics.median(ratios):.3f}x (pairs {min(ratios):.2f}-{max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
