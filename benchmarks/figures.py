"""What a benchmark prints, recorded: one JSON line per figure in ``benchmarks/results/``.

A benchmark makes one :class:`Recorder` and hands it each figure it prints::

    figures = Recorder("wordcount", enabled=args.record)
    figures.record("the same, acking off", off["words_per_sec"], unit="words/s")

With ``--record`` (:func:`add_flag`) or ``STORMLET_BENCH_RECORD=1`` each call appends a line to
``benchmarks/results/<benchmark>.jsonl``: the measure, its value, and what it was measured on
(date, the git commit of the stormlet it imported, build mode, Python, the machine's load
average). Without either it writes nothing, so test runs of a benchmark leave the results alone
(a test that records sets ``STORMLET_BENCH_RESULTS`` to a folder of its own).
``benchmarks/diary.py`` renders ``LATEST.md``'s table from the latest line of each measure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import stormlet
from stormlet.runtime import build_mode

RESULTS = Path(__file__).resolve().parent / "results"
RECORD_ENV = "STORMLET_BENCH_RECORD"
RESULTS_ENV = "STORMLET_BENCH_RESULTS"
REPO = Path(__file__).resolve().parent.parent

Value = int | float | str | Sequence[int | float | str]


def add_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--record``: append this run's figures to ``benchmarks/results/``."""
    parser.add_argument("--record", action="store_true",
                        help=f"append the figures to benchmarks/results/ (or {RECORD_ENV}=1)")


def recording_asked(flag: bool = False) -> bool:
    """Whether to record: the ``--record`` flag or ``STORMLET_BENCH_RECORD=1``."""
    return flag or os.environ.get(RECORD_ENV, "") not in ("", "0")


def this_command() -> str:
    """The command that is running, as typed from the repository's root (``--record`` left out)."""
    script = Path(sys.argv[0]).resolve()
    try:
        script_text = str(script.relative_to(REPO))
    except ValueError:
        script_text = str(script)
    args = [a for a in sys.argv[1:] if a != "--record"]
    return " ".join(["python", script_text, *map(shlex.quote, args)])


def spark_label(master: str) -> str:
    """How a measure names the Spark it ran on: LATEST.md's rows say "local Spark, 2 cores"."""
    return "local Spark, 2 cores" if master == "local[2]" else f"Spark {master}"


def code_commit(package: Path) -> str | None:
    """The commit of the code in ``package`` (a folder in a git work tree): its tree's HEAD,
    with "+" when files under ``package`` differ from it; None outside a work tree (an installed
    copy). The benchmarks import stormlet from wherever the interpreter finds it (an editable
    install may point at another work tree than this script's), so the record names that."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(package), *args], capture_output=True,
                                 text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return None
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return head + ("+" if changed else "")


def _commit() -> str | None:
    return code_commit(Path(stormlet.__file__).resolve().parent)


class Recorder:
    """Records one benchmark's figures, if asked (see the module's docstring)."""

    def __init__(self, benchmark: str, *, enabled: bool = False, command: str | None = None,
                 results: Path | None = None):
        self.benchmark = benchmark
        self.enabled = recording_asked(enabled)
        self.command = command or this_command()
        # The folder: given, else STORMLET_BENCH_RESULTS's (a test's own), else results/.
        results = results or Path(os.environ.get(RESULTS_ENV) or RESULTS)
        self.path = results / f"{benchmark}.jsonl"
        self._context: dict | None = None

    def context(self) -> dict:
        """What every record of this run carries: when, which code, built how (the load is each
        record's own, read as it is recorded: a run's figures are measured minutes apart)."""
        if self._context is None:
            self._context = {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "commit": _commit(),
                "build": build_mode.mode(),
                "python": platform.python_version(),
            }
        return self._context

    def record(self, measure: str, value: Value, *, unit: str = "", detail: str = "",
               command: str | None = None) -> dict | None:
        """Append one figure (a number, a text, or several shown as ``a / b``); the record, or
        None when not recording. ``measure`` is the row of LATEST.md's table it fills."""
        if not self.enabled:
            return None
        if not isinstance(value, (int, float, str)):
            value = list(value)
        entry = {"benchmark": self.benchmark, "measure": measure, "value": value, "unit": unit,
                 "detail": detail, "command": command or self.command,
                 "load": [round(x, 2) for x in os.getloadavg()], **self.context()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return entry
