"""The UI's REST API and /metrics against running topologies: the numbers it serves are the
topology's real counts, its actions act, its errors say what is wrong with the right status.
Also the live progress line of `stormlet local`, on a terminal and not into a pipe."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time
import urllib.request
from itertools import pairwise
from pathlib import Path

import pytest
from cluster_support import LEDGER, LoopbackCluster
from prometheus_client.parser import text_string_to_metric_families
from ui_support import (
    COUNT,
    FAIL_EVERY,
    FINITE,
    LOG_CONF,
    LOG_RECORDS,
    NOT_FINITE,
    SPOUT_TASKS,
    append,
    caught_up,
    get,
    log_topology,
    partition_rows,
    post,
    request,
    topology,
    ui_cluster,
    wait_until,
    write_log,
)
from zookeeper_server import zookeeper_available

from stormlet.cluster.nimbus_client import NimbusClient
from stormlet.ui.app import serve
from stormlet.ui.progress import ProgressLine
from stormlet.ui.source import ClusterSource

MESSAGES = COUNT * SPOUT_TASKS
FAILS = MESSAGES // FAIL_EVERY


@pytest.fixture(scope="module")
def ui():
    with ui_cluster("finite", "steady") as (cluster, server):
        yield cluster, server


def component(page: dict, cid: str) -> dict:
    return next(c for c in page["spouts"] + page["bolts"] if c["id"] == cid)


def finished(server) -> dict:
    """The "finite" topology's page once every message is acked."""
    wait_until(lambda: component(get(server, "/api/v1/topology/finite"), "numbers")["acked"]
               >= MESSAGES, 20, "every finite message acked")
    return get(server, "/api/v1/topology/finite")


def test_topology_numbers_are_the_topologys_real_counts(ui):
    cluster, server = ui
    page = finished(server)
    numbers, double, sink = (component(page, c) for c in ("numbers", "double", "sink"))
    # Every message acked once, every explicit fail counted and replayed.
    assert numbers["acked"] == MESSAGES
    assert numbers["failed"] == FAILS
    assert numbers["emitted"] == MESSAGES + FAILS
    assert double["executed"] == sink["executed"] == MESSAGES + FAILS
    assert double["emitted"] == MESSAGES + FAILS
    # The same as the runtime's own counters.
    real = cluster.metrics("finite")
    for row in (numbers, double, sink):
        for key in ("emitted", "executed", "acked", "failed"):
            assert row[key] == real[row["id"]][key], (row["id"], key)
    stats = page["topologyStats"]
    assert (stats["acked"], stats["failed"]) == (MESSAGES, FAILS)
    assert stats["failed_by_kind"] == {"fail": FAILS}
    assert stats["failed_by_component"] == [["sink", FAILS]]
    assert page["status"] == "active" and page["workersTotal"] == 1
    assert [(e["from"], e["to"]) for e in page["graph"]["edges"]] == [("numbers", "double"),
                                                                       ("double", "sink")]
    assert set(page["graph"]["components"]) == {"numbers", "double", "sink"}
    # A young topology's 10-minute window holds everything it did.
    recent = get(server, "/api/v1/topology/finite?window=600")
    assert component(recent, "numbers")["acked"] == MESSAGES
    assert recent["window"] == "600" and page["window"] == ":all-time"


def test_component_page_has_one_row_per_task_adding_up_to_the_component(ui):
    _cluster, server = ui
    finished(server)
    sink = get(server, "/api/v1/topology/finite/component/sink")
    assert sink["type"] == "bolt"
    assert len(sink["tasks"]) == 2
    assert sum(t["executed"] for t in sink["tasks"]) == sink["stats"]["executed"] \
        == MESSAGES + FAILS
    assert [e["from"] for e in sink["inputs"]] == ["double"] and sink["outputs"] == []
    spout = get(server, "/api/v1/topology/finite/component/numbers")
    assert len({t["task"] for t in spout["tasks"]}) == SPOUT_TASKS
    assert sum(t["acked"] for t in spout["tasks"]) == MESSAGES


def test_cluster_and_topology_summaries_list_what_runs(ui):
    _cluster, server = ui
    summary = get(server, "/api/v1/cluster/summary")
    assert summary["mode"] == "local" and summary["topologies"] == 2
    rows = {t["name"]: t for t in get(server, "/api/v1/topology/summary")["topologies"]}
    assert set(rows) == {"finite", "steady"}
    assert rows["finite"]["status"] == "active" and rows["finite"]["workersTotal"] == 1
    # A topology is found by its id as well as its name.
    assert get(server, f"/api/v1/topology/{rows['finite']['id']}")["name"] == "finite"
    assert get(server, "/api/v1/nimbus/summary") == {"nimbuses": []}
    assert get(server, "/api/v1/supervisor/summary") == {"supervisors": []}


def emitted(server, name: str) -> int:
    return component(get(server, f"/api/v1/topology/{name}"), "numbers")["emitted"]


def test_deactivate_stops_emission_and_activate_resumes_it(ui):
    _cluster, server = ui
    first = emitted(server, "steady")
    wait_until(lambda: emitted(server, "steady") > first + 50, 10, "steady emitting")
    post(server, "/api/v1/topology/steady/deactivate")
    assert get(server, "/api/v1/topology/steady")["status"] == "inactive"
    # Replays of trees in flight may still go out for a moment; then nothing.
    previous = [emitted(server, "steady")]

    def settled() -> bool:
        time.sleep(0.5)
        now = emitted(server, "steady")
        stable, previous[0] = now == previous[0], now
        return stable

    wait_until(settled, 10, "emission to stop after deactivate")
    time.sleep(1.0)
    assert emitted(server, "steady") == previous[0]
    post(server, "/api/v1/topology/steady/activate")
    assert get(server, "/api/v1/topology/steady")["status"] == "active"
    wait_until(lambda: emitted(server, "steady") > previous[0] + 50, 10, "emission to resume")


def test_errors_are_json_with_the_right_status(ui):
    _cluster, server = ui
    cases = [
        ("GET", "/api/v1/topology/nope", 404, "no topology with id or name 'nope'"),
        ("GET", "/api/v1/topology/finite/component/nope", 404, "has no component 'nope'"),
        ("POST", "/api/v1/topology/nope/deactivate", 404, "'nope'"),
        ("GET", "/api/v1/topology/finite?window=60", 400, "window must be one of"),
        ("POST", "/api/v1/topology/finite/kill/soon", 400, "wait time"),
        ("POST", "/api/v1/topology/finite/rebalance/0", 409, "not supported in local mode"),
    ]
    for method, path, status, message in cases:
        got, body = request(server, path, method, {} if method == "POST" else None)
        assert got == status, (path, got, body)
        assert message in body["error"], (path, body)


def samples(server, name: str, **labels: str) -> float:
    """The sum of one metric's samples with these labels, from /metrics."""
    with urllib.request.urlopen(f"{server.url}metrics", timeout=10) as response:
        text = response.read().decode()
    total, found = 0.0, False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total, found = total + sample.value, True
    assert found, f"no {name} {labels} in /metrics"
    return total


def test_prometheus_metrics_carry_the_same_counts(ui):
    _cluster, server = ui
    finished(server)
    finite = {"topology": "finite"}
    assert samples(server, "stormlet_acked_total", component="numbers", **finite) == MESSAGES
    assert samples(server, "stormlet_failures_total", component="numbers", reason="fail",
                   failed_component="sink", **finite) == FAILS
    assert samples(server, "stormlet_executed_total", component="sink", **finite) \
        == MESSAGES + FAILS
    assert samples(server, "stormlet_emitted_total", component="double", stream="default",
                   **finite) == MESSAGES + FAILS
    assert samples(server, "stormlet_worker_rss_bytes", **finite) > 0
    assert samples(server, "stormlet_queue_capacity", component="sink", **finite) > 0
    assert samples(server, "stormlet_ui_source_up") == 1


def test_kill_removes_the_topology(ui):
    cluster, server = ui
    cluster.submit("doomed", FINITE, topology())
    post(server, "/api/v1/topology/doomed/kill/0")
    wait_until(lambda: "doomed" not in cluster.topologies(), 10, "the killed topology to go")
    summary = get(server, "/api/v1/topology/summary")
    assert "doomed" not in {t["name"] for t in summary["topologies"]}
    assert request(server, "/api/v1/topology/doomed")[0] == 404


def test_an_action_without_the_pages_header_is_refused_and_does_nothing(ui):
    cluster, server = ui
    before = get(server, "/api/v1/topology/steady")["status"]
    # What another site's HTML form can send: no custom header.
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for path in ("/api/v1/topology/steady/deactivate", "/api/v1/topology/steady/activate",
                 "/api/v1/topology/steady/kill/0", "/api/v1/topology/steady/rebalance/0"):
        status, body = request(server, path, "POST", {}, headers=form)
        assert status == 403, (path, status, body)
        assert "X-Requested-By: stormlet-ui" in body["error"], body
    # A wrong value is refused too.
    status, _ = request(server, "/api/v1/topology/steady/deactivate", "POST", {},
                        headers={"X-Requested-By": "someone-else"})
    assert status == 403
    time.sleep(0.3)   # a kill would be under way by now
    assert "steady" in cluster.topologies()
    assert get(server, "/api/v1/topology/steady")["status"] == before


def test_non_finite_metric_values_are_served_as_null(ui):
    cluster, server = ui
    cluster.submit("odd", NOT_FINITE, topology())
    try:
        def gauged() -> bool:
            # request() parses as a browser does: NaN or Infinity in the reply fails here.
            sink = get(server, "/api/v1/topology/odd/component/sink")
            return len(sink["tasks"]) == 2 and all("nan" in t["user"] for t in sink["tasks"])

        wait_until(gauged, 10, "the sink's gauges in both its task rows")
        sink = get(server, "/api/v1/topology/odd/component/sink")
        assert len(sink["tasks"]) == 2, sink["tasks"]   # else the checks below check nothing
        assert all(t["user"]["nan"] is None for t in sink["tasks"])
        assert all(t["user"]["infinite"]["mean"] is None for t in sink["tasks"])
        page = get(server, "/api/v1/topology/odd")
        assert page["configuration"]["ui.limit"] is None
    finally:
        cluster.kill("odd", wait_secs=0)


def test_a_topology_resubmitted_under_a_killed_ones_name_is_live(ui):
    cluster, server = ui
    cluster.submit("again", FINITE, topology())
    post(server, "/api/v1/topology/again/kill/0")
    wait_until(lambda: "again" not in cluster.topologies(), 10, "the killed topology to go")
    cluster.submit("again", FINITE, topology())
    assert get(server, "/api/v1/topology/again")["status"] == "active"
    post(server, "/api/v1/topology/again/deactivate")
    assert get(server, "/api/v1/topology/again")["status"] == "inactive"
    post(server, "/api/v1/topology/again/kill/0")   # and the UI can kill it again
    wait_until(lambda: "again" not in cluster.topologies(), 10, "the second one to go")


def test_the_progress_line_survives_a_topology_missing_at_first():
    reads = iter([LookupError("not there yet")])

    def read() -> dict[str, int]:
        for problem in reads:
            raise problem
        return {"emitted": 10, "acked": 9, "failed": 0, "executed": 20}

    out = io.StringIO()
    progress = ProgressLine(read, out, interval=0.02).start()
    try:
        wait_until(lambda: "emitted 10" in out.getvalue(), 5, "a progress line")
    finally:
        progress.stop()


def test_the_progress_line_rates_count_from_submit_when_told():
    # A topology done before the first read: from submit, its totals were zero, so the first
    # line has a rate; counted from the first read, every line would say 0/s.
    done = {"emitted": 600, "acked": 600, "failed": 0, "executed": 4200}
    lines = {}
    for submitted_at in (None, time.monotonic()):
        out = io.StringIO()
        progress = ProgressLine(lambda: done, out, interval=0.02,
                                submitted_at=submitted_at).start()
        try:
            wait_until(lambda: out.getvalue().count("emitted 600") >= 2, 5, "two lines")
        finally:
            progress.stop()
        lines[submitted_at is None] = out.getvalue().split("\r")[1]
    assert "emitted 600 0/s" in lines[True] and "executed 4,200 0/s" in lines[True]
    assert "emitted 600 0/s" not in lines[False] and "executed 4,200 0/s" not in lines[False]


@pytest.mark.slow   # waits out the partition rows' 2 s refresh, twice
def test_an_offset_spouts_component_page_shows_each_partitions_lag(ui, tmp_path):
    cluster, server = ui
    log = write_log(tmp_path / "log")
    cluster.submit("logged", LOG_CONF, log_topology(tmp_path / "log"))
    try:
        # The rows are refreshed every 2 s: once the log is read, nothing lags.
        wait_until(lambda: caught_up(server, "logged"), 20, "every partition committed")
        rows = partition_rows(server, "logged")
        assert [r["partition"] for r in rows] == [0, 1, 2]
        assert [r["acked"] for r in rows] == list(LOG_RECORDS)
        tasks = {t["task"] for t in get(server, "/api/v1/topology/logged/component/reader")
                 ["tasks"]}
        assert {r["task"] for r in rows} == tasks and len(tasks) == 2
        # Deactivated, the spout reads nothing: whatever is appended is lag.
        post(server, "/api/v1/topology/logged/deactivate")
        # Asked, the spout threads deactivate on their next turn: append only after that, or a
        # spout still active reads the new records and they never show as lag.
        runtime = cluster.runtime("logged")
        wait_until(runtime.activation_settled, 10, "the spouts to deactivate")
        appended = (2, 0, 4)
        append(log, appended)
        wait_until(lambda: [r["lag"] for r in partition_rows(server, "logged")]
                   == list(appended), 10, "the appended records to show as lag")
        assert [r["committed"] for r in partition_rows(server, "logged")] == list(LOG_RECORDS)
    finally:
        cluster.kill("logged", wait_secs=0)


# ----- the progress line of `stormlet local`, through the real CLI

ROOT = Path(__file__).resolve().parents[2]
# A small word count (2 spout tasks x 5 lines x 600), done well within the first second.
SENTENCES = 2 * 5 * 600
LOCAL = [sys.executable, "-m", "stormlet.cli", "local", "topologies/word_count.py",
         "-c", "wordcount.repeats=600", "--duration"]
PROGRESS = re.compile(r"\r(\d+)s  emitted ([\d,]+) [\d.]+k?/s  acked ([\d,]+) [\d.]+k?/s  "
                      r"failed ([\d,]+)(?: [\d.]+k?/s)?  executed ([\d,]+) ([\d.]+k?)/s")
SUMMARY_ROW = re.compile(r"^(\S+) +\d+ +(\d+) +(\d+) +(\d+) +(\d+)  ", re.MULTILINE)


def progress_lines(output: str) -> list[tuple[int, ...]]:
    """(seconds, emitted, acked, failed, executed) of each progress line written."""
    return [tuple(int(v.replace(",", "")) for v in m.groups()[:5])
            for m in PROGRESS.finditer(output)]


def final_totals(output: str) -> tuple[int, ...]:
    """(emitted, acked, failed, executed) from the summary table printed at the end."""
    rows = {m[1]: [int(v) for v in m.groups()[1:]] for m in SUMMARY_ROW.finditer(output)}
    emitted, _executed, acked, failed = rows.pop("sentences")
    rows.pop("__acker")   # bookkeeping, not the user's bolts
    return emitted, acked, failed, sum(row[1] for row in rows.values())


def on_a_terminal(args: list[str]) -> str:
    """What the command writes to its stdout when that is a (pseudo-)terminal; at most 30 s."""
    main, replica = pty.openpty()
    env = {**os.environ, "COLUMNS": "200"}   # wide enough for the whole line
    process = subprocess.Popen(args, stdout=replica, stderr=subprocess.DEVNULL, cwd=ROOT,
                               env=env)
    os.close(replica)
    output, deadline = b"", time.monotonic() + 30
    try:
        while (select.select([main], [], [], max(0.0, deadline - time.monotonic()))[0]
               and (chunk := os.read(main, 4096))):
            output += chunk
    except OSError:   # the terminal is gone: the process closed it
        pass
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
    assert process.wait() == 0
    return output.decode()


@pytest.mark.slow   # runs `stormlet local` for a fixed --duration
def test_stormlet_local_on_a_terminal_shows_a_live_progress_line():
    text = on_a_terminal(LOCAL + ["3"])
    lines = progress_lines(text)
    assert len(lines) >= 2, text
    # Rewritten in place about once a second, never going backwards.
    assert all(a <= b for first, later in pairwise(lines) for a, b in zip(first, later))
    # The rates: something moved while it ran.
    assert any(m[6] != "0" for m in PROGRESS.finditer(text)), text
    # The totals: once the topology is done, the line shows what the final summary does.
    assert lines[-1][1:] == final_totals(text) and lines[-1][1] == SENTENCES
    assert text.index("topology word_count: ran") > text.rindex("\r" + " " * 100)  # erased


@pytest.mark.slow   # runs `stormlet local` for a fixed --duration
def test_stormlet_local_into_a_pipe_shows_no_progress_line():
    # 2 s: a progress line would be written after one.
    result = subprocess.run(LOCAL + ["2"], capture_output=True, cwd=ROOT, timeout=30,
                            check=False)
    assert result.returncode == 0, result.stderr
    output = result.stdout.decode()   # not text=True: that would turn each "\r" into "\n"
    assert "topology word_count: ran" in output
    assert "\r" not in output and progress_lines(output) == []


# ----- on a cluster

LEDGER_MESSAGES = 500


@pytest.mark.cluster
@pytest.mark.skipif(not zookeeper_available(),
                    reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")
def test_on_a_cluster_the_api_serves_nimbus_s_numbers_and_actions(tmp_path):
    with LoopbackCluster(tmp_path) as cluster:
        try:
            cluster.add_nimbus()
            cluster.add_supervisor("s1", 2)
            cluster.wait_for_leader()
            result = cluster.cli("submit", str(LEDGER), "--name", "ledger",
                                 "-c", "topology.workers=2", "-c", f"ledger.dir={tmp_path}",
                                 "-c", f"ledger.messages={LEDGER_MESSAGES}",
                                 "-c", "topology.metrics.report.secs=1")
            assert result.returncode == 0, result.stderr
            source = ClusterSource(NimbusClient(cluster.zk.hosts))
            server = serve(source, "127.0.0.1", 0)
            try:
                check_cluster_ui(server)
            finally:
                server.stop()
                source.close()
        except BaseException:
            print(cluster.logs())
            raise


def check_cluster_ui(server) -> None:
    # Both workers' snapshots add up to every message acked once.
    wait_until(lambda: component(get(server, "/api/v1/topology/ledger"), "source")["acked"]
               == LEDGER_MESSAGES, 60, "every ledger message acked, as reported to nimbus")
    # Acks reach nimbus in worker metrics, restarts in the supervisor's own (slower) report:
    # None until that report names both workers.
    wait_until(lambda: all(w["restarts"] is not None
                           for w in get(server, "/api/v1/topology/ledger")["workers"]),
               30, "the supervisor reports both workers")
    page = get(server, "/api/v1/topology/ledger")
    assert page["status"] == "active" and page["workersTotal"] == 2
    assert len(page["workers"]) == 2 and all(w["restarts"] == 0 for w in page["workers"])
    assert component(page, "sink")["executed"] >= LEDGER_MESSAGES
    summary = get(server, "/api/v1/cluster/summary")
    assert (summary["mode"], summary["supervisors"], summary["slotsTotal"],
            summary["slotsUsed"]) == ("cluster", 1, 2, 2)
    assert [n["status"] for n in get(server, "/api/v1/nimbus/summary")["nimbuses"]] == ["Leader"]
    post(server, "/api/v1/topology/ledger/deactivate")
    assert get(server, "/api/v1/topology/ledger")["status"] == "inactive"
    assert request(server, "/api/v1/topology/nope")[0] == 404
