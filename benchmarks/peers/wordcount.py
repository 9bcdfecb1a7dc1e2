"""Peer benchmark: the same word count through plain Python, Bytewax and stormlet, in one run.

    python benchmarks/peers/wordcount.py [--sentences 200000] [--repeat 1] [--only NAME,...]
                                         [--bytewax-python PATH]

Every run counts the words of the same N sentences (sentences.py), each in a fresh subprocess so
that one run's garbage does not slow the next, and reports its own time from the start of
processing until every sentence is fully processed (for stormlet's tracked runs: acked). Each
run's final counts must equal collections.Counter's exactly, or this exits non-zero. Prints
words/s (best of --repeat) and its ratio to Bytewax's. With --repeat R the runs take turns, R
rounds of each run once, so that a slow spell of the machine does not fall on one run alone, and
each run's ratio to Bytewax within each round is printed too, as the median over the rounds.

Bytewax runs with its own virtualenv's python (``bash benchmarks/peers/setup_bytewax.sh``; another
one through --bytewax-python or BYTEWAX_PYTHON), and is skipped, saying so, where that is absent.

The last rows are stormlet's floor (run_floor.py): the same spout and bolts called on one thread by
the least any runtime must do for them, so what a stormlet run takes beyond it is the runtime's
own cost; then the floor with the one part of that cost no stormlet emit can skip, its value
check. Both are skipped, saying why, where their compiled helper cannot be built.

With --record (or STORMLET_BENCH_RECORD=1) each run's words/s, ratio to Bytewax and words per
CPU-second also go to benchmarks/results/peers.jsonl, a row of LATEST.md's table each
(benchmarks/figures.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import run_floor
import run_stormlet
from runs import RUNS, Run
from sentences import DEFAULT_N, SEED, WORDS, WORDS_PER_SENTENCE, expected_counts, sentences

from stormlet.runtime import build_mode
from stormlet.runtime import threads as runner

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import figures  # noqa: E402  (benchmarks/figures.py, one folder up)

DEFAULT_BYTEWAX_PYTHON = HERE / ".venv-bytewax" / "bin" / "python"
SKIPPED = "bytewax: skipped (not installed: run bash benchmarks/peers/setup_bytewax.sh)"


def measure(run: Run, python: str, n: int, expected: dict[str, int]) -> dict:
    """One run in a fresh subprocess; its figures, once its counts are checked. Exits on a
    failed run or on counts that differ from ``expected``."""
    cmd = run.command(python, n)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # stderr shows as it comes
    if proc.returncode != 0:
        sys.exit(f"FAILED: {run.label}: exit status {proc.returncode} from {' '.join(cmd)}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    pairs = result["counts"]
    counts = dict(pairs)
    if len(counts) != len(pairs) or counts != expected:
        wrong = {w: (counts.get(w), expected.get(w)) for w in sorted(set(counts) | set(expected))
                 if counts.get(w) != expected.get(w)}
        sys.exit(f"FAILED: {run.label}: counts differ from collections.Counter's "
                 f"({len(pairs)} rows for {len(counts)} words; word: (got, expected)): {wrong}")
    return result


def bytewax_available(python: str) -> bool:
    if not Path(python).exists():
        return False
    probe = subprocess.run([python, "-c", "import bytewax"], capture_output=True)
    return probe.returncode == 0


def record_measure(run: Run, n: int) -> str:
    """A run's row in LATEST.md (whole, as --only may leave out any run)."""
    return f"peer word count, {n:,} sentences, a fresh process a run: {run.label}"


def record_detail(run: Run, baseline: dict | None, result: dict, median: float | None,
                  repeat: int, words: int) -> str:
    """What a run's row says beside its words/s: its ratio to Bytewax (and the median of the
    rounds' ratios), or Bytewax's version on Bytewax's own row; then its words per CPU-second,
    which a busy machine lowers less than words/s (the run waits for a core without CPU)."""
    per_cpu = f"{words / result['cpu_seconds']:,.0f} words per CPU-second"
    if run.name == "bytewax":
        compared = f"Bytewax {result['version']}"
    elif baseline is None:
        compared = "Bytewax not run"
    else:
        compared = f"{baseline['seconds'] / result['seconds']:.2f}× Bytewax"
        if median is not None:
            compared += f", median of rounds {median:.2f}×"
    return f"{compared}; {per_cpu}" + (f"; best of {repeat} rounds" if repeat > 1 else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=DEFAULT_N, metavar="N")
    parser.add_argument("--repeat", type=int, default=1, metavar="R",
                        help="R rounds of every run, best of R per run (default 1)")
    parser.add_argument("--only", default=",".join(r.name for r in RUNS),
                        help="comma-separated runs among: " + ", ".join(r.name for r in RUNS))
    parser.add_argument("--bytewax-python", metavar="PATH",
                        default=os.environ.get("BYTEWAX_PYTHON", str(DEFAULT_BYTEWAX_PYTHON)))
    figures.add_flag(parser)
    args = parser.parse_args()
    only = args.only.split(",")
    unknown = sorted(set(only) - {r.name for r in RUNS})
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; choose among "
                     f"{', '.join(r.name for r in RUNS)}")
    runs = [r for r in RUNS if r.name in only]

    expected = dict(expected_counts(sentences(args.sentences)))
    total = sum(expected.values())
    print(f"word count peers: {args.sentences:,} sentences, {total:,} words ({WORDS_PER_SENTENCE} "
          f"per sentence from a {len(set(WORDS))}-word vocabulary, seed {SEED}), "
          f"best of {args.repeat} rounds; python {sys.version.split()[0]}")
    print(f"stormlet: local mode, one process, spout -> split -> count (fields grouping), one task "
          f"each; topology.max.spout.pending {run_stormlet.MAX_SPOUT_PENDING} when acking; "
          f"executors {runner.describe(run_stormlet.config('basic'))}; {build_mode.describe()}")
    if any(r.name == "bytewax" for r in runs) and not bytewax_available(args.bytewax_python):
        print(SKIPPED)
        runs = [r for r in runs if r.name != "bytewax"]
    if any(r.script == run_floor.SCRIPT for r in runs) and (why := run_floor.why_unavailable()):
        print(f"{why}; skipped")
        runs = [r for r in runs if r.script != run_floor.SCRIPT]
    if not runs:
        sys.exit("nothing left to run")
    print("every run in its own process, its counts checked exactly against collections.Counter",
          flush=True)

    # Rounds, each run once a round: a slow spell of the machine (they outlast a run) then
    # falls on every run alike instead of on whichever run's tries it lasted through.
    rounds: list[dict[str, dict]] = []
    for _ in range(args.repeat):
        rounds.append({})
        for run in runs:
            python = args.bytewax_python if run.name == "bytewax" else sys.executable
            rounds[-1][run.name] = measure(run, python, args.sentences, expected)
    best = {run.name: min((r[run.name] for r in rounds), key=lambda result: result["seconds"])
            for run in runs}

    baseline = best.get("bytewax")
    width = max(len(r.label) for r in runs)
    # Each round's ratio is taken within the round, minutes apart at most: their median is
    # steadier than the ratio of bests when the machine's speed drifts between rounds.
    paired = baseline is not None and args.repeat > 1
    paired_head = f"  {'median of rounds':>16}" if paired else ""
    print(f"\n{'run':<{width}}  {'words/s':>11}  {'vs Bytewax':>10}{paired_head}  {'seconds':>7}  "
          f"{'cpu s':>6}")
    # LATEST.md's rows, one a run (benchmarks/diary.py renders them from the records).
    recorder = figures.Recorder("peers", enabled=args.record)
    for run in runs:
        result = best[run.name]
        rate = total / result["seconds"]
        ratio = f"{baseline['seconds'] / result['seconds']:.2f}x" if baseline else "n/a"
        median = None
        if paired:
            median = statistics.median(r["bytewax"]["seconds"] / r[run.name]["seconds"]
                                       for r in rounds)
        median_text = f"  {median:>15.2f}x" if median is not None else ""
        print(f"{run.label:<{width}}  {rate:>11,.0f}  {ratio:>10}{median_text}  "
              f"{result['seconds']:>7.2f}  {result['cpu_seconds']:>6.2f}")
        recorder.record(record_measure(run, args.sentences), rate, unit="words/s",
                        detail=record_detail(run, baseline, result, median, args.repeat,
                                              total))
    if baseline:
        print(f"Bytewax {baseline['version']} on python {baseline['python']} "
              f"({args.bytewax_python}), one worker (run_main)")
    else:
        print("vs Bytewax: n/a, Bytewax was not run, so there is nothing to compare against")


if __name__ == "__main__":
    main()
