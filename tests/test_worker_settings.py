"""A worker's settings in its topology's config, without a cluster: how they are checked
(``topology.environment``, ``topology.worker.childopts``, ``topology.worker.max.heap.size.mb``)."""

from __future__ import annotations

import pytest

from stormlet import config as cfg
from stormlet.cluster.security import SECRET_FILE_ENV, WORKER_CREDENTIALS_ENV

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
