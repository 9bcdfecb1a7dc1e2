// The component page: totals, one row per task, the partitions of an offset-tracking spout,
// its input and output edges, and its recent errors.
"use strict";

const topologyId = UI.params.get("id");
const componentId = UI.params.get("component");
const windowValue = UI.windowSelector("window", () => refresh());

const latency = v => UI.ms(v);
const capacity = v => (v === null || v === undefined ? "-" : v.toFixed(3));

function columns(type) {
  const common = [
    {title: "Emitted", field: "emitted"},
    {title: "Transferred", field: "transferred"},
  ];
  if (type === "spout") {
    return [...common,
      {title: "Complete latency (ms)", field: "complete_latency_ms.mean", format: latency},
      {title: "Complete p99 (ms)", field: "complete_latency_ms.p99", format: latency},
      {title: "Acked", field: "acked"},
      {title: "Failed", field: "failed", cls: v => (v ? "bad" : null)},
    ];
  }
  return [...common,
    {title: "Capacity", field: "capacity", format: capacity, cls: UI.capacityClass},
    {title: "Execute latency (ms)", field: "execute_latency_ms.mean", format: latency},
    {title: "Execute p99 (ms)", field: "execute_latency_ms.p99", format: latency},
    {title: "Executed", field: "executed"},
    {title: "Process latency (ms)", field: "process_latency_ms.mean", format: latency},
    {title: "Acked", field: "acked"},
    {title: "Failed", field: "failed", cls: v => (v ? "bad" : null)},
  ];
}

async function load() {
  if (!topologyId || !componentId) {
    throw new Error("open this page as component.html?id=TOPOLOGY&component=COMPONENT");
  }
  const c = await UI.api(`topology/${encodeURIComponent(topologyId)}/component/` +
                         `${encodeURIComponent(componentId)}?window=${encodeURIComponent(windowValue())}`);
  document.title = `stormlet: ${c.topologyName} › ${c.id}`;
  const back = document.getElementById("crumb-topology");
  back.textContent = c.topologyName;
  back.href = `/topology.html?id=${encodeURIComponent(c.topologyId)}&window=${encodeURIComponent(windowValue())}`;
  UI.setText("crumb-component", c.id);
  document.getElementById("logs-link").href =
    `/logs.html?id=${encodeURIComponent(c.topologyId)}&component=${encodeURIComponent(c.id)}`;
  UI.setText("name", c.id);
  UI.setText("type", c.type);
  UI.setText("executors", UI.num(c.stats.executors));
  UI.setText("tasks", UI.num(c.stats.tasks));
  UI.setText("window-hint", c.windowHint);

  UI.table("totals", columns(c.type), [c.stats]);
  UI.table("task-table", [
    {title: "Task", field: "task"},
    {title: "Queue", field: "queue_depth"},
    {title: "Throttled (s)", field: "throttled_secs", format: v => (v === undefined ? "-" : v.toFixed(2))},
    ...columns(c.type),
  ], c.tasks, t => ({"data-task": t.task}));

  document.getElementById("partition-section").hidden = !c.partitions.length;
  UI.table("partitions", [
    {title: "Task", field: "task"},
    {title: "Partition", field: "partition"},
    {title: "Lag", field: "lag", cls: v => (v > 0 ? "warn" : null)},
    {title: "In flight", field: "in_flight"},
    {title: "Retrying", field: "retrying"},
    {title: "Committed offset", field: "committed"},
    {title: "Acked", field: "acked"},
    {title: "Dead-lettered", field: "dead_lettered", cls: v => (v ? "bad" : null)},
    {title: "Lost (damaged file)", field: "lost", cls: v => (v ? "bad" : null)},
  ], c.partitions, p => ({"data-partition": p.partition}));

  const edge = key => ({title: key === "from" ? "From" : "To", field: key, format: String,
                        link: e => `/component.html?id=${encodeURIComponent(topologyId)}` +
                                   `&component=${encodeURIComponent(e[key])}`});
  const edgeColumns = key => [edge(key),
    {title: "Stream", field: "stream", format: String},
    {title: "Grouping", field: "grouping", format: String},
    {title: "Rate (/s)", field: "rate", format: v => (v === null || v === undefined ? "-" : v.toFixed(1))}];
  UI.table("inputs", edgeColumns("from"), c.inputs, null, "none (a spout)");
  UI.table("outputs", edgeColumns("to"), c.outputs, null, "no subscribers");

  UI.table("errors", [
    {title: "Time", field: "time", format: UI.time},
    {title: "Task", field: "task"},
    {title: "Host", field: "host", format: (v, e) => (v ? `${v}:${e.port}` : "local")},
    {title: "Error", field: "error", format: String, cls: () => "message"},
  ], c.errors, null, "no errors");
}

const refresh = UI.every(load);
