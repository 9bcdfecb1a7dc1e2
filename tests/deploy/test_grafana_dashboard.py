"""deploy/grafana/stormlet-dashboard.json against the Prometheus endpoint it is for: every metric
its queries name is one a real scrape of ``/metrics`` (a LocalCluster's UI, running a topology
that fails some tuples) exposes, with the labels the queries select and group by; and the JSON is
a dashboard Grafana loads (panels on its grid, a Prometheus data source variable, the variables
its queries use)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from ui_support import COUNT, SPOUT_TASKS, get, ui_cluster, wait_until

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "stormlet-dashboard.json"
GRID_WIDTH = 24   # Grafana's grid is 24 columns wide
# Grafana's own variables, which a dashboard uses without defining them.
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__range_s"}
# PromQL's aggregations and the functions the dashboard may call (an unknown word before "(" is
# a misspelling).
PROMQL_CALLS = {"sum", "max", "min", "avg", "count", "topk", "bottomk", "quantile", "rate",
                "irate", "increase", "delta", "deriv", "histogram_quantile", "abs", "clamp_min",
                "clamp_max", "label_values", "by", "without", "on", "ignoring", "group_left",
                "group_right", "vector", "scalar", "time", "max_over_time", "min_over_time",
                "avg_over_time", "changes", "resets"}
METRIC = re.compile(r"\b(stormlet_[A-Za-z0-9_]+)\b")
SELECTOR = re.compile(r"\b(stormlet_[A-Za-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(board: dict) -> list[str]:
    """Every PromQL the dashboard runs: its panels' targets and its query variables'."""
    found = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    found += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return found


def scraped_labels() -> dict[str, set[str]]:
    """Sample name -> its label names, from the /metrics of a UI serving a topology that has
    acked, failed and replayed tuples."""
    with ui_cluster("finite") as (_cluster, server):
        def done() -> bool:
            page = get(server, "/api/v1/topology/finite")
            spout = next(c for c in page["spouts"] if c["id"] == "numbers")
            return spout["acked"] >= COUNT * SPOUT_TASKS
        wait_until(done, 20, "every finite message acked")
        with urllib.request.urlopen(f"{server.url}metrics", timeout=10) as response:
            text = response.read().decode()
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


@pytest.fixture(scope="module")
def exposed() -> dict[str, set[str]]:
    return scraped_labels()


def test_every_metric_the_dashboard_queries_is_exposed_with_its_labels(exposed):
    board = dashboard()
    used = {name for query in queries(board) for name in METRIC.findall(query)}
    assert used, "the dashboard queries no stormlet metric"
    missing = sorted(used - set(exposed))
    assert not missing, f"the dashboard queries metrics /metrics does not expose: {missing} " \
                        f"(it exposes {sorted(n for n in exposed if n.startswith('stormlet_'))})"
    for query in queries(board):
        for name, matchers in SELECTOR.findall(query):
            for label in MATCHER.findall(matchers):
                assert label in exposed[name], f"{name} has no label {label!r}: {query}"
        grouped = set().union(*(exposed[n] for n in METRIC.findall(query)))
        for labels in GROUPING.findall(query):
            for label in filter(None, (s.strip() for s in labels.split(","))):
                assert label in grouped, f"no metric of this query has label {label!r}: {query}"


def test_the_dashboard_covers_the_charts_metrics(exposed):
    """Throughput, latency, capacity and backpressure, as the UI's charts show them."""
    used = {name for query in queries(dashboard()) for name in METRIC.findall(query)}
    assert {"stormlet_emitted_total", "stormlet_acked_total", "stormlet_failed_total",
            "stormlet_complete_latency_seconds", "stormlet_busy_seconds_total",
            "stormlet_throttled_seconds_total"} <= used


def test_the_json_is_a_grafana_dashboard():
    board = dashboard()
    assert isinstance(board["title"], str) and board["title"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", board["uid"])
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["time"] == {"from": "now-1h", "to": "now"}
    variables = {v["name"]: v for v in board["templating"]["list"]}
    source = variables["datasource"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}

    panels = board["panels"]
    assert len(panels) >= 10
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "two panels share an id"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        assert panel["type"] in ("row", "timeseries", "stat"), panel["type"]
        assert panel["title"]
        pos = panel["gridPos"]
        assert all(isinstance(pos[k], int) and pos[k] >= 0 for k in "hwxy")
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] + pos["w"] <= GRID_WIDTH, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert target["expr"].strip()

    for query in queries(board):
        assert _balanced(query), f"unbalanced brackets: {query}"
        for name in VARIABLE.findall(query):
            assert name in variables or name in BUILTIN_VARIABLES, \
                f"${name} is no variable of the dashboard: {query}"
        for call in CALL.findall(query):
            assert call in PROMQL_CALLS, f"{call}( is no PromQL function: {query}"


def _balanced(text: str) -> bool:
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    quoted = False
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack and not quoted
