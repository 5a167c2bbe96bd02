// The torch, memory/GPU and cluster pages of probed's web view. Each reads the daemon's views
// through POST /v1/query with the pid given (the daemon scopes every table to that process and
// to what the user may see), and draws lines with uPlot and heat maps as tables. Without the
// page libraries (probectl built without npm) the charts are left out and the tables stay.
'use strict';

async function rowsOf(pid, sql) {
  return (await api('POST', '/v1/query', { pid: Number(pid), sql })).rows;
}

const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1e6];

// Lines over @xs (@time: unix seconds on the axis), one per {label, values, colour}.
function lineChart(holder, xs, series, opts) {
  holder.replaceChildren();
  if (!xs.length) { holder.append(el('p', opts.empty || 'nothing recorded', 'empty')); return; }
  if (typeof window.uPlot !== 'function') return;
  const colours = ['#c0392b', '#2471a3', '#229954', '#b9770e', '#7d3c98', '#17a589', '#566573'];
  new uPlot({
    width: Math.max(400, (holder.clientWidth || 1100) - 20), height: opts.height || 220,
    scales: { x: { time: !!opts.time } },
    axes: [opts.time ? { label: opts.xLabel } : { label: opts.xLabel, incrs: STEP_INCRS },
      { size: 60, label: opts.yLabel }],
    series: [{ label: opts.xLabel || 'x' }, ...series.map((s, i) => ({
      label: s.label, stroke: colours[i % colours.length], width: 1.5, spanGaps: true }))],
  }, [xs, ...series.map((s) => s.values)], holder);
}

// A table of @rows under @columns; @fmt formats a cell.
function fillTable(table, columns, rows, fmt) {
  table.tHead.replaceChildren();
  const head = el('tr');
  for (const c of columns) head.append(el('th', c));
  table.tHead.append(head);
  table.tBodies[0].replaceChildren();
  for (const r of rows) {
    const tr = el('tr');
    r.forEach((v, i) => tr.append(el('td', fmt ? fmt(v, i) : v, typeof v === 'number' ? 'num' : '')));
    table.tBodies[0].append(tr);
  }
  if (!rows.length) {
    const td = el('td', 'nothing recorded', 'empty');
    td.colSpan = columns.length;
    table.tBodies[0].append(el('tr'));
    table.tBodies[0].rows[0].append(td);
  }
}

const num = (v, digits) => (v === null || v === undefined ? '' : typeof v === 'number' ? +v.toFixed(digits) : v);

// A step x module heat map: rows modules, columns steps, each cell shaded by its value.
function heatMap(holder, cells, unit) {
  holder.replaceChildren();
  if (!cells.length) { holder.append(el('p', 'nothing recorded', 'empty')); return; }
  const steps = [...new Set(cells.map((c) => c[0]))].sort((a, b) => a - b);
  const modules = [...new Set(cells.map((c) => c[1]))];
  const at = new Map(cells.map((c) => [c[0] + '\u0000' + c[1], c[2]]));
  // shaded from the least to the most: memory differs little between cells, time a lot
  const values = cells.map((c) => c[2]).filter((v) => v !== null);
  const min = Math.min(...values), range = Math.max(...values) - min || 1;
  const t = el('table', null, 'heat');
  const head = el('tr');
  head.append(el('th', 'module \\ step'));
  for (const s of steps) head.append(el('th', s, 'num'));
  t.append(head);
  for (const m of modules) {
    const tr = el('tr');
    tr.append(el('th', m));
    for (const s of steps) {
      const v = at.get(s + '\u0000' + m);
      const td = el('td', '', 'cell');
      if (v !== undefined && v !== null) {
        td.style.background = 'rgba(192,57,43,' + (0.08 + 0.92 * (v - min) / range).toFixed(3) + ')';
        td.title = m + ', step ' + s + ': ' + num(v, 3) + ' ' + unit;
        td.dataset.value = v;
      }
      tr.append(td);
    }
    t.append(tr);
  }
  holder.append(t);
}

// ---- torch ----

async function readTorch() {
  const pid = $('torch-pid').value;
  if (!pid) return;
  try {
    const steps = await rowsOf(pid, 'SELECT step, duration * 1000 FROM torch_step_times ORDER BY step');
    lineChart($('torch-steps'), steps.map((r) => r[0]), [{ label: 'step time (ms)', values: steps.map((r) => r[1]) }],
      { xLabel: 'step', yLabel: 'ms', empty: 'no steps recorded: probectl torch ' + pid + ' on' });
    // the last 40 steps of the 16 modules that took longest (their forward and backward)
    const top = 'SELECT module FROM torch_trace WHERE stage <> \'step\' GROUP BY module ORDER BY sum(duration) DESC LIMIT 16';
    const last = 'step > (SELECT max(step) FROM torch_trace) - 40';
    heatMap($('torch-heat-time'), await rowsOf(pid, 'SELECT step, module, sum(duration) * 1000 FROM torch_trace WHERE '
      + last + ' AND module IN (' + top + ') GROUP BY step, module ORDER BY step'), 'ms');
    heatMap($('torch-heat-memory'), await rowsOf(pid, 'SELECT step, module, max(allocated) FROM torch_trace WHERE '
      + last + ' AND module IN (' + top + ') GROUP BY step, module ORDER BY step'), 'MB');
    const vars = await rowsOf(pid, 'SELECT name, step, value FROM torch_variables ORDER BY step');
    const names = [...new Set(vars.map((r) => r[0]))];
    const xs = [...new Set(vars.map((r) => r[1]))];
    const index = new Map(xs.map((x, i) => [x, i]));
    lineChart($('torch-vars'), xs, names.map((n) => {
      const values = xs.map(() => null);
      for (const [name, step, value] of vars) if (name === n && !isNaN(parseFloat(value))) values[index.get(step)] = parseFloat(value);
      return { label: n, values };
    }), { xLabel: 'step', empty: 'no variables tracked: probectl torch ' + pid + ' on --exprs loss@train' });
    fillTable($('torch-kernels'), ['GPU kernel', 'calls', 'device ms', 'mean ms'],
      await rowsOf(pid, 'SELECT operation_name, count(*), sum(coalesce(device_ms, duration_ms)),'
        + ' avg(coalesce(device_ms, duration_ms)) FROM profiling_data WHERE source = \'gpu\''
        + ' GROUP BY 1 ORDER BY 3 DESC LIMIT 25'), (v, i) => (i ? num(v, 3) : v));
    // set last, once every chart is drawn: what waits for it sees the whole page
    $('torch-steps').dataset.steps = steps.length;
    status('torch of pid ' + pid + ': ' + steps.length + ' steps');
  } catch (e) { status(e.message); }
}

// ---- memory and GPUs ----

async function readMemory() {
  const pid = $('memory-pid').value;
  if (!pid) return;
  const span = Number($('memory-since').value);
  const from = Math.floor(Date.now() * 1e6 - span * 1e9);
  const bucket = Math.max(1, Math.round(span / 600)) * 1e9;
  try {
    const mem = await rowsOf(pid, 'SELECT ts_ns / ' + bucket + ' * ' + bucket / 1e9 + ', avg(rss_mb), avg(pss_mb),'
      + ' avg(uss_mb), avg(swap_mb) FROM memory_usage WHERE ts_ns >= ' + from + ' GROUP BY 1 ORDER BY 1');
    lineChart($('memory-chart'), mem.map((r) => r[0]), ['RSS', 'PSS', 'USS', 'swap'].map((l, i) => (
      { label: l + ' (MB)', values: mem.map((r) => r[i + 1]) })), { time: true, yLabel: 'MB' });
    $('memory-chart').dataset.points = mem.length;
    fillTable($('memory-allocs'), ['function', 'file', 'line', 'growth (MB)', 'live (MB)'],
      await rowsOf(pid, 'SELECT function_name, file, line, sum(allocated_bytes) / 1048576.0,'
        + ' (SELECT live_bytes FROM memory_allocations b WHERE b.file = a.file AND b.line = a.line'
        + ' ORDER BY ts_ns DESC LIMIT 1) / 1048576.0 FROM memory_allocations a WHERE ts_ns >= ' + from
        + ' GROUP BY file, line ORDER BY 4 DESC LIMIT 25'), (v, i) => (i >= 3 ? num(v, 2) : v));
    const gpu = await rowsOf(pid, 'SELECT ts_ns / ' + bucket + ' * ' + bucket / 1e9 + ', sum(memory_used_mb),'
      + ' max(sm_util) FROM gpu_processes WHERE ts_ns >= ' + from + ' GROUP BY 1 ORDER BY 1');
    lineChart($('memory-gpu'), gpu.map((r) => r[0]), [{ label: 'GPU memory (MB)', values: gpu.map((r) => r[1]) },
      { label: 'SM use (%)', values: gpu.map((r) => r[2]) }],
    { time: true, empty: 'no GPU readings for this process (GET /v1/status says why, under gpu)' });
    status('memory of pid ' + pid + ': ' + mem.length + ' points');
  } catch (e) { status(e.message); }
}

// ---- cluster: a hang snapshot of every process of yours, ranks grouped by stack ----

function mainStack(t) {
  if (!t.threads) return '(not read: ' + (t.error || 'no threads') + ')';
  const th = t.threads.find((x) => x.tid === t.pid) || t.threads[0];
  return th ? th.frames.map((f) => f.function + ' (' + f.file + ':' + f.line + ')').join('\n') : '';
}

async function readCluster() {
  try {
    const snap = await api('POST', '/v1/hang', { at_ns: 0 });
    const groups = new Map();
    for (const t of snap.targets) {
      const key = mainStack(t);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(t);
    }
    const out = $('cluster-groups');
    out.replaceChildren();
    // the odd ones first: the fewest processes sharing a stack
    for (const [stack, ts] of [...groups.entries()].sort((a, b) => a[1].length - b[1].length)) {
      const d = el('div', null, 'group');
      d.dataset.pids = ts.map((t) => t.pid).join(',');
      const who = ts.map((t) => (t.rank !== null && t.rank !== undefined ? 'rank ' + t.rank + ' ' : '') + 'pid ' + t.pid).join(', ');
      d.append(el('h3', ts.length + (ts.length === 1 ? ' process' : ' processes') + ': ' + who));
      d.append(el('pre', stack, 'frames'));
      out.append(d);
    }
    if (!snap.targets.length) out.append(el('p', 'No process of yours is being sampled.', 'empty'));
    fillTable($('cluster-comm'), ['rank', 'pid', 'collective', 'calls', 'in flight', 'mean ms', 'max ms'],
      (await api('POST', '/v1/query', { sql: 'SELECT rank, pid, op, count(*), sum(in_flight), avg(latency_ms),'
        + ' max(latency_ms) FROM comm_metrics GROUP BY rank, pid, op ORDER BY rank, pid, op LIMIT 500' })).rows,
      (v, i) => (i >= 5 ? num(v, 3) : v));
    status('snapshot of ' + snap.targets.length + ' processes on ' + snap.host);
  } catch (e) { status(e.message); }
}

$('torch-read').onclick = readTorch;
$('memory-read').onclick = readMemory;
$('memory-since').onchange = readMemory;
$('cluster-read').onclick = readCluster;
