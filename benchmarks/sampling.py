"""What tuple sampling (``stormlet debug``) costs: the local word count (benchmarks/wordcount.py)
with sampling off, at 1 % and at 100 % of every component's emitted tuples.

    python benchmarks/sampling.py [--seconds 4] [--rounds 7] [--basic]
    python benchmarks/sampling.py --alternate 100 [--window 1] [--basic] [--percent 0]
    python benchmarks/sampling.py --instructions [--sentences 20000]

Each run samples as a worker does (runtime/live_settings.py): the samples go to the in-memory
buffers and to a samples.jsonl file, written by the settings thread. Every run is a process of
its own (a run leaves garbage and a grown heap behind, which would slow the next one in the same
process). Each round runs the settings in another order, so that neither order nor a machine
growing busier or quieter weighs on one of them, and with one hash seed for all its runs. Each
round's change is against its own run with sampling off, and the figure is the median of the
rounds' changes (and of their rates), with the middle half of the changes: on this 2-core
machine the rate with sampling off alone varies by a fifth from run to run, so telling a few per
cent apart takes twenty rounds or more.
``--basic`` runs the split as a BasicBolt (the README's idiom: its emits go through the basic
collector), else as a Bolt anchoring by hand. Run it on a quiet machine.

``--alternate N`` measures in one run instead: the same topology, sampled at 1 % in N windows
between windows with sampling off (turned on and off at run time, as ``stormlet debug`` does),
each sampled window against the mean of its two neighbours; the figure is the median of the N
changes. The settings then share the process and the machine's moment, which runs of their own
do not. ``--percent 0`` leaves sampling off in every window: what the method makes of no change.

Instructions are steadier than seconds. ``--instructions`` runs the peer benchmark's word count
(benchmarks/peers: N sentences, acking on, the split as a BasicBolt and anchoring by hand) under
valgrind's callgrind with sampling off and at 1 % from the first emit, and prints the
instructions a word the executors execute (their steps, ``instructions.EXECUTOR_STEPS``, so the
settings thread's writing of the file is not in them) and the change.
Needs Debian's valgrind and the compiled hot path; about two minutes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import figures
from wordcount import WORDS_PER_SENTENCE, build

from stormlet import LocalCluster
from stormlet.runtime import build_mode
from stormlet.runtime.live_settings import LiveSettings
from stormlet.runtime.tuning import tune_for_streaming

SETTINGS = {"off": None, "1 %": 1.0, "100 %": 100.0}
PEERS = Path(__file__).resolve().parent / "peers"


@contextmanager
def sampled_word_count(basic: bool, path: Path) -> Iterator[tuple[LocalCluster, LiveSettings]]:
    """The word count running in this process with a worker's settings thread (its samples to
    ``path``), killed and the thread closed on leaving."""
    tune_for_streaming()   # as `stormlet local` and workers do
    conf = {"topology.max.spout.pending": 2000, "topology.acker.executors": 1}
    with LocalCluster() as cluster:
        cluster.submit("bench", conf, build(True, None, basic=basic))
        settings = LiveSettings(cluster.runtime("bench"), path).start()
        try:
            time.sleep(1.0)   # warm up
            yield cluster, settings
            settings.follow({"sampling": {}})
            cluster.kill("bench", wait_secs=5)
        finally:
            settings.close()


def sampling_at(percent: float | None) -> dict:
    """The settings thread's ``follow`` for every component sampled at ``percent`` (None or
    0: off)."""
    return {"sampling": {"*": {"percent": percent, "until": None}} if percent else {}}


def words(cluster: LocalCluster) -> int:
    return cluster.metrics("bench")["count"]["executed"]


def run(seconds: float, percent: float | None, basic: bool) -> dict:
    """Words per second counted while every component's emits are sampled at ``percent``
    (None: off), how many samples were made and how many written to the file."""
    with tempfile.TemporaryDirectory(prefix="stormlet-sampling-") as directory:
        path = Path(directory) / "samples.jsonl"
        with sampled_word_count(basic, path) as (cluster, settings):
            settings.follow(sampling_at(percent))
            start_words, start = words(cluster), time.monotonic()
            time.sleep(seconds)
            counted, elapsed = words(cluster) - start_words, time.monotonic() - start
        written = sum(1 for _ in path.open()) if path.exists() else 0
        sink = settings.samples
    return {"words_per_sec": counted / elapsed, "written": written,
            "made": written + sink.thinned + sink.dropped}


def alternating(pairs: int, window: float, percent: float, basic: bool) -> list[tuple]:
    """One topology in this process, sampled at ``percent`` in every other window of
    ``window`` seconds (off first and last): each sampled window's rate and its two
    neighbours' (off). Turned on and off at run time as ``stormlet debug`` does, the two settings
    share the process, its heap and the machine's moment, which runs of their own do not."""
    # 0: off in every window, which shows what the method itself makes of no change.
    on, off = sampling_at(percent), sampling_at(None)
    rates = []
    with tempfile.TemporaryDirectory(prefix="stormlet-sampling-") as directory, \
            sampled_word_count(basic, Path(directory) / "samples.jsonl") as (cluster, settings):
        for index in range(2 * pairs + 1):
            settings.follow(on if index % 2 else off)
            start_words, start = words(cluster), time.monotonic()
            time.sleep(window)
            rates.append((words(cluster) - start_words) / (time.monotonic() - start))
    return [(rates[i - 1], rates[i], rates[i + 1]) for i in range(1, len(rates) - 1, 2)]


def print_alternating(pairs: int, window: float, basic: bool, percent: float) -> None:
    split = "a BasicBolt" if basic else "a Bolt anchoring by hand"
    shown = f"{percent:g} %" if percent else "off (no change: the method's own error)"
    print(f"tuple sampling's cost, off and {shown} alternating in one run: word count, local mode, "
          f"acking on, split as {split}, {pairs} sampled windows of {window:g} s, python "
          f"{sys.version.split()[0]}; {build_mode.describe()}", flush=True)
    windows = alternating(pairs, window, percent, basic)
    changes = [100 * (on - (before + after) / 2) / ((before + after) / 2)
               for before, on, after in windows]
    low, middle, high = statistics.quantiles(changes, n=4)
    offs = [rate for before, _on, after in windows for rate in (before, after)]
    print(f"  sampling off  {statistics.median(offs):>10,.0f} words/s (median window)")
    print(f"  sampling {percent:g} %  {statistics.median(on for _b, on, _a in windows):>10,.0f} "
          f"words/s (median window)")
    print(f"  {percent:g} % against its neighbours off: {statistics.median(changes):+.1f} % "
          f"(median of {len(changes)} windows; half of them within {low:+.1f} % to "
          f"{high:+.1f} %)")


def counted_run(percent: float | None, sentences: int, mode: str) -> None:
    """The peer benchmark's word count of ``sentences``, sampled at ``percent`` from its first
    emit, to the last ack: what ``--instructions`` runs under callgrind."""
    sys.path.insert(0, str(PEERS))
    from run_stormlet import build as build_peers
    from run_stormlet import config, shared_sentences

    shared_sentences(sentences)
    with tempfile.TemporaryDirectory(prefix="stormlet-sampling-") as directory, \
            LocalCluster() as cluster:
        cluster.submit("peers", config(mode), build_peers(mode, sentences))
        cluster.deactivate("peers")   # sampling first: every emit is the sampled one
        settings = LiveSettings(cluster.runtime("peers"), Path(directory) / "samples.jsonl")
        settings.start()
        settings.follow(sampling_at(percent))
        spout, = cluster.instances("peers", "sentences")
        cluster.activate("peers")
        cluster.wait_for(lambda: spout.finished is not None, timeout=3600, interval=0.05)
        settings.close()


def instructions(percent_name: str, sentences: int, mode: str, workdir: Path) -> int:
    """Instructions the executors executed in ``counted_run``, counted by callgrind."""
    sys.path.insert(0, str(PEERS))
    from instructions import EXECUTOR_STEPS, event_totals

    # No "%" in the name: valgrind reads it as a format (%p: the pid).
    out = workdir / f"callgrind.{mode}.{percent_name.replace(' %', 'pct')}"
    command = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
               *(f"--toggle-collect={pattern}" for pattern in EXECUTOR_STEPS),
               f"--callgrind-out-file={out}", sys.executable, __file__, "--counted",
               percent_name, "--sentences", str(sentences), "--mode", mode]
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return event_totals(out)["Ir"]


def print_instructions(sentences: int) -> None:
    words = sentences * WORDS_PER_SENTENCE
    print(f"tuple sampling's cost in instructions a word (callgrind, the executors' steps), "
          f"{sentences:,} sentences ({words:,} words), python {sys.version.split()[0]}; "
          f"{build_mode.describe()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="stormlet-callgrind-") as workdir:
        for mode, label in (("basic", "split as a BasicBolt"),
                            ("anchored", "split anchoring by hand")):
            off = instructions("off", sentences, mode, Path(workdir)) / words
            on = instructions("1 %", sentences, mode, Path(workdir)) / words
            print(f"  {label:<26} off {off:8,.0f}   1 % {on:8,.0f}   "
                  f"{100 * (on - off) / off:+.1f} %", flush=True)


def in_own_process(seconds: float, name: str, basic: bool, seed: int) -> dict:
    """One run in a process of its own, hashing strings with ``seed``: the runs of a round
    share it, so that the words' places in the counts' dicts (which move a run's rate by several
    per cent) are the same for each setting."""
    command = [sys.executable, __file__, "--one", name, "--seconds", str(seconds)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONHASHSEED": str(seed)}
    out = subprocess.run(command + (["--basic"] if basic else []), capture_output=True,
                         text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--basic", action="store_true", help="the split as a BasicBolt")
    parser.add_argument("--alternate", type=int, metavar="N",
                        help="instead: N windows sampled between windows off, in one run")
    parser.add_argument("--percent", type=float, default=SETTINGS["1 %"],
                        help="with --alternate: the sampled windows' percentage (0: off too)")
    parser.add_argument("--window", type=float, default=2.0,
                        help="with --alternate: seconds a window")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help="the settings run beside off, comma-separated (default: 1 %%,100 %%)")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions under callgrind instead (see above)")
    parser.add_argument("--sentences", type=int, default=20_000,
                        help="with --instructions: the sentences of each run")
    parser.add_argument("--one", choices=list(SETTINGS), help=argparse.SUPPRESS)
    parser.add_argument("--counted", choices=list(SETTINGS), help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="basic", help=argparse.SUPPRESS)
    figures.add_flag(parser)
    args = parser.parse_args()
    if args.one:   # one run, in this process, for main's loop
        print(json.dumps(run(args.seconds, SETTINGS[args.one], args.basic)))
        return
    if args.counted:   # one run under callgrind, for print_instructions
        counted_run(SETTINGS[args.counted], args.sentences, args.mode)
        return
    if args.alternate:
        print_alternating(args.alternate, args.window, args.basic, args.percent)
        return
    if args.instructions:
        if build_mode.mode() != build_mode.COMPILED:
            sys.exit(f"counts the compiled hot path; {build_mode.describe()}")
        print_instructions(args.sentences)
        return
    split = "a BasicBolt" if args.basic else "a Bolt anchoring by hand"
    print(f"tuple sampling's cost: word count, local mode, acking on, split as {split}, "
          f"{WORDS_PER_SENTENCE} words/sentence, {args.seconds:g} s per run, {args.rounds} "
          f"rounds, a process per run, python {sys.version.split()[0]}; "
          f"{build_mode.describe()}", flush=True)
    names = ["off"] + [name.strip() for name in args.settings.split(",")
                       if name.strip() in SETTINGS and name.strip() != "off"]
    rates: dict[str, list[float]] = {name: [] for name in names}
    changes: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        results = {name: in_own_process(args.seconds, name, args.basic, seed=round_ + 1)
                   for name in order}
        off = results["off"]["words_per_sec"]
        line = []
        for name in names:
            rate = results[name]["words_per_sec"]
            rates[name].append(rate)
            changes[name].append(100 * (rate - off) / off)
            line.append(f"{name} {rate:>10,.0f}" + ("" if name == "off" else
                        f" ({changes[name][-1]:+.1f} %, {results[name]['made']:,} samples, "
                        f"{results[name]['written']:,} written)"))
        print(f"  round {round_ + 1}: " + "  ".join(line), flush=True)
    print("median of the rounds:")
    for name in names:
        change = ""
        if name != "off":
            change = (f"  {statistics.median(changes[name]):+.1f} % against off (median of the "
                      f"rounds' changes")
            if args.rounds > 1:
                low, _middle, high = statistics.quantiles(changes[name], n=4)
                change += f"; half of them within {low:+.1f} % to {high:+.1f} %"
            change += ")"
        print(f"  sampling {name:<6} {statistics.median(rates[name]):>10,.0f} words/s{change}")
    # LATEST.md's rows (benchmarks/diary.py renders them from the records): each setting's
    # change against its own round's run with sampling off.
    recorder = figures.Recorder("sampling", enabled=args.record)
    for name in names[1:]:
        # The spread goes with the median: on a busy machine it is wider than the change.
        spread = ""
        if args.rounds > 1:
            low, _middle, high = statistics.quantiles(changes[name], n=4)
            spread = f", half within {low:+.1f} to {high:+.1f} %"
        recorder.record(
            f"tuple sampling (`stormlet debug`) at {name} of every component's emits, the local "
            f"word count, split as {split}: words/s against sampling off",
            f"{statistics.median(changes[name]):+.1f} %",
            detail=f"median of {args.rounds} rounds' changes{spread}; "
                   f"{statistics.median(rates['off']):,.0f} words/s off")


if __name__ == "__main__":
    main()
