// jvmperf's profile page: a flame graph / icicle on a canvas, search, zoom, a caller view, the
// top methods, a timeline of the samples and a thread list. Every view is computed from the
// samples inside the selected time window and threads. No network access of any kind.
'use strict';
(function () {
  const D = JSON.parse(document.getElementById('profile-data').textContent);
  const $ = (id) => document.getElementById(id);
  const S = D.strings;
  const ROW = 17;

  // Unsigned LEB128 varints from base64 (see src/output/html/mod.rs).
  function column(b64, n) {
    const out = new Float64Array(n);
    if (!b64) return out;
    const bin = atob(b64);
    let v = 0, mul = 1, k = 0;
    for (let i = 0; i < bin.length && k < n; i++) {
      const b = bin.charCodeAt(i);
      v += (b & 0x7f) * mul;
      if (b & 0x80) { mul *= 128; } else { out[k++] = v; v = 0; mul = 1; }
    }
    return out;
  }

  // Frames: name and method (indices into S), kind (index into D.kinds), details.
  const F = D.frames;
  const fName = column(F.name, F.n), fMethod = column(F.method, F.n);
  const fKind = column(F.kind, F.n), fDetail = column(F.detail, F.n);

  // The stack trie; node N (one past the last) is the root, "all".
  const N = D.nodes.n, ROOT = N;
  const up = column(D.nodes.up, N), nFrame = column(D.nodes.frame, N);
  const parent = new Int32Array(N + 1).fill(-1);
  for (let i = 0; i < N; i++) parent[i] = up[i] === 0 ? ROOT : i - up[i];
  // Children of each node, in name order: node n's are kidList[kidStart[n] .. kidStart[n + 1]).
  const nameRank = new Float64Array(F.n);
  Array.from(nameRank.keys()).sort((a, b) => (S[fName[a]] < S[fName[b]] ? -1 : 1))
    .forEach((f, r) => { nameRank[f] = r; });
  const kidStart = new Int32Array(N + 2), kidList = new Int32Array(N);
  for (let i = 0; i < N; i++) kidStart[parent[i] + 1]++;
  for (let n = 0; n <= N; n++) kidStart[n + 1] += kidStart[n];
  const fill = kidStart.slice(0, N + 1);
  for (let i = 0; i < N; i++) kidList[fill[parent[i]]++] = i;
  for (let n = 0; n <= N; n++) {
    if (kidStart[n + 1] - kidStart[n] > 1) {
      kidList.subarray(kidStart[n], kidStart[n + 1]).sort((a, b) => nameRank[nFrame[a]] - nameRank[nFrame[b]]);
    }
  }
  const kids = (n) => kidList.subarray(kidStart[n], kidStart[n + 1]);
  const stackLeaf = column(D.stacks.leaf, D.stacks.n); // node + 1, 0 for the empty stack

  // Each thread's samples in time order: stack, time (in units since the first sample), weight.
  // A row is `stack * 4 + d`, d (0-2) the time since the previous row, or 3 and the time next.
  function sampleSet(d) {
    const threads = d.threads.map((t) => {
      const v = column(t.rows, 2 * t.n), time = new Float64Array(t.n), stack = new Float64Array(t.n);
      for (let i = 0, k = 0, q = 0; i < t.n; i++) {
        const x = v[k++], dt = x % 4;
        stack[i] = (x - dt) / 4;
        q += dt < 3 ? dt : v[k++];
        time[i] = q;
      }
      const weight = t.weight ? column(t.weight, t.n) : null;
      return { tid: t.tid, name: t.name, samples: t.samples, n: t.n, time, stack, weight };
    });
    return { threads, unit: d.unit_ns, timed: d.timed, t0: d.t0_ns };
  }
  const SM = sampleSet(D.samples);
  // What weights count: samples, or bytes in an allocation profile.
  const UNIT = D.unit || 'samples';
  const BASE = D.baseline ? sampleSet(D.baseline) : null;
  const span = maxOf(SM.threads.map((t) => (t.n ? t.time[t.n - 1] + 1 : 1)));
  // The rows of thread t inside the time window.
  function rowsIn(t, range) {
    return range ? [lowerBound(t.time, range[0]), lowerBound(t.time, range[1])] : [0, t.n];
  }

  // What is shown: the time window (in sample time units), the threads, the zoom, the search.
  const state = {
    range: null, threads: null, zoom: ROOT, view: 'flame', search: null,
    callersOf: null, callerZoom: 0, sortBy: 'self', heatmap: false,
  };

  // Summed weight per stack of the samples in the window and threads.
  function stackWeights(set, range, threads) {
    const w = new Float64Array(D.stacks.n);
    let total = 0;
    set.threads.forEach((t, ti) => {
      if (threads && !threads.has(ti)) return;
      const [lo, hi] = rowsIn(t, range);
      for (let i = lo; i < hi; i++) {
        const x = t.weight ? t.weight[i] : 1;
        w[t.stack[i]] += x;
        total += x;
      }
    });
    return { w, total };
  }
  function lowerBound(a, x) {
    let lo = 0, hi = a.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }
  // Total and self weight per trie node.
  function nodeWeights(sw) {
    const total = new Float64Array(N + 1), self = new Float64Array(N + 1);
    for (let s = 0; s < sw.w.length; s++) {
      if (!sw.w[s]) continue;
      const leaf = stackLeaf[s] ? stackLeaf[s] - 1 : ROOT;
      self[leaf] += sw.w[s];
      total[leaf] += sw.w[s];
    }
    for (let i = N - 1; i >= 0; i--) total[parent[i]] += total[i];
    return { total, self };
  }

  // ---------------------------------------------------------------- the current selection
  let cur = null; // { sw, nw, base, matched }
  function recompute() {
    const sw = stackWeights(SM, state.range, state.threads);
    const nw = nodeWeights(sw);
    let base = null;
    if (BASE) {
      const bw = stackWeights(BASE, null, null);
      base = { nw: nodeWeights(bw), total: bw.total };
    }
    cur = { sw, nw, base };
    if (state.zoom !== ROOT && !nw.total[state.zoom]) state.zoom = ROOT;
    updateSearch();
    renderSelection();
    renderMethods();
    renderThreads();
    drawTimeline();
    draw();
  }

  // ---------------------------------------------------------------------------- search
  function updateSearch() {
    const box = $('search'), text = box.value;
    state.search = null;
    box.classList.remove('bad');
    if (text) {
      try { state.search = new RegExp(text); } catch (e) { box.classList.add('bad'); }
    }
    if (!state.search) { $('search-share').textContent = ''; cur.matched = null; return; }
    // A node matches when its method matches; a stack when any of its nodes does.
    const re = state.search, hit = new Map();
    const matches = (f) => {
      const m = fMethod[f];
      if (!hit.has(m)) hit.set(m, re.test(S[m]));
      return hit.get(m);
    };
    const self = new Uint8Array(N + 1), under = new Uint8Array(N + 1);
    for (let i = 0; i < N; i++) {
      self[i] = matches(nFrame[i]) ? 1 : 0;
      under[i] = self[i] || (parent[i] !== ROOT && under[parent[i]]) ? 1 : 0;
    }
    let w = 0;
    for (let s = 0; s < cur.sw.w.length; s++) {
      if (cur.sw.w[s] && stackLeaf[s] && under[stackLeaf[s] - 1]) w += cur.sw.w[s];
    }
    cur.matched = self;
    const pct = cur.sw.total ? (100 * w) / cur.sw.total : 0;
    $('search-share').textContent =
      `matched ${pct.toFixed(2)}% (${fmt(w)} of ${fmt(cur.sw.total)} ${UNIT})`;
    $('search-share').dataset.share = pct.toFixed(4);
  }

  // ------------------------------------------------------------------------- flame graph
  // A tree to draw: the trie, or the callers of one method.
  function trieTree() {
    return {
      root: ROOT, kids, frame: (n) => (n === ROOT ? -1 : nFrame[n]),
      parent: (n) => parent[n], total: cur.nw.total, self: cur.nw.self,
      base: cur.base, matched: cur.matched,
    };
  }
  // All paths into one method merged: the method at the root (all its kinds), its callers above
  // it (for each stack, from the method's innermost frame outwards).
  function callerTree(method) {
    const t = { frame: [-1], parent: [-1], kids: [[]], total: [0], self: [0], index: new Map() };
    const child = (p, f) => {
      const key = p + ':' + f;
      let c = t.index.get(key);
      if (c === undefined) {
        c = t.frame.length;
        t.index.set(key, c);
        t.frame.push(f); t.parent.push(p); t.kids.push([]); t.total.push(0); t.self.push(0);
        t.kids[p].push(c);
      }
      return c;
    };
    for (let s = 0; s < cur.sw.w.length; s++) {
      const w = cur.sw.w[s];
      if (!w || !stackLeaf[s]) continue;
      let n = stackLeaf[s] - 1;
      while (n !== ROOT && fMethod[nFrame[n]] !== method) n = parent[n];
      if (n === ROOT) continue;
      t.total[0] += w;
      let at = 0;
      for (n = parent[n]; n !== ROOT; n = parent[n]) { at = child(at, nFrame[n]); t.total[at] += w; }
      t.self[at] += w;
    }
    for (const k of t.kids) k.sort((a, b) => t.total[b] - t.total[a]);
    return {
      root: 0, kids: (n) => t.kids[n], frame: (n) => t.frame[n], parent: (n) => t.parent[n],
      total: t.total, self: t.self, base: null, matched: null,
    };
  }

  let drawn = []; // the boxes on the canvas: {node, x, y, w, frame}
  let tree = null;
  function draw() {
    tree = state.callersOf === null ? trieTree() : callerTree(state.callersOf);
    const zoom = state.callersOf === null ? state.zoom : state.callerZoom;
    const canvas = $('flame'), box = $('canvas-box');
    const width = box.clientWidth || 800;
    // Lay out: the zoomed node full width below its ancestors, its descendants by weight.
    const ancestors = [];
    for (let n = zoom; n !== tree.root && n >= 0; n = tree.parent(n)) ancestors.unshift(n);
    ancestors.unshift(tree.root);
    const boxes = [];
    ancestors.forEach((n, d) => boxes.push({ node: n, x: 0, w: width, depth: d, dim: n !== zoom }));
    const scale = tree.total[zoom] ? width / tree.total[zoom] : 0;
    const todo = [[zoom, 0, ancestors.length - 1]];
    let depth = ancestors.length;
    while (todo.length) {
      const [n, x0, d] = todo.pop();
      let x = x0;
      for (const c of tree.kids(n)) {
        const w = tree.total[c] * scale;
        if (w >= 0.4) {
          boxes.push({ node: c, x, w, depth: d + 1, dim: false });
          todo.push([c, x, d + 1]);
          if (d + 2 > depth) depth = d + 2;
        }
        x += w;
      }
    }
    const dpr = window.devicePixelRatio || 1, height = Math.max(depth, 1) * ROW + 4;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.height = height + 'px';
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, height);
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    drawn = [];
    const icicle = state.view === 'icicle';
    for (const b of boxes) {
      const y = icicle ? b.depth * ROW : height - (b.depth + 1) * ROW;
      const f = tree.frame(b.node);
      g.fillStyle = colour(b.node, f);
      g.globalAlpha = b.dim ? 0.55 : 1;
      g.fillRect(b.x, y, Math.max(b.w - 0.5, 0.5), ROW - 1);
      g.globalAlpha = 1;
      if (b.w > 28) {
        g.fillStyle = '#000';
        g.fillText(fit(g, label(f), b.w - 6), b.x + 3, y + ROW / 2);
      }
      drawn.push({ node: b.node, x: b.x, y, w: b.w, frame: f });
    }
    renderCrumbs();
    // A flame graph grows up from its root at the bottom: show the root.
    if (!icicle && height > box.clientHeight) box.scrollTop = height;
  }
  function label(f) { return f < 0 ? (state.callersOf === null ? 'all' : S[state.callersOf]) : S[fName[f]]; }
  function fit(g, text, w) {
    if (g.measureText(text).width <= w) return text;
    let lo = 0, hi = text.length;
    while (lo < hi) {
      const m = (lo + hi + 1) >> 1;
      if (g.measureText(text.slice(0, m) + '…').width <= w) lo = m; else hi = m - 1;
    }
    return lo > 1 ? text.slice(0, lo) + '…' : '';
  }
  function colour(node, f) {
    if (f < 0) return '#c8c8c8';
    if (tree.matched && tree.matched[node]) return 'rgb(230,60,220)';
    if (tree.base) return diffColour(node);
    return D.kinds[fKind[f]].color;
  }
  // The diff page: red where the node's share of the samples grew from the baseline, blue where
  // it shrank, white where it stayed.
  function diffColour(node) {
    const after = cur.sw.total ? tree.total[node] / cur.sw.total : 0;
    const before = tree.base.total ? tree.base.nw.total[node] / tree.base.total : 0;
    const d = Math.max(-1, Math.min(1, (after - before) * 5));
    const fade = Math.round(255 * (1 - Math.abs(d)));
    return d >= 0 ? `rgb(255,${fade},${fade})` : `rgb(${fade},${fade},255)`;
  }

  function renderCrumbs() {
    const nav = $('crumbs');
    nav.textContent = '';
    const zoom = state.callersOf === null ? state.zoom : state.callerZoom;
    const path = [];
    for (let n = zoom; n >= 0 && n !== tree.root; n = tree.parent(n)) path.unshift(n);
    path.unshift(tree.root);
    for (const n of path) {
      const s = document.createElement('span');
      s.textContent = label(tree.frame(n));
      s.addEventListener('click', () => zoomTo(n));
      nav.appendChild(s);
    }
  }
  function zoomTo(n) {
    if (state.callersOf === null) {
      state.zoom = n;
      const f = n === ROOT ? -1 : nFrame[n];
      const btn = $('callers');
      btn.hidden = f < 0;
      if (f >= 0) { btn.textContent = 'callers of ' + S[fMethod[f]]; btn.dataset.method = fMethod[f]; }
    } else {
      state.callerZoom = n;
    }
    draw();
  }
  function showCallers(method) {
    state.callersOf = method;
    state.callerZoom = 0;
    $('back').hidden = false;
    $('callers').hidden = true;
    draw();
  }
  function hit(ev) {
    const r = $('flame').getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    return drawn.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + ROW) || null;
  }
  function showTip(ev, b) {
    const tip = $('tip');
    if (!b) { tip.hidden = true; return; }
    const total = cur.sw.total || 1, f = b.frame;
    const rows = [['', label(f)]];
    if (f >= 0) {
      rows.push(['kind', D.kinds[fKind[f]].name]);
      if (S[fDetail[f]]) rows.push(['', S[fDetail[f]]]);
    }
    rows.push([UNIT, fmt(tree.total[b.node])]);
    rows.push(['total', pct(tree.total[b.node], total)]);
    rows.push(['self', pct(tree.self[b.node], total)]);
    if (tree.base) {
      const before = tree.base.total ? tree.base.nw.total[b.node] / tree.base.total : 0;
      rows.push(['before', (100 * before).toFixed(2) + '%']);
    }
    tip.textContent = '';
    rows.forEach(([k, v], i) => {
      const line = document.createElement('div');
      if (i === 0) { const bold = document.createElement('b'); bold.textContent = v; line.appendChild(bold); }
      else line.textContent = k ? `${k}: ${v}` : v;
      tip.appendChild(line);
    });
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + 'px';
    tip.style.top = ev.clientY + 16 + 'px';
  }

  // ----------------------------------------------------------------------- side tables
  function renderSelection() {
    const parts = [`${fmt(cur.sw.total)} ${UNIT}`];
    const all = SM.threads.reduce((sum, t) => sum + t.samples, 0);
    if (cur.sw.total !== all) parts.push(`${pct(cur.sw.total, all)} of ${fmt(all)}`);
    if (state.range) parts.push(rangeText(state.range));
    if (state.threads) parts.push(`${state.threads.size} of ${SM.threads.length} threads`);
    if (BASE) parts.push('coloured by change from the baseline: red grew, blue shrank');
    $('selection').textContent = parts.join(' · ');
  }
  function renderMethods() {
    // As `jvmperf report` counts: self where the method is the leaf, total once per sample
    // with the method anywhere on the stack.
    const self = new Float64Array(S.length), total = new Float64Array(S.length);
    const seen = new Int32Array(S.length).fill(-1), methods = [];
    for (let s = 0; s < cur.sw.w.length; s++) {
      const w = cur.sw.w[s];
      if (!w || !stackLeaf[s]) continue;
      let n = stackLeaf[s] - 1;
      self[fMethod[nFrame[n]]] += w;
      for (; n !== ROOT; n = parent[n]) {
        const m = fMethod[nFrame[n]];
        if (seen[m] === s) continue;
        if (!total[m]) methods.push(m);
        seen[m] = s;
        total[m] += w;
      }
    }
    const key = state.sortBy === 'self' ? self : total;
    const rows = methods.sort((a, b) => key[b] - key[a] || total[b] - total[a]).slice(0, 40);
    const body = $('methods').tBodies[0];
    body.textContent = '';
    for (const m of rows) {
      const tr = body.insertRow();
      tr.dataset.method = S[m];
      cell(tr, S[m]).title = S[m];
      cell(tr, pct(self[m], cur.sw.total), 'num');
      cell(tr, pct(total[m], cur.sw.total), 'num');
      const c = cell(tr, '');
      const btn = document.createElement('button');
      btn.type = 'button';
      btn.textContent = 'callers';
      btn.addEventListener('click', (ev) => { ev.stopPropagation(); showCallers(m); });
      c.appendChild(btn);
      tr.addEventListener('click', () => {
        $('search').value = '^' + S[m].replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$';
        updateSearch();
        draw();
      });
    }
    for (const th of document.querySelectorAll('#methods th.sort')) {
      th.classList.toggle('sorted', th.dataset.sort === state.sortBy);
    }
  }
  function renderThreads() {
    // Samples per thread in the time window.
    const count = new Float64Array(SM.threads.length);
    SM.threads.forEach((t, ti) => {
      const [lo, hi] = rowsIn(t, state.range);
      for (let i = lo; i < hi; i++) count[ti] += t.weight ? t.weight[i] : 1;
    });
    const table = $('threads');
    table.textContent = '';
    const order = SM.threads.map((_, i) => i).sort((a, b) => SM.threads[b].samples - SM.threads[a].samples);
    for (const i of order) {
      const t = SM.threads[i], tr = table.insertRow();
      tr.dataset.tid = t.tid;
      const on = !state.threads || state.threads.has(i);
      const box = document.createElement('input');
      box.type = 'checkbox';
      box.checked = on;
      box.addEventListener('click', (ev) => { ev.stopPropagation(); toggleThread(i); });
      cell(tr, '').appendChild(box);
      cell(tr, t.name).title = `${t.name} (tid ${t.tid}): click for this thread alone`;
      cell(tr, fmt(count[i]), 'num');
      tr.classList.toggle('picked', !!state.threads && on);
      tr.addEventListener('click', () => onlyThread(i));
    }
    $('all-threads').hidden = !state.threads;
  }
  function toggleThread(i) {
    const set = state.threads ? new Set(state.threads) : new Set(SM.threads.map((_, j) => j));
    if (set.has(i)) set.delete(i); else set.add(i);
    state.threads = set.size === SM.threads.length ? null : set;
    recompute();
  }
  function onlyThread(i) {
    state.threads = state.threads && state.threads.size === 1 && state.threads.has(i) ? null : new Set([i]);
    recompute();
  }
  function cell(tr, text, cls) {
    const td = tr.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  // ----------------------------------------------------------------------------- timeline
  // One row for all threads and one for each of the busiest threads: samples per pixel column.
  const LANES = 12, TOP = 34, LANE = 12, AXIS = 14, GUTTER = 130;
  let drag = null;
  function lanes() {
    return SM.threads.map((_, i) => i).sort((a, b) => SM.threads[b].samples - SM.threads[a].samples).slice(0, LANES);
  }
  function drawTimeline() {
    const c = $('timeline');
    if (!SM.timed) {
      c.hidden = true;
      $('timeline-mode').hidden = true;
      $('range').textContent = 'this profile keeps no sample times';
      return;
    }
    if (state.heatmap) drawHeatmap(c); else drawLanes(c);
    const secs = (span * SM.unit) / 1e9;
    $('range').textContent = state.range ? rangeText(state.range) : `whole recording, ${secs.toFixed(3)} s`;
    $('clear-range').hidden = !state.range;
  }
  function setCanvasSize(c, width, height) {
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(width * dpr);
    c.height = Math.round(height * dpr);
    c.style.height = height + 'px';
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, height);
    g.font = '10px system-ui, sans-serif';
    return g;
  }
  // The subsecond heatmap: a column per second, a cell per 20 ms of it (0 ms at the top), darker
  // with more samples of the selected threads; a drag selects from one cell to another in time.
  const HM_ROWS = 50, HM_CELL = 3;
  function heatGeometry(c) {
    const width = c.clientWidth || 800, perSec = 1e9 / SM.unit;
    const cols = Math.max(1, Math.ceil(span / perSec));
    return { width, perSec, cols, cw: (width - GUTTER) / cols, cell: perSec / HM_ROWS };
  }
  function drawHeatmap(c) {
    const h = heatGeometry(c), height = AXIS + HM_ROWS * HM_CELL + 2;
    const g = setCanvasSize(c, h.width, height);
    const counts = new Float64Array(h.cols * HM_ROWS);
    SM.threads.forEach((t, ti) => {
      if (state.threads && !state.threads.has(ti)) return;
      for (let i = 0; i < t.n; i++) {
        const col = Math.floor(t.time[i] / h.perSec), row = Math.floor((t.time[i] % h.perSec) / h.cell);
        counts[col * HM_ROWS + row] += t.weight ? t.weight[i] : 1;
      }
    });
    const max = maxOf(counts);
    const r = drag ? [Math.min(drag.a, drag.b), Math.max(drag.a, drag.b) + h.cell] : state.range;
    for (let k = 0; k < counts.length; k++) {
      const col = Math.floor(k / HM_ROWS), row = k % HM_ROWS, t = col * h.perSec + row * h.cell;
      const x = GUTTER + col * h.cw, y = AXIS + row * HM_CELL;
      if (counts[k]) {
        g.fillStyle = `rgba(40,90,180,${0.1 + 0.9 * (counts[k] / max)})`;
        g.fillRect(x, y, Math.max(h.cw - 0.3, 0.5), HM_CELL);
      }
      if (r && t >= r[0] && t < r[1]) {
        g.fillStyle = 'rgba(255,160,0,0.35)';
        g.fillRect(x, y, Math.max(h.cw, 0.5), HM_CELL);
      }
    }
    g.fillStyle = '#333';
    g.textBaseline = 'top';
    g.fillText('0 ms', 4, AXIS);
    g.textBaseline = 'bottom';
    g.fillText('1000 ms', 4, AXIS + HM_ROWS * HM_CELL);
    const step = Math.max(1, niceStep(h.cols / 8));
    g.textBaseline = 'top';
    for (let col = 0; col < h.cols; col += step) {
      g.fillRect(GUTTER + col * h.cw, 0, 1, 4);
      g.fillText(col + ' s', GUTTER + col * h.cw + 2, 1);
    }
  }
  function drawLanes(c) {
    const width = c.clientWidth || 800, shown = lanes();
    const height = AXIS + TOP + shown.length * LANE + 2;
    const g = setCanvasSize(c, width, height);
    // Columns of at least 2 px, and few enough that a column holds several samples.
    const plot = Math.max(1, width - GUTTER);
    const rows = SM.threads.reduce((sum, t) => sum + t.n, 0);
    const cols = Math.max(1, Math.min(Math.floor(plot / 2), Math.ceil(rows / 4)));
    const cw = plot / cols, X = (t) => GUTTER + (t / span) * plot;
    const lane = new Int32Array(SM.threads.length).fill(-1);
    shown.forEach((t, i) => { lane[t] = i; });
    const all = new Float64Array(cols), per = shown.map(() => new Float64Array(cols));
    SM.threads.forEach((t, ti) => {
      const on = !state.threads || state.threads.has(ti);
      if (!on && lane[ti] < 0) return;
      for (let i = 0; i < t.n; i++) {
        const x = Math.min(cols - 1, Math.floor((t.time[i] / span) * cols));
        const w = t.weight ? t.weight[i] : 1;
        if (on) all[x] += w;
        if (lane[ti] >= 0) per[lane[ti]][x] += w;
      }
    });
    const maxAll = maxOf(all);
    g.fillStyle = '#4a7bd0';
    for (let x = 0; x < cols; x++) {
      const h = (all[x] / maxAll) * (TOP - 4);
      g.fillRect(GUTTER + x * cw, AXIS + TOP - h, cw, h);
    }
    g.textBaseline = 'middle';
    g.fillStyle = '#333';
    g.fillText(state.threads ? 'selected threads' : 'all threads', 4, AXIS + TOP / 2);
    per.forEach((counts, i) => {
      const max = maxOf(counts), y = AXIS + TOP + i * LANE, t = shown[i];
      const on = !state.threads || state.threads.has(t);
      for (let x = 0; x < cols; x++) {
        if (!counts[x]) continue;
        g.fillStyle = on ? `rgba(40,90,180,${0.15 + 0.85 * (counts[x] / max)})` : 'rgba(150,150,150,0.3)';
        g.fillRect(GUTTER + x * cw, y + 1, cw, LANE - 2);
      }
      g.fillStyle = on ? '#333' : '#999';
      g.fillText(fit(g, SM.threads[t].name, GUTTER - 8), 4, y + LANE / 2);
    });
    // The axis: seconds from the first sample.
    const secs = (span * SM.unit) / 1e9, step = niceStep(secs / 8);
    g.fillStyle = '#555';
    g.textBaseline = 'top';
    for (let s = 0; s <= secs; s += step) {
      const x = X((s / secs) * span);
      g.fillRect(x, 0, 1, 4);
      g.fillText(s.toFixed(step < 1 ? 1 : 0) + ' s', x + 2, 1);
    }
    const r = drag ? [Math.min(drag.a, drag.b), Math.max(drag.a, drag.b)] : state.range;
    if (r) {
      const x0 = X(r[0]), x1 = X(r[1]);
      g.fillStyle = 'rgba(255,180,0,0.25)';
      g.fillRect(x0, 0, Math.max(1, x1 - x0), height);
      g.fillStyle = 'rgba(0,0,0,0.12)';
      g.fillRect(GUTTER, AXIS, x0 - GUTTER, height);
      g.fillRect(x1, AXIS, width - x1, height);
    }
    // Where the time axis lies, for scripts: CSS px from the canvas' left, and its seconds.
    c.dataset.plotLeft = GUTTER;
    c.dataset.plotWidth = plot;
    c.dataset.seconds = secs;
  }
  function niceStep(x) {
    const p = Math.pow(10, Math.floor(Math.log10(x || 1)));
    for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
    return 10 * p;
  }
  function rangeText(r) {
    const s = (t) => ((t * SM.unit) / 1e9).toFixed(3);
    return `${s(r[0])} s – ${s(r[1])} s (${(((r[1] - r[0]) * SM.unit) / 1e6).toFixed(1)} ms)`;
  }
  function timeAt(ev) {
    const c = $('timeline'), r = c.getBoundingClientRect();
    if (state.heatmap) {
      // The start of the cell under the pointer.
      const h = heatGeometry(c);
      const col = Math.max(0, Math.min(h.cols - 1, Math.floor((ev.clientX - r.left - GUTTER) / h.cw)));
      const row = Math.max(0, Math.min(HM_ROWS - 1, Math.floor((ev.clientY - r.top - AXIS) / HM_CELL)));
      return Math.min(span, col * h.perSec + row * h.cell);
    }
    return Math.max(0, Math.min(1, (ev.clientX - r.left - GUTTER) / (r.width - GUTTER))) * span;
  }

  // ------------------------------------------------------------------------------ helpers
  // The largest of `a` and 1 (a spread into Math.max fails on very long arrays).
  function maxOf(a) {
    let m = 1;
    for (const x of a) if (x > m) m = x;
    return m;
  }
  function fmt(x) { return Math.round(x).toLocaleString('en-US'); }
  function pct(x, of) { return of ? ((100 * x) / of).toFixed(2) + '%' : '0%'; }

  // ------------------------------------------------------------------------------- set up
  $('title').textContent = D.title;
  document.title = D.title;
  $('subtitle').textContent = D.description.join(' · ') +
    (D.clock === 'wall' ? ' · a wall-clock profile: samples of threads running or waiting'
      : D.clock === 'alloc_space' ? ' · an allocation profile: bytes allocated, by stack and allocated class'
      : ' · a CPU profile: samples of threads on a CPU');
  for (const k of D.kinds) {
    if (k.name === 'thread') continue;
    if (k.name === 'allocated class' && D.clock !== 'alloc_space') continue;
    const li = document.createElement('li'), sw = document.createElement('span');
    sw.style.background = k.color;
    li.append(sw, k.name);
    $('legend').appendChild(li);
  }
  if (D.notes.length) { $('notes').hidden = false; $('notes').textContent = D.notes.join(' · '); }

  const canvas = $('flame');
  canvas.addEventListener('mousemove', (ev) => showTip(ev, hit(ev)));
  canvas.addEventListener('mouseleave', () => { $('tip').hidden = true; });
  canvas.addEventListener('click', (ev) => { const b = hit(ev); if (b) zoomTo(b.node); });
  $('view').addEventListener('change', () => { state.view = $('view').value; draw(); });
  $('search').addEventListener('input', () => { updateSearch(); draw(); });
  $('callers').addEventListener('click', () => showCallers(Number($('callers').dataset.method)));
  $('back').addEventListener('click', () => {
    state.callersOf = null;
    $('back').hidden = true;
    zoomTo(state.zoom);
  });
  $('timeline-mode').addEventListener('change', () => {
    state.heatmap = $('timeline-mode').value === 'heatmap';
    drawTimeline();
  });
  $('all-threads').addEventListener('click', () => { state.threads = null; recompute(); });
  $('clear-range').addEventListener('click', () => { state.range = null; recompute(); });
  for (const th of document.querySelectorAll('#methods th.sort')) {
    th.addEventListener('click', () => { state.sortBy = th.dataset.sort; renderMethods(); });
  }
  const tl = $('timeline');
  tl.addEventListener('mousedown', (ev) => { drag = { a: timeAt(ev), b: timeAt(ev) }; ev.preventDefault(); });
  window.addEventListener('mousemove', (ev) => { if (drag) { drag.b = timeAt(ev); drawTimeline(); } });
  window.addEventListener('mouseup', (ev) => {
    if (!drag) return;
    drag.b = timeAt(ev);
    const a = Math.min(drag.a, drag.b), b = Math.max(drag.a, drag.b);
    drag = null;
    if (state.heatmap) {
      // From the first cell's start to the last cell's end; a click on a cell is that cell.
      state.range = [a, Math.min(span, b + heatGeometry(tl).cell)];
    } else {
      // A click (a drag under 3 px) goes back to the whole recording.
      state.range = ((b - a) / span) * (tl.clientWidth - GUTTER) < 3 ? null : [a, b];
    }
    recompute();
  });
  let resize = 0;
  window.addEventListener('resize', () => { clearTimeout(resize); resize = setTimeout(recompute, 100); });

  // For scripts and tests: the boxes drawn, in CSS pixels from the canvas' top left.
  window.jvmperf = {
    boxes: () => drawn.map((b) => ({ name: label(b.frame), x: b.x, y: b.y, w: b.w, h: ROW })),
  };
  const begin = performance.now();
  recompute();
  // For `cargo xtask bench html`: ms from navigation to the page drawn, and of one redraw (what
  // a new time window or thread filter costs).
  document.body.dataset.recomputeMs = (performance.now() - begin).toFixed(1);
  document.body.dataset.readyMs = performance.now().toFixed(1);
  document.body.dataset.ready = 'true';
})();
