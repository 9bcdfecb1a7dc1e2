"""Instructions a word for each stormlet run of the peer benchmark and for its floor, counted by
valgrind's callgrind: a figure that does not move with the machine's speed or load.

    python benchmarks/peers/instructions.py [--sentences 20000] [--only basic,anchored,unacked,floor]
                                            [--top 10]

Each run is run_stormlet.py (or run_floor.py) under ``valgrind --tool=callgrind``, counting only
the executors' threads (``--toggle-collect=thread_run``: the spout, the bolts and the acker, none
of the main thread's set-up and polling), or for the floor only its loop. Prints the instructions a
word of each run and how many more than the floor's, then, for each stormlet run, the stormlet
functions that execute the most instructions a word themselves.

Instructions are not time: a cache miss or a thread handing over the GIL costs none, so
wordcount.py's words/s stays the figure that counts. This one tells whether a change removed work
when the change is smaller than what wall-clock runs on this machine can resolve: it does not move
with the machine's speed or load, only by a few tenths of a percent between runs of the same code
(the threads' interleaving changes how tuples are batched; 5,634-5,645 a word for ``basic`` in four
runs). A run takes 20-60 s (valgrind runs the code ~50 times slower).
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

from sentences import WORDS_PER_SENTENCE

HERE = Path(__file__).resolve().parent
RUNS = {  # name: (script and its arguments, the function callgrind counts inside); floor first
    "floor": (["run_floor.py"], "__pyx_pw_15floor_collector_*run"),
    "basic": (["run_stormlet.py", "--mode", "basic"], "thread_run"),
    "anchored": (["run_stormlet.py", "--mode", "anchored"], "thread_run"),
    "unacked": (["run_stormlet.py", "--mode", "unacked"], "thread_run"),
}
# A line of callgrind_annotate's function table: "1,234 (12.34%)  file:function [object]".
FUNCTION_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+?):(\S+)(?:\s+\[(.+)\])?\s*$")


def count(name: str, sentences: int, workdir: Path) -> tuple[int, Counter]:
    """Instructions counted in run ``name`` and, per C function of stormlet's compiled modules,
    the instructions it executed itself."""
    script, toggle = RUNS[name]
    out = workdir / f"callgrind.{name}"
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={toggle}",
           f"--callgrind-out-file={out}", sys.executable, str(HERE / script[0]), *script[1:],
           "--sentences", str(sentences)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"FAILED: {name}: exit status {proc.returncode}\n{proc.stderr[-2000:]}")
    words = json.loads(proc.stdout.strip().splitlines()[-1])["words"]
    if words != sentences * WORDS_PER_SENTENCE:
        sys.exit(f"FAILED: {name} counted {words:,} words of {sentences * WORDS_PER_SENTENCE:,}")
    table = subprocess.run(["callgrind_annotate", "--threshold=100", str(out)],
                           stdout=subprocess.PIPE, text=True, check=True).stdout
    total, own = 0, Counter()
    for line in table.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        match = FUNCTION_LINE.match(line)
        if match and match.group(4) and "/stormlet/" in match.group(4):
            function = match.group(3).split("'")[0]   # 'N marks a recursion level
            own[function] += int(match.group(1).replace(",", ""))
    return total, own


def readable(function: str) -> str:
    """Cython's C name of a function as its Python one: ``__pyx_f_8stormlet_7runtime_9collector_
    13BoltCollector__emit`` is ``stormlet.runtime.collector.BoltCollector._emit`` (each name
    after its length; a wrapper's last name after its index instead)."""
    function = re.sub(r"(\.(constprop|isra|part|cold)(\.\d+)?)+$", "", function)  # gcc's clones
    match = re.match(r"__pyx_(pw|pf|f|tp_[a-z]+)_(.+)", function)
    if not match:
        return function
    kind, rest = match.groups()
    names = []
    while (part := re.match(r"(\d+)(.*)", rest)):
        length, tail = int(part.group(1)), part.group(2)
        name, after = tail[:length], tail[length:]
        if len(name) < length or (after and not after.startswith("_")):
            rest = tail   # not a length: a wrapper's index before the method's name
            break
        names.append(name)
        rest = after[1:]
    if rest:
        names.append(rest)
    suffix = f" ({kind[3:]})" if kind.startswith("tp_") else ""
    return ".".join(names) + suffix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--only", default=",".join(RUNS), help="among: " + ", ".join(RUNS))
    parser.add_argument("--top", type=int, default=10, help="functions listed per run")
    args = parser.parse_args()
    names = [name for name in RUNS if name in args.only.split(",")]
    unknown = sorted(set(args.only.split(",")) - set(RUNS))
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; choose among {', '.join(RUNS)}")
    missing = [tool for tool in ("valgrind", "callgrind_annotate") if not shutil.which(tool)]
    if missing:
        sys.exit(f"needs {' and '.join(missing)} (Debian's valgrind package)")
    if "floor" in names:   # built natively first: compiling under valgrind would take minutes
        check = subprocess.run([sys.executable, str(HERE / "run_floor.py"), "--check"],
                               stderr=subprocess.PIPE, text=True)
        if check.returncode != 0:
            print(f"{check.stderr.strip().splitlines()[-1]}; skipped")
            names.remove("floor")
    words = args.sentences * WORDS_PER_SENTENCE
    print(f"instructions a word (callgrind), {args.sentences:,} sentences ({words:,} words), "
          f"python {sys.version.split()[0]}", flush=True)
    counted: dict[str, tuple[int, Counter]] = {}
    with tempfile.TemporaryDirectory(prefix="stormlet-callgrind-") as workdir:
        for name in names:
            counted[name] = count(name, args.sentences, Path(workdir))
            total = counted[name][0]
            floor = counted.get("floor", (None,))[0]
            beyond = (f"  ({(total - floor) / words:+,.0f} beyond the floor)"
                      if floor and name != "floor" else "")
            print(f"  {name:<9} {total / words:8,.0f}{beyond}", flush=True)
    for name, (_total, own) in counted.items():
        if name == "floor" or not own:
            continue
        by_name = Counter()
        for function, n in own.items():   # a wrapper and its implementation count as one
            by_name[readable(function)] += n
        print(f"\n{name}: stormlet functions by their own instructions a word")
        for function, n in by_name.most_common(args.top):
            print(f"  {n / words:8,.1f}  {function}")


if __name__ == "__main__":
    main()
