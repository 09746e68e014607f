// modelzip view: the page's script (hand-written, no library, no build step).
// Data comes from the server's JSON API (/api/...), or, in a page `view --html` wrote,
// from window.MODELZIP_DATA (the same answers, keyed by request path). Every text from
// the archive is set with textContent, never parsed as HTML.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
// The most rows a table draws (the rest are counted; a filter narrows them).
const MAX_ROWS = 2000;
const state = { doc: null, tag: null, params: [], sortKey: null, sortDesc: false, paramSel: null };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "testid") e.dataset.testid = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}
function sv(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "testid") e.setAttribute("data-testid", v); else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}
const $ = (id) => document.getElementById(id);

function key(path, params) {
  const q = Object.entries(params || {}).map(([k, v]) => k + "=" + encodeURIComponent(v)).join("&");
  return "api/" + path + (q ? "?" + q : "");
}
async function api(path, params) {
  const k = key(path, params);
  if (window.MODELZIP_DATA) {
    const d = window.MODELZIP_DATA[k];
    // A graph several tags share is held once: the others point at it.
    if (d && d.same_as) return Object.assign({}, window.MODELZIP_DATA[d.same_as], { tag: d.tag });
    return d ||
      { error: "not in this static page (it holds the tag list, the parameters and graphs of the first and the newest 2,000 tags, and the diffs of consecutive tags among the newest): run `modelzip view` for it" };
  }
  try {
    const r = await fetch(k, { cache: "no-store" });
    const j = await r.json();
    if (!r.ok && !j.error) j.error = "HTTP " + r.status;
    return j;
  } catch (e) {
    return { error: "cannot reach the modelzip view server: " + e };
  }
}
function showError(msg) {
  const p = $("error");
  if (!msg) { p.hidden = true; p.textContent = ""; return; }
  p.hidden = false; p.textContent = msg;
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0; let x = n;
  while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
  return (i === 0 ? x : x.toFixed(1)) + " " + u[i];
}
function num(x) {
  if (x === null || x === undefined) return "-";
  if (typeof x === "string") return x;
  if (x === 0) return "0";
  const a = Math.abs(x);
  return (a >= 1e4 || a < 1e-3) ? x.toExponential(3) : String(+x.toPrecision(5));
}

// ---- the timeline of tags ---------------------------------------------------------
function renderTimeline(doc) {
  const body = $("timeline").tBodies[0]; body.textContent = "";
  const shown = doc.tags.length > MAX_ROWS ? doc.tags.slice(0, MAX_ROWS) : doc.tags;
  const max = doc.tags.reduce((m, t) => Math.max(m, t.own_bytes + t.shared_bytes), 1);
  for (const t of shown) {
    const own = 100 * t.own_bytes / max, shared = 100 * t.shared_bytes / max;
    const bar = el("span", { class: "bar", title: bytes(t.own_bytes) + " own, " + bytes(t.shared_bytes) + " shared" },
      el("span", { class: "own", style: "width:" + own.toFixed(2) + "%" }),
      el("span", { class: "shared", style: "width:" + shared.toFixed(2) + "%" }));
    const row = el("tr", { testid: "tag-row", "data-tag": t.name, onclick: () => selectTag(t.name) },
      el("td", {}, t.name === doc.default ? "★" : ""),
      el("td", {}, t.name),
      el("td", { class: "num" }, t.step === null ? "-" : t.step),
      el("td", {}, t.created || "-"),
      el("td", { class: "num" }, t.params),
      el("td", {}, bar),
      el("td", { class: "num" }, bytes(t.own_bytes)),
      el("td", { class: "num" }, bytes(t.shared_bytes)),
      el("td", {}, t.graph || "-"),
      el("td", {}, (t.dtypes || []).join(", ")),
      el("td", { testid: "tag-retention" }, t.kept_by ? (t.kept_by.length ? "kept: " + t.kept_by.join(", ") : "due for removal") : "-"));
    if (t.not_checkpoint) row.title = "not a checkpoint: " + t.not_checkpoint;
    body.append(row);
  }
  if (!doc.tags.length) body.append(el("tr", {}, el("td", { colspan: 11 }, "(no tags)")));
  if (shown.length < doc.tags.length) {
    body.append(el("tr", {}, el("td", { colspan: 11 }, `… and ${doc.tags.length - shown.length} more tags (the first ${MAX_ROWS} are listed)`)));
  }
}

// ---- metric charts ----------------------------------------------------------------
// Which way a metric improves: accuracy-like up, learning rates nowhere, the rest down.
function goal(name) {
  if (/^(lr|learning[_-]?rate)$/i.test(name)) return null;
  return /acc|auc|f1|precision|recall|score|bleu|iou|map/i.test(name) ? "max" : "min";
}
// The retention policy in words, as the newest checkpoint's save recorded it.
function policyText(r) {
  const rules = [];
  if (r.keep_last) rules.push(`the last ${r.keep_last}`);
  if (r.keep_every) rules.push(`every ${r.keep_every} steps`);
  if (r.keep_best) rules.push(`the best ${r.keep_best.count} by ${r.keep_best.metric} (${r.keep_best.goal === "min" ? "lowest" : "highest"})`);
  return "keeps the newest" + rules.map((x) => ", " + x).join("");
}
function renderMetrics(doc) {
  const box = $("metrics"); box.textContent = "";
  const r = doc.retention;
  const removed = r ? r.removed : [];
  if (r) {
    const omitted = r.removed_omitted ? ` (and ${r.removed_omitted} earlier ones not listed)` : "";
    box.append(el("p", { testid: "retention-summary" }, `Retention policy: ${policyText(r)}. ` +
      `${removed.length} checkpoint${removed.length === 1 ? "" : "s"} removed${omitted}` +
      (removed.length ? ", drawn as hollow points." : ".")));
  } else if (doc.retention_problem) {
    box.append(el("p", { testid: "retention-summary" }, "The retention record is not read: " + doc.retention_problem));
  }
  const ckpts = doc.tags.filter((t) => t.step !== null && t.step !== undefined);
  const names = [...new Set([...ckpts, ...removed].flatMap((t) => Object.keys(t.metrics || {})))].sort();
  if (!names.length) {
    box.append(el("p", {}, ckpts.length
      ? "The checkpoints have no metrics (metadata.json \"metrics\")."
      : "No checkpoints: no tag's metadata.json has a \"step\" (pack --step N --metric NAME=VALUE, or the Checkpointer, write them)."));
    return;
  }
  const best = r && r.keep_best;
  for (const name of names) {
    const pts = ckpts.filter((t) => name in t.metrics).map((t) => ({ step: t.step, v: t.metrics[name], tag: t.name }))
      .concat(removed.filter((t) => name in t.metrics).map((t) => ({ step: t.step, v: t.metrics[name], tag: t.tag, removed: true })))
      .sort((a, b) => a.step - b.step);
    box.append(chart(name, pts, best && best.metric === name ? best.goal : goal(name)));
  }
}
function chart(name, pts, g) {
  const W = 380, H = 220, L = 58, R = 12, T = 26, B = 34;
  const svg = sv("svg", { class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, testid: "metric-chart", "data-metric": name });
  let best = null;
  if (g) for (const p of pts) if (best === null || (g === "min" ? p.v < best.v : p.v > best.v)) best = p;
  svg.append(sv("text", { x: L, y: 16, "font-weight": "bold", text: name + (best ? `  (best ${num(best.v)} at step ${best.step})` : "") }));
  const xs = pts.map((p) => p.step), ys = pts.map((p) => p.v);
  const lo = (a) => a.reduce((m, v) => Math.min(m, v), Infinity), hi = (a) => a.reduce((m, v) => Math.max(m, v), -Infinity);
  let x0 = lo(xs), x1 = hi(xs), y0 = lo(ys), y1 = hi(ys);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const X = (s) => L + (s - x0) / (x1 - x0) * (W - L - R);
  const Y = (v) => H - B - (v - y0) / (y1 - y0) * (H - T - B);
  svg.append(sv("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#99a" }));
  svg.append(sv("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#99a" }));
  for (const v of [y0, (y0 + y1) / 2, y1]) svg.append(sv("text", { x: L - 4, y: Y(v) + 4, "text-anchor": "end", text: num(v) }));
  for (const s of [x0, x1]) svg.append(sv("text", { x: X(s), y: H - B + 14, "text-anchor": "middle", text: num(s) }));
  svg.append(sv("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", text: "step" }));
  svg.append(sv("polyline", { class: "line", points: pts.map((p) => X(p.step) + "," + Y(p.v)).join(" ") }));
  for (const p of pts) {
    const c = sv("circle", { class: "pt" + (p === best ? " best" : "") + (p.removed ? " removed" : ""), cx: X(p.step), cy: Y(p.v), r: p === best ? 5 : 3.5,
      testid: p.removed ? "metric-point-removed" : "metric-point", "data-tag": p.tag, "data-step": p.step, "data-value": p.v },
      sv("title", { text: `${p.tag}: ${name} = ${p.v} (step ${p.step})${p === best ? ", the best" : ""}${p.removed ? ", removed by the retention policy" : ""}` }));
    if (!p.removed) c.addEventListener("click", () => selectTag(p.tag));
    svg.append(c);
  }
  return svg;
}

// ---- a tag's parameters -----------------------------------------------------------
async function selectTag(name) {
  state.tag = name;
  for (const r of document.querySelectorAll('tr[data-testid="tag-row"]')) r.classList.toggle("selected", r.dataset.tag === name);
  $("params-tag").textContent = name; $("graph-tag").textContent = name;
  $("graph-box").textContent = ""; $("graph-details").textContent = ""; $("graph-facts").textContent = "";
  $("param-stats").textContent = "";
  const d = await api("tag", { name });
  if (state.tag !== name) return;
  if (d.error) { showError(d.error); state.params = []; state.total = 0; } else { state.params = d.params; state.total = d.params_total; }
  renderParams();
}
function paramValue(p, k) {
  if (k === "shape") return p.dims.reduce((a, b) => a * b, 1);
  if (k === "bytes") return p.bytes;
  return p[k] || "";
}
function renderParams() {
  const body = $("params").tBodies[0]; body.textContent = "";
  const f = $("param-filter").value.toLowerCase();
  let rows = state.params.filter((p) => p.name.toLowerCase().includes(f));
  if (state.sortKey) {
    const k = state.sortKey, s = state.sortDesc ? -1 : 1;
    rows = rows.slice().sort((a, b) => { const x = paramValue(a, k), y = paramValue(b, k); return (x < y ? -1 : x > y ? 1 : 0) * s; });
  }
  for (const p of rows.slice(0, MAX_ROWS)) {
    body.append(el("tr", { testid: "param-row", "data-name": p.name, onclick: (e) => showParam(p.name, e.currentTarget) },
      el("td", { class: "mono" }, p.name), el("td", {}, p.dtype), el("td", {}, "[" + p.dims.join(", ") + "]"),
      el("td", { class: "num" }, bytes(p.bytes)), el("td", {}, p.shared_from || "-"),
      el("td", { class: "mono" }, p.data_sha256.slice(0, 12))));
  }
  $("params-count").textContent = `${rows.length} of ${state.params.length} parameters` +
    (rows.length > MAX_ROWS ? ` (the first ${MAX_ROWS} drawn: filter to narrow)` : "") +
    (state.total > state.params.length ? `; the tag has ${state.total}, the first ${state.params.length} are listed` : "");
}
async function showParam(name, row) {
  for (const r of document.querySelectorAll('tr[data-testid="param-row"]')) r.classList.toggle("selected", r === row);
  const box = $("param-stats"); box.textContent = "computing…";
  const d = await api("param", { tag: state.tag, name });
  box.textContent = "";
  box.append(el("h3", { class: "mono" }, name));
  if (d.error) { box.append(el("p", { class: "error" }, d.error)); return; }
  const dl = el("dl", { class: "kv" });
  const kv = (k, v) => dl.append(el("dt", {}, k), el("dd", {}, v));
  kv("dtype", d.dtype); kv("dims", "[" + d.dims.join(", ") + "]"); kv("values", d.numel);
  if (d.sampled) kv("read", `${d.read} (a sample: ${d.read} of ${d.numel})`);
  kv("min", num(d.min)); kv("max", num(d.max)); kv("mean", num(d.mean)); kv("std", num(d.std));
  if (d.non_finite) kv("NaN/inf", d.non_finite);
  box.append(dl, histogram(d.histogram));
}
function histogram(h) {
  const W = 320, H = 150, B = 20;
  const svg = sv("svg", { class: "chart", width: W, height: H, testid: "param-histogram" });
  const max = h.counts.reduce((m, c) => Math.max(m, c), 1), bw = W / h.counts.length;
  h.counts.forEach((c, i) => {
    const bh = (H - B - 6) * c / max;
    svg.append(sv("rect", { x: i * bw + 0.5, y: H - B - bh, width: Math.max(1, bw - 1), height: bh, fill: "#3465a4" },
      sv("title", { text: String(c) })));
  });
  svg.append(sv("text", { x: 2, y: H - 5, text: num(h.min) }));
  svg.append(sv("text", { x: W - 2, y: H - 5, "text-anchor": "end", text: num(h.max) }));
  return svg;
}

// ---- diff -------------------------------------------------------------------------
function rel(x) { return x === null || x === undefined ? -1 : x === "inf" ? Infinity : x; }
async function runDiff() {
  const a = $("diff-a").value, b = $("diff-b").value;
  const body = $("diff").tBodies[0]; body.textContent = "";
  $("diff-summary").textContent = "comparing…";
  const d = await api("diff", { a, b });
  if (d.error) { $("diff-summary").textContent = ""; showError(d.error); return; }
  showError(null);
  const changed = d.changed.slice().sort((x, y) => rel(y.max_rel_diff) - rel(x.max_rel_diff) || rel(y.max_abs_diff) - rel(x.max_abs_diff));
  for (const c of changed) {
    const t = c.dtype_a === c.dtype_b ? c.dtype_a : c.dtype_a + " → " + c.dtype_b;
    const dims = JSON.stringify(c.dims_a) === JSON.stringify(c.dims_b) ? "[" + c.dims_a.join(", ") + "]" : "[" + c.dims_a.join(", ") + "] → [" + c.dims_b.join(", ") + "]";
    body.append(el("tr", { testid: "diff-row", class: "changed", "data-name": c.name, "data-change": "changed" },
      el("td", {}, "~ changed" + (c.dequantized ? " (dequantized)" : "")), el("td", { class: "mono" }, c.name), el("td", {}, t), el("td", {}, dims),
      el("td", { class: "num" }, num(c.max_abs_diff)), el("td", { class: "num" }, num(c.max_rel_diff))));
  }
  for (const [list, kind, mark] of [[d.added, "added", "+ added"], [d.removed, "removed", "− removed"]]) {
    for (const n of list) body.append(el("tr", { testid: "diff-row", class: kind, "data-name": n, "data-change": kind },
      el("td", {}, mark), el("td", { class: "mono" }, n), el("td", {}, ""), el("td", {}, ""), el("td", {}, ""), el("td", {}, "")));
  }
  // (`counts`: each list's length before the server cut it to 20,000 names)
  const n = d.counts || { added: d.added.length, removed: d.removed.length, changed: d.changed.length,
    shared: d.shared.length, copied: d.copied.length };
  $("diff-summary").textContent = `${d.tag_a} → ${d.tag_b}: graph ${d.graph}, ${n.added} added, ${n.removed} removed, ` +
    `${n.changed} changed, ${n.shared} shared, ${n.copied} copied` + (d.identical ? " (identical)" : "") +
    (d.truncated ? " (rows: at most 20,000 of a kind; the changed ones with the largest differences)" : "");
}
function fillDiffSelects(doc) {
  // (the newest MAX_ROWS tags: a list of 100,000 choices is no choice)
  const names = doc.tags.slice(-MAX_ROWS).map((t) => t.name);
  for (const [id, pick] of [["diff-a", names.length - 2], ["diff-b", names.length - 1]]) {
    const s = $(id); const old = s.value; s.textContent = "";
    for (const n of names) s.append(el("option", { value: n }, n));
    s.value = names.includes(old) ? old : names[Math.max(0, pick)] || "";
  }
}

// ---- graph ------------------------------------------------------------------------
async function drawGraph() {
  const tag = state.tag; if (!tag) return;
  const box = $("graph-box"), det = $("graph-details");
  box.textContent = "loading…"; det.textContent = "";
  const g = await api("graph", { tag });
  box.textContent = "";
  if (g.error) { box.append(el("p", { class: "error" }, g.error)); return; }
  if (!g.graph && !g.nodes) { box.append(el("p", {}, `Tag ${tag} has no graph.`)); return; }
  $("graph-facts").textContent = `${g.kind}, ${g.encoding}: ${g.ops} ops, ${g.variables} variables/values folded into edges`;
  if (!g.drawn) { graphList(g, box, det); return; }
  layoutAndDraw(g, box, det);
}
function graphList(g, box, det) {
  box.append(el("p", {}, `${g.ops} operations: too many to draw (more than ${g.max_drawn}). Search them:`));
  const input = el("input", { placeholder: "op type or name", size: 40, testid: "graph-search" });
  const ul = el("ul", { id: "graph-list" });
  const fill = () => {
    ul.textContent = ""; const f = input.value.toLowerCase(); let n = 0;
    for (const node of g.nodes) {
      if (!node.label.toLowerCase().includes(f)) continue;
      if (++n > 500) { ul.append(el("li", {}, "… (narrow the search)")); break; }
      ul.append(el("li", { class: "mono", onclick: () => nodeDetails(g, node, det) }, node.label.replace(/\n/g, "  ")));
    }
  };
  input.addEventListener("input", fill); box.append(input, ul); fill();
}
function layoutAndDraw(g, box, det) {
  const n = g.nodes.length, idx = new Map(g.nodes.map((x, i) => [x.id, i]));
  const succ = Array.from({ length: n }, () => []), pred = Array.from({ length: n }, () => []);
  for (const [a, b] of g.edges) {
    const i = idx.get(a), j = idx.get(b);
    if (i === undefined || j === undefined || i === j) continue;
    succ[i].push(j); pred[j].push(i);
  }
  // Layers: longest path from the sources, over the edges of a depth-first forest that
  // skips back edges (a cycle does not stop the layout).
  const color = new Uint8Array(n), order = [], back = new Set();
  for (let s = 0; s < n; s++) {
    if (color[s]) continue;
    const stack = [[s, 0]]; color[s] = 1;
    while (stack.length) {
      const top = stack[stack.length - 1], [v, k] = top;
      if (k < succ[v].length) {
        top[1]++; const w = succ[v][k];
        if (color[w] === 1) back.add(v + ">" + w); else if (!color[w]) { color[w] = 1; stack.push([w, 0]); }
      } else { color[v] = 2; order.push(v); stack.pop(); }
    }
  }
  order.reverse();
  const layer = new Array(n).fill(0);
  for (const v of order) for (const w of succ[v]) if (!back.has(v + ">" + w)) layer[w] = Math.max(layer[w], layer[v] + 1);
  const layers = [];
  for (let v = 0; v < n; v++) (layers[layer[v]] ||= []).push(v);
  const pos = new Array(n).fill(0);
  const setPos = () => layers.forEach((l) => l.forEach((v, i) => { pos[v] = i; }));
  setPos();
  // Fewer crossings: a few sweeps ordering each layer by its neighbours' mean position.
  const bary = (v, nb) => nb[v].length ? nb[v].reduce((s, u) => s + pos[u], 0) / nb[v].length : pos[v];
  for (let it = 0; it < 6; it++) {
    const down = it % 2 === 0, nb = down ? pred : succ;
    const seq = down ? layers.slice(1) : layers.slice(0, -1).reverse();
    for (const l of seq) { const b = new Map(l.map((v) => [v, bary(v, nb)])); l.sort((x, y) => b.get(x) - b.get(y)); l.forEach((v, i) => { pos[v] = i; }); }
  }
  const label = (node) => { const t = node.label.split("\n"); return t.length > 1 && t[1] && g.kind !== "paddle" ? t[0] + " " + t[1] : t[0]; };
  const width = (node) => Math.min(260, 16 + 6.6 * Math.min(36, label(node).length));
  const H = 26, GAP = 18, VGAP = 64;
  const x = new Array(n), y = new Array(n), w = g.nodes.map(width);
  let maxW = 0;
  for (const l of layers) maxW = Math.max(maxW, l.reduce((s, v) => s + w[v] + GAP, 0));
  layers.forEach((l, li) => {
    let cx = (maxW - l.reduce((s, v) => s + w[v] + GAP, 0)) / 2;
    for (const v of l) { x[v] = cx + w[v] / 2; y[v] = 20 + li * VGAP; cx += w[v] + GAP; }
  });
  const svg = sv("svg", { testid: "graph-svg" }), root = sv("g", {});
  svg.append(root);
  for (let i = 0; i < n; i++) for (const j of succ[i]) {
    const x1 = x[i], y1 = y[i] + H / 2, x2 = x[j], y2 = y[j] - H / 2, my = (y1 + y2) / 2;
    root.append(sv("path", { class: "edge", d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
  }
  svg.prepend(sv("defs", {}, sv("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" },
    sv("path", { d: "M0,0 L10,5 L0,10 z", fill: "#98a2b3" }))));
  g.nodes.forEach((node, i) => {
    const t = label(node), shown = t.length > 36 ? t.slice(0, 35) + "…" : t;
    const ng = sv("g", { class: "node", testid: "graph-node", "data-id": node.id, "data-op": node.op, transform: `translate(${x[i] - w[i] / 2},${y[i] - H / 2})` },
      sv("rect", { width: w[i], height: H }), sv("text", { x: w[i] / 2, y: 17, "text-anchor": "middle", text: shown }),
      sv("title", { text: node.label }));
    ng.addEventListener("click", (e) => {
      e.stopPropagation();
      for (const o of svg.querySelectorAll(".node.sel")) o.classList.remove("sel");
      ng.classList.add("sel"); nodeDetails(g, node, det, succ[i].map((j) => g.nodes[j]), pred[i].map((j) => g.nodes[j]));
    });
    root.append(ng);
  });
  box.append(svg);
  // Pan (drag) and zoom (wheel, at the pointer) by moving the viewBox.
  const total = { w: Math.max(maxW, 200), h: 40 + layers.length * VGAP };
  const r = box.getBoundingClientRect();
  let vb = { x: 0, y: -10, w: Math.max(total.w + 20, (total.h + 20) * r.width / r.height), h: 0 };
  vb.h = vb.w * r.height / r.width;
  vb.x = (total.w - vb.w) / 2; // centred
  const apply = () => svg.setAttribute("viewBox", `${vb.x} ${vb.y} ${vb.w} ${vb.h}`);
  apply();
  svg.addEventListener("wheel", (e) => {
    e.preventDefault();
    const k = e.deltaY > 0 ? 1.15 : 1 / 1.15, b = svg.getBoundingClientRect();
    const px = vb.x + (e.clientX - b.left) / b.width * vb.w, py = vb.y + (e.clientY - b.top) / b.height * vb.h;
    vb = { x: px - (px - vb.x) * k, y: py - (py - vb.y) * k, w: vb.w * k, h: vb.h * k }; apply();
  }, { passive: false });
  let drag = null;
  svg.addEventListener("pointerdown", (e) => { drag = { x: e.clientX, y: e.clientY, vb: { ...vb } }; });
  window.addEventListener("pointerup", () => { drag = null; });
  svg.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const b = svg.getBoundingClientRect();
    vb.x = drag.vb.x - (e.clientX - drag.x) / b.width * vb.w; vb.y = drag.vb.y - (e.clientY - drag.y) / b.height * vb.h; apply();
  });
}
function nodeDetails(g, node, det, outs, ins) {
  det.textContent = "";
  det.append(el("h3", {}, node.op));
  const dl = el("dl", { class: "kv" });
  const kv = (k, v) => dl.append(el("dt", {}, k), el("dd", { class: "mono" }, v));
  kv("node", node.id); if (node.block !== undefined && node.block !== null) kv("block", node.block);
  if (node.label.includes("\n")) kv("label", node.label.replace(/\n/g, " · "));
  const slots = (s) => s.map((x) => `${x.name}=[${x.args.join(", ")}]`).join("\n") || "-";
  if (node.inputs) kv("inputs", slots(node.inputs)); else if (ins) kv("inputs from", ins.map((x) => x.label.replace(/\n/g, " ")).join("\n") || "-");
  if (node.outputs) kv("outputs", slots(node.outputs)); else if (outs) kv("outputs to", outs.map((x) => x.label.replace(/\n/g, " ")).join("\n") || "-");
  det.append(dl);
  if (node.attrs && node.attrs.length) {
    const a = el("dl", { class: "kv" });
    for (const x of node.attrs) a.append(el("dt", {}, x.name), el("dd", { class: "mono" }, x.value));
    det.append(el("h4", {}, "attributes"), a);
  }
}

// ---- start ------------------------------------------------------------------------
async function main() {
  $("param-filter").addEventListener("input", renderParams);
  for (const th of document.querySelectorAll("#params th[data-key]")) {
    th.addEventListener("click", () => {
      const k = th.dataset.key;
      state.sortDesc = state.sortKey === k ? !state.sortDesc : false; state.sortKey = k; renderParams();
    });
  }
  $("diff-run").addEventListener("click", runDiff);
  $("view-graph").addEventListener("click", drawGraph);
  const doc = await api("archive");
  if (doc.error) {
    showError(doc.error);
    for (const s of document.querySelectorAll("main section")) s.hidden = true;
    document.body.dataset.ready = "error";
    return;
  }
  state.doc = doc;
  $("archive-name").textContent = doc.archive;
  $("archive-facts").textContent = `${doc.tags.length} tags, ${bytes(doc.len_bytes)}` +
    (doc.dead_bytes ? `, ${bytes(doc.dead_bytes)} dead (compact reclaims them)` : "") + (window.MODELZIP_DATA ? " · static page" : "");
  renderTimeline(doc); renderMetrics(doc); fillDiffSelects(doc);
  if (doc.default) await selectTag(doc.default);
  document.body.dataset.ready = "yes";
}
main().catch((e) => {
  showError("the page failed: " + e);
  document.body.dataset.ready = "error";
});
