"""Looking into a running worker (worker_introspection.py, worker_stacks.py): every thread's stack
with its name, asked of the worker by a signal or taken by py-spy; a CPU profile as an SVG flame
graph; clear errors for a process that is gone, a profile's bounds, a missing py-spy and a
kernel that refuses it; and a restart carried out by the supervisor's loop.

The target is a real Python process whose threads are named as a worker's executor threads are
(runtime/threads.py) and run functions with known names; its main thread waits on an event, as a
worker's does (``Worker.wait``). The real ``stormlet worker`` is looked into in
test_worker_introspection_live.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import psutil
import pytest
from support import wait_until

from stormlet.cluster import worker_introspection as wi
from stormlet.cluster.supervisor import Supervisor, WorkerProcess
from stormlet.cluster.worker_introspection import (
    IntrospectionError,
    Restarts,
    WorkerGone,
    catches_signal,
    check_profile_seconds,
    profile,
    stack_dump,
)
from stormlet.cluster.worker_stacks import STACKS_FILE, STACKS_SIGNAL

REPO = Path(__file__).resolve().parents[2]

# argv: the directory for its files, and how it treats STACKS_SIGNAL: "answer" (the worker's
# handler), "deaf" (a handler that never writes: a worker stuck in C code) or "default".
TARGET = '''
import signal, sys, threading, time
from pathlib import Path

from stormlet.cluster.worker_stacks import STACKS_SIGNAL, install_stacks_handler

here, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "answer":
    install_stacks_handler(here)
elif mode == "deaf":
    signal.signal(STACKS_SIGNAL, lambda signum, frame: None)


def spin_in_bolt(started):
    started.set()
    n = 0
    while True:
        n += 1


def wait_in_spout(started):
    started.set()
    threading.Event().wait()


def count_ticks(started):
    started.set()
    ticks = 0
    while True:
        ticks += 1
        (here / "ticks.part").write_text(str(ticks))
        (here / "ticks.part").replace(here / "ticks")
        time.sleep(0.005)


# Ready once every thread is in its function (a thread that has started may not be there yet).
for target, name in [(spin_in_bolt, "wc-1:count:3-3"), (wait_in_spout, "wc-1:words:1-1"),
                     (count_ticks, "wc-1:ticker")]:
    started = threading.Event()
    threading.Thread(target=target, args=(started,), name=name, daemon=True).start()
    started.wait()
(here / "ready").touch()
threading.Event().wait()
'''


def start_target(directory: Path, mode: str) -> subprocess.Popen:
    script = directory / "target.py"
    script.write_text(TARGET)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    process = subprocess.Popen([sys.executable, str(script), str(directory), mode], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_until(lambda: (directory / "ready").exists() or process.poll() is not None, 30,
               "the target to start its threads")
    assert process.poll() is None, process.stderr and process.stderr.read().decode()
    return process


@pytest.fixture
def target(tmp_path):
    """Start targets in modes; kill them all afterwards."""
    started: list[subprocess.Popen] = []

    def start(mode: str = "answer") -> subprocess.Popen:
        directory = tmp_path / f"target-{len(started)}"
        directory.mkdir()
        process = start_target(directory, mode)
        process.directory = directory   # type: ignore[attr-defined]
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def py_spy_attaches() -> bool:
    """Whether py-spy may trace a child of this process here (the tests that need it skip
    otherwise, saying why)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        done = subprocess.run([wi.py_spy_path(), "dump", "--pid", str(child.pid)],
                              capture_output=True, timeout=30)
        return done.returncode == 0
    except IntrospectionError:
        return False
    finally:
        child.kill()
        child.wait()


needs_py_spy = pytest.mark.skipif(not py_spy_attaches(),
                                  reason="py-spy is missing or may not trace processes here")

WORKER_THREADS = ['"wc-1:count:3-3"', "spin_in_bolt", '"wc-1:words:1-1"', "wait_in_spout",
                  '"MainThread"']


def ticks(process) -> int:
    return int((process.directory / "ticks").read_text() or 0)


# ----- stacks


def test_a_worker_writes_every_threads_stack_with_its_name_when_asked(target):
    worker = target("answer")
    assert catches_signal(worker.pid, STACKS_SIGNAL)

    dumps = []

    def main_thread_waits() -> bool:
        dumps.append(stack_dump(worker.pid, worker.directory))
        return "Event.wait" in main_thread(dumps[-1])

    # The main thread shows where it waits (once it is there: it says it is ready just before).
    wait_until(main_thread_waits, 10, "a dump of the main thread waiting")
    for text in dumps:
        for expected in WORKER_THREADS:
            assert expected in text, text
        assert "Written by the process itself on SIGUSR1" in text
        assert "py-spy" not in text
        # Where it was interrupted, not the handler that wrote the dump.
        assert "install_stacks_handler" not in main_thread(text), text
    assert (worker.directory / STACKS_FILE).read_text() == dumps[-1]   # kept among its files


def main_thread(dump: str) -> str:
    """The main thread's stack in ``dump``."""
    return dump.split('"MainThread"', 1)[1].split("\nThread ", 1)[0]


def test_stack_dumps_do_not_disturb_the_worker(target):
    worker = target("answer")
    wait_until(lambda: (worker.directory / "ticks").exists(), 10, "the first tick")
    before = ticks(worker)
    for _ in range(30):
        assert '"wc-1:ticker"' in stack_dump(worker.pid, worker.directory)
    wait_until(lambda: ticks(worker) > before + 20, 10, "the ticker to go on ticking")
    assert worker.poll() is None


@needs_py_spy
def test_a_worker_without_the_handler_is_not_sent_the_signal_but_dumped_by_py_spy(target):
    worker = target("default")   # SIGUSR1 would end it
    assert not catches_signal(worker.pid, STACKS_SIGNAL)
    wait_until(lambda: (worker.directory / "ticks").exists(), 10, "the first tick")

    text = stack_dump(worker.pid, worker.directory)
    after_dump = ticks(worker)

    assert text.startswith(f"(worker {worker.pid} does not answer SIGUSR1 (yet): these stacks "
                           f"are py-spy's)\n")
    for expected in WORKER_THREADS:
        assert expected in text, text
    # A signal sent during the dump is delivered before the process runs on; SIGUSR1 would
    # have ended it, so a tick after the dump shows it was never sent.
    wait_until(lambda: ticks(worker) > after_dump, 10, "a tick after the dump")
    assert worker.poll() is None


@needs_py_spy
def test_a_worker_that_does_not_answer_in_time_is_dumped_by_py_spy(target):
    worker = target("deaf")

    text = stack_dump(worker.pid, worker.directory, timeout=0.5)

    assert f"worker {worker.pid} wrote no stacks to" in text.splitlines()[0]
    assert "these stacks are py-spy's" in text.splitlines()[0]
    for expected in WORKER_THREADS:
        assert expected in text, text


@needs_py_spy
def test_py_spy_dumps_a_worker_with_no_log_directory(target):
    worker = target("default")
    text = stack_dump(worker.pid)
    for expected in WORKER_THREADS:
        assert expected in text, text
    assert text.startswith(f"Process {worker.pid}:")


def test_a_process_that_is_gone_is_said_to_be_gone(tmp_path):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    # Exited but not yet reaped by its parent, as a worker its supervisor has not polled yet.
    wait_until(lambda: psutil.Process(ended.pid).status() == psutil.STATUS_ZOMBIE, 10,
               "the child to exit")
    try:
        for call in (lambda: stack_dump(ended.pid, tmp_path), lambda: stack_dump(ended.pid),
                     lambda: profile(ended.pid, 2)):
            with pytest.raises(WorkerGone, match=f"worker process {ended.pid} has exited"):
                call()
    finally:
        ended.wait()
    with pytest.raises(WorkerGone, match="has exited"):   # and reaped
        stack_dump(ended.pid, tmp_path)


def test_a_worker_names_its_supervisor_as_its_tracer_where_yama_is():
    """Yama's prctl takes the parent's pid (it fails with EINVAL where there is no Yama: this
    kernel may have none, and then nothing needs it)."""
    done = subprocess.run([sys.executable, "-c", "from stormlet.cluster.worker_stacks import "
                           "allow_supervisor_to_trace as a; print(a())"],
                          capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == str(wi.YAMA_PTRACE_SCOPE.exists())


# ----- profiles


@pytest.mark.parametrize("seconds", [0, -1, 301, 1.5, float("nan"), float("inf"), "10", True,
                                     None])
def test_a_profile_outside_its_bounds_is_refused_before_anything_runs(seconds, monkeypatch):
    monkeypatch.setattr(wi, "_run_py_spy", lambda *args: pytest.fail("py-spy was run"))
    with pytest.raises(IntrospectionError, match="a profile lasts 1 to 300 whole seconds"):
        profile(os.getpid(), seconds)


def test_a_profiles_bounds_are_inclusive():
    assert check_profile_seconds(1) == 1 and check_profile_seconds(300.0) == 300


@pytest.mark.parametrize("rate", [0, 1001, 2.5, "100"])
def test_a_profiles_rate_is_bounded(rate, monkeypatch):
    monkeypatch.setattr(wi, "_run_py_spy", lambda *args: pytest.fail("py-spy was run"))
    with pytest.raises(IntrospectionError, match="samples 1 to 1000 times a second"):
        profile(os.getpid(), 5, rate=rate)


@pytest.mark.slow   # profiles for two seconds
@needs_py_spy
def test_a_profile_is_an_svg_flame_graph_of_the_busy_threads(target):
    worker = target("answer")
    svg = profile(worker.pid, 2)
    assert svg.lstrip().startswith(b"<?xml") and b"<svg" in svg and svg.rstrip().endswith(
        b"</svg>")
    assert b"spin_in_bolt" in svg and b"wc-1:count:3-3" in svg   # the busy one, by thread
    assert worker.poll() is None


@pytest.mark.slow   # profiles for two seconds
@needs_py_spy
def test_one_profile_of_a_worker_at_a_time(target):
    worker = target("answer")
    first: list[bytes] = []
    thread = threading.Thread(target=lambda: first.append(profile(worker.pid, 2, idle=True)))
    thread.start()
    try:
        wait_until(lambda: worker.pid in wi._traced._held, 10, "the first profile to start")
        with pytest.raises(IntrospectionError, match=f"worker {worker.pid} is being profiled"):
            profile(worker.pid, 1)
        # A stack dump is still answered, by the worker itself.
        assert '"wc-1:count:3-3"' in stack_dump(worker.pid, worker.directory)
    finally:
        thread.join()
    assert b"wait_in_spout" in first[0] and b"MainThread" in first[0]   # idle ones too


def test_without_py_spy_the_error_says_how_to_install_it(target, monkeypatch, tmp_path):
    worker = target("answer")
    monkeypatch.setattr(wi.sysconfig, "get_path", lambda name: str(tmp_path / "no-scripts"))
    monkeypatch.setattr(wi, "which", lambda name: None)
    with pytest.raises(IntrospectionError, match="py-spy is not installed .*pip install py-spy"):
        profile(worker.pid, 5)


def test_a_refusal_to_trace_says_what_to_do(target, monkeypatch, tmp_path):
    """py-spy's own words when the kernel refuses it, as an ordinary user gets them for another
    user's process (the next test makes it really happen, where it can)."""
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho \"Permission Denied: Try running again with elevated "
                    "permissions by going 'sudo env \\\"PATH=\\$PATH\\\" !!'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(wi, "py_spy_path", lambda: str(fake))
    worker = target("default")
    for call in (lambda: profile(worker.pid, 5), lambda: stack_dump(worker.pid)):
        with pytest.raises(IntrospectionError) as refused:
            call()
        message = str(refused.value)
        assert f"the kernel refuses py-spy ({fake}) the right to trace worker {worker.pid}" in (
            message)
        assert f"setcap cap_sys_ptrace+ep {fake}" in message
        assert "ptrace_scope" in message and "run the supervisor as root" in message


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root, to run py-spy as another user")
def test_py_spy_run_by_another_user_is_refused_with_advice(target, monkeypatch,
                                                           tmp_path_factory):
    # Somewhere the other user may run py-spy from (root's home and pytest's tmp are private).
    shared = Path(tmp_path_factory.getbasetemp().parent.parent) / f"stormlet-pyspy-{os.getpid()}"
    shared.mkdir(mode=0o755, exist_ok=True)
    try:
        shutil.copy(wi.py_spy_path(), shared / "py-spy.bin")
        wrapper = shared / "py-spy"
        wrapper.write_text(f"#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup "
                           f"--clear-groups {shared / 'py-spy.bin'} \"$@\"\n")
        for path in (shared / "py-spy.bin", wrapper):
            path.chmod(0o755)
        monkeypatch.setattr(wi, "py_spy_path", lambda: str(wrapper))
        worker = target("default")
        with pytest.raises(IntrospectionError, match="the kernel refuses py-spy"):
            profile(worker.pid, 1)
    finally:
        shutil.rmtree(shared)


# ----- restarts


def worker_process(tid: str, pid: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(topology_id=tid, process=types.SimpleNamespace(pid=pid))


def test_a_restart_asked_from_another_thread_is_carried_out_by_the_loop():
    restarts, stopped, answers = Restarts(), [], []
    asker = threading.Thread(target=lambda: answers.append(
        restarts.ask("wc-1", 6700, "asked by alice", timeout=30)))
    asker.start()
    wait_until(lambda: restarts._pending, 10, "the request")
    restarts.serve({6700: worker_process("wc-1", 4242)},
                   lambda port, reason: stopped.append((port, reason)), "node-a")
    asker.join()
    assert stopped == [(6700, "restart asked: asked by alice")]
    assert answers == [{"topology_id": "wc-1", "port": 6700, "pid": 4242}]


@pytest.mark.parametrize("workers", [{}, {6700: worker_process("other-2", 4242)}],
                         ids=["no worker", "another topology's"])
def test_a_restart_of_a_worker_not_running_here_is_refused(workers):
    restarts, errors = Restarts(), []

    def ask():
        try:
            restarts.ask("wc-1", 6700, "asked by alice", timeout=30)
        except IntrospectionError as exc:
            errors.append(str(exc))

    asker = threading.Thread(target=ask)
    asker.start()
    wait_until(lambda: restarts._pending, 10, "the request")
    restarts.serve(workers, lambda port, reason: pytest.fail("stopped"), "node-a")
    asker.join()
    assert errors == ["no worker of wc-1 runs on port 6700 of node-a"]


def test_a_restart_the_loop_does_not_get_to_in_time_is_withdrawn():
    restarts = Restarts()
    with pytest.raises(IntrospectionError, match="within 0.1s; nothing was done"):
        restarts.ask("wc-1", 6700, "asked by alice", timeout=0.1)
    restarts.serve({6700: worker_process("wc-1", 4242)},
                   lambda port, reason: pytest.fail("a withdrawn request was carried out"))


def test_the_supervisor_stops_a_worker_asked_for_and_starts_it_again_in_the_same_pass(
        tmp_path, monkeypatch, caplog):
    supervisor = Supervisor("127.0.0.1:1", [6700], data_dir=tmp_path, supervisor_id="s1",
                            pin_workers=False)
    old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    supervisor.workers[6700] = WorkerProcess("wc-1", 3, old, tmp_path / "6700.json")
    launched = []
    monkeypatch.setattr(supervisor, "desired", lambda: {6700: ("wc-1", 3)})
    monkeypatch.setattr(supervisor, "_blobs_ready", lambda tid, port: True)
    monkeypatch.setattr(supervisor, "_launch",
                        lambda port, tid, tenure: launched.append((port, tid, tenure)))
    answers = []
    asker = threading.Thread(target=lambda: answers.append(
        supervisor.restart_worker("wc-1", 6700, "asked by alice")))
    try:
        asker.start()
        wait_until(lambda: supervisor.restart_requests._pending, 10, "the request")
        with caplog.at_level("INFO", logger="stormlet.cluster.supervisor"):
            supervisor._sync()   # one pass of the loop
        asker.join()
    finally:
        if old.poll() is None:
            old.kill()
        old.wait()
    assert old.returncode == -signal.SIGTERM   # stopped as any worker it replaces
    assert answers == [{"topology_id": "wc-1", "port": 6700, "pid": old.pid}]
    assert launched == [(6700, "wc-1", 3)]
    assert "stopping worker 127.0.0.1:6700 of wc-1: restart asked: asked by alice" in caplog.text
