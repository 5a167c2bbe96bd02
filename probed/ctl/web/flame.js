// The flame graph page of probed's web view: a samples-per-second strip to pick a window on
// (uPlot; drag to pick), the flame graph of that window (d3-flame-graph: click to zoom, the
// path clicked shown as a breadcrumb, search with the matched share), icicle and sandwich
// views as speedscope has them, and the diff of the window against a kept baseline, coloured
// by change. The profile comes from GET /v1/flamegraph?format=json (frames and stacks as
// indices). Without the libraries (probectl built without npm) it shows the daemon's SVG.
'use strict';

const flame = {
  chart: null,      // the d3-flame-graph chart drawn now
  profile: null,    // the window's profile as the daemon sent it
  baseline: null,   // {profile, label}: the window kept to diff against
  pick: null,       // [from_ns, to_ns] dragged on the strip; null: the window select's
  strip: null,      // the uPlot strip
  sandwichOf: null, // the function the sandwich view shows
  asked: 0,         // draws asked for: an answer to an older one is not drawn over a newer
};

const haveLibs = () => typeof window.flamegraph === 'function' && typeof window.uPlot === 'function'
  && typeof window.d3 === 'object';

const SPANS = { '1m': 60, '5m': 300, '15m': 900, '1h': 3600, '6h': 21600, '24h': 86400 };

function frameName(f) {
  if (f.kind === 'native') return f.name + ' [' + f.file.split('/').pop() + ']';
  if (f.kind === 'python') return f.name + ' (' + f.file + ':' + f.line + ')';
  if (f.kind === 'task') return '<task ' + f.name + '>';
  return f.name;
}

function nsText(ns) { return new Date(ns / 1e6).toLocaleTimeString(); }

// The window asked for: [from_ns, to_ns] (to 0: now).
function flameWindow() {
  if (flame.pick) return flame.pick;
  const span = SPANS[$('flame-since').value];
  return span ? [Date.now() * 1e6 - span * 1e9, 0] : [0, 0];
}

function flameQuery(win) {
  let q = 'pid=' + encodeURIComponent($('flame-pid').value);
  if (win[0]) q += '&from_ns=' + Math.floor(win[0]);
  if (win[1]) q += '&to_ns=' + Math.floor(win[1]);
  if ($('flame-thread').value) q += '&tid=' + $('flame-thread').value;
  if ($('flame-idle').checked) q += '&idle=1';
  if ($('flame-gil').checked) q += '&gil=1';
  if ($('flame-tasks').checked) q += '&tasks=1';
  return q;
}

// A profile as d3-flame-graph's tree: each node's value counts the samples under it.
function toTree(profile, keep) {
  const root = { name: 'all', value: 0, children: [], index: new Map() };
  for (const st of profile.stacks) {
    const ids = keep ? keep(st.frames) : st.frames;
    if (!ids) continue;
    let node = root;
    root.value += st.n;
    for (const id of ids) {
      const name = frameName(profile.frames[id]);
      let child = node.index.get(name);
      if (!child) {
        child = { name, value: 0, children: [], index: new Map(), kind: profile.frames[id].kind };
        node.index.set(name, child);
        node.children.push(child);
      }
      child.value += st.n;
      node = child;
    }
  }
  return root;
}

// Each node's change against @base, in samples, @base scaled to this window's total.
function addDelta(tree, base) {
  const scale = base.value ? tree.value / base.value : 0;
  const walk = (node, other) => {
    node.delta = node.value - (other ? other.value * scale : 0);
    for (const c of node.children) walk(c, other ? other.index.get(c.name) : null);
  };
  walk(tree, base);
}

function dropIndex(node) {
  delete node.index;
  node.children.forEach(dropIndex);
  return node;
}

function diffColour(d) {
  if (d.highlight) return '#e600e6';
  const delta = d.data.delta || 0, v = d.value || 1;
  const k = Math.min(1, Math.abs(delta) / v);
  const c = Math.round(235 - 170 * k);
  return delta > 0 ? 'rgb(235,' + c + ',' + c + ')' : delta < 0 ? 'rgb(' + c + ',' + c + ',235)' : 'rgb(235,235,235)';
}

function crumbs(d) {
  const out = $('flame-crumbs');
  out.replaceChildren();
  const path = d ? d.ancestors().reverse() : [];
  path.forEach((n, i) => {
    const a = el('a', n.data.name, 'crumb');
    a.onclick = () => flame.chart && flame.chart.zoomTo(n);
    if (i) out.append(el('span', ' › '));
    out.append(a);
  });
}

function drawChart(holder, tree, opts) {
  holder.replaceChildren();
  const chart = flamegraph()
    .width(Math.max(400, holder.clientWidth || 1200))
    .cellHeight(18)
    .transitionDuration(250)
    .minFrameSize(1)
    .sort(true)
    .inverted(!!opts.inverted)
    .setSearchMatch((d, term) => !!term && String(d.data.name).toLowerCase().includes(term.toLowerCase()))
    .setSearchHandler((results, sum, total) => {
      $('flame-match').textContent = $('flame-search').value
        ? 'matched: ' + sum + ' of ' + total + ' samples (' + (total ? (100 * sum / total).toFixed(1) : '0') + ' %)' : '';
    })
    .label((d) => d.data.name + ': ' + d.value + ' samples (' + (100 * (d.x1 - d.x0)).toFixed(2) + ' %)'
      + (d.data.delta !== undefined ? ', ' + (d.data.delta >= 0 ? '+' : '') + d.data.delta.toFixed(1) + ' against the baseline' : ''));
  if (opts.diff) chart.setColorMapper((d) => diffColour(d));
  if (opts.onClick) chart.onClick(opts.onClick);
  d3.select(holder).datum(tree).call(chart);
  return chart;
}

async function fetchProfile(win) {
  const r = await fetch('/v1/flamegraph?format=json&' + flameQuery(win), { credentials: 'same-origin' });
  const doc = await r.json();
  if (!r.ok) throw new Error(doc.error || r.statusText);
  return doc;
}

async function drawFlame() {
  const pid = $('flame-pid').value;
  if (!pid) return;
  if (!haveLibs()) { // the daemon's own SVG
    let url = '/v1/flamegraph?format=svg&' + flameQuery(flameWindow());
    $('flame-svg').hidden = false;
    $('flame-svg').data = url;
    status('built without the page libraries: the daemon\'s SVG flame graph');
    return;
  }
  const win = flameWindow(), asked = ++flame.asked;
  try {
    const profile = await fetchProfile(win);
    if (asked !== flame.asked) return;
    flame.profile = profile;
    const tree = toTree(profile);
    const diff = $('flame-diff').checked && flame.baseline;
    if (diff) addDelta(tree, toTree(flame.baseline.profile));
    $('flame-count').textContent = profile.total + ' samples' + (win[0] ? ' from ' + nsText(win[0]) : '')
      + (win[1] ? ' to ' + nsText(win[1]) : win[0] ? ' to now' : '');
    $('flame-count').dataset.samples = profile.total;
    const view = $('flame-view').value;
    $('flame-chart').hidden = view === 'sandwich';
    $('flame-sandwich').hidden = view !== 'sandwich';
    if (view === 'sandwich') {
      drawSandwich();
    } else {
      flame.chart = drawChart($('flame-chart'), dropIndex(tree), { inverted: view === 'icicle', diff, onClick: crumbs });
      crumbs(null);
      if ($('flame-search').value) flame.chart.search($('flame-search').value);
    }
  } catch (e) { status(e.message); }
}

// ---- the strip: samples per second over the window select's span ----

async function drawStrip() {
  const pid = $('flame-pid').value;
  if (!pid || !haveLibs()) return;
  const now = Date.now() * 1e6;
  let from = now - (SPANS[$('flame-since').value] || 0) * 1e9;
  try {
    if (!SPANS[$('flame-since').value]) { // all: from the first attach
      const d = await api('POST', '/v1/query', { pid: Number(pid), sql: 'SELECT min(attached_ns) FROM targets' });
      from = d.rows[0][0] || now - 300e9;
    }
    const span = Math.max(1, (now - from) / 1e9);
    // seconds from the samples up to a quarter of an hour; past it minutes and more, from the
    // per-minute counts (a few rows a minute, however many threads sampled)
    const bucket = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600].find(
      (b) => span / b <= 400 && (span <= 900 || b >= 60)) || 3600;
    const cpu = $('flame-idle').checked ? '' : ' AND (state & 1) = 1';
    const tid = $('flame-thread').value ? ' AND tid = ' + Number($('flame-thread').value) : '';
    const src = bucket >= 60 ? 'SELECT ts_ns, state, tid, n FROM minute_counts' : 'SELECT ts_ns, state, tid, 1 AS n FROM samples';
    const d = await api('POST', '/v1/query', {
      pid: Number(pid),
      sql: 'SELECT ts_ns / ' + bucket * 1e9 + ' AS b, sum(n) FROM (' + src + ' WHERE ts_ns >= ' + Math.floor(from)
        + cpu + tid + ') GROUP BY b ORDER BY b' });
    const xs = [], ys = [];
    for (const [b, n] of d.rows) { xs.push(b * bucket); ys.push(n / bucket); }
    const holder = $('flame-strip');
    holder.replaceChildren();
    flame.strip = new uPlot({
      width: Math.max(400, holder.clientWidth || 1200), height: 110,
      cursor: { drag: { x: true, y: false, setScale: false } },
      scales: { x: { time: true, range: [from / 1e9, now / 1e9] } },
      legend: { show: false },
      axes: [{}, { size: 50, label: 'samples/s' }],
      series: [{}, { label: 'samples/s', stroke: '#c0392b', fill: 'rgba(192,57,43,0.15)', paths: uPlot.paths.stepped({ align: 1 }) }],
      hooks: { setSelect: [(u) => {
        if (u.select.width < 2) return;
        const a = u.posToVal(u.select.left, 'x'), b = u.posToVal(u.select.left + u.select.width, 'x');
        pickWindow(a * 1e9, b * 1e9);
      }] },
    }, [xs, ys], holder);
  } catch (e) { status(e.message); }
}

function pickWindow(from_ns, to_ns) {
  flame.pick = [from_ns, to_ns];
  $('flame-pick').textContent = 'picked ' + nsText(from_ns) + ' – ' + nsText(to_ns);
  $('flame-unpick').hidden = false;
  drawFlame();
}

function unpick() {
  flame.pick = null;
  $('flame-pick').textContent = '';
  $('flame-unpick').hidden = true;
  if (flame.strip) flame.strip.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
  drawFlame();
}

function keepBaseline() {
  if (!flame.profile) return;
  const win = flameWindow();
  flame.baseline = { profile: flame.profile, label: (win[0] ? nsText(win[0]) : 'start') + ' – ' + (win[1] ? nsText(win[1]) : 'now') };
  $('flame-baseline').textContent = 'baseline: ' + flame.baseline.label + ', ' + flame.profile.total + ' samples';
  $('flame-diff').disabled = false;
}

// ---- sandwich: a function's callers above it, its callees below ----

function functionTable(profile) {
  const fns = new Map(); // name -> {self, total}
  for (const st of profile.stacks) {
    const seen = new Set();
    st.frames.forEach((id, i) => {
      const name = frameName(profile.frames[id]);
      const f = fns.get(name) || { self: 0, total: 0 };
      if (!seen.has(name)) { f.total += st.n; seen.add(name); }
      if (i === st.frames.length - 1) f.self += st.n;
      fns.set(name, f);
    });
  }
  return [...fns.entries()].sort((a, b) => b[1].self - a[1].self || b[1].total - a[1].total);
}

function drawSandwich() {
  const p = flame.profile, body = $('sandwich-table').tBodies[0];
  body.replaceChildren();
  const rows = functionTable(p);
  for (const [name, f] of rows.slice(0, 200)) {
    const tr = el('tr');
    const a = el('a', name, 'pid');
    a.onclick = () => { flame.sandwichOf = name; drawSandwich(); };
    const td = el('td');
    td.append(a);
    tr.append(td, el('td', f.self, 'num'), el('td', f.total, 'num'));
    if (name === flame.sandwichOf) tr.className = 'on';
    body.append(tr);
  }
  const name = flame.sandwichOf || (rows[0] && rows[0][0]);
  if (!name) return;
  const at = (ids) => ids.findIndex((id) => frameName(p.frames[id]) === name);
  // callers: each stack's frames from the function down to the root, drawn upside down
  const callers = toTree(p, (ids) => { const i = at(ids); return i < 0 ? null : ids.slice(0, i + 1).reverse(); });
  const callees = toTree(p, (ids) => { const i = at(ids); return i < 0 ? null : ids.slice(i); });
  $('sandwich-of').textContent = name;
  drawChart($('sandwich-callers'), dropIndex(callers.children[0] || callers), { inverted: true });
  drawChart($('sandwich-callees'), dropIndex(callees.children[0] || callees), {});
}

async function loadThreads() {
  const pid = $('flame-pid').value, sel = $('flame-thread');
  if (!pid) return;
  const keep = sel.value;
  sel.replaceChildren(el('option', 'every thread'));
  sel.options[0].value = '';
  try {
    const d = await api('POST', '/v1/query', { pid: Number(pid), sql: 'SELECT DISTINCT tid, name FROM threads ORDER BY tid' });
    for (const [tid, name] of d.rows) {
      const o = el('option', tid + ' ' + (name || ''));
      o.value = tid;
      sel.append(o);
    }
    sel.value = keep;
  } catch (e) { status(e.message); }
}

function openFlame() {
  loadThreads();
  drawStrip();
  drawFlame();
}

function searchFlame() {
  if (!flame.chart) return;
  if ($('flame-search').value) flame.chart.search($('flame-search').value);
  else { flame.chart.clear(); $('flame-match').textContent = ''; }
}

$('flame-draw').onclick = () => { flame.pick = null; $('flame-pick').textContent = ''; $('flame-unpick').hidden = true; openFlame(); };
for (const id of ['flame-idle', 'flame-gil', 'flame-tasks', 'flame-thread', 'flame-view', 'flame-diff'])
  $(id).onchange = () => { if (id === 'flame-idle' || id === 'flame-thread') drawStrip(); drawFlame(); };
$('flame-since').onchange = () => { flame.pick = null; $('flame-pick').textContent = ''; openFlame(); };
$('flame-search').oninput = searchFlame;
$('flame-reset').onclick = () => { if (flame.chart) { flame.chart.resetZoom(); crumbs(null); } };
$('flame-unpick').onclick = unpick;
$('flame-keep').onclick = keepBaseline;
