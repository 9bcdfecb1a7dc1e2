"""The floor under stormlet's runs: its own spout and bolts with no runtime around them.

    python benchmarks/peers/run_floor.py --sentences N [--check-values]
    python benchmarks/peers/run_floor.py --check    # compiles the helper, or says why not

run_stormlet.py's spout (acking off) and benchmarks/wordcount.py's split and count bolts, called
on one thread by the least any runtime with Storm's model must do (floor_collector.pyx, compiled
here with pyximport and the system C compiler): ``next_tuple`` once per sentence, a ``Tuple``
made for each emit (stormlet's own, compiled), each bolt's ``execute`` once per tuple, in bursts
of as many ``next_tuple`` calls as the spout executor makes between looks at its inbox. No
routing, value check, acking, queue, thread or metric. What stormlet's acking-off run takes
beyond this is the runtime's cost. ``--check-values`` adds the one part of that cost every emit
must pay whatever the runtime: stormlet's value check (``serialization.checked``), which refuses
a value msgpack cannot carry at the emit that made it. Prints one JSON line: seconds,
cpu_seconds, words and counts (``[[word, count], ...]``). Where the helper cannot be built (no C
compiler, or stormlet running interpreted), exits non-zero saying why.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_stormlet import CountBolt, SentenceSpout, SplitBolt, shared_sentences
from sentences import DEFAULT_N

import stormlet
from stormlet.runtime import build_mode
from stormlet.runtime.spout_executor import BURST
from stormlet.runtime.tuning import tune_for_streaming
from stormlet.tuples import StreamInfo

HERE = Path(__file__).resolve().parent
SCRIPT = Path(__file__).name   # as the runs of runs.py name it


def compiled_collector():
    """floor_collector, compiled now against this checkout's stormlet (a few seconds the first
    time, cached after in a build directory of its own)."""
    import pyximport
    package_root = Path(stormlet.__file__).resolve().parent.parent   # for its .pxd files
    checkout = hashlib.sha256(str(package_root).encode()).hexdigest()[:12]
    pyximport.install(build_dir=str(Path(tempfile.gettempdir()) / f"stormlet-floor-{checkout}"),
                      setup_args={"include_dirs": [str(package_root)]}, language_level=3)
    import floor_collector
    return floor_collector


def why_unavailable() -> str | None:
    """Why the floor cannot run here (its helper cannot be built), or None if it can. Builds
    the helper in a separate process, as the runs that follow would."""
    check = subprocess.run([sys.executable, str(HERE / SCRIPT), "--check"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check.returncode == 0:
        return None
    lines = check.stderr.strip().splitlines()
    return lines[-1] if lines else f"floor: --check exited with status {check.returncode}"


def run(floor, n: int, check_values: bool = False) -> dict:
    """Counts the words of the ``n`` shared sentences through ``floor`` (the compiled
    floor_collector), each emit's values checked if ``check_values``; its figures."""
    shared_sentences(n)
    spout_out = floor.Collector(StreamInfo("sentences", "default", SentenceSpout.outputs),
                                check_values)
    split_out = floor.Collector(StreamInfo("split", "default", SplitBolt.outputs), check_values)
    count_out = floor.Collector(StreamInfo("count", "default", CountBolt.outputs), check_values)
    spout, split, count = SentenceSpout(n, tracked=False), SplitBolt(), CountBolt()
    spout.open({}, None, spout_out)
    split.prepare({}, None, split_out)
    count.prepare({}, None, count_out)
    start, cpu_start = time.perf_counter(), time.process_time()
    floor.run(spout, spout_out, split, split_out, count, n, BURST)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {"seconds": seconds, "cpu_seconds": cpu, "words": sum(count.counts.values()),
            "counts": sorted(count.counts.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=DEFAULT_N)
    parser.add_argument("--check", action="store_true", help="build the helper and exit")
    parser.add_argument("--check-values", action="store_true",
                        help="check each emit's values, as every stormlet emit does")
    args = parser.parse_args()
    if build_mode.mode() != build_mode.COMPILED:
        sys.exit(f"floor: needs stormlet's compiled hot path; {build_mode.describe()}")
    try:
        floor = compiled_collector()
    except Exception as exc:  # noqa: BLE001 - any build or import failure: say it and stop
        sys.exit(f"floor: cannot build floor_collector.pyx: {type(exc).__name__}: "
                 f"{str(exc).splitlines()[0] if str(exc) else ''}")
    if args.check:
        return
    tune_for_streaming()  # as run_stormlet.py does
    print(json.dumps(run(floor, args.sentences, args.check_values)))


if __name__ == "__main__":
    main()
