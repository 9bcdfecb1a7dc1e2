// Run-time settings on the topology and component pages (the REST API's debug_api.py): the
// "Debug" control (sample a percentage of the emitted tuples, for a while: Storm's Debug
// button), the log levels (Storm's "Change Log Level", topology page only) and the sampled
// tuples (component page only). Each part is a section of its own, added to the page's main.
"use strict";

const Debug = {};

Debug.topology = UI.params.get("id");
Debug.component = UI.params.get("component");   // null on the topology page
Debug.base = () => `topology/${encodeURIComponent(Debug.topology)}`;
Debug.LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];

Debug.left = function (entry) {
  return entry.timeout === null || entry.timeout === undefined
    ? "until cleared" : `${UI.duration(entry.timeout)} left`;
};

Debug.section = function (id, title, hint, ...children) {
  const heading = UI.el("h2", {}, title,
                        hint ? UI.el("span", {class: "hint", text: hint}) : null);
  const section = UI.el("section", {id}, heading, ...children);
  document.querySelector("main").append(section);
  return section;
};

Debug.field = function (id, label, attrs) {
  return UI.el("label", {class: "field"}, label, UI.el("input", {id, ...attrs}));
};

Debug.act = async function (path, body, done) {
  try {
    await UI.post(path, body);
    UI.showNotice(done);
  } catch (e) {
    UI.showProblem(e.message);
  }
  Debug.refresh();
};

// ----- sampling ("Debug")

Debug.samplingSection = function () {
  const which = Debug.component ? `component ${Debug.component}` : "every component";
  Debug.section("debug-section", "Debug", `sample the tuples ${which} emits`,
    UI.el("div", {class: "actions"},
          Debug.field("debug-percent", "Sampling %", {type: "number", min: 0.001, max: 100,
                                                      step: "any", value: 10}),
          Debug.field("debug-seconds", "for (s)", {type: "number", min: 0, step: 1, value: 600}),
          UI.el("button", {id: "debug-enable", class: "primary", text: "Debug",
                           onclick: Debug.enable}),
          UI.el("button", {id: "debug-disable", text: "Stop debugging", onclick: Debug.disable})),
    UI.el("table", {id: "debug-sampling"}));
};

Debug.debugPath = function (action, percent) {
  const component = Debug.component ? `/component/${encodeURIComponent(Debug.component)}` : "";
  return `${Debug.base()}${component}/debug/${action}/${percent}`;
};

Debug.enable = function () {
  const percent = Number(document.getElementById("debug-percent").value);
  const seconds = Number(document.getElementById("debug-seconds").value) || 0;
  Debug.act(Debug.debugPath("enable", percent), {timeout: seconds},
            `sampling ${percent}% of the emitted tuples` + (seconds ? ` for ${seconds} s` : ""));
};

Debug.disable = function () {
  Debug.act(Debug.debugPath("disable", 0), {}, "tuple sampling off");
};

Debug.showSampling = function (sampling) {
  const rows = Object.entries(sampling).map(([key, entry]) => ({key, ...entry}));
  UI.table("debug-sampling", [
    {title: "Sampled", field: "key", format: k => (k === "*" ? "every component" : k)},
    {title: "Percent", field: "percent"},
    {title: "Lasts", field: "timeout", format: (v, row) => Debug.left(row)},
  ], rows, row => ({"data-sampled": row.key}), "sampling is off");
};

// ----- log levels (topology page)

Debug.logSection = function () {
  const level = UI.el("select", {id: "log-level"},
                      ...Debug.LEVELS.map(l => UI.el("option", {value: l, text: l})));
  Debug.section("log-levels-section", "Log levels",
    "a logger's level on every worker, back to its own when the time runs out",
    UI.el("table", {id: "log-levels"}),
    UI.el("div", {class: "actions"},
          Debug.field("log-logger", "Logger", {type: "text", value: "ROOT", size: 28}),
          UI.el("label", {class: "field"}, "Level", level),
          Debug.field("log-seconds", "for (s)", {type: "number", min: 0, step: 1, value: 300}),
          UI.el("button", {id: "log-set", class: "primary", text: "Set",
                           onclick: Debug.setLevel})));
};

Debug.setLevel = function () {
  const logger = document.getElementById("log-logger").value.trim() || "ROOT";
  const level = document.getElementById("log-level").value;
  const timeout = Number(document.getElementById("log-seconds").value) || 0;
  Debug.act(`${Debug.base()}/logconfig`,
            {namedLoggerLevels: {[logger]: {target_level: level, timeout}}},
            `${logger} set to ${level}` + (timeout ? ` for ${timeout} s` : ""));
};

Debug.clearLevel = function (logger) {
  Debug.act(`${Debug.base()}/logconfig`, {namedLoggerLevels: {[logger]: {target_level: null}}},
            `${logger} back to its own level`);
};

Debug.showLevels = function (levels) {
  const rows = Object.entries(levels).map(([logger, entry]) => ({logger, ...entry}));
  UI.table("log-levels", [
    {title: "Logger", field: "logger", format: String},
    {title: "Level", field: "target_level", format: String},
    {title: "Lasts", field: "timeout", format: (v, row) => Debug.left(row)},
    {title: "", field: "clear", format: (v, row) => UI.el(
      "button", {class: "clear", text: "Clear", onclick: () => Debug.clearLevel(row.logger)})},
  ], rows, row => ({"data-logger": row.logger}), "no logger set: each has its own level");
};

// ----- sampled tuples (component page)

Debug.samplesSection = function () {
  Debug.section("samples-section", "Sampled tuples", "newest last; turn sampling on above",
                UI.el("table", {id: "samples"}));
};

Debug.showSamples = function (samples) {
  UI.table("samples", [
    {title: "Time", field: "time", format: v => new Date(v * 1000).toLocaleTimeString()},
    {title: "Task", field: "task"},
    {title: "Stream", field: "stream", format: String},
    {title: "Values", field: "values", format: v => JSON.stringify(v), cls: () => "message"},
    {title: "To tasks", field: "to_tasks", format: v => (v || []).join(", ")},
    {title: "Message id", field: "msg_id",
     format: v => (v === undefined ? "-" : JSON.stringify(v))},
    {title: "Roots", field: "roots", format: v => (v || []).join(" ") || "-"},
    {title: "Note", field: "note", format: v => v || ""},
    {title: "Worker", field: "host", format: (v, s) => (v ? `${v}:${s.port}` : "local")},
  ], samples.slice().reverse(), null, "no samples");
};

// ----- refreshing

Debug.load = async function () {
  if (!Debug.topology) return;
  if (Debug.component) {
    const c = encodeURIComponent(Debug.component);
    const reply = await UI.api(`${Debug.base()}/component/${c}/samples?limit=50`);
    Debug.showSampling(reply.sampling);
    Debug.showSamples(reply.samples);
  } else {
    const [sampling, levels] = await Promise.all([UI.api(`${Debug.base()}/debug`),
                                                  UI.api(`${Debug.base()}/logconfig`)]);
    Debug.showSampling(sampling.sampling);
    Debug.showLevels(levels.namedLoggerLevels);
  }
  document.getElementById("debug-section").dataset.loaded = String(Date.now());
};

Debug.refresh = async function () {
  clearTimeout(Debug.timer);
  try {
    await Debug.load();
  } catch (e) {
    // A topology killed meanwhile is the page's own news; anything else is shown.
    if (e.status !== 404) UI.showProblem(e.message);
  }
  Debug.timer = setTimeout(Debug.refresh, UI.refreshSecs * 1000);
};

Debug.samplingSection();
if (Debug.component) {
  Debug.samplesSection();
} else {
  Debug.logSection();
}
Debug.refresh();
