"""Shared test configuration: the mock Kafka fixture, each phase's report kept on its test, and the
markers that say what a test starts (registered in pyproject.toml).

The markers are derived here, so they cannot go stale:

- from the fixtures a test uses, directly or through other fixtures (``SERVICE_FIXTURES``);
- from the directory: everything under ``tests/chaos/`` is ``chaos``;
- from explicit marks, for the few tests that start a service themselves, without a fixture;
- ``cluster`` implies ``zookeeper``, ``chaos`` and ``multi_host`` imply ``cluster``, and every
  service marker implies ``slow``, so ``pytest -m "not slow"`` is the inner loop. (A few tests
  that start no service but wait out seconds by design carry ``@pytest.mark.slow`` themselves,
  and tests of seconds that run no hot-path code ``support.compiled_run_only``: CI's interpreted
  run, ``-m "not slow"``, would run their code exactly as its compiled run did.)

A guard keeps them honest: a test that starts ZooKeeper, a cluster daemon, the mock Kafka broker,
a Spark session or standalone cluster, or a browser without carrying the matching marker fails,
saying which marker it lacks.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

# The mock Kafka broker fixture, for every test module that names it.
from kafka_mock import mock_kafka  # noqa: F401

# Fixture name -> the markers of every test that uses it. A fixture that starts one of these
# services belongs here (the guard below fails the tests of one that is missing).
SERVICE_FIXTURES = {
    "mock_kafka": ("kafka",),      # kafka_mock.py: librdkafka's mock broker
    "spark": ("spark",),           # test_replay.py, test_backfill.py: a local Spark session
    "spark_cluster": ("spark",),   # spark_cluster.py: a Spark standalone master and worker
    "browser": ("browser",),       # test_ui_browser.py: chromium through Playwright
    "cluster": ("cluster",),       # test_cluster.py, test_cluster_metrics.py: a LoopbackCluster
    "multi_host": ("multi_host",),  # multi_host.py: a cluster over network namespaces
}
# A multi-host cluster runs the same daemons and ZooKeeper, on hosts of its own.
IMPLIED = {"chaos": ("cluster",), "cluster": ("zookeeper",), "multi_host": ("cluster",)}
SERVICE_MARKERS = ("zookeeper", "cluster", "spark", "kafka", "browser", "chaos", "multi_host")
TESTS_DIR = Path(__file__).resolve().parent
CHAOS_DIR = TESTS_DIR / "chaos"

# Test modules import the helpers here (``from support import running``) and each other
# (``from test_streamparse import FEATURES``) by bare name, from whichever folder of tests/ they
# are in: tests/ comes first on the path (pytest puts a rootdir conftest's folder there), each
# folder of test modules after everything else (their names, test_*, shadow nothing). The chaos
# suite's folder stays off: its modules (run.py, harness.py) are found from its own tests.
for _folder in [TESTS_DIR, *sorted({p.parent for p in TESTS_DIR.glob("*/test_*.py")})]:
    if _folder != CHAOS_DIR and str(_folder) not in sys.path:
        if _folder == TESTS_DIR:
            sys.path.insert(0, str(_folder))
        else:
            sys.path.append(str(_folder))


def pytest_configure(config):
    # Registered here rather than in pyproject.toml's list, beside the fixture that applies it.
    config.addinivalue_line(
        "markers", "multi_host: starts a cluster across hosts made of network namespaces "
                   "(root, ip and nft; deploy/netns.sh install; implies cluster)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set()
        for fixture in item.fixturenames:
            names.update(SERVICE_FIXTURES.get(fixture, ()))
        if CHAOS_DIR in Path(item.path).resolve().parents:
            names.add("chaos")
        names.update(m.name for m in item.iter_markers() if m.name in SERVICE_MARKERS)
        pending = list(names)
        while pending:
            for implied in IMPLIED.get(pending.pop(), ()):
                if implied not in names:
                    names.add(implied)
                    pending.append(implied)
        if names:
            names.add("slow")
        for name in sorted(names):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the test item, so fixtures can tell whether the test failed.
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


# ----- the guard: starting a service needs its marker

# (module, class, method, marker, what it starts): patched as soon as the module is imported,
# to fail an unmarked test at the moment it starts the service.
GUARDED = [
    ("zookeeper_server", "ZooKeeperServer", "start", "zookeeper", "a ZooKeeper server"),
    ("cluster_support", "Daemon", "start", "cluster", "a stormlet cluster daemon"),
    ("kafka_mock", "MockKafkaCluster", "__init__", "kafka", "the mock Kafka broker"),
    ("pyspark.context", "SparkContext", "_ensure_initialized", "spark", "a Spark session"),
    ("spark_cluster", "SparkCluster", "start", "spark", "a Spark standalone cluster"),
    ("playwright.sync_api", "BrowserType", "launch", "browser", "a browser"),
    ("playwright.sync_api", "BrowserType", "launch_persistent_context", "browser", "a browser"),
]
_patched: set[tuple[str, str, str]] = set()
_running: pytest.Item | None = None     # the test whose setup, call or teardown is running


def _require(item: pytest.Item | None, marker: str, what: str) -> None:
    if item is not None and item.get_closest_marker(marker) is None:
        pytest.fail(f"{item.nodeid} starts {what} but is not marked {marker!r}: use a fixture "
                    f"named in tests/conftest.py's SERVICE_FIXTURES, or mark the test "
                    f"@pytest.mark.{marker}", pytrace=False)


def _guarded_call(function, marker: str, what: str):
    @functools.wraps(function)
    def guarded(*args, **kwargs):
        _require(_running, marker, what)
        return function(*args, **kwargs)
    return guarded


def _guard_imported_services() -> None:
    for module_name, class_name, method, marker, what in GUARDED:
        key = (module_name, class_name, method)
        module = sys.modules.get(module_name)
        if key in _patched or module is None:
            continue
        cls = getattr(module, class_name, None)
        raw = cls.__dict__.get(method) if cls is not None else None
        if raw is None:
            continue
        _patched.add(key)
        if isinstance(raw, classmethod):
            setattr(cls, method, classmethod(_guarded_call(raw.__func__, marker, what)))
        else:
            setattr(cls, method, _guarded_call(raw, marker, what))


def _spark_context():
    context = sys.modules.get("pyspark.context")
    return context.SparkContext._active_spark_context if context else None


def _guarding(item: pytest.Item):
    """Runs one phase of ``item`` with the guard on; a Spark session that appeared during it
    (pyspark imported by the test itself, too late to be patched) needs the marker as well."""
    global _running
    _guard_imported_services()
    before = _spark_context()
    _running = item
    try:
        result = yield
    finally:
        _running = None
    if _spark_context() not in (None, before):
        _require(item, "spark", "a Spark session")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarding(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarding(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _guarding(item))


_guard_imported_services()   # kafka_mock, imported above
