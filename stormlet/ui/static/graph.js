// The topology graph in SVG: spouts on the left, each bolt one layer right of its furthest
// input (a cycle's closing edge is drawn as a loop underneath and does not push layers), nodes
// ordered within a layer by their inputs' positions to keep edges short. Each edge shows its
// rate; a component whose capacity is above 0.8 is drawn busy (red).
"use strict";

const Graph = {};

Graph.NODE_W = 160;
Graph.NODE_H = 56;
Graph.COL_GAP = 120;
Graph.ROW_GAP = 28;
Graph.PAD = 24;
Graph.SVG = "http://www.w3.org/2000/svg";

Graph.svg = function (tag, attrs, text) {
  const node = document.createElementNS(Graph.SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
};

// Layers by longest path from the spouts over the graph without its back edges.
Graph.layers = function (components) {
  const ids = Object.keys(components);
  const sources = id => components[id].inputs.map(i => i.component).filter(s => s in components);
  const back = new Set();   // "from->to" edges that close a cycle
  const state = {};         // undefined: unseen, 1: on the DFS stack, 2: done
  const visit = id => {
    state[id] = 1;
    for (const target of ids.filter(t => sources(t).includes(id))) {
      if (state[target] === 1) back.add(`${id}->${target}`);
      else if (!state[target]) visit(target);
    }
    state[id] = 2;
  };
  ids.filter(id => components[id].kind === "spout").forEach(visit);
  ids.filter(id => !state[id]).forEach(visit);

  const layer = {};
  const depth = id => {
    if (layer[id] === undefined) {
      layer[id] = 0;   // provisional, in case of a cycle we did not mark
      const forward = sources(id).filter(s => !back.has(`${s}->${id}`));
      layer[id] = forward.length ? 1 + Math.max(...forward.map(depth)) : 0;
    }
    return layer[id];
  };
  ids.forEach(depth);
  return {layer, back};
};

// Positions: {id: {x, y}} (top left of each node) and the drawing's size.
Graph.place = function (components, layer, loops) {
  const columns = [];
  for (const id of Object.keys(components)) (columns[layer[id]] = columns[layer[id]] || []).push(id);
  const pos = {};
  columns.forEach((column, c) => {
    if (c > 0) {
      // Order by the mean row of each node's inputs already placed (one barycenter sweep).
      const rank = id => {
        const rows = components[id].inputs.map(i => pos[i.component]).filter(Boolean).map(p => p.y);
        return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : 0;
      };
      column.sort((a, b) => rank(a) - rank(b));
    }
    column.forEach((id, r) => {
      pos[id] = {x: Graph.PAD + c * (Graph.NODE_W + Graph.COL_GAP),
                 y: Graph.PAD + r * (Graph.NODE_H + Graph.ROW_GAP)};
    });
  });
  const tallest = Math.max(1, ...columns.map(col => (col ? col.length : 0)));
  return {pos,
          width: 2 * Graph.PAD + columns.length * Graph.NODE_W + (columns.length - 1) * Graph.COL_GAP,
          // Loops (cycles) are drawn under the nodes: room for them.
          height: 2 * Graph.PAD + tallest * Graph.NODE_H + (tallest - 1) * Graph.ROW_GAP +
                  (loops ? 60 : 0)};
};

Graph.rate = function (rate) {
  if (rate === null || rate === undefined) return "-";
  return (rate >= 100 ? Math.round(rate).toLocaleString("en-US") : rate.toFixed(1)) + "/s";
};

// Draws into svg (an <svg> element). stats: {componentId: {capacity, ...}}; link(id) gives
// each node's page.
Graph.draw = function (svg, components, edges, stats, link) {
  const {layer, back} = Graph.layers(components);
  const isLoop = e => back.has(`${e.from}->${e.to}`) || layer[e.to] <= layer[e.from];
  const loops = edges.some(isLoop);
  const {pos, width, height} = Graph.place(components, layer, loops);
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const defs = Graph.svg("defs");
  const marker = Graph.svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                                      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"});
  marker.append(Graph.svg("path", {d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead"}));
  defs.append(marker);
  svg.append(defs);

  const seen = {};   // edges between one pair of nodes, to spread their labels
  for (const edge of edges) {
    const from = pos[edge.from], to = pos[edge.to];
    if (!from || !to) continue;
    const pair = `${edge.from}->${edge.to}`;
    const nth = seen[pair] = (seen[pair] || 0) + 1;
    const loop = isLoop(edge);
    let d, lx, ly;
    if (loop) {
      // Out of the source's bottom, under both nodes, into the target's bottom.
      const x1 = from.x + Graph.NODE_W / 2, y1 = from.y + Graph.NODE_H;
      const x2 = to.x + Graph.NODE_W / 2 + (edge.from === edge.to ? 30 : 0), y2 = to.y + Graph.NODE_H;
      const drop = 36 + 14 * nth;
      d = `M ${x1} ${y1} C ${x1} ${y1 + drop}, ${x2} ${y2 + drop}, ${x2} ${y2}`;
      lx = (x1 + x2) / 2; ly = Math.max(y1, y2) + drop * 0.75;
    } else {
      const x1 = from.x + Graph.NODE_W, y1 = from.y + Graph.NODE_H / 2;
      const x2 = to.x, y2 = to.y + Graph.NODE_H / 2;
      const bend = (x2 - x1) / 2;
      d = `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`;
      lx = (x1 + x2) / 2; ly = (y1 + y2) / 2 - 6 + (nth - 1) * 14;
    }
    const stream = edge.stream === "default" ? "" : ` ${edge.stream}`;
    const group = Graph.svg("g", {class: "edge", "data-from": edge.from, "data-to": edge.to,
                                  "data-stream": edge.stream, "data-rate": edge.rate});
    group.append(Graph.svg("path", {d, class: "edge-line", "marker-end": "url(#arrow)"}));
    group.append(Graph.svg("text", {x: lx, y: ly, class: "edge-label", "text-anchor": "middle"},
                           `${Graph.rate(edge.rate)}${stream}`));
    group.append(Graph.svg("title", {}, `${edge.from} → ${edge.to} (${edge.stream}, ` +
                           `${edge.grouping} grouping): ${Graph.rate(edge.rate)}`));
    svg.append(group);
  }

  for (const [id, spec] of Object.entries(components)) {
    const p = pos[id];
    const capacity = (stats[id] || {}).capacity;
    const busy = typeof capacity === "number" && capacity > 0.8;
    const group = Graph.svg("g", {class: `node ${spec.kind}${busy ? " busy" : ""}`,
                                  "data-component": id, transform: `translate(${p.x},${p.y})`});
    const anchor = Graph.svg("a", {href: link(id)});
    anchor.append(Graph.svg("rect", {width: Graph.NODE_W, height: Graph.NODE_H, rx: 8}));
    anchor.append(Graph.svg("text", {x: Graph.NODE_W / 2, y: 22, class: "node-name",
                                     "text-anchor": "middle"}, id));
    const detail = `${spec.kind} ×${spec.executors}` +
      (typeof capacity === "number" && spec.kind === "bolt" ? ` · cap ${capacity.toFixed(2)}` : "");
    anchor.append(Graph.svg("text", {x: Graph.NODE_W / 2, y: 41, class: "node-detail",
                                     "text-anchor": "middle"}, detail));
    group.append(anchor);
    svg.append(group);
  }
};
