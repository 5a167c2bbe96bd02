#!/usr/bin/python3
"""Daemon benchmark; prints figures, asserts nothing.

usage: PROBED_BUILD=DIR bench/daemon.py [--load 1x10000,1x100,16x100,64x100] [--window S]
                       [--python all|PATH,...]
                       [--flame 1000000,10000000] [--attach-torch N] [--run-state-baseline]
                       [--side-by-side BUILD]

1. One probed sampling N targets (bench/targets/idle_deep.py: two threads 20+ frames deep)
   at a rate, for each NxRATE of --load and each interpreter of --python (all: one after the
   other, each pyenv minor and Debian's): ticks kept vs expected and late ones, the sampler
   thread's CPU per tick (schedstat), the daemon's CPU (% of one core, from /proc/PID/stat
   over the window), its RSS, dropped and torn samples, and the database's bytes per stored
   sample (pages in use / samples). Beside it, the machine's floor measured in the same
   window: a bare thread's CPU per timed wait at that rate (bench/wake_floor.c; again in the
   3 s after it: the noise), and the sampler's CPU less one such wake a period, per tick and
   per sample; and the sampler's read syscalls a tick (0 with the run-state board, about 1.5 a
   thread with /proc). --run-state-baseline: each load also by a daemon without CAP_BPF (its
   threads' run state from /proc), alternating, twice, with the ratio of CPU per sample.
   --side-by-side BUILD: at each rate of --load, this build's daemon and BUILD's (the previous
   commit's) sample one target each at the same time, in the same windows (the machine's
   swings cancel), with the ratio of their sampler CPU per tick; then two of this build's at
   once: that ratio's spread is the noise.
2. Flame graph build time: a database holding 1 M and 10 M samples (a realistic mix: 2,000
   distinct stacks 30 frames deep, Zipf-like counts), `probectl flamegraph --format folded`
   and `--format svg` timed end to end through the daemon, twice (the difference is the
   noise), and over the last 10 minutes; baseline in the same run: the flame query that
   counts every sample (before stack_counts), and `SELECT count(*) FROM samples`.
3. Many threads: a target of 150 threads (bench/targets/many_threads.py, one working) in
   windows sampled at 100 Hz and 1 kHz and not in turn: its work rate sampled / unsampled,
   beside the noise floor (unsampled windows against each other).
4. Attaching many: N idle targets (128) attached one after the other through the API while
   those before are sampled: the whole, and each attach's median and longest.
6. Attach and detach cycles (--cycles): the daemon's RSS every tenth of N cycles of the same
   targets attached and detached, and that less the writer's SQLite page cache (GET
   /v1/status db_cache_bytes), which fills to its bound (2 MB) as the database grows.
7. A week in storage (--week): N ranks (bench/targets/rank_like.py: 10 threads each, the
   main one stepping through three phases, the rest waiting) sampled at 100 Hz for a while;
   the daemon is stopped, the blocks moved 4 minutes back and the CPU readings 65, and a
   daemon started on the database merges those minutes (store__compact) and thins those
   readings to one a minute per thread (store__thin); then the database is vacuumed and its
   bytes per sample, whole and in sample_blocks, stack_counts and thread_cpu (dbstat), give
   a week of an 8-rank job (8 x 10 threads x 100 Hz x 604,800 s = 4.84 G samples; the last
   hour's CPU readings a second apart). Baseline in the same run: the same samples and
   readings as the writer left them.
5. The API while attaching: N torch processes (tests/targets/native_torch.py, Debian's python3
   with python3-torch) attached --native one after the other while another client asks
   GET /v1/status back to back: each attach's time, and the status replies' median and
   longest wait meanwhile (an attach that runs on the loop thread holds every reply up).
"""
import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'functional'))
os.environ.setdefault('PROBED_BUILD', os.path.join(ROOT, 'build'))
from daemon import AS_OF_SCHEMA_11, Daemon, daemon_without  # noqa: E402
from procstat import cpu_seconds, rss_mib, thread_cpu_seconds, thread_syscr  # noqa: E402
from run import interpreters  # noqa: E402  bench/run.py

PYTHON = sys.executable  # the targets' interpreter: --python sets it, in turn


def ready_targets(script, n):
    """@n bench/targets/@script processes, each ready."""
    targets = [subprocess.Popen([PYTHON, os.path.join(ROOT, 'bench', 'targets', script)],
                                stdout=subprocess.PIPE, universal_newlines=True)
               for _ in range(n)]
    for t in targets:
        t.stdout.readline()
    return targets


def idle_targets(n):
    return ready_targets('idle_deep.py', n)


def wake_floor(rate, seconds):
    """A bare thread waking at @rate for @seconds (bench/wake_floor.c), started: the floor
    under the sampler's CPU per tick on this machine. floor_us() reads its answer."""
    return subprocess.Popen([os.path.join(os.environ['PROBED_BUILD'], 'bench', 'wake_floor'),
                             str(rate), str(seconds)], stdout=subprocess.PIPE,
                            universal_newlines=True)


def floor_us(p):
    return json.loads(p.communicate()[0])['us_per_wake']


def sample_load(n_targets, rate, window, run_state='ebpf'):
    """@run_state 'proc': the daemon runs without CAP_BPF, so threads' run state comes from
    /proc (the baseline of the run-state board)."""
    targets = idle_targets(n_targets)
    d = Daemon() if run_state == 'ebpf' else daemon_without('bpf', 'sys_admin')
    try:
        source = d.api('GET', '/v1/status')[1]['run_state']['source']
        for t in targets:
            d.ctl('attach', t.pid, '--rate', str(rate), check=True)
        time.sleep(2)
        c0, t0 = cpu_seconds(d.proc.pid), time.time()
        sc0 = thread_cpu_seconds(d.proc.pid, 'probed-sampler')
        r0 = thread_syscr(d.proc.pid, 'probed-sampler')
        s0 = {x['pid']: x['stats'] for x in
              json.loads(d.ctl('list', '--json', check=True).stdout)['targets']}
        # the floor in the same window (a machine this size varies 3x from minute to minute),
        # and again in the next one: the difference is its noise
        floor = [floor_us(wake_floor(rate, window))]
        time.sleep(max(0, window - (time.time() - t0)))
        c1, t1 = cpu_seconds(d.proc.pid), time.time()
        sc1 = thread_cpu_seconds(d.proc.pid, 'probed-sampler')
        r1 = thread_syscr(d.proc.pid, 'probed-sampler')
        s1 = {x['pid']: x['stats'] for x in
              json.loads(d.ctl('list', '--json', check=True).stdout)['targets']}
        floor.append(floor_us(wake_floor(rate, min(window, 3))))
        ticks = sum(s1[p]['ticks'] - s0[p]['ticks'] for p in s1)
        samples = sum(s1[p]['samples'] - s0[p]['samples'] for p in s1)
        dropped = sum(s1[p]['dropped'] for p in s1)
        torn = sum(s1[p]['torn'] for p in s1)
        late = sum(s1[p]['late'] - s0[p]['late'] for p in s1)
        rss = rss_mib(d.proc.pid)
        time.sleep(1.5)
        db = sqlite3.connect(d.db)
        n = db.execute('SELECT sum(n) FROM sample_blocks').fetchone()[0] or 0
        pages = db.execute('PRAGMA page_count').fetchone()[0] - \
            db.execute('PRAGMA freelist_count').fetchone()[0]
        size = pages * db.execute('PRAGMA page_size').fetchone()[0]
        per_table = dict(db.execute("SELECT name, sum(pgsize - unused) FROM dbstat"
                                    " WHERE name IN ('sample_blocks', 'stack_counts')"
                                    " GROUP BY name").fetchall())
        db.close()
        expected = n_targets * rate * (t1 - t0)
        print('%3d targets x %5d Hz, run state from %s: ticks %d/%d expected (%.1f%%), late %d;'
              ' sampler thread %.1f us CPU per tick (%.2f read syscalls), daemon CPU %5.1f%% of a'
              ' core, RSS %.1f MiB; dropped %d,'
              ' torn %d; %.1f bytes per sample stored (%d samples, %.1f MiB), of which'
              ' %.2f in sample_blocks and %.2f in stack_counts'
              % (n_targets, rate, source, ticks, expected, 100 * ticks / expected, late,
                 1e6 * (sc1 - sc0) / max(ticks, 1), (r1 - r0) / max(ticks, 1),
                 100 * (c1 - c0) / (t1 - t0), rss, dropped,
                 torn, size / max(n, 1), n, size / 2 ** 20,
                 per_table.get('sample_blocks', 0) / max(n, 1),
                 per_table.get('stack_counts', 0) / max(n, 1)))
        # targets at one rate share the schedule: one wake-up a period serves them all
        work_us = 1e6 * (sc1 - sc0) - floor[0] * rate * (t1 - t0)
        print('%28s sampler %.1f us per sample (%.2f samples a tick); the floor, a bare timed'
              ' wait at %d Hz: %.1f us per wake (again: %.1f, the noise); the sampler less one'
              ' such wake a period: %.1f us per tick, %.1f per sample'
              % ('', 1e6 * (sc1 - sc0) / max(samples, 1), samples / max(ticks, 1), rate,
                 floor[0], floor[1], work_us / max(ticks, 1), work_us / max(samples, 1)))
        return 1e6 * (sc1 - sc0) / max(samples, 1)
    finally:
        d.close()
        for t in targets:
            t.kill()
            t.wait()


def side_by_side(rate, window, baseline, reps=4):
    """This build's daemon and @baseline's (another build directory: the previous commit's)
    at once, each sampling its own idle_deep target at @rate, so both meet the same machine
    in the same windows (on this VM the floor alone moves 3x from minute to minute, which
    windows one after the other take for a difference); then two of this build's, the noise."""
    def pair(builds):
        ds, ts = [], []
        try:
            for b in builds:
                ds.append(Daemon(build=b))
                ts += idle_targets(1)
                ds[-1].ctl('attach', ts[-1].pid, '--rate', str(rate), check=True)
            time.sleep(2)
            ratios, per_tick = [], []
            for _ in range(reps):
                c0 = [thread_cpu_seconds(d.proc.pid, 'probed-sampler') for d in ds]
                t0 = time.time()
                time.sleep(window)
                c1 = [thread_cpu_seconds(d.proc.pid, 'probed-sampler') for d in ds]
                us = [1e6 * (b - a) / ((time.time() - t0) * rate) for a, b in zip(c0, c1)]
                per_tick.append('%.1f/%.1f' % (us[0], us[1]))
                ratios.append(us[0] / us[1])
            return ratios, per_tick
        finally:
            for d in ds:
                d.close()
            for t in ts:
                t.kill()
                t.wait()

    ratios, per_tick = pair([None, baseline])
    noise, noise_per_tick = pair([None, None])
    print('side by side at %d Hz, one target each, %d windows of %g s: sampler CPU per tick,'
          ' this build / %s: %s us (ratios %s); this / this, the noise: %s us (ratios %s)'
          % (rate, reps, window, baseline, ' '.join(per_tick),
             ' '.join('%.2f' % r for r in ratios), ' '.join(noise_per_tick),
             ' '.join('%.2f' % r for r in noise)))


def synth_db(path, n_samples):
    """A store with @n_samples samples over 2,000 stacks 30 frames deep."""
    d = Daemon(workdir=os.path.dirname(path))  # creates the schema
    d.close()
    db = sqlite3.connect(path)
    # back to schema 11 (a row per sample): the daemon counts and packs them as it opens it
    db.executescript(AS_OF_SCHEMA_11)
    rnd = random.Random(1)
    db.execute("INSERT INTO targets(id, pid, start_time, uid, cmdline, py_version, rate_hz,"
               " attached_ns) VALUES (1, 999999, 0, 0, 'synthetic', '3.12.0', 100, 0)")
    funcs = ['f%d' % i for i in range(300)]
    for i, f in enumerate(funcs):
        db.execute('INSERT INTO strings VALUES (?, ?)', (i + 1, f))
    db.execute("INSERT INTO strings VALUES (1000, '/app/model.py')")
    frame_ids = []
    for i in range(3000):
        db.execute('INSERT INTO frames(id, func_id, file_id, line, first_line)'
                   ' VALUES (?, ?, 1000, ?, 1)',
                   (i + 1, rnd.randrange(300) + 1, rnd.randrange(1, 500)))
        frame_ids.append(i + 1)
    stacks = []
    for s in range(2000):
        sid = s + 1
        base = (s % 40) * 30  # stacks share prefixes, like a real program
        for depth in range(30):
            fid = frame_ids[base + depth] if depth < 20 else rnd.choice(frame_ids)
            db.execute('INSERT INTO stack_frames VALUES (?, ?, ?)', (sid, 29 - depth, fid))
        stacks.append(sid)
    cum, total = [], 0.0
    for k in range(len(stacks)):
        total += 1.0 / (k + 1)
        cum.append(total)
    t0 = time.time_ns() - n_samples * 1_000_000  # recent: the last n x 1 ms
    for start in range(0, n_samples, 100000):
        n = min(100000, n_samples - start)
        picks = rnd.choices(stacks, cum_weights=cum, k=n)
        db.executemany('INSERT INTO samples(ts_ns, target_id, tid, stack_id, state)'
                       ' VALUES (?, ?, ?, ?, ?)',
                       ((t0 + (start + i) * 1_000_000, 1, 1 + i % 4, picks[i], 1)
                        for i in range(n)))
    db.commit()
    db.close()


# The flame graph's query as it was before stack_counts (it counted every sample): the
# baseline, timed in the same run on the same store.
COUNTING_FLAME_SQL = (
    "WITH c AS (SELECT stack_id, count(*) AS n FROM samples WHERE stack_id <> 0 AND ts_ns >= 0"
    " AND (state & 1) = 1 AND target_id IN (SELECT id FROM targets WHERE pid = 999999)"
    " GROUP BY stack_id) SELECT (SELECT json_group_array(json_array(kind, func, file, lineno))"
    " FROM (SELECT kind, func, file, lineno FROM stacks WHERE stacks.stack_id = c.stack_id"
    " ORDER BY depth DESC)) AS frames, n FROM c ORDER BY frames")


def flame_time(n_samples):
    work = tempfile.mkdtemp(prefix='probed-bench-')
    path = os.path.join(work, 'probed.db')
    synth_db(path, n_samples)
    t0 = time.time()
    d = Daemon('--query-timeout', '600s', '--retention', '0', '--max-db-size', '0', workdir=work,
               start_timeout=900)
    migrated = time.time() - t0
    try:
        def timed(*args):
            t0 = time.time()
            r = d.ctl(*args, check=True, timeout=900)
            return time.time() - t0, len(r.stdout)
        timed('query', 'SELECT 1')  # the page cache warm for every run alike
        base, _ = timed('query', 'SELECT count(*) FROM samples')
        counting, _ = timed('query', COUNTING_FLAME_SQL, '--format', 'csv')
        folded, _ = timed('flamegraph', '999999', '--format', 'folded')
        svg, svg_len = timed('flamegraph', '999999', '--format', 'svg')
        recent, _ = timed('flamegraph', '999999', '--format', 'folded', '--since', '10m')
        noise, _ = timed('flamegraph', '999999', '--format', 'folded')
        print('flame graph of %9d samples: folded %.2f s (again: %.2f s, the noise), svg %.2f s'
              ' (%d KiB), last 10 min %.2f s; counting every sample (the query before'
              ' stack_counts) %.2f s: %.2fx; count(*) alone %.2f s; the migration of the store'
              ' from a row per sample (counted and packed) %.1f s'
              % (n_samples, folded, noise, svg, svg_len // 1024, recent, counting,
                 folded / counting, base, migrated))
    finally:
        d.close()


def many_threads(n_threads, rate, rounds=4, window=3.0):
    """A target of @n_threads threads (bench/targets/many_threads.py: one working, the rest
    parked) in windows of @window s, unsampled and sampled at @rate in turn: its work rate
    sampled / unsampled, and unsampled / the unsampled window before (the noise floor)."""
    import threading
    t = subprocess.Popen([PYTHON, os.path.join(ROOT, 'bench', 'targets',
                                                       'many_threads.py'), str(n_threads)],
                         stdout=subprocess.PIPE, universal_newlines=True)
    latest = [None]

    def read():
        for line in t.stdout:
            parts = line.split()
            if len(parts) == 2:
                latest[0] = (float(parts[0]), int(parts[1]))
    assert t.stdout.readline().startswith('READY')
    threading.Thread(target=read, daemon=True).start()
    d = Daemon()
    try:
        def work_rate():
            time.sleep(0.5)  # settle: the attach or detach itself is not measured
            a = latest[0]
            time.sleep(window)
            b = latest[0]
            return (b[1] - a[1]) / (b[0] - a[0])
        on, off, noise = [], [], []
        c0 = cpu_seconds(d.proc.pid)
        sc0 = thread_cpu_seconds(d.proc.pid, 'probed-sampler')
        ticks = 0
        for _ in range(rounds):
            off.append(work_rate())
            d.ctl('attach', t.pid, '--rate', str(rate), check=True)
            on.append(work_rate())
            ticks += [x['stats']['ticks'] for x in json.loads(
                d.ctl('list', '--json', check=True).stdout)['targets']
                if x['pid'] == t.pid and x['state'] == 'sampling'][0]
            d.ctl('detach', t.pid, check=True)
        off.append(work_rate())
        c1 = cpu_seconds(d.proc.pid)
        sc1 = thread_cpu_seconds(d.proc.pid, 'probed-sampler')
        noise = [abs(off[i + 1] / off[i] - 1) for i in range(len(off) - 1)]
        ratio = [on[i] / ((off[i] + off[i + 1]) / 2) for i in range(rounds)]
        print('%d threads x %4d Hz: target work rate sampled / unsampled %.3f (windows: %s);'
              ' noise floor (unsampled / unsampled) +-%.3f; daemon CPU %.2f s over the run;'
              ' sampler thread %.1f us CPU per tick, %.2f us per thread sampled'
              % (n_threads, rate, sum(ratio) / rounds, ' '.join('%.3f' % r for r in ratio),
                 max(noise), c1 - c0, 1e6 * (sc1 - sc0) / max(ticks, 1),
                 1e6 * (sc1 - sc0) / max(ticks * n_threads, 1)))
    finally:
        d.close()
        t.kill()
        t.wait()


def attach_many(n_targets):
    """N idle targets attached one after the other (the API's serial lane) while the ones
    attached before are sampled at 100 Hz: the whole, and each attach's median and longest."""
    targets = idle_targets(n_targets)
    d = Daemon()
    try:
        took = []
        t0 = time.time()
        for t in targets:
            a = time.time()
            status, reply = d.api('POST', '/v1/targets', {'pid': t.pid, 'rate': 100})
            assert status == 200, reply
            took.append(time.time() - a)
        total = time.time() - t0
        took.sort()
        print('%d targets attached one after the other: %.2f s, each: median %.1f ms,'
              ' longest %.1f ms' % (n_targets, total, 1e3 * took[len(took) // 2],
                                    1e3 * took[-1]))
    finally:
        d.close()
        for t in targets:
            t.kill()
            t.wait()


def attach_latency(n_targets):
    import threading
    targets = [subprocess.Popen(['/usr/bin/python3', os.path.join(ROOT, 'tests', 'targets',
                                                                  'native_torch.py')],
                                stdout=subprocess.PIPE, universal_newlines=True)
               for _ in range(n_targets)]
    d = Daemon()
    try:
        pids = [json.loads(t.stdout.readline().split(' ', 1)[1])['pid'] for t in targets]
        for pid in pids:
            waits, done = [], threading.Event()
            took = []

            def attach():
                t0 = time.time()
                d.api('POST', '/v1/targets', {'pid': pid, 'native': True})
                took.append(time.time() - t0)
                done.set()

            th = threading.Thread(target=attach)
            th.start()
            while not done.is_set():
                t0 = time.time()
                d.api('GET', '/v1/status')
                waits.append(time.time() - t0)
            th.join()
            waits.sort()
            print('attach --native of a torch process: %.2f s; meanwhile %d status replies,'
                  ' median %.1f ms, longest %.1f ms'
                  % (took[0], len(waits), 1e3 * waits[len(waits) // 2], 1e3 * waits[-1]))
    finally:
        d.close()
        for t in targets:
            t.kill()
            t.wait()


def attach_cycles(n_targets, cycles):
    """The daemon's RSS over @cycles attaches and detaches of the same @n_targets idle targets
    (sampled at 100 Hz while attached): it should stay flat, the first cycles' growth (caches
    filling to their caps) aside."""
    targets = idle_targets(n_targets)
    d = Daemon()
    try:
        marks = []
        t0 = time.time()
        for i in range(cycles + 1):
            if i % max(cycles // 10, 1) == 0:
                cache = d.api('GET', '/v1/status')[1]['db_cache_bytes'] / 2 ** 20
                marks.append((i, rss_mib(d.proc.pid), cache))
            if i == cycles:
                break
            for t in targets:
                status, reply = d.api('POST', '/v1/targets', {'pid': t.pid, 'rate': 100})
                assert status == 200, reply
            for t in targets:
                status, reply = d.api('DELETE', '/v1/targets/%d' % t.pid)
                assert status == 200, reply
        print('%d targets attached and detached %d times (%.0f s): daemon RSS %s MiB;'
              ' less the page cache of the database (bounded, filling as it grows: %s MiB)'
              ' %s MiB'
              % (n_targets, cycles, time.time() - t0,
                 ' '.join('%.1f@%d' % (r, i) for i, r, _ in marks),
                 ' '.join('%.1f' % c for _, _, c in marks),
                 ' '.join('%.1f' % (r - c) for _, r, c in marks)))
    finally:
        d.close()
        for t in targets:
            t.kill()
            t.wait()


def db_bytes(path):
    """A vacuumed copy's size, and its sample_blocks' and stack_counts' bytes (dbstat)."""
    copy = path + '.vacuumed'
    if os.path.exists(copy):
        os.unlink(copy)
    db = sqlite3.connect(path)
    db.execute("VACUUM INTO ?", (copy,))
    db.close()
    db = sqlite3.connect(copy)
    n = db.execute('SELECT sum(n) FROM sample_blocks').fetchone()[0] or 0
    blocks = db.execute('SELECT count(*) FROM sample_blocks').fetchone()[0]
    per_table = dict(db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
    db.close()
    size = os.path.getsize(copy)
    os.unlink(copy)
    return n, blocks, size, per_table


GROWING = ('sample_blocks', 'stack_counts', 'memory', 'thread_cpu')


def week_storage(n_ranks, window):
    targets = ready_targets('rank_like.py', n_ranks)
    d = Daemon()
    try:
        for t in targets:
            d.ctl('attach', t.pid, '--rate', '100', check=True)
        time.sleep(window)
        for t in targets:
            d.ctl('detach', t.pid, check=True)
        time.sleep(1.5)
        d.kill()
        db = sqlite3.connect(d.db)
        shift = 240 * 10 ** 9  # within the 10 minutes a start merges
        db.execute('UPDATE sample_blocks SET first_ns = first_ns - ?, last_ns = last_ns - ?',
                   (shift, shift))
        db.execute('UPDATE stack_counts SET bucket = bucket - 4 WHERE span_s = 60')
        # the CPU readings 65 minutes back: past the hour after which they are thinned, within
        # the 10 minutes before it that a start thins
        shift = 65 * 60 * 10 ** 9
        db.execute('UPDATE thread_cpu SET ts_ns = ts_ns - ?', (shift,))
        db.commit()
        db.close()
        rows = [('as written (a block per thread per second, a CPU reading per thread a'
                 ' second)', db_bytes(d.db))]
        d.start()
        deadline = time.time() + 60
        while time.time() < deadline:  # every minute merged: at most 2 blocks per thread
            time.sleep(2)
            if d.rows('SELECT max(c) FROM (SELECT count(*) c FROM sample_blocks'
                      ' GROUP BY target_id, tid)')[0][0] <= 2 and \
                    d.rows('SELECT max(c) FROM (SELECT count(*) c FROM thread_cpu'
                           ' GROUP BY target_id, tid)')[0][0] <= 2:
                break
        d.kill()
        rows.append(('merged per minute, CPU readings thinned', db_bytes(d.db)))
        week = n_ranks and 8 * 10 * 100 * 604800
        hour = week / 168
        cpu_written = rows[0][1][3].get('thread_cpu', 0) / max(rows[0][1][0], 1)
        for what, (n, blocks, size, per_table) in rows:
            # what grows with time scales to a week: the samples, their counts, the memory
            # timeline and the CPU readings (the last hour's a second apart, the rest as
            # measured); the rest (the schema, stacks and frames, targets, empty tables) is
            # there once
            growing = sum(per_table.get(x, 0) for x in GROWING) / max(n, 1)
            cpu = per_table.get('thread_cpu', 0) / max(n, 1)
            week_bytes = (week * (growing - cpu) + hour * cpu_written + (week - hour) * cpu
                          + size - n * growing)
            print('a week in storage, %d ranks x 10 threads x 100 Hz for %ds, %s: %d samples in'
                  ' %d blocks; %.2f bytes per sample in all (%.2f in sample_blocks, %.2f in'
                  ' stack_counts, %.3f in thread_cpu): a week of 8 ranks = %.2f GB'
                  % (n_ranks, window, what, n, blocks, size / max(n, 1),
                     per_table.get('sample_blocks', 0) / max(n, 1),
                     per_table.get('stack_counts', 0) / max(n, 1), cpu, week_bytes / 1e9))
            print('    by table, bytes per sample: ' + ', '.join(
                '%s %.3f' % (name, b / max(n, 1)) for name, b in
                sorted(per_table.items(), key=lambda x: -x[1]) if b > 4096))  # past one page
    finally:
        d.close()
        for t in targets:
            t.kill()
            t.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--load', default='1x10000,1x100,16x100,64x100',
                    help='targets x rate (Hz), comma-separated')
    ap.add_argument('--python', default=sys.executable,
                    help="the targets' interpreters for --load: paths, comma-separated, or"
                         " 'all' (every pyenv minor and Debian's python3)")
    ap.add_argument('--window', type=float, default=10)
    ap.add_argument('--side-by-side', metavar='BUILD',
                    help="another build directory (the previous commit's): its daemon and"
                         " this one's sample at once, at each rate of --load")
    ap.add_argument('--run-state-baseline', action='store_true',
                    help='each load also by a daemon without CAP_BPF (run state from /proc),'
                         ' alternating, twice: the ratio of sampler CPU per sample')
    ap.add_argument('--flame', default='1000000,10000000')
    ap.add_argument('--threads', default='150x100,150x1000',
                    help='a target of N threads sampled at RATE: its slowdown')
    ap.add_argument('--attach', type=int, default=128)
    ap.add_argument('--attach-torch', type=int, default=3)
    ap.add_argument('--cycles', default='1x10000,16x600',
                    help='TARGETS x CYCLES of attach and detach: the daemon RSS along them')
    ap.add_argument('--week', default='8x60',
                    help='RANKS x SECONDS sampled: the bytes a week of samples takes')
    args = ap.parse_args()
    global PYTHON
    for name, path in interpreters(args.python):
        if not path:
            print('%s: not installed on this machine: no figures' % name)
            continue
        PYTHON = path
        if args.python != sys.executable:
            print('targets run by %s (%s):' % (name, path))
        for load in [x for x in args.load.split(',') if x]:
            n, rate = load.split('x')
            if args.run_state_baseline:  # alternating, twice: the ratio's spread is the noise
                ratios = []
                for _ in range(2):
                    board = sample_load(int(n), int(rate), args.window)
                    proc = sample_load(int(n), int(rate), args.window, 'proc')
                    ratios.append(board / proc)
                print('%28s sampler CPU per sample, run state from the board / from /proc:'
                      ' %.2f, %.2f' % ('', ratios[0], ratios[1]))
            elif args.side_by_side:
                side_by_side(int(rate), args.window, args.side_by_side)
            else:
                sample_load(int(n), int(rate), args.window)
    PYTHON = sys.executable
    for n in [int(x) for x in args.flame.split(',') if x]:
        flame_time(n)
    for load in [x for x in args.threads.split(',') if x]:
        n, rate = load.split('x')
        many_threads(int(n), int(rate))
    if args.attach:
        attach_many(args.attach)
    if args.attach_torch:
        attach_latency(args.attach_torch)
    for load in [x for x in args.cycles.split(',') if x]:
        n, cycles = load.split('x')
        attach_cycles(int(n), int(cycles))
    if args.week:
        n, window = args.week.split('x')
        week_storage(int(n), int(window))


if __name__ == '__main__':
    main()
