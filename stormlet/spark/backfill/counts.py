"""The counts a backfill reports per component: tuples executed, acked and failed, errors raised
or reported, bad input records, tuples emitted per stream, and a few samples of the errors' text.

Each task keeps its own (``TaskCounts``) and adds them, once it is done, to one Spark accumulator
(``Tally``), which sums them per component on the driver: nothing is counted per tuple across
processes.
"""

from __future__ import annotations

from typing import Any

SAMPLES = 5          # error messages kept per component


class Tally:
    """Spark accumulator parameter for per-component counts: ``{component: {name: n,
    "emitted": {stream: n}, "samples": [error text, ...]}}``. Duck-typed as pyspark's
    ``AccumulatorParam`` so importing this module does not need pyspark."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, total: dict, more: dict) -> dict:   # pyspark's name for it
        for component, counts in more.items():
            mine = total.setdefault(component, {})
            for key, value in counts.items():
                if key == "samples":
                    mine[key] = (mine.get(key, []) + value)[:SAMPLES]
                elif key == "emitted":
                    emitted = mine.setdefault(key, {})
                    for stream, n in value.items():
                        emitted[stream] = emitted.get(stream, 0) + n
                else:
                    mine[key] = mine.get(key, 0) + value
        return total


def processed_so_far(tally: Any) -> str:
    """What the finished tasks processed so far, for the progress line: per component, the
    tuples it executed, or for the spout the messages the input emitted."""
    def processed(counts: dict[str, Any]) -> int:
        if counts.get("executed"):
            return int(counts["executed"])
        return sum(counts.get("emitted", {}).values())

    so_far = ", ".join(f"{c} {processed(n):,}" for c, n in dict(tally.value).items())
    return f"finished partitions processed {so_far}" if so_far else ""


class TaskCounts:
    """One task's counts, and the first ``SAMPLES`` error messages (each cut to 300 characters)."""

    __slots__ = ("executed", "acked", "failed", "errors", "reported", "bad_input", "samples")

    def __init__(self) -> None:
        self.executed = self.acked = self.failed = self.errors = self.reported = 0
        self.bad_input = 0
        self.samples: list[str] = []

    def sample(self, text: str) -> None:
        if len(self.samples) < SAMPLES:
            self.samples.append(text if len(text) <= 300 else text[:297] + "...")

    def error(self, text: str) -> None:
        """An exception from the bolt (prepare, execute, cleanup), described by ``text``."""
        self.errors += 1
        self.sample(text)

    def bad_record(self, text: str) -> None:
        """An input record that does not make a tuple of the spout, described by ``text``."""
        self.bad_input += 1
        self.sample(text)

    def as_dict(self, emitted: dict[str, int]) -> dict[str, Any]:
        """What the task adds to the ``Tally``, with its tuples ``emitted`` per stream."""
        counts = {name: getattr(self, name) for name in self.__slots__ if name != "samples"}
        counts["tasks"] = 1
        counts["emitted"] = emitted
        counts["samples"] = self.samples
        return counts
