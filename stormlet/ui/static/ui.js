// Shared by every page: reading the REST API, formatting, tables, the refresh loop, the
// confirmation dialog and the error banner. No framework: pages build DOM from JSON.
"use strict";

const UI = {};

UI.params = new URLSearchParams(window.location.search);
// Seconds between refreshes (?refresh=N overrides, e.g. for a slow link).
UI.refreshSecs = Number(UI.params.get("refresh")) || 2;

UI.api = async function (path, options) {
  const response = await fetch("/api/v1/" + path, options);
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    throw new Error(`${path}: HTTP ${response.status} and a reply that is not JSON`);
  }
  if (response.status === 401) {
    window.location.assign("/login.html");   // the UI needs its access token
  }
  if (!response.ok) {
    const error = new Error(body && body.error ? body.error : `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return body;
};

UI.post = function (path, body) {
  return UI.api(path, {
    method: "POST",
    // The server refuses actions without this header: another site's page cannot send it.
    headers: {"Content-Type": "application/json", "X-Requested-By": "stormlet-ui"},
    body: JSON.stringify(body || {}),
  });
};

// ----- formatting

UI.num = function (value) {
  if (value === null || value === undefined) return "-";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  return value.toLocaleString("en-US", {maximumFractionDigits: 3});
};

UI.ms = function (value) {
  return value === null || value === undefined ? "-" : value.toFixed(value < 10 ? 3 : 1);
};

UI.duration = function (seconds) {
  if (seconds === null || seconds === undefined) return "-";
  let s = Math.floor(seconds);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${h}h ${m}m`;
  if (h) return `${h}h ${m}m ${s}s`;
  return m ? `${m}m ${s}s` : `${s}s`;
};

UI.time = function (epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleString() : "-";
};

// The value at a dotted path ("execute_latency_ms.mean"), or undefined.
UI.get = function (obj, path) {
  return path.split(".").reduce((o, k) => (o === null || o === undefined ? undefined : o[k]), obj);
};

// ----- DOM

UI.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
};

UI.setText = function (id, text) {
  document.getElementById(id).textContent = text;
};

// Fill table#id's body from rows. columns: [{title, field (dotted path), format, cls, link}].
// Each cell carries data-field and data-value (the raw number), for tests and copying.
UI.table = function (id, columns, rows, rowKey, empty) {
  const table = document.getElementById(id);
  // Numbers align right, text left; a column's kind is its first value's.
  const numeric = columns.map(c => rows.length > 0 && typeof UI.get(rows[0], c.field || "") === "number");
  table.tHead?.remove();
  table.createTHead().append(UI.el("tr", {}, ...columns.map(
    (c, i) => UI.el("th", {text: c.title, class: numeric[i] ? "num" : null}))));
  const body = table.tBodies[0] || table.createTBody();
  body.replaceChildren();
  if (!rows.length) {
    body.append(UI.el("tr", {class: "empty"},
                      UI.el("td", {colspan: columns.length, text: empty || "none"})));
    return;
  }
  for (const row of rows) {
    const tr = UI.el("tr", rowKey ? rowKey(row) : {});
    for (const column of columns) {
      const value = column.field ? UI.get(row, column.field) : undefined;
      const text = column.format ? column.format(value, row) : UI.num(value);
      const link = column.link ? column.link(row) : null;
      const raw = typeof value === "number" || typeof value === "string" ? value : undefined;
      const classes = [typeof value === "number" ? "num" : null, column.cls ? column.cls(value, row) : null]
        .filter(Boolean).join(" ");
      tr.append(UI.el("td", {"data-field": column.field || column.title, "data-value": raw,
                             class: classes || null},
                      link ? UI.el("a", {href: link, text}) : text));
    }
    body.append(tr);
  }
};

// ----- problems and confirmations

UI.showProblem = function (message) {
  const banner = document.getElementById("banner");
  banner.textContent = message;
  banner.className = "banner error";
};

UI.showNotice = function (message) {
  const banner = document.getElementById("banner");
  banner.textContent = message;
  banner.className = message ? "banner notice" : "banner";
};

UI.clearProblem = function () {
  const banner = document.getElementById("banner");
  if (banner.classList.contains("error")) UI.showNotice("");
};

// An in-page confirmation: resolves with true (confirmed) or false. ``extra`` is an optional
// element shown under the message (e.g. the rebalance inputs).
UI.confirm = function (title, message, extra) {
  const dialog = document.getElementById("dialog");
  document.getElementById("dialog-title").textContent = title;
  document.getElementById("dialog-message").textContent = message;
  const slot = document.getElementById("dialog-extra");
  slot.replaceChildren(...(extra ? [extra] : []));
  dialog.hidden = false;
  document.getElementById("dialog-confirm").focus();
  return new Promise(resolve => {
    const finish = answer => {
      dialog.hidden = true;
      document.getElementById("dialog-confirm").onclick = null;
      document.getElementById("dialog-cancel").onclick = null;
      resolve(answer);
    };
    document.getElementById("dialog-confirm").onclick = () => finish(true);
    document.getElementById("dialog-cancel").onclick = () => finish(false);
  });
};

// ----- the refresh loop

// Calls load() now and every UI.refreshSecs; a failure shows in the banner and the next
// successful load clears it.
UI.every = function (load) {
  let timer = null;
  const tick = async () => {
    clearTimeout(timer);
    try {
      await load();
      UI.clearProblem();
      document.body.dataset.loaded = String(Date.now());
    } catch (e) {
      UI.showProblem(e.message);
    }
    timer = setTimeout(tick, UI.refreshSecs * 1000);
  };
  tick();
  return tick;   // call to refresh now (after an action)
};

// The window selector: Storm's ?window= values; changing it reloads with the new window.
UI.WINDOWS = [["600", "10 minutes"], ["10800", "3 hours"], ["86400", "1 day"],
              [":all-time", "All time"]];

UI.windowSelector = function (id, onChange) {
  const select = document.getElementById(id);
  const current = UI.params.get("window") || ":all-time";
  for (const [value, label] of UI.WINDOWS) {
    select.append(UI.el("option", {value, text: label, selected: value === current}));
  }
  select.addEventListener("change", () => {
    UI.params.set("window", select.value);
    history.replaceState(null, "", "?" + UI.params.toString());
    onChange();
  });
  return () => select.value;
};

UI.capacityClass = function (value) {
  return typeof value === "number" && value > 0.8 ? "busy" : null;
};
