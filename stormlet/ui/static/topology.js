// The topology page: status, stats for the chosen window, the graph, component tables,
// failures, workers, errors, configuration, and the actions (each confirmed in-page).
"use strict";

const topologyId = UI.params.get("id");
const windowValue = UI.windowSelector("window", () => refresh());
let latest = null;   // the last topology JSON, for the action dialogs

const componentLink = id =>
  `/component.html?id=${encodeURIComponent(topologyId)}&component=${encodeURIComponent(id)}` +
  `&window=${encodeURIComponent(windowValue())}`;

// A worker's log page (logs.html), from its row.
const logsLink = w => `/logs.html?id=${encodeURIComponent(topologyId)}` +
  `&host=${encodeURIComponent(w.host || "")}&port=${encodeURIComponent(w.port ?? "")}`;

const FAIL_KINDS = {timeout: "timeout", fail: "failed by a bolt", error: "error in a bolt"};

const LATENCY = field => ({title: "", field: `${field}.mean`, format: UI.ms});

const SPOUT_COLUMNS = [
  {title: "Id", field: "id", format: String, link: c => componentLink(c.id)},
  {title: "Executors", field: "executors"},
  {title: "Tasks", field: "tasks"},
  {title: "Emitted", field: "emitted"},
  {title: "Transferred", field: "transferred"},
  {...LATENCY("complete_latency_ms"), title: "Complete latency (ms)"},
  {title: "Acked", field: "acked"},
  {title: "Failed", field: "failed", cls: v => (v ? "bad" : null)},
];

const BOLT_COLUMNS = [
  {title: "Id", field: "id", format: String, link: c => componentLink(c.id)},
  {title: "Executors", field: "executors"},
  {title: "Tasks", field: "tasks"},
  {title: "Emitted", field: "emitted"},
  {title: "Transferred", field: "transferred"},
  {title: "Capacity", field: "capacity", format: v => (v === null || v === undefined ? "-" : v.toFixed(3)),
   cls: UI.capacityClass},
  {...LATENCY("execute_latency_ms"), title: "Execute latency (ms)"},
  {title: "Executed", field: "executed"},
  {...LATENCY("process_latency_ms"), title: "Process latency (ms)"},
  {title: "Acked", field: "acked"},
  {title: "Failed", field: "failed", cls: v => (v ? "bad" : null)},
  {title: "Queue", field: "queue_depth"},
];

async function load() {
  if (!topologyId) throw new Error("no topology given: open this page as topology.html?id=ID");
  let t;
  try {
    t = await UI.api(`topology/${encodeURIComponent(topologyId)}?window=${encodeURIComponent(windowValue())}`);
  } catch (e) {
    if (e.status !== 404 || !latest) throw e;
    // Killed from here (or elsewhere) since the last refresh: say so, not as a failure.
    UI.showNotice(`${latest.name} is no longer running`);
    document.querySelectorAll(".actions button").forEach(b => { b.disabled = true; });
    return;
  }
  latest = t;
  document.title = `stormlet: ${t.name}`;
  UI.setText("crumb-topology", t.name);
  UI.setText("name", t.name);
  const status = document.getElementById("status");
  status.textContent = t.status;
  status.className = `status-${t.status}`;
  UI.setText("uptime", UI.duration(t.uptimeSeconds));
  // Fewer run than were asked for while the cluster is short of slots (a host lost).
  const asked = t.workersAsked;
  UI.setText("workers", asked != null && asked !== t.workersTotal
    ? `${UI.num(t.workersTotal)} of ${UI.num(asked)} asked for` : UI.num(t.workersTotal));
  UI.setText("executors", UI.num(t.executorsTotal));
  UI.setText("tasks", UI.num(t.tasksTotal));
  UI.setText("topology-id", t.id);
  UI.setText("window-hint", t.windowHint);
  document.getElementById("activate").disabled = t.status !== "inactive";
  document.getElementById("deactivate").disabled = t.status !== "active";
  document.getElementById("kill").disabled = t.status === "killed";
  document.getElementById("rebalance").disabled = t.status === "killed";

  const s = t.topologyStats;
  UI.table("topology-stats", [
    {title: "Window", field: "window", format: () => t.windowHint},
    {title: "Emitted", field: "emitted"},
    {title: "Transferred", field: "transferred"},
    {title: "Complete latency (ms)", field: "complete_latency_ms.mean", format: UI.ms},
    {title: "Acked", field: "acked"},
    {title: "Failed", field: "failed", cls: v => (v ? "bad" : null)},
  ], [s]);

  const stats = {};
  for (const c of [...t.spouts, ...t.bolts]) stats[c.id] = c;
  Graph.draw(document.getElementById("graph"), t.graph.components, t.graph.edges, stats,
             componentLink);
  UI.table("spouts", SPOUT_COLUMNS, t.spouts, c => ({"data-component": c.id}), "no spouts");
  UI.table("bolts", BOLT_COLUMNS, t.bolts, c => ({"data-component": c.id}), "no bolts");

  const byKind = Object.entries(s.failed_by_kind).map(([kind, count]) => ({kind, count}))
    .sort((a, b) => b.count - a.count);
  UI.table("failures-by-reason", [
    {title: "Reason", field: "kind", format: k => FAIL_KINDS[k] || k},
    {title: "Failed", field: "count"},
  ], byKind, r => ({"data-reason": r.kind}), "no failures");
  UI.table("failures-by-component", [
    {title: "Component", field: "component", format: c => c || "unknown (no acker could say)"},
    {title: "Failed", field: "count"},
  ], s.failed_by_component.map(([component, count]) => ({component, count})),
  r => ({"data-component": r.component || ""}), "no failures");

  UI.table("worker-table", [
    {title: "Host", field: "host", format: v => v || "local"},
    {title: "Port", field: "port", format: v => (v === null || v === undefined ? "-" : String(v))},
    {title: "Pid", field: "pid", format: String},
    {title: "Uptime", field: "uptime", format: UI.duration},
    {title: "CPU %", field: "cpu_percent", format: v => (v === undefined ? "-" : v.toFixed(1))},
    {title: "Memory (MB)", field: "rss_bytes", format: v => (v === undefined ? "-" : (v / 1048576).toFixed(1))},
    {title: "Restarts", field: "restarts"},
    {title: "Peers unreachable", field: "peers_unreachable",
     format: v => (v && v.length ? v.join(", ") : "-"), cls: v => (v && v.length ? "bad" : null)},
    {title: "Logs", field: "logs", format: () => "logs", link: logsLink},
  ], t.workers, w => ({"data-worker": `${w.host}:${w.port}`}), "no worker reported yet");

  UI.table("errors", [
    {title: "Time", field: "time", format: UI.time},
    {title: "Component", field: "component", format: String},
    {title: "Task", field: "task"},
    {title: "Host", field: "host", format: (v, e) => (v ? `${v}:${e.port}` : "local")},
    {title: "Error", field: "error", format: String, cls: () => "message"},
  ], t.errors, null, "no errors");

  UI.table("configuration", [
    {title: "Key", field: "key", format: String},
    {title: "Value", field: "value", format: v => JSON.stringify(v)},
  ], Object.entries(t.configuration).map(([key, value]) => ({key, value})));
}

const refresh = UI.every(load);

// ----- actions

async function act(path, body, done) {
  try {
    await UI.post(`topology/${encodeURIComponent(topologyId)}/${path}`, body);
    UI.showNotice(done);
  } catch (e) {
    UI.showProblem(e.message);
    return;
  }
  refresh();
}

function numberInput(id, label, value) {
  return UI.el("label", {class: "field"}, label,
               UI.el("input", {id, type: "number", min: 0, step: 1, value}));
}

document.getElementById("activate").addEventListener("click", async () => {
  if (await UI.confirm("Activate", `Activate ${latest.name}? Its spouts start emitting again.`)) {
    act("activate", null, `${latest.name} activated`);
  }
});

document.getElementById("deactivate").addEventListener("click", async () => {
  if (await UI.confirm("Deactivate", `Deactivate ${latest.name}? Its spouts stop emitting; ` +
                       "tuples in flight still finish.")) {
    act("deactivate", null, `${latest.name} deactivated`);
  }
});

document.getElementById("rebalance").addEventListener("click", async () => {
  const form = UI.el("div", {class: "form"},
                     numberInput("rebalance-wait", "Wait (s)", 0),
                     numberInput("rebalance-workers", "Workers", latest.workersTotal));
  for (const c of [...latest.spouts, ...latest.bolts]) {
    form.append(numberInput(`rebalance-executors-${c.id}`, `${c.id} executors`, c.executors));
  }
  if (!await UI.confirm("Rebalance", `Rebalance ${latest.name} to:`, form)) return;
  const executors = {};
  for (const c of [...latest.spouts, ...latest.bolts]) {
    const n = Number(document.getElementById(`rebalance-executors-${c.id}`).value);
    if (n !== c.executors) executors[c.id] = n;
  }
  const wait = Number(document.getElementById("rebalance-wait").value) || 0;
  const workers = Number(document.getElementById("rebalance-workers").value);
  act(`rebalance/${wait}`, {workers, executors}, `${latest.name} rebalanced`);
});

document.getElementById("kill").addEventListener("click", async () => {
  const timeout = latest.configuration["topology.message.timeout.secs"] || 30;
  const form = UI.el("div", {class: "form"}, numberInput("kill-wait", "Wait (s)", timeout));
  if (!await UI.confirm("Kill", `Kill ${latest.name}? It is deactivated now and removed after ` +
                        "the wait.", form)) return;
  const wait = Number(document.getElementById("kill-wait").value) || 0;
  act(`kill/${wait}`, null, `${latest.name} is being killed`);
});
