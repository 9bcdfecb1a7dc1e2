// The log viewer (logs.html), Storm's logviewer behind nimbus: one worker's log files
// (logs.html?id=T&host=H&port=P), or one component's lines across all its workers
// (logs.html?id=T&component=C), a page at a time through the REST API (ui/log_viewer.py).
// Search is a regular expression run on the node that holds the file; Older and Newer page
// through it and on into the rotated files; Follow shows the newest lines as they come.
//
// A "cursor" is where the page stands in one worker's file: [start, next) of it. A worker's
// page has one; a component's has one per worker running it, and shows their lines merged by
// time, each prefixed with its worker's host:port.
"use strict";

const Logs = {
  topologyId: UI.params.get("id"),
  component: UI.params.get("component"),   // the component's view; null: a worker's
  listing: null,
  workers: [],      // the workers shown
  cursors: [],
  timer: null,      // following's
  queue: Promise.resolve(),   // actions run one after the other
};
// Bytes a page spans (?page=N; the API's default without).
Logs.pageBytes = UI.params.get("page");
// While following, at most this many records stay shown; past it the view starts again from
// the newest page, so that a long follow does not fill the browser's memory.
Logs.MAX_SHOWN = 5000;

const enc = encodeURIComponent;

Logs.generation = name => { const m = /\.(\d+)$/.exec(name); return m ? Number(m[1]) : 0; };
Logs.series = name => name.replace(/\.\d+$/, "");
Logs.baseName = name => name.split("/").pop();
Logs.where = worker => `${worker.host}:${worker.port}`;

Logs.workerLink = (worker, file) =>
  `/logs.html?id=${enc(Logs.topologyId)}&supervisor=${enc(worker.supervisor)}` +
  `&port=${worker.port}` + (file ? `&file=${enc(file)}` : "");

Logs.downloadLink = (worker, file) =>
  `/api/v1/topology/${enc(Logs.topologyId)}/logs/download?supervisor=${enc(worker.supervisor)}` +
  `&file=${enc(file.name)}` + (file.inode !== null && file.inode !== undefined ? `&inode=${file.inode}` : "");

// ----- the filter

Logs.filter = function () {
  const filter = {};
  const grep = document.getElementById("grep").value;
  const component = Logs.component || document.getElementById("component-filter").value;
  const task = document.getElementById("task-filter").value;
  if (grep) filter.grep = grep;
  if (component) filter.component = component;
  if (task) filter.task = task;
  return filter;
};

// Tasks of the component chosen (or of every component shown), for the task selector.
Logs.fillTasks = function () {
  const component = Logs.component || document.getElementById("component-filter").value;
  const select = document.getElementById("task-filter");
  const chosen = select.value || UI.params.get("task") || "";
  const tasks = new Set();
  for (const worker of Logs.workers) {
    for (const e of worker.executors) {
      if (!component || e.component === component) e.tasks.forEach(t => tasks.add(t));
    }
  }
  select.replaceChildren(UI.el("option", {value: "", text: "all"}),
    ...[...tasks].sort((a, b) => a - b).map(t => UI.el("option", {value: String(t), text: String(t),
                                                                  selected: String(t) === chosen})));
};

// ----- reading

// One page of a cursor's file: ``position`` is {} (its last page), {start: N} or {before: N}.
Logs.read = async function (cursor, position) {
  const query = new URLSearchParams({supervisor: cursor.worker.supervisor, file: cursor.file,
                                     ...position, ...Logs.filter()});
  // Paging on from a page: in the file that page was of, even if rotated since.
  if (cursor.inode !== null && ("start" in position || "before" in position)) {
    query.set("inode", cursor.inode);
  }
  if (Logs.pageBytes) query.set("length", Logs.pageBytes);
  const page = await UI.api(`topology/${enc(Logs.topologyId)}/logs/page?${query}`);
  Object.assign(cursor, {file: page.file, inode: page.inode, start: page.start, next: page.next,
                         eof: page.eof, size: page.size, mtime: page.mtime});
  return page;
};

// The worker's file of the same series as the cursor's, ``step`` generations older (+1) or
// newer (-1), as the listing last said; null if there is none.
Logs.neighbour = function (cursor, step) {
  const wanted = Logs.generation(cursor.file) + step;
  if (wanted < 0) return null;
  return cursor.worker.files.find(f => Logs.series(f.name) === Logs.series(cursor.file) &&
                                       (f.generation || 0) === wanted) || null;
};

Logs.moveTo = function (cursor, file) {
  cursor.file = file.name;
  // The current file is whichever holds the name; a rotated one is that file (its inode).
  cursor.inode = file.generation ? file.inode : null;
};

// What each paging action does to one cursor: a promise of its new page, or null where the
// cursor cannot go (already at the oldest byte, say).
Logs.steps = {
  last(cursor) {   // of the file it is in
    return Logs.read(cursor, {});
  },
  newest(cursor) {
    Logs.moveTo(cursor, {name: Logs.series(cursor.file), generation: 0});
    return Logs.read(cursor, {});
  },
  oldest(cursor) {
    const files = cursor.worker.files.filter(f => Logs.series(f.name) === Logs.series(cursor.file));
    const oldest = files.reduce((a, b) => ((b.generation || 0) > (a.generation || 0) ? b : a), files[0]);
    if (oldest) Logs.moveTo(cursor, oldest);
    return Logs.read(cursor, {start: 0});
  },
  older(cursor) {
    if (cursor.start === undefined) return null;   // its first read failed
    if (cursor.start > 0) return Logs.read(cursor, {before: cursor.start});
    const older = Logs.neighbour(cursor, +1);   // on into the rotated file before it
    if (!older) return null;
    Logs.moveTo(cursor, older);
    return Logs.read(cursor, {});
  },
  newer(cursor) {
    if (cursor.start === undefined) return null;
    if (!cursor.eof || Logs.generation(cursor.file) === 0) {
      return Logs.read(cursor, {start: cursor.next});
    }
    const newer = Logs.neighbour(cursor, -1);   // on into the file written after it
    if (!newer) return null;
    Logs.moveTo(cursor, newer);
    return Logs.read(cursor, {start: 0});
  },
};

// Do ``action`` on every cursor and show the pages that came: in place of what was shown, or
// after it (``append``: following). Nothing changes if no cursor moved. Actions queue: a click
// while a follower's read is under way comes after it.
Logs.go = function (action, append) {
  Logs.queue = Logs.queue.then(() => Logs.run(action, append));
  return Logs.queue;
};

Logs.run = async function (action, append) {
  try {
    if (action === "newest" || action === "oldest") await Logs.relist();
    const asked = Logs.cursors.map(c => ({cursor: c, page: Logs.steps[action](c)}))
      .filter(a => a.page !== null);
    const settled = await Promise.allSettled(asked.map(a => a.page));
    const problems = [];
    const pages = [];
    settled.forEach((result, i) => {
      if (result.status === "fulfilled") pages.push({cursor: asked[i].cursor, page: result.value});
      else problems.push(`${Logs.where(asked[i].cursor.worker)}: ${result.reason.message}`);
    });
    UI.setText("log-problem", problems.join("; "));
    if (problems.length && !pages.length && !append) UI.showProblem(problems.join("; "));
    else UI.clearProblem();
    if (pages.length && !(append && pages.every(p => !p.page.records.length))) {
      Logs.show(pages, append, action);
    }
    if (pages.length) {
      document.getElementById("redacted").hidden = !pages.some(p => p.page.redacted);
    }
    Logs.describe();
  } catch (e) {
    UI.showProblem(e.message);
  } finally {
    document.body.dataset.loaded = String(Date.now());
  }
};

// ----- showing

// The records of ``pages``, each with its worker and a time (a line without one takes the
// time of the record before it), merged by time when they come from several workers.
Logs.records = function (pages) {
  const all = [];
  pages.forEach(({cursor, page}, p) => {
    let last = 0;
    page.records.forEach((record, i) => {
      last = record.time ?? last;
      all.push({...record, worker: cursor.worker, when: last, order: [p, i]});
    });
  });
  if (pages.length > 1) {
    all.sort((a, b) => a.when - b.when || a.order[0] - b.order[0] || a.order[1] - b.order[1]);
  }
  return all;
};

Logs.highlighter = function () {
  const grep = document.getElementById("grep").value;
  if (!grep) return null;
  try {
    return new RegExp(grep, "g");   // Python's syntax is the node's; most patterns read alike
  } catch (e) {
    return null;
  }
};

Logs.recordElement = function (record, prefixed, highlight) {
  const node = UI.el("div", {class: `record${record.level ? " level-" + record.level : ""}`,
                             "data-offset": record.offset, "data-worker": Logs.where(record.worker),
                             "data-component": record.component, "data-task": record.task,
                             title: record.offset !== null ? `byte ${record.offset}` : null});
  if (prefixed) node.append(UI.el("span", {class: "where", text: `${Logs.where(record.worker)} `}));
  const text = record.text;
  if (!highlight) {
    node.append(text);
    return node;
  }
  highlight.lastIndex = 0;
  let at = 0;
  for (let m = highlight.exec(text); m !== null; m = highlight.exec(text)) {
    if (m[0] === "") { highlight.lastIndex += 1; continue; }
    node.append(text.slice(at, m.index), UI.el("mark", {text: m[0]}));
    at = m.index + m[0].length;
  }
  node.append(text.slice(at));
  return node;
};

// Where the view scrolls to after each action: the lines next to those shown before.
Logs.SCROLL_TO_END = new Set(["last", "newest", "older"]);

Logs.show = function (pages, append, action) {
  const box = document.getElementById("log");
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 24;
  const records = Logs.records(pages);
  const highlight = Logs.highlighter();
  const prefixed = Logs.cursors.length > 1;
  if (!append) box.replaceChildren();
  box.querySelector(".empty")?.remove();
  box.append(...records.map(r => Logs.recordElement(r, prefixed, highlight)));
  if (!box.children.length) {
    const filtered = Object.keys(Logs.filter()).length;
    box.append(UI.el("div", {class: "empty", text: filtered
      ? "no matching lines in this part of the file: Older and Newer search on"
      : "no lines in this part of the file"}));
  }
  if (append ? atBottom : Logs.SCROLL_TO_END.has(action)) box.scrollTop = box.scrollHeight;
  else if (!append) box.scrollTop = 0;
};

Logs.describe = function () {
  const single = Logs.cursors.length === 1 ? Logs.cursors[0] : null;
  const part = c => (c.start === undefined ? `${Logs.where(c.worker)}: -`
    : `${Logs.cursors.length > 1 ? Logs.where(c.worker) + " " : ""}${Logs.baseName(c.file)} ` +
      `bytes ${UI.num(c.start)}–${UI.num(c.next)} of ${UI.num(c.size)}`);
  UI.setText("position", Logs.cursors.map(part).join("; "));
  if (single) {
    UI.setText("file-name", Logs.baseName(single.file));
    UI.setText("file-size", single.size === undefined ? "-" : `${UI.num(single.size)} bytes`);
    UI.setText("file-mtime", UI.time(single.mtime));
    const download = document.getElementById("download");
    download.href = Logs.downloadLink(single.worker, {name: single.file, inode: single.inode});
    const select = document.getElementById("file");
    if ([...select.options].some(o => o.value === single.file)) select.value = single.file;
  }
  const log = document.getElementById("log");
  log.dataset.start = Logs.cursors.map(c => c.start).join(",");
  log.dataset.next = Logs.cursors.map(c => c.next).join(",");
  log.dataset.file = Logs.cursors.map(c => c.file).join(",");
  const atStart = c => c.start === 0 && !Logs.neighbour(c, +1);
  document.getElementById("older").disabled = Logs.cursors.every(atStart);
  document.getElementById("oldest").disabled = Logs.cursors.every(atStart);
  // At the end of the current file: Newest reads what came since, Follow keeps reading it.
  const atEnd = c => c.start === undefined || (c.eof && Logs.generation(c.file) === 0);
  document.getElementById("newer").disabled = Logs.cursors.every(atEnd);
};

// ----- the listing: which workers, which files

Logs.relist = async function () {
  const listing = await UI.api(`topology/${enc(Logs.topologyId)}/logs`);
  Logs.listing = listing;
  const byKey = new Map(listing.workers.map(w => [`${w.supervisor}:${w.port}`, w]));
  for (const cursor of Logs.cursors) {
    const fresh = byKey.get(`${cursor.worker.supervisor}:${cursor.worker.port}`);
    if (fresh) cursor.worker = fresh;
  }
  UI.setText("unanswered", listing.unanswered.length
    ? `not read: ${listing.unanswered.join("; ")}` : "");
  return listing;
};

// The workers this page shows, from its parameters.
Logs.chosenWorkers = function (workers) {
  if (Logs.component) {
    const running = workers.filter(w => w.components.includes(Logs.component));
    // A topology killed has no assignment: look through every worker's lines.
    return running.length ? running : workers;
  }
  const supervisor = UI.params.get("supervisor");
  const host = UI.params.get("host");
  const port = Number(UI.params.get("port"));
  const matches = workers.filter(w => w.port === port &&
    (supervisor ? w.supervisor === supervisor : !host || w.host === host));
  if (matches.length) return matches.slice(0, 1);
  // The worker's host as its metrics name it may not be its supervisor's: by port alone.
  const byPort = workers.filter(w => w.port === port);
  if (byPort.length === 1) return byPort;
  return UI.params.get("port") ? [] : workers.slice(0, 1);
};

Logs.fillHeader = function (listing) {
  const name = listing.topologyName || listing.topologyId;
  document.title = `stormlet: ${name} › logs`;
  const back = document.getElementById("crumb-topology");
  back.textContent = name;
  back.href = `/topology.html?id=${enc(Logs.topologyId)}`;
  if (Logs.component) {
    document.getElementById("crumb-component-part").hidden = false;
    const link = document.getElementById("crumb-component");
    link.textContent = Logs.component;
    link.href = `/component.html?id=${enc(Logs.topologyId)}&component=${enc(Logs.component)}`;
    UI.setText("title", `Logs of ${Logs.component}`);
  } else if (Logs.workers.length) {
    UI.setText("title", `Logs of ${Logs.where(Logs.workers[0])}`);
  }
  UI.setText("where", Logs.workers.length ? Logs.workers.map(Logs.where).join(", ") : "-");
  const executors = Logs.workers.flatMap(w => w.executors)
    .filter(e => !Logs.component || e.component === Logs.component)
    .map(e => `${e.component} [${e.tasks.join(", ")}]`);
  UI.setText("executors", executors.length ? executors.join(", ") : "-");
};

Logs.fillChoices = function (listing) {
  const single = Logs.component ? null : Logs.workers[0];
  document.getElementById("worker-choice").hidden = !single;
  document.getElementById("file-choice").hidden = !single;
  document.getElementById("download").hidden = !single;
  document.getElementById("component-choice").hidden = Boolean(Logs.component);
  document.querySelectorAll(".one-file").forEach(node => { node.hidden = !single; });
  if (single) {
    const workers = document.getElementById("worker");
    workers.replaceChildren(...listing.workers.map(w => UI.el("option", {
      value: `${w.supervisor}:${w.port}`, text: Logs.where(w), selected: w === single})));
    const files = document.getElementById("file");
    files.replaceChildren(...single.files.map(f => UI.el("option", {
      value: f.name, text: `${Logs.baseName(f.name)} (${UI.num(f.size)} bytes)`})));
    const components = document.getElementById("component-filter");
    const chosen = UI.params.get("only") || "";
    components.replaceChildren(UI.el("option", {value: "", text: "all"}),
      ...single.components.map(c => UI.el("option", {value: c, text: c, selected: c === chosen})));
  }
  Logs.fillTasks();
  UI.table("files", [
    {title: "Worker", field: "where", format: String, link: f => Logs.workerLink(f.worker)},
    {title: "File", field: "file", format: String, link: f => Logs.workerLink(f.worker, f.name)},
    {title: "Size (bytes)", field: "size"},
    {title: "Last change", field: "mtime", format: UI.time},
    {title: "", field: "download", format: () => "download",
     link: f => Logs.downloadLink(f.worker, f)},
  ], Logs.workers.flatMap(w => w.files.map(f => ({...f, worker: w, where: Logs.where(w),
                                                   file: Logs.baseName(f.name)}))),
  f => ({"data-file": f.name}), "no files");
};

// ----- following

Logs.follow = function (on) {
  clearTimeout(Logs.timer);
  Logs.timer = null;
  Logs.following = (Logs.following || 0) + 1;   // a tick of an earlier follow stops
  const run = Logs.following;
  document.getElementById("follow").checked = on;
  if (!on) return;
  const tick = async () => {
    if (run !== Logs.following) return;
    for (const cursor of Logs.cursors) {
      // Read to the end of a file rotated under the follower, then on in the current one.
      if (cursor.eof && Logs.generation(cursor.file) > 0) {
        Logs.moveTo(cursor, {name: Logs.series(cursor.file), generation: 0});
        cursor.next = 0;
      }
    }
    await Logs.go("newer", true);
    if (document.getElementById("log").children.length > Logs.MAX_SHOWN) await Logs.go("newest");
    if (run === Logs.following) Logs.timer = setTimeout(tick, UI.refreshSecs * 1000);
  };
  Logs.timer = setTimeout(tick, 0);
};

// ----- start

Logs.start = async function () {
  if (!Logs.topologyId) throw new Error("open this page as logs.html?id=TOPOLOGY&host=H&port=P " +
                                        "or logs.html?id=TOPOLOGY&component=C");
  const listing = await Logs.relist();
  if (listing.notice) {   // local mode: no worker files to read
    UI.showNotice(listing.notice);
    Logs.fillHeader(listing);
    for (const id of ["viewer", "files-section", "facts", "choices"]) {
      document.getElementById(id).hidden = true;
    }
    return;
  }
  Logs.workers = Logs.chosenWorkers(listing.workers);
  Logs.fillHeader(listing);
  Logs.fillChoices(listing);
  if (!Logs.workers.length) {
    throw new Error(UI.params.get("port")
      ? `no log files of the worker on port ${UI.params.get("port")} (it may not have started yet)`
      : "no log files of this topology's workers found");
  }
  const wanted = UI.params.get("file");
  Logs.cursors = Logs.workers.map(worker => {
    const log = worker.files.find(f => f.kind === "log" && !f.generation) || worker.files[0];
    const file = worker.files.find(f => f.name === wanted) || log;
    return {worker, file: file.name, inode: file.generation ? file.inode : null};
  });
  document.getElementById("grep").value = UI.params.get("grep") || "";
  await Logs.go("last");
};

// The rest of the URL says what is shown, so that a page can be linked to as it is.
Logs.remember = function () {
  const filter = Logs.filter();
  for (const key of ["grep", "task"]) {
    if (filter[key]) UI.params.set(key, filter[key]); else UI.params.delete(key);
  }
  if (!Logs.component) {
    const only = document.getElementById("component-filter").value;
    if (only) UI.params.set("only", only); else UI.params.delete("only");
    if (Logs.cursors.length === 1) UI.params.set("file", Logs.cursors[0].file);
  }
  history.replaceState(null, "", "?" + UI.params.toString());
};

document.getElementById("search").addEventListener("submit", event => {
  event.preventDefault();
  Logs.remember();
  Logs.go("newest");
});
document.getElementById("clear").addEventListener("click", () => {
  document.getElementById("grep").value = "";
  document.getElementById("task-filter").value = "";
  document.getElementById("component-filter").value = "";
  Logs.remember();
  Logs.go("newest");
});
// A component or task chosen applies at once, as a search does.
document.getElementById("component-filter").addEventListener("change", () => {
  Logs.fillTasks();
  Logs.remember();
  Logs.go("newest");
});
document.getElementById("task-filter").addEventListener("change", () => {
  Logs.remember();
  Logs.go("newest");
});
for (const action of ["oldest", "older", "newer", "newest"]) {
  document.getElementById(action).addEventListener("click", () => {
    if (action !== "newest") Logs.follow(false);
    Logs.go(action);
  });
}
document.getElementById("follow").addEventListener("change", async event => {
  if (event.target.checked) await Logs.go("newest");
  Logs.follow(event.target.checked);
});
document.getElementById("worker").addEventListener("change", event => {
  const [supervisor, port] = event.target.value.split(/:(?=\d+$)/);
  window.location.assign(Logs.workerLink({supervisor, port}));
});
document.getElementById("file").addEventListener("change", event => {
  const cursor = Logs.cursors[0];
  const file = cursor.worker.files.find(f => f.name === event.target.value);
  Logs.follow(false);
  Logs.moveTo(cursor, file);
  Logs.remember();
  Logs.go("last");
});

Logs.start().catch(e => UI.showProblem(e.message))
  .finally(() => { document.body.dataset.loaded = String(Date.now()); });
