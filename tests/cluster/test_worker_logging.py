"""How workers and daemons write their logs (stormlet/cluster/logging_setup.py): every line of a
worker names the topology, component and task that logged it, whichever thread runs the
executor; files rotate by size and stay bounded; the JSON form carries the same fields; what a
worker prints is logged too. A process's logging is global, so the set-ups run in a child
process each."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
from support import running, wait_until

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet import config as cfg
from stormlet.cluster.log_files import daemon_log_file, worker_log_file
from stormlet.cluster.log_search import split_records
from stormlet.cluster.logging_setup import (
    ContextFilter,
    Head,
    LogSettings,
    TextFormatter,
    parse_head,
    task_in,
)

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY_ID = "wc-1764493200-a1b2c3"


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                            capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(REPO), "STORMLET_PURE_PYTHON": "1"})
    assert result.returncode == 0, result.stderr
    return result


# ----- who logged a line, in a running topology


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        logging.getLogger("test.numbers").info("spout task %d opened", context.task_id)

    def next_tuple(self):
        if self.n < 50:
            self.collector.emit([self.n])
            self.n += 1


class Talker(Bolt):
    """Logs its first tuple, naming itself in the message: the line's context must agree."""

    def prepare(self, conf, context, collector):
        self.task = context.task_id
        self.topology = conf[cfg.STORMLET_TOPOLOGY_ID]
        self.said = False

    def execute(self, tup):
        if not self.said:
            self.said = True
            logging.getLogger("test.talker").info("talker task %d of %s got %s", self.task,
                                                  self.topology, tup["n"])


class Lines(logging.Handler):
    """Formats what reaches it as a worker's file would have it."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []
        self.addFilter(ContextFilter("the-worker-topology", "h:1"))
        self.setFormatter(TextFormatter())

    def emit(self, record):
        self.lines.append(self.format(record))


@pytest.fixture
def lines():
    handler = Lines()
    logger = logging.getLogger("test")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize("shared", [True, False], ids=["shared-thread", "own-threads"])
def test_a_line_an_executor_logs_names_its_topology_component_and_task(lines, shared):
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("talker", Talker(), parallelism=2).shuffle_grouping("numbers")
    conf = {cfg.STORMLET_EXECUTOR_SHARED_THREAD: shared, cfg.TOPOLOGY_ACKER_EXECUTORS: 0}
    with running(builder.build(), conf):
        wait_until(lambda: sum("talker task" in line for line in lines) == 2, 20,
                   "both talker tasks to log")
    logging.getLogger("test.main").info("from the test's own thread")
    talked = [line for line in lines if "talker task" in line]
    for line in talked:
        message = line.split(": ", 1)[1].split()   # talker task T of TOPOLOGY got N
        task, topology = message[2], message[4]
        assert f"[{topology} talker {task}] test.talker:" in line, line
        head = parse_head(line)
        assert (head.topology, head.component, head.task) == (topology, "talker", task)
    (opened,) = [line for line in lines if "opened" in line]
    assert " numbers " in opened and parse_head(opened).component == "numbers"
    (own,) = [line for line in lines if "own thread" in line]
    # No executor runs there: the worker's topology, no component or task.
    assert "[the-worker-topology - -] test.main:" in own


# ----- reading a line back


def test_parse_head_reads_text_and_json_heads_and_nothing_else():
    text = ("2026-11-30T10:00:00.123+01:00 WARNING [wc-1764493200-a1b2c3 split 4-6] "
            "app.split: hello")
    nine_utc = datetime(2026, 11, 30, 9, tzinfo=timezone.utc).timestamp()
    assert parse_head(text) == Head(nine_utc + 0.123, "WARNING", TOPOLOGY_ID, "split", "4-6")
    daemon = "2026-11-30T09:00:00.000+00:00 INFO stormlet.cluster.nimbus: leading"
    assert parse_head(daemon) == Head(nine_utc, "INFO", "", "", "")
    no_context = "2026-11-30T09:00:00.000+00:00 INFO [wc-1764493200-a1b2c3 - -] w: x"
    assert parse_head(no_context).component == ""
    entry = {"epoch": 1764493200.5, "level": "ERROR", "topology": TOPOLOGY_ID,
             "component": "count", "task": "7", "message": "m"}
    assert parse_head(json.dumps(entry)) == Head(1764493200.5, "ERROR", TOPOLOGY_ID, "count",
                                                 "7")
    for continuation in ("Traceback (most recent call last):", '  File "x.py", line 1',
                         "ValueError: 2026-11-30T10:00:00 INFO", "{not json", ""):
        assert parse_head(continuation) is None, continuation


def test_a_task_field_covers_the_tasks_of_its_executor():
    assert task_in("4", 4) and not task_in("4", 5)
    assert task_in("4-6", 4) and task_in("4-6", 6) and not task_in("4-6", 7)
    assert not task_in("", 4) and not task_in("-", 4)


def test_settings_are_checked_like_a_topologys_config():
    assert LogSettings.from_conf({cfg.STORMLET_LOG_FORMAT: "json"}).format == "json"
    with pytest.raises(ValueError, match="stormlet.log.format must be text or json, not 'xml'"):
        LogSettings.from_conf({cfg.STORMLET_LOG_FORMAT: "xml"})
    with pytest.raises(ValueError, match="stormlet.log.backups"):
        LogSettings(backups=0)
    assert LogSettings(4096, 2, "json").options() == [
        "--log-format", "json", "--log-max-bytes", "4096", "--log-backups", "2"]


# ----- a worker's files


def test_a_workers_log_rotates_at_its_size_and_keeps_its_count(tmp_path):
    run_python(f"""
        import logging
        from pathlib import Path
        from stormlet.cluster.logging_setup import LogSettings, log_worker
        log_worker(Path("w"), LogSettings(4096, 2, "text"), "{TOPOLOGY_ID}", "h:6700")
        logging.getLogger().setLevel(logging.INFO)
        for i in range(2000):
            logging.getLogger("app").info("line %d of a worker that logs a lot", i)
        """, tmp_path)
    files = sorted(p.name for p in (tmp_path / "w").iterdir())
    assert files == ["worker.log", "worker.log.1", "worker.log.2"]
    longest = max(len(line) + 1 for p in (tmp_path / "w").iterdir()
                  for line in p.read_text().splitlines())
    for path in (tmp_path / "w").iterdir():
        assert path.stat().st_size <= 4096 + longest, path
    # The newest lines are in the current file, the older ones rotated away in order.
    assert "line 1999 " in worker_log_file(tmp_path / "w").read_text()
    assert "line 0 " not in "".join(p.read_text() for p in (tmp_path / "w").iterdir())


def test_what_a_worker_prints_is_logged_naming_who_printed_it(tmp_path):
    result = run_python(f"""
        import logging, os, sys, threading, warnings
        from pathlib import Path
        from stormlet.cluster.logging_setup import LogSettings, log_worker
        from stormlet.runtime import log_context
        log_worker(Path("w"), LogSettings(), "{TOPOLOGY_ID}", "h:6700")
        logging.getLogger().setLevel(logging.INFO)   # the worker command's default
        def executor():
            log_context.enter(log_context.ExecutorContext("{TOPOLOGY_ID}", "split", 4, 4))
            print("printed", "by split")
            sys.stdout.write("in two ")
            sys.stdout.write("parts\\n")
            raise RuntimeError("an uncaught error on an executor's thread")
        thread = threading.Thread(target=executor)
        thread.start()
        thread.join()
        warnings.warn("a warning")
        os.write(2, b"straight to fd 2\\n")
        """, tmp_path)
    log = worker_log_file(tmp_path / "w").read_text()
    assert f"INFO [{TOPOLOGY_ID} split 4] stdout: printed by split\n" in log
    assert f"[{TOPOLOGY_ID} split 4] stdout: in two parts\n" in log
    # The thread's uncaught exception: one record, its traceback under it, with its context.
    (uncaught,) = [r for r in split_records(log.encode()) if b"uncaught" in r.data]
    assert uncaught.head.component == "split" and uncaught.head.level == "ERROR"
    assert uncaught.data.decode().rstrip().endswith(
        "RuntimeError: an uncaught error on an executor's thread")
    assert "stderr:" not in log
    assert "py.warnings" in log and "a warning" in log
    # What bypasses Python's streams is the process's own output (worker.out on a cluster).
    assert "straight to fd 2" not in log and "straight to fd 2" in result.stderr
    assert "printed" not in result.stdout + result.stderr


def test_a_workers_last_uncaught_exception_is_logged_and_left_in_its_raw_output(tmp_path):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from pathlib import Path
        from stormlet.cluster.logging_setup import LogSettings, log_worker
        log_worker(Path("w"), LogSettings(), "{TOPOLOGY_ID}", "h:6700")
        raise SystemError("the worker's last words")
        """)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(REPO), "STORMLET_PURE_PYTHON": "1"})
    assert result.returncode == 1
    log = worker_log_file(tmp_path / "w").read_text()
    assert " CRITICAL [" in log and log.rstrip().endswith("SystemError: the worker's last words")
    assert result.stderr.rstrip().endswith("SystemError: the worker's last words")


def test_json_lines_carry_the_same_fields_one_object_a_line(tmp_path):
    run_python(f"""
        import logging, threading
        from pathlib import Path
        from stormlet.cluster.logging_setup import LogSettings, log_worker
        from stormlet.runtime import log_context
        log_worker(Path("w"), LogSettings(format="json"), "{TOPOLOGY_ID}", "h:6700")
        logging.getLogger().setLevel(logging.INFO)
        def executor():
            log_context.enter(log_context.ExecutorContext("{TOPOLOGY_ID}", "count", 7, 8))
            logging.getLogger("app.count").info("two\\nlines")
            try:
                1 / 0
            except ZeroDivisionError:
                logging.getLogger("app.count").exception("failed")
        thread = threading.Thread(target=executor, name="executors")
        thread.start()
        thread.join()
        logging.getLogger("app").warning("the worker's own")
        """, tmp_path)
    lines = worker_log_file(tmp_path / "w").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert len(entries) == 3
    first, failed, own = entries
    assert first["message"] == "two\nlines" and first["level"] == "INFO"
    assert (first["topology"], first["component"], first["task"]) == (TOPOLOGY_ID, "count", "7-8")
    assert first["worker"] == "h:6700" and first["thread"] == "executors"
    assert first["logger"] == "app.count" and first["time"].startswith("20")
    assert "ZeroDivisionError" in failed["exception"]
    assert own["component"] is None and own["topology"] == TOPOLOGY_ID
    assert parse_head(lines[1]) == Head(failed["epoch"], "ERROR", TOPOLOGY_ID, "count", "7-8")


def test_a_daemon_writes_its_role_log_under_its_data_dir_as_well_as_stderr(tmp_path):
    result = run_python("""
        import logging
        from stormlet.cluster.logging_setup import LogSettings, log_daemon
        logging.basicConfig(level=logging.INFO)
        print(log_daemon("nimbus", "data", LogSettings()))
        logging.getLogger("stormlet.cluster.nimbus").info("nimbus n1 is the leader")
        """, tmp_path)
    path = daemon_log_file(tmp_path / "data", "nimbus")
    assert result.stdout.strip() == str(path.relative_to(tmp_path))
    (line,) = path.read_text().splitlines()
    assert line.endswith(" INFO stormlet.cluster.nimbus: nimbus n1 is the leader")
    assert parse_head(line).level == "INFO"
    assert "nimbus n1 is the leader" in result.stderr


def test_an_executors_context_is_its_threads_own():
    """Another thread's executor never shows in a thread's lines."""
    from stormlet.runtime import log_context

    seen = {}

    def executor(name):
        log_context.enter(log_context.ExecutorContext("t", name, 1, 1))
        seen[name] = log_context.current().component

    threads = [threading.Thread(target=executor, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {"a": "a", "b": "b"} and log_context.current() is None
