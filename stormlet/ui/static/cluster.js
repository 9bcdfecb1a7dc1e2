// The cluster page: nimbus leader and standbys, supervisors and their slots, topologies.
"use strict";

function fact(term, value, id) {
  return [UI.el("dt", {text: term}), UI.el("dd", {id, text: value})];
}

async function loadCluster() {
  const [summary, nimbus, supervisors, topologies] = await Promise.all([
    UI.api("cluster/summary"), UI.api("nimbus/summary"), UI.api("supervisor/summary"),
    UI.api("topology/summary")]);
  const local = summary.mode === "local";
  const facts = [
    ...fact("Mode", local ? "local (every topology runs in this process)" : "cluster", "mode"),
    ...fact("Topologies", UI.num(summary.topologies), "topology-count"),
    ...fact("Executors", UI.num(summary.executorsTotal), "executor-count"),
    ...fact("Tasks", UI.num(summary.tasksTotal), "task-count"),
  ];
  if (local) {
    facts.push(...fact("Process", `${summary.process.host} pid ${summary.process.pid}`, "process"));
  } else {
    facts.push(...fact("Supervisors", UI.num(summary.supervisors), "supervisor-count"),
               ...fact("Slots used / free", `${summary.slotsUsed} / ${summary.slotsFree}`, "slots"));
  }
  document.getElementById("summary").replaceChildren(...facts);
  document.getElementById("nimbus-section").hidden = local;
  document.getElementById("supervisor-section").hidden = local;

  UI.table("nimbuses", [
    {title: "Host", field: "host", format: String},
    {title: "Port", field: "port", format: String},
    {title: "Status", field: "status", format: String,
     cls: v => (v === "Leader" ? "leader" : null)},
    {title: "Uptime", field: "uptimeSeconds", format: UI.duration},
  ], nimbus.nimbuses, null, "no nimbus is registered");

  UI.table("supervisors", [
    {title: "Id", field: "id", format: String},
    {title: "Host", field: "host", format: String},
    {title: "Uptime", field: "uptimeSeconds", format: UI.duration},
    {title: "Slots", field: "slotsTotal"},
    {title: "Used", field: "slotsUsed"},
    {title: "Free", field: "slotsFree"},
  ], supervisors.supervisors, null, "no supervisor is running");

  UI.table("topologies", [
    {title: "Name", field: "name", format: String,
     link: t => `/topology.html?id=${encodeURIComponent(t.id)}`},
    {title: "Id", field: "id", format: String},
    {title: "Status", field: "status", format: String, cls: v => `status-${v}`},
    {title: "Uptime", field: "uptimeSeconds", format: UI.duration},
    {title: "Workers", field: "workersTotal"},
    {title: "Executors", field: "executorsTotal"},
    {title: "Tasks", field: "tasksTotal"},
    {title: "Errors", field: "errors", cls: v => (v ? "bad" : null)},
  ], topologies.topologies, t => ({"data-topology": t.id}), "no topology is running");
}

UI.every(loadCluster);
