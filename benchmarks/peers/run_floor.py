"""The floor under stormlet's runs: its own spout and bolts with no runtime around them.

    python benchmarks/peers/run_floor.py --sentences N
    python benchmarks/peers/run_floor.py --check    # compiles the helper, or says why not

run_stormlet.py's spout (acking off) and benchmarks/wordcount.py's split and count bolts, called
on one thread by the least any runtime with Storm's model must do (floor_collector.pyx, compiled
here with pyximport and the system C compiler): ``next_tuple`` once per sentence, a ``Tuple``
made for each emit (stormlet's own, compiled), each bolt's ``execute`` once per tuple, in bursts
of ``topology.transfer.batch.size`` sentences as the spout executor runs them. No routing, value
check, acking, queue, thread or metric. What stormlet's acking-off run takes beyond this is the
runtime's cost. Prints one JSON line: seconds, cpu_seconds, words and counts (``[[word, count],
...]``). Where the helper cannot be built (no C compiler, or stormlet running interpreted), exits
non-zero saying why.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import stormlet
from stormlet import build_mode, config
from stormlet.runtime.tuning import tune_for_streaming
from stormlet.tuples import StreamInfo

from sentences import DEFAULT_N

from run_stormlet import SentenceSpout, shared_sentences

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from wordcount import CountBolt, SplitBolt  # noqa: E402

BURST = config.DEFAULTS[config.TOPOLOGY_TRANSFER_BATCH_SIZE].default


def compiled_collector():
    """floor_collector, compiled now (a few seconds the first time, cached after)."""
    import pyximport
    package_root = str(Path(stormlet.__file__).resolve().parent.parent)  # for its .pxd files
    pyximport.install(build_dir=str(Path(tempfile.gettempdir()) / "stormlet-floor-build"),
                      setup_args={"include_dirs": [package_root]}, language_level=3)
    import floor_collector
    return floor_collector


def run(n: int) -> dict:
    floor = compiled_collector()
    shared_sentences(n)
    spout_out = floor.Collector(StreamInfo("sentences", "default", SentenceSpout.outputs))
    split_out = floor.Collector(StreamInfo("split", "default", SplitBolt.outputs))
    spout, split, count = SentenceSpout(n, tracked=False), SplitBolt(), CountBolt()
    spout.open({}, None, spout_out)
    split.prepare({}, None, split_out)
    count.prepare({}, None, split_out)
    start, cpu_start = time.perf_counter(), time.process_time()
    floor.run(spout, spout_out, split, split_out, count, n, BURST)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {"seconds": seconds, "cpu_seconds": cpu, "words": sum(count.counts.values()),
            "counts": sorted(count.counts.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=DEFAULT_N)
    parser.add_argument("--check", action="store_true", help="build the helper and exit")
    args = parser.parse_args()
    if build_mode.mode() != build_mode.COMPILED:
        sys.exit(f"floor: needs stormlet's compiled hot path; {build_mode.describe()}")
    try:
        compiled_collector()
    except Exception as exc:  # noqa: BLE001 - any build or import failure: say it and stop
        sys.exit(f"floor: cannot build floor_collector.pyx: {type(exc).__name__}: "
                 f"{str(exc).splitlines()[0] if str(exc) else ''}")
    if args.check:
        return
    tune_for_streaming()  # as run_stormlet.py does
    print(json.dumps(run(args.sentences)))


if __name__ == "__main__":
    main()
