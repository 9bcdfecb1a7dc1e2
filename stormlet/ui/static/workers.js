// The topology page's worker actions (ui/workers_api.py; cluster/introspection_service.py):
// Stack, Profile and Restart buttons on each row of the Workers table, and a panel under it
// that shows a stack dump, or a profile's progress and then its flame graph with a download
// link. Each is the admin's: with security on the UI asks for its token. topology.js redraws
// the table on every refresh; the buttons are added to each row it draws (a MutationObserver),
// so that file knows nothing of them. A local topology's one worker is this UI's own process:
// its buttons are disabled, saying so.
"use strict";

const Workers = {};

Workers.topologyId = UI.params.get("id");
Workers.table = document.getElementById("worker-table");
// How often a profile under way is asked about.
Workers.POLL_MS = 1000;
Workers.DEFAULT_SECONDS = 10;
Workers.LOCAL = "stack dumps, profiles and restarts are for a cluster's workers";

Workers.api = path => `topology/${encodeURIComponent(Workers.topologyId)}/${path}`;
Workers.workerApi = (worker, action) =>
  Workers.api(`worker/${encodeURIComponent(worker)}/${action}`);

// ----- the panel under the table

Workers.panel = UI.el("section", {id: "worker-panel", class: "worker-panel", hidden: true},
  UI.el("h2", {},
        UI.el("span", {id: "worker-panel-title"}),
        UI.el("button", {id: "worker-panel-close", class: "close", title: "close",
                         onclick: () => { Workers.panel.hidden = true; }}, "×")),
  UI.el("div", {id: "worker-panel-body"}));
Workers.table.closest("section").after(Workers.panel);

Workers.show = function (title, ...content) {
  UI.setText("worker-panel-title", title);
  document.getElementById("worker-panel-body").replaceChildren(...content);
  Workers.panel.hidden = false;
};

Workers.failed = function (title, error) {
  Workers.show(title, UI.el("p", {class: "worker-error", text: error.message}));
  UI.showProblem(error.message);
};

// ----- the buttons on each row

Workers.button = function (text, title, onclick, cls) {
  return UI.el("button", {type: "button", class: cls, title, "data-action": text.toLowerCase(),
                          onclick}, text);
};

Workers.decorate = function () {
  const head = Workers.table.tHead && Workers.table.tHead.rows[0];
  if (head && !head.querySelector("th.worker-actions")) {
    head.append(UI.el("th", {class: "worker-actions", text: "Look into"}));
  }
  const body = Workers.table.tBodies[0];
  for (const row of body ? body.rows : []) {
    if (row.classList.contains("empty") || row.querySelector("td.worker-actions")) continue;
    const host = row.querySelector('td[data-field="host"]')?.dataset.value;
    const port = row.querySelector('td[data-field="port"]')?.dataset.value;
    const cell = UI.el("td", {class: "worker-actions"});
    if (host && port) {
      const worker = `${host}:${port}`;
      row.dataset.worker = worker;
      cell.append(
        Workers.button("Stack", `every thread's stack in worker ${worker}, now`,
                       () => Workers.stack(worker)),
        Workers.button("Profile", `a CPU profile of worker ${worker} as a flame graph`,
                       () => Workers.profile(worker)),
        Workers.button("Restart", `stop worker ${worker} and start it again`,
                       () => Workers.restart(worker), "danger"));
    } else {
      for (const text of ["Stack", "Profile", "Restart"]) {
        const button = Workers.button(text, Workers.LOCAL, null);
        button.disabled = true;
        cell.append(button);
      }
    }
    row.append(cell);
  }
};

new MutationObserver(Workers.decorate).observe(Workers.table, {childList: true, subtree: true});
Workers.decorate();

// ----- the actions

Workers.stack = async function (worker) {
  const title = `Stacks of worker ${worker}`;
  Workers.show(title, UI.el("p", {class: "hint", text: "asking the worker for its stacks..."}));
  try {
    const answer = await UI.post(Workers.workerApi(worker, "stacks"));
    Workers.show(`${title} (pid ${answer.pid})`,
                 UI.el("pre", {id: "worker-stacks", class: "stacks", text: answer.stacks}));
  } catch (e) {
    Workers.failed(title, e);
  }
};

Workers.profile = async function (worker) {
  const form = UI.el("div", {class: "form"},
    UI.el("label", {class: "field"}, "Seconds",
          UI.el("input", {id: "profile-seconds", type: "number", min: 1, max: 300, step: 1,
                          value: Workers.DEFAULT_SECONDS})),
    UI.el("label", {class: "check"},
          UI.el("input", {id: "profile-idle", type: "checkbox"}),
          " waiting threads too (where time goes, not only the CPU)"));
  if (!await UI.confirm("Profile", `Profile worker ${worker} with py-spy? It samples every ` +
                        "thread for the seconds below (the worker pauses a moment each time).",
                        form)) return;
  const seconds = Number(document.getElementById("profile-seconds").value);
  const idle = document.getElementById("profile-idle").checked;
  const title = `Profile of worker ${worker}`;
  let started;
  try {
    started = await UI.post(Workers.workerApi(worker, "profile"), {seconds, idle});
  } catch (e) {
    Workers.failed(title, e);
    return;
  }
  const status = UI.el("p", {id: "profile-status", class: "hint",
                             text: `profiling for ${started.seconds} s...`});
  Workers.show(title, status);
  const poll = async () => {
    let state;
    try {
      state = await UI.api(Workers.api(`profile/${encodeURIComponent(started.profile)}`));
    } catch (e) {
      Workers.failed(title, e);
      return;
    }
    if (state.state === "running") {
      const elapsed = Math.min(Math.floor(state.elapsed), state.seconds);
      status.textContent = `profiling: ${elapsed} of ${state.seconds} s...`;
      setTimeout(poll, Workers.POLL_MS);
    } else if (state.state === "failed") {
      Workers.failed(title, new Error(state.error));
    } else {
      Workers.showFlameGraph(title, state);
    }
  };
  setTimeout(poll, Workers.POLL_MS);
};

// A flame graph in an <img>, where its own script does not run (workers_api.py says why); the
// download opens interactive in a browser.
Workers.showFlameGraph = function (title, state) {
  const url = state.svg;
  const kept = state.file ? ` (kept on ${state.host} as ${state.file})` : "";
  Workers.show(`${title} (pid ${state.pid}, ${state.seconds} s)`,
    UI.el("p", {class: "hint"},
          UI.el("a", {id: "profile-download", href: url, download: ""}, "Download the flame graph"),
          ` to open it interactive${kept}`),
    UI.el("img", {id: "profile-flame-graph", class: "flame-graph", src: url,
                  alt: `flame graph of worker ${state.host}:${state.port}`}));
};

Workers.restart = async function (worker) {
  const form = UI.el("div", {class: "form"},
    UI.el("label", {class: "field"}, "Reason",
          UI.el("input", {id: "restart-reason", type: "text", maxlength: 500,
                          placeholder: "why (for the event history)"})));
  if (!await UI.confirm("Restart worker", `Restart worker ${worker}? Its supervisor stops it ` +
                        "and starts it again at once; tuples in flight are replayed by their " +
                        "spouts.", form)) return;
  const reason = document.getElementById("restart-reason").value.trim();
  try {
    const answer = await UI.post(Workers.workerApi(worker, "restart"), {reason: reason || null});
    UI.showNotice(`worker ${worker} restarted (pid ${answer.pid} stopped; its supervisor ` +
                  "starts a new one)");
  } catch (e) {
    UI.showProblem(e.message);
  }
};
