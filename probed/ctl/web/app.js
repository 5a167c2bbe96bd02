// probed's web view (probectl web). Every call goes to the page's own server, which forwards
// /v1/... to the daemon as the user who started it; the token is a cookie it set. Everything
// shown is put in with textContent: command lines and function names are the targets' text.
'use strict';

const $ = (id) => document.getElementById(id);
let timer = null;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

async function api(method, path, body) {
  const r = await fetch(path, {
    method,
    headers: body ? { 'Content-Type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
    credentials: 'same-origin',
  });
  const text = await r.text();
  let doc = null;
  try { doc = JSON.parse(text); } catch (e) { doc = null; }
  if (!r.ok) throw new Error((doc && doc.error) || text || r.statusText);
  return doc;
}

function status(text) { $('status').textContent = text; }

function show(page) {
  for (const b of document.querySelectorAll('nav button'))
    b.classList.toggle('on', b.dataset.page === page);
  for (const s of document.querySelectorAll('main section')) s.hidden = s.id !== page;
  clearInterval(timer);
  timer = null;
  if (page === 'targets') { loadTargets(); timer = setInterval(loadTargets, 2000); }
  if (page === 'target') { readTarget(); timer = setInterval(() => $('target-auto').checked && readTarget(), 2000); }
  if (page === 'sql') loadTables();
}

function openTarget(pid, page) {
  for (const id of ['target-pid', 'flame-pid', 'torch-pid', 'memory-pid']) $(id).value = pid;
  show(page);
  if (page === 'torch') readTorch();
  if (page === 'memory') readMemory();
  if (page === 'flame') openFlame();
}

let daemonHost = null; // the node whose daemon answers (GET /v1/status): -H's, or this one

async function loadTargets() {
  try {
    if (daemonHost === null) daemonHost = (await api('GET', '/v1/status')).host || '';
    const doc = await api('GET', '/v1/targets');
    const body = $('targets-table').tBodies[0];
    body.replaceChildren();
    for (const t of doc.targets) {
      const tr = el('tr');
      tr.dataset.pid = t.pid;
      const pid = el('td');
      const a = el('a', t.pid, 'pid');
      a.onclick = () => openTarget(t.pid, 'target');
      pid.append(a);
      tr.append(pid, el('td', t.cmdline), el('td', t.rank ?? ''), el('td', daemonHost), el('td', t.python_version),
        el('td', t.mode), el('td', t.rate_hz, 'num'), el('td', t.stats.samples, 'num'),
        el('td', t.stats.torn, 'num'), el('td', t.state));
      const links = el('td');
      for (const [text, page] of [['flame graph', 'flame'], ['torch', 'torch'], ['memory', 'memory']]) {
        const a = el('a', text, 'pid');
        a.onclick = () => openTarget(t.pid, page);
        links.append(a, ' ');
      }
      if (t.state === 'sampling') {
        const b = el('button', 'detach', 'detach');
        b.onclick = () => detachPid(t.pid);
        links.append(b);
      }
      tr.append(links);
      body.append(tr);
    }
    $('targets-empty').hidden = doc.targets.length > 0;
    status(doc.targets.length + ' attached');
  } catch (e) { status(e.message); }
}

async function readTarget() {
  const pid = $('target-pid').value;
  if (!pid) return;
  let q = '/v1/backtrace?pid=' + encodeURIComponent(pid);
  if ($('target-locals').checked) q += '&locals=' + Number($('target-depth').value || 1);
  if ($('target-native').checked) q += '&native=1';
  try {
    const doc = await api('GET', q);
    const out = $('target-threads');
    out.replaceChildren();
    for (const th of doc.threads) {
      const d = el('div', null, 'thread');
      d.dataset.tid = th.tid;
      const state = [th.holds_gil ? 'holds the GIL' : '', th.on_cpu ? 'on CPU' : 'idle',
        th.task ? 'task ' + th.task.name : ''].filter(Boolean).join(', ');
      d.append(el('h3', 'Thread ' + th.tid + ' "' + th.name + '" (' + state + ')'));
      const frames = el('div', null, 'frames');
      for (const f of th.frames) {
        const line = el('div', null, f.kind === 'native' ? 'native' : '');
        line.append(el('span', f.function + ' '), el('span', '(' + (f.file || f.object || '?')
          + (f.line ? ':' + f.line : '') + ')', 'file'));
        frames.append(line);
        if (f.locals) {
          const dl = el('dl', null, 'locals');
          for (const v of f.locals) dl.append(el('dt', v.name), el('dd', v.value));
          frames.append(dl);
        }
        if (f.locals_error) frames.append(el('div', f.locals_error, 'locals-error'));
      }
      d.append(frames);
      out.append(d);
    }
    status('pid ' + pid + ': ' + doc.threads.length + ' threads, read ' + new Date().toLocaleTimeString());
  } catch (e) { status(e.message); }
}

async function attachPid() {
  const pid = Number($('attach-pid').value);
  if (!pid) return;
  const body = { pid };
  if ($('attach-native').checked) body.native = true;
  try {
    await api('POST', '/v1/targets', body);
    status('attached ' + pid);
    loadTargets();
  } catch (e) { status(e.message); }
}

async function detachPid(pid) {
  try {
    await api('DELETE', '/v1/targets/' + pid);
    status('detached ' + pid);
    loadTargets();
  } catch (e) { status(e.message); }
}

async function loadTables() {
  try {
    const doc = await api('POST', '/v1/query', {
      sql: "SELECT name FROM temp.sqlite_master WHERE type IN ('table', 'view') ORDER BY name" });
    $('sql-tables').textContent = doc.rows.map((r) => r[0]).join(', ');
  } catch (e) { $('sql-tables').textContent = e.message; }
}

function csv(doc) {
  const cell = (v) => {
    const s = v === null ? '' : String(v);
    return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  };
  return [doc.columns, ...doc.rows].map((r) => r.map(cell).join(',')).join('\n') + '\n';
}

async function runQuery() {
  $('sql-error').hidden = true;
  const grid = $('sql-grid');
  grid.tHead.replaceChildren();
  grid.tBodies[0].replaceChildren();
  try {
    const t0 = performance.now();
    const doc = await api('POST', '/v1/query', { sql: $('sql-text').value });
    const head = el('tr');
    for (const c of doc.columns) head.append(el('th', c));
    grid.tHead.append(head);
    for (const r of doc.rows) {
      const tr = el('tr');
      for (const v of r) tr.append(el('td', v === null ? 'NULL' : v, typeof v === 'number' ? 'num' : ''));
      grid.tBodies[0].append(tr);
    }
    const link = $('sql-csv');
    link.href = URL.createObjectURL(new Blob([csv(doc)], { type: 'text/csv' }));
    link.hidden = false;
    $('sql-info').textContent = doc.rows.length + ' rows, ' + Math.round(performance.now() - t0) + ' ms';
  } catch (e) {
    $('sql-error').textContent = e.message;
    $('sql-error').hidden = false;
    $('sql-info').textContent = '';
  }
}

for (const b of document.querySelectorAll('nav button')) b.onclick = () => show(b.dataset.page);
$('target-read').onclick = readTarget;
$('attach-go').onclick = attachPid;
$('sql-run').onclick = runQuery;
show('targets');
