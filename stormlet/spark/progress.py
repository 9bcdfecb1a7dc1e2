"""Progress of a running Spark job (a backfill, a replay's planning), reported every few seconds
from a thread on the driver: the step (which stage runs, what is written where), the partitions
done in the running Spark stages, and what the job says it has done so far (a backfill: what its
finished tasks processed, from its accumulator). A status call that races the job's end is
ignored, never fatal to the job.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)


class Progress:
    """Reports every ``interval`` seconds while the job runs: the step, the tasks done in the
    running stages, and ``so_far()`` (what the job has done, or "")."""

    def __init__(self, spark: Any, report: Callable[[str], None], interval: float = 5.0,
                 so_far: Callable[[], str] = lambda: ""):
        self._tracker = spark.sparkContext.statusTracker()
        self._so_far = so_far
        self._report = report
        self._interval = interval
        self._started = time.monotonic()
        self._stop = threading.Event()
        self.step = "starting"
        self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def begin(self, step: str) -> None:
        self.step = step
        self._report(f"[{self.elapsed():.0f}s] {step}")

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._report(self.line())
            except Exception as exc:  # a status call racing the job's end must not kill it
                log.debug("progress: %s", exc)

    def line(self) -> str:
        tracker = self._tracker
        running = []
        for job_id in tracker.getActiveJobsIds():
            job = tracker.getJobInfo(job_id)
            stage_ids = sorted(job.stageIds) if job is not None else []
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None and stage_id in stage_ids:
                    running.append(f"Spark stage {stage_ids.index(stage_id) + 1} of "
                                   f"{len(stage_ids)}, {info.numCompletedTasks}/{info.numTasks} "
                                   f"partitions done")
        text = f"[{self.elapsed():.0f}s] {self.step}"
        if running:
            text += ": " + "; ".join(running)
        so_far = self._so_far()
        return f"{text}; {so_far}" if so_far else text
