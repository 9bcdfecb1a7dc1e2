"""Instructions a word for each stormlet run of the peer benchmark and for its floor, counted by
valgrind's callgrind: a figure that does not move with the machine's speed or load.

    python benchmarks/peers/instructions.py [--sentences 20000] [--top 10]
                                            [--only floor,basic,anchored,unacked] [--caches]

Each run is the peer benchmark's (runs.py) under ``valgrind --tool=callgrind``, counting every
thread the runtime starts (the executors' shared thread with its turns, and the runtime's other
threads: none of the main thread's set-up and polling), or for the floor only its loop. Counting
the executors' steps alone left out ~700 instructions a word of the runtime's own (a turn's
bookkeeping, and freeing a batch's tuples, which happens as the turn that ran it ends), and put
acking off 168 below the floor that it is really ~540 above.
Prints the instructions a word of each run and how many more than the floor's, then, for each
stormlet run, the stormlet functions that execute the most instructions a word themselves.

Instructions are not time: a cache miss or a thread handing over the GIL costs none, so
wordcount.py's words/s stays the figure that counts. This one tells whether a change removed work
when the change is smaller than what wall-clock runs on this machine can resolve: it does not move
with the machine's speed or load, only by a few tenths of a percent between runs of the same code
(the threads' interleaving changes how tuples are batched). A run takes 20-60 s (valgrind runs
the code ~50 times slower). Needs the compiled hot path and Debian's valgrind.

``--caches`` also simulates this machine's first two cache levels (sizes read from Linux's
/sys/devices/system/cpu/cpu0/cache: the first-level instruction and data caches, and the core's
second-level cache as callgrind's last level) and prints, a word, the misses in each.
callgrind models one core and no coherence traffic, so these are counts of what the code
touches, not times. (Without it callgrind's last level would be the shared third-level cache,
where this work barely misses.)
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import run_floor
from runs import RUNS, Run
from sentences import WORDS_PER_SENTENCE

import stormlet
from stormlet.runtime import build_mode

# The executors' steps, as compiled: each resumption of an executor's ``steps`` generator, whose
# body Cython names ``<class>_<n>generator`` (nested generators end in a digit and are not
# matched, since a second toggle inside would turn counting off). What sampling.py counts, so
# that the thread writing the samples is left out.
EXECUTOR_STEPS = ("__pyx_gb_8stormlet_7runtime_*Executor_?generator",
                  "__pyx_gb_8stormlet_7runtime_*Executor_??generator")
# What callgrind counts in here (toggled on entering a matching function, off on leaving it):
# each thread Python starts (CPython's ``thread_run``: the runtime's threads, not the main one),
# or the floor's loop.
COUNTED = {"run_stormlet.py": ("thread_run",),
           "run_floor.py": ("__pyx_pw_15floor_collector_*run",)}
# The floor first, so that each run after it can say how far beyond it it is.
MEASURED = sorted((run for run in RUNS if run.script in COUNTED),
                  key=lambda run: run.name != "floor")
# Linux's description of the first CPU's caches, and the ones --caches simulates:
# callgrind's option -> (level, type) in that description.
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
SIMULATED = {"--I1": (1, "Instruction"), "--D1": (1, "Data"), "--LL": (2, "Unified")}
# Misses a word --caches prints: (label, callgrind's events summed).
MISSES = (("L1i", ("I1mr",)), ("L1d", ("D1mr", "D1mw")), ("L2 code", ("ILmr",)),
          ("L2 data", ("DLmr", "DLmw")))
# The multipliers of the sizes in that description ("32K").
SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20}
# A line of callgrind_annotate's function table: "1,234 (12.34%)  file:function [object]".
FUNCTION_LINE = re.compile(r"^\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S+?):(\S+)(?:\s+\[(.+)\])?\s*$")
STORMLET_DIR = str(Path(stormlet.__file__).resolve().parent) + "/"


def core_caches(cache_dir: Path = CACHE_DIR) -> list[str]:
    """callgrind's options simulating the first-level caches and the core's second-level one
    (``--I1=size,ways,line`` ...), from Linux's description of them in ``cache_dir``; exits
    saying what is missing where that cannot be read."""
    found: dict[tuple[int, str], str] = {}
    for index in sorted(cache_dir.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
            ways = int((index / "ways_of_associativity").read_text())
            line = int((index / "coherency_line_size").read_text())
        except (OSError, ValueError):
            continue
        size_bytes = (int(size[:-1]) * SIZE_UNITS[size[-1]] if size[-1] in SIZE_UNITS
                      else int(size))
        found[(level, kind)] = f"{size_bytes},{ways},{line}"
    missing = [option for option, key in SIMULATED.items() if key not in found]
    if missing:
        sys.exit(f"--caches: {cache_dir} does not describe the caches for "
                 f"{', '.join(missing)} (not Linux, or a virtual machine that hides them)")
    return [f"{option}={found[key]}" for option, key in SIMULATED.items()]


def event_totals(out: Path) -> dict[str, int]:
    """Each event's total in callgrind's output file ``out`` (its ``events:`` and
    ``totals:`` lines)."""
    events: list[str] = []
    for line in out.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("totals:"):
            return dict(zip(events, (int(n) for n in line.split()[1:])))
    return {}


def count(run: Run, sentences: int, workdir: Path,
          caches: list[str]) -> tuple[int, Counter, dict[str, int]]:
    """Instructions counted in ``run``, per C function of stormlet's compiled modules the
    instructions it executed itself, and every event's total (with ``caches``, callgrind's
    cache options, the simulated misses too)."""
    out = workdir / f"callgrind.{run.name}"
    simulate = ["--cache-sim=yes", *caches] if caches else []
    cmd = ["valgrind", "--tool=callgrind", *simulate, "--collect-atstart=no",
           *(f"--toggle-collect={pattern}" for pattern in COUNTED[run.script]),
           f"--callgrind-out-file={out}",
           *run.command(sys.executable, sentences)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        sys.exit(f"FAILED: {run.name}: exit status {proc.returncode}\n{proc.stderr[-2000:]}")
    words = json.loads(lines[-1])["words"]
    if words != sentences * WORDS_PER_SENTENCE:
        sys.exit(f"FAILED: {run.name} counted {words:,} words of "
                 f"{sentences * WORDS_PER_SENTENCE:,}")
    table = subprocess.run(["callgrind_annotate", "--show=Ir", "--threshold=100", str(out)],
                           stdout=subprocess.PIPE, text=True, check=True).stdout
    own: Counter = Counter()
    for line in table.splitlines():
        match = FUNCTION_LINE.match(line)
        if match and match.group(4) and match.group(4).startswith(STORMLET_DIR):
            function = match.group(3).split("'")[0]   # 'N marks a recursion level
            own[function] += int(match.group(1).replace(",", ""))
    events = event_totals(out)
    total = events.get("Ir", 0)
    if total == 0:
        patterns = " or ".join(COUNTED[run.script])
        sys.exit(f"FAILED: {run.name}: callgrind counted nothing in {patterns} "
                 f"(renamed, or this python's symbols are stripped?)")
    return total, own, events


def readable(function: str) -> str:
    """Cython's C name of a function as its Python one: ``__pyx_f_8stormlet_7runtime_9collector_
    13BoltCollector__emit`` is ``stormlet.runtime.task_collectors.BoltCollector._emit``. Each name
    follows its length; a wrapper's (pw, pf) last name follows its index instead, so there a
    length counts only where another name follows it."""
    function = re.sub(r"(\.(constprop|isra|part|cold)(\.\d+)?)+$", "", function)  # gcc's clones
    match = re.match(r"__pyx_(pw|pf|f|tp_[a-z]+)_(.+)", function)
    if not match:
        return function
    kind, rest = match.groups()
    wrapper = kind in ("pw", "pf")
    names = []
    while (part := re.match(r"(\d+)(.*)", rest)):
        length, tail = int(part.group(1)), part.group(2)
        name, after = tail[:length], tail[length:]
        followed = re.match(r"_\d", after) if wrapper else (not after or after.startswith("_"))
        if len(name) < length or not followed:
            rest = tail if wrapper else rest   # a wrapper's index, then the method's name
            break
        names.append(name)
        rest = after[1:]
    if rest:
        names.append(rest)
    suffix = f" ({kind[3:]})" if kind.startswith("tp_") else ""
    return ".".join(names) + suffix


def main() -> None:
    names = [run.name for run in MEASURED]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--only", default=",".join(names), help="among: " + ", ".join(names))
    parser.add_argument("--top", type=int, default=10, help="functions listed per run")
    parser.add_argument("--caches", action="store_true",
                        help="also simulate this machine's L1 and L2 caches: misses a word")
    args = parser.parse_args()
    unknown = sorted(set(args.only.split(",")) - set(names))
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; choose among {', '.join(names)}")
    if args.sentences < 1:
        parser.error("--sentences must be at least 1")
    runs = [run for run in MEASURED if run.name in args.only.split(",")]
    missing = [tool for tool in ("valgrind", "callgrind_annotate") if not shutil.which(tool)]
    if missing:
        sys.exit(f"needs {' and '.join(missing)} (Debian's valgrind package)")
    if build_mode.mode() != build_mode.COMPILED:
        sys.exit(f"counts the compiled hot path's functions; {build_mode.describe()}")
    if any(run.script == run_floor.SCRIPT for run in runs) and (why := run_floor.why_unavailable()):
        print(f"{why}; skipped")   # built natively first: under valgrind it would take minutes
        runs = [run for run in runs if run.script != run_floor.SCRIPT]
    if not runs:
        sys.exit("nothing left to run")
    caches = core_caches() if args.caches else []
    words = args.sentences * WORDS_PER_SENTENCE
    print(f"instructions a word (callgrind), {args.sentences:,} sentences ({words:,} words), "
          f"python {sys.version.split()[0]}", flush=True)
    if caches:
        print(f"misses a word in simulated caches ({' '.join(caches)}): "
              f"{', '.join(label for label, _events in MISSES)}", flush=True)
    counted: dict[str, tuple[int, Counter, dict[str, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="stormlet-callgrind-") as workdir:
        for run in runs:
            total, own, events = counted[run.name] = count(run, args.sentences, Path(workdir),
                                                           caches)
            floor = counted["floor"][0] if "floor" in counted and run.name != "floor" else None
            beyond = f"  ({(total - floor) / words:+,.0f} beyond the floor)" if floor else ""
            misses = "".join(f"  {label} {sum(events.get(e, 0) for e in names) / words:5.2f}"
                             for label, names in MISSES) if caches else ""
            print(f"  {run.name:<9} {total / words:8,.0f}{beyond}{misses}", flush=True)
    for name, (_total, own, _events) in counted.items():
        if name == "floor" or not own:
            continue
        by_name: Counter = Counter()
        for function, n in own.items():   # a wrapper and its implementation count as one
            by_name[readable(function)] += n
        print(f"\n{name}: stormlet functions by their own instructions a word")
        for function, n in by_name.most_common(args.top):
            print(f"  {n / words:8,.1f}  {function}")


if __name__ == "__main__":
    main()
