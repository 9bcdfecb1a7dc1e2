// The topology page's event history (GET /api/v1/topology/<id>/events; cluster/events.py):
// what happened to the topology and why, newest first: submits, activations, rebalances,
// assignments and why executors moved, workers' starts, exits and stops, the kill. A loop of
// its own beside topology.js's: the history outlives the topology, so the table still says how
// it ended once the rest of the page has nothing to show.
"use strict";

const Events = {};

// How many of the newest events the table shows: the API's default, unless ?events=N.
Events.query = UI.params.get("events") ? `?limit=${encodeURIComponent(UI.params.get("events"))}` : "";

// Kinds an operator should notice: a worker that died or was stopped, work that waits.
Events.NOTABLE = new Set(["worker-exited", "worker-stopped", "environment-failed", "waiting",
                          "reassigned", "killed", "removed"]);

Events.load = async function () {
  const id = UI.params.get("id");
  if (!id) return;
  const history = await UI.api(`topology/${encodeURIComponent(id)}/events${Events.query}`);
  UI.table("events", [
    {title: "Time", field: "time", format: UI.time},
    {title: "Kind", field: "kind", format: String,
     cls: kind => (Events.NOTABLE.has(kind) ? "warn" : null)},
    {title: "Event", field: "text", format: String, cls: () => "message"},
    {title: "Recorded by", field: "writer", format: String},
  ], history.events.slice().reverse(), e => ({"data-seq": e.seq, "data-kind": e.kind}),
  "no events recorded");
  UI.setText("events-problem", "");
  document.getElementById("events").dataset.loaded = String(Date.now());
};

// Refreshes with the page's cadence; a failure shows beside the heading, not in the page's
// banner, which speaks for the rest of the page.
Events.loop = async function () {
  try {
    await Events.load();
  } catch (e) {
    UI.setText("events-problem", `could not read the events: ${e.message}`);
  }
  setTimeout(Events.loop, UI.refreshSecs * 1000);
};

Events.loop();
