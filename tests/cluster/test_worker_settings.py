"""A worker's settings in its topology's config, without a cluster: how they are checked
(``topology.environment``, ``topology.worker.childopts``, ``topology.worker.max.heap.size.mb``),
the environment and command line a supervisor gives a worker, and how it stops and reports one
over its memory limit. tests/cluster/test_cluster_worker_settings.py runs them on a cluster."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import types

import pytest
from kazoo.protocol.states import KazooState

from stormlet import config as cfg
from stormlet.cluster.error_reports import topology_error_summary, topology_errors
from stormlet.cluster.memory_limit import Overruns, overrun_text, resident_mb
from stormlet.cluster.security import SECRET_FILE_ENV, WORKER_CREDENTIALS_ENV, Security
from stormlet.cluster.supervisor import Supervisor, WorkerProcess
from stormlet.cluster.worker_command import (
    PORT_OPTION,
    WORKER_MODULE_ARGS,
    is_worker,
    worker_command,
)

ENV = cfg.TOPOLOGY_ENVIRONMENT
OPTS = cfg.TOPOLOGY_WORKER_CHILDOPTS
LIMIT = cfg.TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB


# ----- the checks

def test_settings_a_worker_can_use_pass_the_checks():
    for key, value in [(ENV, None), (ENV, {}), (ENV, {"GREETING": "hi", "PATH": "/opt/bin"}),
                       (OPTS, None), (OPTS, []), (OPTS, ["-X", "importtime", "-W", "error"]),
                       (OPTS, "-X importtime -OO -Wdefault"), (LIMIT, None), (LIMIT, 150),
                       (LIMIT, 0.5)]:
        assert cfg.problem(key, value) is None, (key, value)


@pytest.mark.parametrize("value, why", [
    (["GREETING=hi"], ""),
    ({"": "x"}, "'' is no variable name"),
    ({"A=B": "x"}, "'A=B' is no variable name"),
    ({"A\0B": "x"}, "is no variable name"),
    ({3: "x"}, "3 is no variable name"),
    ({"GREETING": 3}, "the value of GREETING is not a string"),
    ({"GREETING": "a\0b"}, "the value of GREETING holds a NUL character"),
    # Stormlet's own: a worker's credentials, the cluster secret's file.
    ({WORKER_CREDENTIALS_ENV: "/tmp/other.json"}, f"without {WORKER_CREDENTIALS_ENV}: every "
                                                  f"STORMLET_* variable is stormlet's own"),
    ({SECRET_FILE_ENV: "/etc/stormlet/cluster.secret"}, f"without {SECRET_FILE_ENV}"),
])
def test_an_environment_that_is_no_map_of_names_to_strings_or_names_stormlets_own_is_refused(
        value, why):
    problem = cfg.problem(ENV, value)
    assert problem.startswith(f"{ENV} must be a map of environment variable names to strings, "
                              f"or None"), problem
    assert why in problem
    with pytest.raises(ValueError, match=ENV):
        cfg.worker_environment({ENV: value})


def test_a_refused_environment_is_shown_without_its_credentials():
    problem = cfg.problem(ENV, {"DB_PASSWORD": 12345678, "GREETING": "hi"})
    assert "12345678" not in problem and "'GREETING': 'hi'" in problem


def test_python_options_are_read_one_argument_each_with_its_value_attached():
    read = lambda value: cfg.worker_python_options({OPTS: value})   # noqa: E731
    assert read(None) == [] and read([]) == [] and read("") == []
    assert read(["-X", "importtime", "-OW", "error", "-Xdev", "-bB"]) == [
        "-Ximporttime", "-O", "-Werror", "-Xdev", "-b", "-B"]
    assert read("-X 'probe=a b' -u") == ["-Xprobe=a b", "-u"]


@pytest.mark.parametrize("value, why", [
    ("-c 'print(1)'", "-c runs its own code instead of the worker"),
    (["-m", "http.server"], "-m runs another module instead of the worker"),
    ("-Bi", "-i waits at a prompt after the worker ends"),
    ("-S", "-S leaves site-packages, where stormlet is installed, off the path"),
    ("-V", "-V prints the version"),
    ("--help", "'--help' is not one of Python's short options"),
    ("app.py", "'app.py' is not one of Python's short options (the program a worker runs is "
               "stormlet)"),
    (["-X"], "-X needs a value"),
    ("-Dlog.level=debug", "-D (in '-Dlog.level=debug') is not an option of Python's"),
    # A Storm topology's JVM options mean nothing to Python, which would ignore them.
    ("-Xmx2g", "-Xmx2g is a JVM's option, which Python ignores; for a worker's memory limit set "
               "topology.worker.max.heap.size.mb"),
    ("-XX:+UseG1GC", "-XX:+UseG1GC is a JVM's option"),
    ("-X 'unclosed", "cannot split it into options"),
    ([1, 2], "neither a list of strings nor a string"),
    ({"-X": "dev"}, "neither a list of strings nor a string"),
    (["-Xa\0b"], "holds a NUL character"),
])
def test_python_options_that_are_none_or_would_not_run_the_worker_are_refused(value, why):
    problem = cfg.problem(OPTS, value)
    assert problem.startswith(f"{OPTS} must be Python's options as a list of strings or one "
                              f"string, or None ("), problem
    assert why in problem
    with pytest.raises(ValueError, match=OPTS):
        cfg.worker_python_options({OPTS: value})


def test_the_memory_limit_is_a_number_of_mb_above_zero_or_none():
    assert cfg.worker_memory_limit_mb({}) is None
    assert cfg.worker_memory_limit_mb({LIMIT: 150}) == 150.0
    for value in (0, -1, "150", True, float("nan")):
        assert cfg.problem(LIMIT, value).startswith(
            f"{LIMIT} must be a number above 0 (or None for no limit)"), value


# ----- the worker's process

def args(*parts: str) -> list[bytes]:
    return [part.encode() for part in parts]


def test_a_worker_started_with_python_options_is_still_known_as_a_worker():
    options = cfg.worker_python_options({OPTS: "-X importtime -W error -O"})
    command = worker_command("python", options, [PORT_OPTION, "6700"])
    assert command == ["python", "-Ximporttime", "-Werror", "-O", *WORKER_MODULE_ARGS,
                       PORT_OPTION, "6700"]
    assert is_worker(args(*command))
    # Something else than Python's options before -m stormlet worker: not a worker.
    assert not is_worker(args("python", "-c", "-m", "stormlet", "worker"))
    assert not is_worker(args("python", "tool.py", "-Xdev", *WORKER_MODULE_ARGS))


def supervisor(tmp_path, security: Security | None = None) -> Supervisor:
    return Supervisor("127.0.0.1:1", [6700, 6701], data_dir=tmp_path / "supervisor",
                      supervisor_id="s1", security=security, pin_workers=False)


def test_a_worker_gets_its_topologys_variables_and_stormlets_own_are_the_supervisors(
        tmp_path, monkeypatch):
    secret = tmp_path / "cluster.secret"
    Security.generate(secret)
    monkeypatch.setenv(SECRET_FILE_ENV, str(secret))
    monkeypatch.setenv("GREETING", "the supervisor's")
    monkeypatch.setenv("KEPT", "inherited")
    sup = supervisor(tmp_path, Security.load(secret))
    environment = sup._worker_environment("t-1", "t", {ENV: {"GREETING": "the topology's",
                                                             "EXTRA": "added"}})
    assert environment["GREETING"] == "the topology's" and environment["EXTRA"] == "added"
    assert environment["KEPT"] == "inherited"
    # Never the cluster secret; its own credentials, in a file of the supervisor's.
    assert SECRET_FILE_ENV not in environment
    credentials = environment[WORKER_CREDENTIALS_ENV]
    assert credentials.startswith(str((tmp_path / "supervisor").resolve()))
    # A record that names stormlet's own variables (checked at submit since) starts no worker.
    with pytest.raises(ValueError, match=f"without {WORKER_CREDENTIALS_ENV}"):
        sup._worker_environment("t-1", "t", {ENV: {WORKER_CREDENTIALS_ENV: "/tmp/forged"}})


# ----- the memory limit

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_slot_whose_workers_keep_exceeding_gets_one_error_an_interval(caplog):
    clock = Clock()
    overruns = Overruns(interval_secs=60, clock=clock)
    text = lambda mb: overrun_text("h", 6700, "t-1", mb, 150, 0)   # noqa: E731
    with caplog.at_level(logging.INFO, logger="stormlet.cluster.memory_limit"):
        overruns.overrun(6700, "t-1", text(300))
        for _ in range(3):
            clock.now += 10
            overruns.overrun(6700, "t-1", text(301))
        assert [e["error"] for e in overruns.errors(6700, "t-1")] == [text(300)]
        assert overruns.count(6700, "t-1") == 4
        clock.now += 31   # 61 s after the recorded one
        overruns.overrun(6700, "t-1", text(302))
    assert [e["error"] for e in overruns.errors(6700, "t-1")] == [
        f"{text(302)} ... and 3 more like it in the last 61 s"]
    assert overruns.count(6700, "t-1") == 5
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [text(300), f"{text(302)} ... and 3 more like it in the last 61 s"]
    # Another topology's worker on the slot starts over; a topology gone is forgotten.
    overruns.overrun(6700, "u-2", text(400))
    assert overruns.count(6700, "t-1") == 0 and overruns.count(6700, "u-2") == 1
    overruns.retain(lambda tid: tid != "u-2")
    assert overruns.errors(6700, "u-2") == []


def test_the_message_names_worker_topology_use_limit_and_setting():
    assert overrun_text("10.0.0.1", 6700, "t-1", 312.4, 150, 0) == (
        "worker 10.0.0.1:6700 of t-1 used 312 MB, over its limit of 150 MB "
        "(topology.worker.max.heap.size.mb): restarted")
    assert overrun_text("10.0.0.1", 6700, "t-1", 312.4, 150.5, 4).endswith(
        "over its limit of 150.5 MB (topology.worker.max.heap.size.mb): restarted in 4 s")


class Recorder:
    def __init__(self):
        self.reports = {}

    def set_heartbeat(self, supervisor_id, value):
        self.reports[supervisor_id] = json.loads(json.dumps(value))


HOLDER = """
import sys, time
held = b"x" * (int(sys.argv[1]) * 1024 * 1024)   # written, so in RAM
print("holding", flush=True)
time.sleep(120)
"""


def holder(mb: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(mb)], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "holding"
    return process


def test_a_worker_over_its_memory_limit_is_stopped_reported_and_started_again(tmp_path):
    sup = supervisor(tmp_path)
    sup.client = types.SimpleNamespace(state=KazooState.CONNECTED)
    sup.state = Recorder()
    big, small = holder(200), holder(1)
    try:
        assert resident_mb(big.pid) > 200 > resident_mb(small.pid)
        for port, process, tid in ((6700, big, "hog-1"), (6701, small, "calm-2")):
            sup.workers[port] = WorkerProcess(tid, 1, process, tmp_path / f"{port}.json",
                                              memory_limit_mb=100)
            sup._check_memory(port, sup.workers[port])
        assert big.wait(timeout=10) == -signal.SIGKILL
        assert small.poll() is None and list(sup.workers) == [6701]
        # Young, so it may be over its limit at every start: started again after a delay.
        assert sup.not_before[6700] > 0 and sup.quick_exits[6700] == 1

        sup._report()
        report = sup.state.reports["s1"]
        [error] = topology_errors({"s1": report}, "hog-1", 10)
        assert error["component"] == "__system" and error["port"] == 6700
        assert error["error"].startswith("worker 127.0.0.1:6700 of hog-1 used 2")
        assert error["error"].endswith("MB, over its limit of 100 MB "
                                       "(topology.worker.max.heap.size.mb): restarted in 2 s")
        assert report["exited"]["6700"]["exit"] == "stopped over its memory limit"
        assert topology_error_summary({"s1": report}, "hog-1")["errors"] == 1
        assert topology_errors({"s1": report}, "calm-2", 10) == []
    finally:
        for process in (big, small):
            process.kill()
            process.wait()
