"""Helpers shared by the tests that run topologies in a LocalCluster."""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from stormlet import LocalCluster
from stormlet import config as cfg

#: For a test of seconds that runs no hot-path code (stormlet.runtime.build_mode.HOT_MODULES),
#: neither in its own process nor in one it starts: CI's second, interpreted run (-m "not slow")
#: would only run again the very code its compiled run has just proven, so such a test runs in the
#: compiled run (and any full run) only. "slow" is how the interpreted run leaves a test out.
compiled_run_only = pytest.mark.slow


class InjectedFault:
    """The one fault a test injects into the components it runs in this process (local mode):
    the test ``arm``s it by name before the run; a component asks ``fire(name)`` where that
    fault would strike, which is True once, for the armed fault only (whichever executor thread
    asks first); afterwards ``fired(name)`` tells the test it struck."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: str | None = None
        self._struck = False

    def arm(self, name: str) -> None:
        with self._lock:
            self._armed, self._struck = name, False

    def fire(self, name: str) -> bool:
        with self._lock:
            if self._armed != name or self._struck:
                return False
            self._struck = True
            return True

    def fired(self, name: str) -> bool:
        return self._armed == name and self._struck


def exactly_conf(tmp_path: Path, **more: object) -> dict:
    """The local tests' config of topology.guarantee effectively-once: the embedded store under
    ``tmp_path / "state"``, a checkpoint every 100 ms, a message timeout of 3 s (so a lost tuple
    is replayed soon); ``more`` adds or overrides keys."""
    return {cfg.TOPOLOGY_GUARANTEE: cfg.EFFECTIVELY_ONCE,
            cfg.TOPOLOGY_STATE_PROVIDER: "embedded",
            cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: {"dir": str(tmp_path / "state")},
            cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS: 100,
            cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS: 3, **more}


@contextmanager
def running(topology, conf, name="test"):
    """A LocalCluster running ``topology``; killed without waiting at the end if still running."""
    with LocalCluster() as cluster:
        cluster.submit(name, conf, topology)
        try:
            yield cluster
        finally:
            if name in cluster.topologies():
                cluster.kill(name, wait_secs=0)


def wait_until(condition: Callable[[], object], timeout: float, what: str,
               interval: float = 0.1) -> None:
    """Poll ``condition`` every ``interval`` seconds until it holds; AssertionError after
    ``timeout`` seconds, naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class SteppedClock:
    """Stands for the ``time`` module in a module under test (``monkeypatch.setattr(module,
    "time", SteppedClock())``): its monotonic clock moves only when the test moves ``now``,
    starting from the real one; everything else (time.time, time.sleep...) is the real one."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


@contextmanager
def imported_from(folder: Path, name: str, tree: Path | None = None) -> Iterator[ModuleType]:
    """Module ``name`` imported from ``folder`` (a benchmark's, say); afterwards the folder
    leaves sys.path and the modules imported meanwhile from under ``tree`` (default: the
    folder) leave sys.modules, so that no other test imports them by their plain names."""
    path_before, modules_before = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path[:] = path_before
        for loaded in set(sys.modules) - modules_before:
            if (getattr(sys.modules[loaded], "__file__", None) or "").startswith(
                    str(tree or folder)):
                del sys.modules[loaded]


def whole_json_lines(path: Path) -> list[Any]:
    """The JSON values of ``path``'s lines, the whole ones only: a file another process or
    thread appends to (a worker's samples.jsonl) may be read part way through a line."""
    whole = path.read_text().rpartition("\n")[0]
    return [json.loads(line) for line in whole.splitlines() if line]


#: The benchmarks' folder, whose scripts the tests of tests/benchmarks import by plain name.
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmark_module(name: str, fixture: str | None = None) -> Any:
    """A module-scoped fixture (named ``fixture``, else ``name``) that yields benchmark module
    ``name`` imported from ``BENCHMARKS`` (``imported_from``)."""
    @pytest.fixture(scope="module", name=fixture or name)
    def module() -> Iterator[ModuleType]:
        with imported_from(BENCHMARKS, name) as imported:
            yield imported
    return module
