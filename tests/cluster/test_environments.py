"""Issue 52, Python dependencies and environments: what a project declares
(cluster/dependencies.py), the key of its environment, and environments built once per node and
reused, side by side, removed when unused (cluster/environments.py).

The tests that run pip are marked slow: they install wheels made here (local_wheels.py), with no
index, in a few seconds each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from local_wheels import TESTDEP, make_testdep_wheels
from support import wait_until

from stormlet.cluster import environments as envs
from stormlet.cluster.code import MANIFEST, package_topology, unpack
from stormlet.cluster.dependencies import DependencyError, declared, normalize
from stormlet.cluster.environments import (
    BuildError,
    Builds,
    Environments,
    EnvironmentSettings,
    EnvironmentSpec,
    package_spec,
)

TOPOLOGY = "from stormlet import TopologyBuilder\ntopology = TopologyBuilder().build()\n"


def project(tmp_path: Path, files: dict[str, str], entry: str = "topo.py") -> Path:
    """A project directory holding ``files`` and a topology file; the topology file's path."""
    for name, text in {entry: TOPOLOGY, **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path / entry


# ----- what a project declares


def test_requirements_txt_is_read_with_comments_includes_and_continuations(tmp_path):
    topo = project(tmp_path, {
        "requirements.txt": """\
            # the topology's packages
            Humanize >= 4   # inline comment
            -r more/base.txt
            stormlet_testdep==\\
            1.0
            humanize>=4
            """,
        "more/base.txt": "--requirement=pinned.txt\nRequests[socks]\n",
        "more/pinned.txt": "urllib3<3,>=1.26\n"})
    found = declared(topo)
    assert found.source == "requirements.txt"
    assert found.requirements == ("humanize>=4", "requests[socks]", "stormlet-testdep==1.0",
                                  "urllib3<3,>=1.26")


def test_pyproject_dependencies_are_read_when_there_is_no_requirements_txt(tmp_path):
    topo = project(tmp_path, {"pyproject.toml": """\
        [project]
        name = "mytopology"
        dependencies = ["humanize>=4", "stormlet_testdep==2.0"]
        """})
    found = declared(topo)
    assert (found.source, found.requirements) == (
        "pyproject.toml", ("humanize>=4", "stormlet-testdep==2.0"))
    # requirements.txt comes first; a pyproject.toml without [project].dependencies declares none.
    (tmp_path / "requirements.txt").write_text("humanize\n")
    assert declared(topo).requirements == ("humanize",)
    other = project(tmp_path / "other", {"pyproject.toml": "[tool.black]\nline-length = 99\n"})
    assert declared(other) is None


def test_a_streamparse_projects_virtualenvs_file_is_honoured_without_its_streamparse_line(
        tmp_path):
    topo = project(tmp_path, {
        "config.json": json.dumps({"topology_specs": "topologies/",
                                   "virtualenv_specs": "virtualenvs/"}),
        "virtualenvs/wordcount.txt": "streamparse==5.0.0\nstormlet_testdep==1.0\n",
        "virtualenvs/other.txt": "stormlet_testdep==2.0\n",
        "requirements.txt": "humanize\n"}, entry="topologies/wordcount.py")
    found = declared(topo)
    assert (found.source, found.requirements) == ("virtualenvs/wordcount.txt",
                                                  ("stormlet-testdep==1.0",))
    # config.json may name another directory, as streamparse allows.
    (tmp_path / "config.json").write_text(json.dumps({"virtualenv_specs": "venvs"}))
    (tmp_path / "venvs").mkdir()
    (tmp_path / "venvs" / "wordcount.txt").write_text("stormlet_testdep==2.0\n")
    assert declared(topo).requirements == ("stormlet-testdep==2.0",)
    # Only streamparse: nothing to install, no environment.
    (tmp_path / "venvs" / "wordcount.txt").write_text("streamparse\n")
    assert declared(topo) is None


def test_submits_requirements_option_wins_over_the_project(tmp_path):
    topo = project(tmp_path, {"requirements.txt": "humanize\n"})
    given = tmp_path / "elsewhere.txt"
    given.write_text("stormlet_testdep==2.0\n")
    found = declared(topo, given)
    assert (found.source, found.requirements) == (str(given), ("stormlet-testdep==2.0",))
    with pytest.raises(DependencyError, match="no such requirements file"):
        declared(topo, tmp_path / "missing.txt")


def test_index_options_and_malformed_lines_are_refused_naming_the_file_and_line(tmp_path):
    topo = project(tmp_path, {"requirements.txt": "humanize\n--index-url https://x/simple\n"})
    with pytest.raises(DependencyError, match=r"requirements.txt:2: '--index-url'.*cluster's "
                                              r"setting.*--pip-index-url.*wheels/"):
        declared(topo)
    (tmp_path / "requirements.txt").write_text("humanize\nnot a requirement!\n")
    with pytest.raises(DependencyError, match=r"requirements.txt:2: 'not a requirement!'"):
        declared(topo)
    assert declared(project(tmp_path / "none", {})) is None


# ----- the key


def test_the_key_is_the_same_for_the_same_set_however_spelled_and_differs_otherwise():
    def key(*lines, wheels=()):
        return EnvironmentSpec(tuple(normalize(line, "test") for line in lines), wheels).key

    same = key("Humanize >= 4", "stormlet_testdep==1.0")
    assert key("stormlet-testdep == 1.0", "humanize>=4") == same
    assert key("stormlet-testdep==2.0", "humanize>=4") != same
    assert key("humanize>=4", "stormlet_testdep==1.0", wheels=(("a.whl", "1" * 64),)) != same
    assert (key("humanize>=4", "stormlet_testdep==1.0", wheels=(("a.whl", "1" * 64),))
            != key("humanize>=4", "stormlet_testdep==1.0", wheels=(("a.whl", "2" * 64),)))


def test_the_package_carries_the_requirements_and_its_wheels_key_the_environment(tmp_path):
    topo = project(tmp_path / "p", {"requirements.txt": "stormlet_testdep==1.0\n"})
    make_testdep_wheels(tmp_path / "p" / "wheels")
    unpack(package_topology(topo, declared(topo)), tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert manifest["requirements"] == ["stormlet-testdep==1.0"]
    assert manifest["requirements_from"] == "requirements.txt"
    spec = package_spec(tmp_path / "out")
    assert spec.requirements == ("stormlet-testdep==1.0",)
    assert [name for name, _digest in spec.wheels] == [
        f"{TESTDEP}-1.0-py3-none-any.whl", f"{TESTDEP}-2.0-py3-none-any.whl"]
    assert spec.wheel_dir == tmp_path / "out" / "wheels"
    # Without declared dependencies: no environment, and the manifest is as it always was.
    unpack(package_topology(topo), tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / MANIFEST).read_text()) == {"entry": "topo.py"}
    assert package_spec(tmp_path / "plain") is None


def test_a_manifest_whose_requirements_could_smuggle_pip_options_is_refused(tmp_path):
    (tmp_path / MANIFEST).write_text(json.dumps(
        {"entry": "t.py", "requirements": ["humanize\n--index-url http://elsewhere"]}))
    with pytest.raises(BuildError, match="not a requirement"):
        package_spec(tmp_path)


# ----- removal of unused environments (no pip: complete environments made by hand)


def fake_environment(directory: Path, key: str, last_used: float) -> Path:
    path = directory / key
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").symlink_to(sys.executable)
    (path / envs.MARKER).write_text(json.dumps({"build_seconds": 1.5}))
    (path / envs.LAST_USED).touch()
    os.utime(path / envs.LAST_USED, (last_used, last_used))
    (directory / f"{key}.lock").touch()
    return path


def test_environments_unused_for_longer_than_the_ttl_are_removed_and_no_others(tmp_path):
    environments = Environments(EnvironmentSettings(directory=tmp_path, ttl=3600))
    now = time.time()
    old = fake_environment(tmp_path, "old", now - 7200)
    fresh = fake_environment(tmp_path, "fresh", now - 60)
    busy = fake_environment(tmp_path, "busy", now - 7200)
    held = environments._lock("busy", wait=True)   # being looked up or built elsewhere
    try:
        assert environments.remove_unused() == ["old"]
    finally:
        os.close(held)
    assert not old.exists() and not (tmp_path / "old.lock").exists()
    assert fresh.exists() and busy.exists()
    # Touched (a supervisor keeps its workers' environments), it stays.
    environments.touch("busy")
    assert environments.remove_unused() == []
    # Two hours on, both are unused: removed, lock files and all.
    assert sorted(environments.remove_unused(now=time.time() + 7200)) == ["busy", "fresh"]
    assert list(tmp_path.iterdir()) == []


def test_lookup_never_waits_and_marks_the_environment_used(tmp_path):
    environments = Environments(EnvironmentSettings(directory=tmp_path))
    spec = EnvironmentSpec(("humanize",))
    assert environments.lookup(spec) is None
    fake_environment(tmp_path, spec.key, time.time() - 100)
    found = environments.lookup(spec)
    assert (found.key, found.built, found.build_seconds) == (spec.key, False, 1.5)
    assert time.time() - (tmp_path / spec.key / envs.LAST_USED).stat().st_mtime < 5
    held = environments._lock(spec.key, wait=True)
    try:
        assert environments.lookup(spec) is None   # built or removed meanwhile: ask again
    finally:
        os.close(held)


class FakeEnvironments:
    """Environments whose builds fail, or succeed, when the test says."""

    def __init__(self):
        self.built: set[str] = set()
        self.fail = True
        self.builds = 0
        self.release = threading.Event()

    def lookup(self, spec):
        if spec.key in self.built:
            return envs.Environment(spec.key, Path("/envs") / spec.key, False, 1.0)
        return None

    def ensure(self, spec):
        self.release.wait(10)
        self.builds += 1
        if self.fail:
            raise BuildError("pip could not install x; its last lines:\nERROR: no x")
        self.built.add(spec.key)


def test_background_builds_answer_at_once_report_failures_and_try_again_later(tmp_path):
    (tmp_path / MANIFEST).write_text(json.dumps({"entry": "t.py", "requirements": ["x"]}))
    fake, now = FakeEnvironments(), [0.0]
    builds = Builds(fake, clock=lambda: now[0])
    assert builds.python_for(tmp_path) is None      # building, on a thread of its own
    assert builds.python_for(tmp_path) is None      # still: one build, not two
    fake.release.set()
    wait_until(lambda: builds.failures(tmp_path) == 1, 10, "the build to fail", interval=0.01)
    with pytest.raises(BuildError, match="ERROR: no x"):
        builds.python_for(tmp_path)
    assert fake.builds == 1 and builds.failures(tmp_path) == 1
    now[0] += envs.RETRY_SECS + 1                   # time to try again; this time it works
    fake.fail = False
    assert builds.python_for(tmp_path) is None
    built = f"/envs/{builds.key_of(tmp_path)}/bin/python"
    wait_until(lambda: builds.python_for(tmp_path) == built, 10, "the second build",
               interval=0.01)
    assert fake.builds == 2 and builds.failures(tmp_path) == 0
    # A package that declares nothing runs with our own interpreter.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / MANIFEST).write_text(json.dumps({"entry": "t.py"}))
    assert builds.python_for(plain) == sys.executable


# ----- real builds with pip (a few seconds each)


def spec_for(wheels: Path, *requirements: str) -> EnvironmentSpec:
    return EnvironmentSpec(tuple(normalize(r, "test") for r in requirements),
                           wheel_dir=wheels)


def imported(environment, statement: str = f"import {TESTDEP}; print({TESTDEP}.VERSION)") -> str:
    return subprocess.run([str(environment.python), "-c", statement], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


@pytest.fixture
def offline(tmp_path) -> EnvironmentSettings:
    """Settings that install from the test's wheels only: no index."""
    return EnvironmentSettings(directory=tmp_path / "environments", index_url=envs.NO_INDEX)


@pytest.mark.slow
def test_an_environment_is_built_once_then_reused_and_layers_on_ours(tmp_path, offline):
    wheels = make_testdep_wheels(tmp_path / "wheels")
    environments = Environments(offline)
    spec = spec_for(wheels, "stormlet_testdep==1.0")
    started = time.monotonic()
    first = environments.ensure(spec)
    build = time.monotonic() - started
    started = time.monotonic()
    second = environments.ensure(spec)
    reuse = time.monotonic() - started
    print(f"environment build: {build:.2f} s; reuse: {reuse * 1000:.1f} ms")
    assert first.built and not second.built and first.path == second.path
    assert second.build_seconds == pytest.approx(first.build_seconds)
    assert reuse < 0.5 and reuse < build / 10
    assert imported(first) == "1.0"
    # stormlet comes from this process's environment (PYTHONPATH and site-packages), not a copy.
    assert imported(first, "import stormlet; print(stormlet.__file__)") == \
        __import__("stormlet").__file__
    # Nothing was installed where this process imports from.
    with pytest.raises(ImportError):
        __import__(TESTDEP)


@pytest.mark.slow
def test_two_pins_of_one_package_get_two_environments_side_by_side(tmp_path, offline):
    wheels = make_testdep_wheels(tmp_path / "wheels")
    environments = Environments(offline)
    one = environments.ensure(spec_for(wheels, "stormlet_testdep==1.0"))
    two = environments.ensure(spec_for(wheels, "stormlet_testdep==2.0"))
    assert one.path != two.path
    assert (imported(one), imported(two)) == ("1.0", "2.0")


@pytest.mark.slow
def test_daemons_on_one_host_build_an_environment_once_between_them(tmp_path, offline):
    """Two processes (a nimbus and a supervisor, say) asking for the same environment at once:
    one builds it under the lock, the other waits and reuses it."""
    wheels = make_testdep_wheels(tmp_path / "wheels")
    script = textwrap.dedent(f"""
        import json
        from pathlib import Path
        from stormlet.cluster.environments import *
        environments = Environments(EnvironmentSettings(directory=Path({str(offline.directory)!r}),
                                                        index_url=NO_INDEX))
        spec = EnvironmentSpec(("stormlet-testdep==2.0",), wheel_dir=Path({str(wheels)!r}))
        print(json.dumps(environments.ensure(spec).built))
        """)
    processes = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                  text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert sorted(json.loads(out) for out in outputs) == [False, True]


@pytest.mark.slow
def test_a_build_that_fails_raises_with_pips_message_and_leaves_nothing(tmp_path, offline):
    environments = Environments(offline)
    spec = spec_for(make_testdep_wheels(tmp_path / "wheels"), "stormlet_testdep==1.0",
                    "no_such_package_anywhere==1.0")
    with pytest.raises(BuildError) as caught:
        environments.ensure(spec)
    message = str(caught.value)
    assert message.startswith("pip could not install stormlet-testdep==1.0, "
                              "no-such-package-anywhere==1.0; its last lines:\n")
    assert "No matching distribution found for no-such-package-anywhere==1.0" in message
    assert not (offline.directory / spec.key).exists()
    # The failure is not remembered on disk: the next call tries again.
    with pytest.raises(BuildError):
        environments.ensure(spec)


def test_a_failed_build_on_a_node_is_reported_against_the_topology_and_that_node():
    """What a supervisor reports for a slot whose worker cannot start is what `stormlet
    errors` and `stormlet list` show (cluster/error_reports.py)."""
    from stormlet.cluster.error_reports import (
        ENVIRONMENT_COMPONENT,
        topology_error_summary,
        topology_errors,
        unstarted_entry,
    )

    message = ("pip could not install stormlet-testdep==3.0; its last lines:\nERROR: Could not "
               "find a version\nERROR: No matching distribution found for stormlet-testdep==3.0")
    reports = {"s1": {"host": "10.0.0.7", "workers": {}, "exited": {},
                      "unstarted": {"6701": unstarted_entry("t-1-x", message, 2)}},
               "s2": {"host": "10.0.0.8", "workers": {}, "exited": {}}}
    [error] = topology_errors(reports, "t-1-x", 10)
    assert (error["component"], error["host"], error["port"]) == (ENVIRONMENT_COMPONENT,
                                                                  "10.0.0.7", 6701)
    assert error["error"] == ("its environment failed to build: ERROR: No matching "
                              "distribution found for stormlet-testdep==3.0")
    assert error["detail"] == message
    assert topology_error_summary(reports, "t-1-x") == {"errors": 2,
                                                        "last_error": error["time"]}
    assert topology_errors(reports, "other", 10) == []


def test_a_build_under_way_shows_its_time_and_pips_last_line_and_submit_prints_each_change(
        tmp_path):
    # Issue 52: `stormlet submit` shows the build's progress while nimbus builds.
    from stormlet.cli.cluster import build_progress_lines

    environments = Environments(EnvironmentSettings(directory=tmp_path))
    spec = EnvironmentSpec(("humanize>=4", "requests"))
    assert environments.building() == []
    held = environments._lock(spec.key, wait=True)   # as a build holds it
    try:
        path = tmp_path / spec.key
        path.mkdir()
        (path / envs.REQUIREMENTS).write_text("humanize>=4\nrequests\n")
        (path / envs.BUILD_LOG).write_text("Looking in links: /w\nCollecting humanize>=4\n")
        (build,) = environments.building()
        assert build["key"] == spec.key and build["requirements"] == ["humanize>=4", "requests"]
        assert build["last"] == "Collecting humanize>=4" and 0 <= build["seconds"] < 60
        shown: dict = {}
        assert [line.split(": ", 1)[1] for line in build_progress_lines([build], shown)] == \
            ["Collecting humanize>=4"]
        assert build_progress_lines([build], shown) == []   # unchanged: nothing more
        with open(path / envs.BUILD_LOG, "a") as log:
            log.write("Collecting requests\n")
        assert build_progress_lines(environments.building(), shown)[0].endswith(
            ": Collecting requests")
    finally:
        os.close(held)
    # Its builder gone (the lock free) and not complete: no build under way.
    assert environments.building() == []
