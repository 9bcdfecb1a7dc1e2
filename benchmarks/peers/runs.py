"""The runs of the peer benchmark: each a script of this folder, run in a fresh process, that
prints one JSON line with its figures and counts (wordcount.py runs them all, instructions.py
stormlet's and the floor under callgrind)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Run:
    name: str  # for --only
    label: str  # for the table
    script: str
    args: tuple[str, ...] = ()

    def command(self, python: str, sentences: int) -> list[str]:
        """The command line of this run over ``sentences`` sentences with ``python``."""
        return [python, str(HERE / self.script), *self.args, "--sentences", str(sentences)]


RUNS = (
    Run("python", "plain Python loop (split + dict)", "run_plain.py"),
    Run("bytewax", "Bytewax, TestingSource batch_size 1000", "run_bytewax.py"),
    Run("basic", "stormlet, acking on, BasicBolt split", "run_stormlet.py", ("--mode", "basic")),
    Run("anchored", "stormlet, acking on, Bolt anchoring", "run_stormlet.py",
        ("--mode", "anchored")),
    Run("unacked", "stormlet, acking off", "run_stormlet.py", ("--mode", "unacked")),
    Run("floor", "stormlet's spout and bolts, no runtime", "run_floor.py"),
    Run("checked", "the same, each emit's values checked", "run_floor.py", ("--check-values",)),
)
