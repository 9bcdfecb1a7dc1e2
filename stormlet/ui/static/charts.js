// The topology page's charts: its metrics over time (GET topology/<id>/history), one chart per
// metric with a line per component, drawn with uPlot (vendor/uplot). "Last hour" shows the
// fine series, "Whole life" the coarse one; the choice is kept in the URL (?resolution=).
// Each chart's box carries data-metric, data-points and data-series, and Charts.plots holds the
// uPlot instances, for tests.
"use strict";

const Charts = {plots: {}, latest: null};

// What each chart draws: the series' metric(s), which components have it, and its unit.
Charts.CHARTS = [
  {id: "emitted", title: "Emitted", unit: "tuples/s", metrics: ["emitted"]},
  {id: "executed", title: "Executed", unit: "tuples/s", metrics: ["executed"], kinds: ["bolt"]},
  {id: "acked", title: "Acked", unit: "tuples/s", metrics: ["acked"]},
  {id: "failed", title: "Failed", unit: "tuples/s", metrics: ["failed"]},
  {id: "complete_latency", title: "Complete latency", unit: "ms",
   metrics: ["complete_p50_ms", "complete_p99_ms"], kinds: ["spout"]},
  {id: "capacity", title: "Capacity", unit: "busiest task's busy fraction", metrics: ["capacity"],
   kinds: ["bolt"]},
  {id: "backpressure", title: "Backpressure", unit: "fraction of time waiting",
   metrics: ["backpressure"]},
];

// One colour per component, the same in every chart (by the component's place in the answer).
Charts.COLOURS = ["#2f6fdb", "#12b886", "#f08c00", "#d6336c", "#7048e8", "#0c8599", "#5c940d",
                  "#e8590c", "#495057", "#ae3ec9"];

Charts.RESOLUTIONS = {fine: "Last hour", coarse: "Whole life"};
Charts.resolution = Charts.RESOLUTIONS[UI.params.get("resolution")] ? UI.params.get("resolution")
  : "fine";

Charts.format = function (value, unit) {
  if (value === null || value === undefined) return "-";
  if (unit === "ms") return UI.ms(value);
  if (unit === "tuples/s") {
    return value >= 100 ? value.toFixed(0) : value.toFixed(value >= 10 ? 1 : 2);
  }
  return value.toFixed(value >= 0.1 ? 2 : 3);
};

Charts.every = function (seconds) {
  if (seconds >= 86400) return `${+(seconds / 86400).toFixed(1)} d`;
  if (seconds >= 3600) return `${+(seconds / 3600).toFixed(1)} h`;
  if (seconds >= 60) return `${+(seconds / 60).toFixed(1)} min`;
  return `${seconds} s`;
};

// The lines of one chart: [{label, values, colour, dash}] from the history's components.
Charts.lines = function (chart, history) {
  const lines = [];
  Object.entries(history.components).forEach(([cid, component], i) => {
    if (chart.kinds && !chart.kinds.includes(component.kind)) return;
    const colour = Charts.COLOURS[i % Charts.COLOURS.length];
    for (const metric of chart.metrics) {
      const p99 = metric.endsWith("p99_ms");
      const label = chart.metrics.length > 1 ? `${cid} ${p99 ? "p99" : "p50"}` : cid;
      lines.push({label, values: component[metric], colour, dash: p99 ? [5, 4] : undefined});
    }
  });
  return lines;
};

// Time labels as the ticks' spacing needs them: seconds, minutes, or days.
Charts.timeLabel = function (seconds, spacing) {
  const date = new Date(seconds * 1000);
  const two = n => String(n).padStart(2, "0");
  const hm = `${two(date.getHours())}:${two(date.getMinutes())}`;
  if (spacing < 60) return `${hm}:${two(date.getSeconds())}`;
  if (spacing < 86400) return hm;
  return date.toLocaleDateString(undefined, {month: "short", day: "numeric"});
};

Charts.options = function (chart, lines, width) {
  const axis = {stroke: "#667085", grid: {stroke: "#eef1f5", width: 1}, ticks: {stroke: "#e3e7ee"},
                font: "11px system-ui, sans-serif"};
  const single = lines.length === 1;
  return {
    width, height: 170,
    cursor: {sync: {key: "stormlet-topology"}, points: {size: 6}},
    legend: {live: true},
    // Away from the chart, the legend shows the newest values (uPlot's would show none).
    hooks: {setLegend: [u => {
      const last = u.data[0].length - 1;
      if (u.legend.idx == null && last >= 0) u.setLegend({idx: last}, false);
    }]},
    scales: {x: {time: true},
             y: {range: (u, min, max) => [0, max > 0 ? max * 1.12 : 1]}},
    axes: [{...axis, values: (u, ticks) => ticks.map(
             t => Charts.timeLabel(t, ticks.length > 1 ? ticks[1] - ticks[0] : 60))},
           {...axis, size: 52}],
    series: [{label: "Time", value: (u, t) => (t === null ? "-" : Charts.timeLabel(t, 1))},
             ...lines.map(line => ({label: line.label, stroke: line.colour, width: 1.75,
                                    dash: line.dash, fill: single ? `${line.colour}1a` : undefined,
                                    // dots only while a line is too short to see
                                    points: {show: (u, s, i0, i1) => i1 - i0 < 3},
                                    value: (u, v) => Charts.format(v, chart.unit)}))],
  };
};

Charts.draw = function (history) {
  const grid = document.getElementById("charts");
  const empty = history.times.length === 0;
  document.getElementById("charts-empty").hidden = !empty;
  grid.hidden = empty;
  UI.setText("charts-hint", empty ? "" : `one point each ${Charts.every(history.step)}; ` +
             "hover for values, drag to zoom in, double-click to zoom out");
  if (empty) return;
  for (const chart of Charts.CHARTS) {
    const lines = Charts.lines(chart, history);
    let box = grid.querySelector(`.chart[data-metric="${chart.id}"]`);
    if (!lines.length) {   // no component has this metric (no bolt, say)
      if (box) box.remove();
      delete Charts.plots[chart.id];
      continue;
    }
    if (!box) {
      box = UI.el("div", {class: "chart", "data-metric": chart.id},
                  UI.el("h3", {}, chart.title, UI.el("span", {class: "hint", text: chart.unit})),
                  UI.el("div", {class: "plot"}));
      grid.append(box);
    }
    const data = [history.times, ...lines.map(line => line.values)];
    const labels = lines.map(line => line.label).join(",");
    const plot = Charts.plots[chart.id];
    if (plot && box.dataset.series === labels) {
      plot.setData(data);
    } else {   // new lines (a component appeared): made again
      if (plot) plot.destroy();
      const target = box.querySelector(".plot");
      target.replaceChildren();
      Charts.plots[chart.id] = new uPlot(Charts.options(chart, lines, target.clientWidth || 560),
                                         data, target);
    }
    box.dataset.series = labels;
    box.dataset.points = String(history.times.length);
  }
  document.getElementById("charts-section").dataset.drawn = String(Date.now());
};

Charts.load = async function () {
  const id = UI.params.get("id");
  if (!id) return;
  const history = await UI.api(`topology/${encodeURIComponent(id)}/history` +
                               `?resolution=${Charts.resolution}`);
  Charts.latest = history;
  Charts.draw(history);
};

// Refreshes on its own clock (at most every half step: nothing newer comes sooner), so the
// rest of the page need not wait for it; a failure shows under the charts' title only.
Charts.tick = async function () {
  clearTimeout(Charts.timer);
  const note = document.getElementById("charts-problem");
  try {
    await Charts.load();
    note.textContent = "";
  } catch (e) {
    if (e.status !== 404) note.textContent = e.message;
  }
  const step = Charts.latest ? Charts.latest.step : UI.refreshSecs;
  Charts.timer = setTimeout(Charts.tick, 1000 * Math.max(UI.refreshSecs, step / 2));
};

Charts.resize = function () {
  for (const [id, plot] of Object.entries(Charts.plots)) {
    const target = document.querySelector(`.chart[data-metric="${id}"] .plot`);
    if (target && target.clientWidth) plot.setSize({width: target.clientWidth, height: 170});
  }
};

Charts.start = function () {
  const buttons = document.querySelectorAll("#charts-resolution button");
  for (const button of buttons) {
    button.classList.toggle("on", button.dataset.resolution === Charts.resolution);
    button.addEventListener("click", () => {
      Charts.resolution = button.dataset.resolution;
      UI.params.set("resolution", Charts.resolution);
      window.history.replaceState(null, "", "?" + UI.params.toString());
      buttons.forEach(b => b.classList.toggle("on", b === button));
      Charts.tick();
    });
  }
  let pending = null;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(Charts.resize, 100);
  });
  Charts.tick();
};

Charts.start();
