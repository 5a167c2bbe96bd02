"""The daemon end to end: a real probed on a temporary socket and database, real targets on
every interpreter, probectl and curl as clients."""
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import shutil
import tempfile
import time

import pytest

from conftest import BUILD, INTERPRETERS, PROBECTL, interpreter_params, require, Target, TARGETS, wait_for
from daemon import AS_OF_SCHEMA_11, Daemon, daemon_without, ensure_test_user


@pytest.fixture
def daemon():
    d = Daemon()
    yield d
    d.close()


def busy(python):
    return Target(python, 'busy.py')


def main_thread_samples(d, pid):
    return d.rows('SELECT count(*) FROM samples s JOIN targets t ON t.id = s.target_id'
                  ' WHERE t.pid = %d AND s.tid = %d' % (pid, pid))[0][0]


def measured_rate(d, pid, n_samples):
    """The main thread's sampling rate from the samples' own timestamps, once @n_samples are
    stored (commits come once a second: counting rows between two moments would measure the
    flushes, not the sampling)."""
    wait_for(lambda: main_thread_samples(d, pid) > n_samples, what='samples')
    n, lo, hi = d.rows('SELECT count(*), min(ts_ns), max(ts_ns) FROM samples'
                       ' WHERE tid = %d' % pid)[0]
    return (n - 1) / ((hi - lo) / 1e9)


@pytest.mark.parametrize('python', interpreter_params())
def test_attach_samples_at_rate_and_frames_are_right(daemon, python):
    require(python)
    t = busy(python)
    try:
        r = daemon.ctl('attach', t.pid, '--rate', '100', check=True)
        assert 'attached to pid %d' % t.pid in r.stdout
        rate = measured_rate(daemon, t.pid, 300)
        assert 90 <= rate <= 110, 'main thread sampled at %.1f Hz, asked 100' % rate
        # The stored stacks are the target's: spin_inner under middle under outer_loop.
        # Executing is on the CPU, as top and the flame graph count: the sleeping thread is in
        # function_stats_all (every sample) only; the spinning chain in both, per process.
        funcs = {row[0]: row for row in daemon.rows(
            "SELECT func, self_samples, total_samples FROM function_stats WHERE pid = %d"
            % t.pid)}
        assert {'spin_inner', 'middle', 'outer_loop', 'main'} <= set(funcs), funcs
        assert 'sleeper' not in funcs, funcs
        assert funcs['spin_inner'][1] > 0.5 * funcs['outer_loop'][2]
        everything = {row[0]: row for row in daemon.rows(
            "SELECT func, self_pct FROM function_stats_all WHERE pid = %d" % t.pid)}
        assert {'spin_inner', 'sleeper'} <= set(everything), everything
        chain = daemon.rows("SELECT func FROM stacks WHERE stack_id = (SELECT stack_id"
                            " FROM samples WHERE tid = %d GROUP BY stack_id"
                            " ORDER BY count(*) DESC LIMIT 1) ORDER BY depth" % t.pid)
        assert [c[0] for c in chain][:4] == ['spin_inner', 'middle', 'outer_loop', 'main']
        # Two threads, named as threading names them; the OS names (CPython does not name OS
        # threads before 3.14) beside them.
        threads = daemon.rows('SELECT tid, name, os_name FROM threads')
        assert len(threads) == 2 and [t.pid, 'MainThread', os.path.basename(python)[:15]] in \
            threads and 'sleeper' in [name for _, name, _ in threads], threads
        lst = json.loads(daemon.ctl('list', '--json', check=True).stdout)['targets']
        mine = [x for x in lst if x['pid'] == t.pid][0]
        assert mine['state'] == 'sampling' and mine['rate_hz'] == 100
        assert mine['python_version'].startswith(os.path.basename(python)[6:] or '3')
        daemon.ctl('detach', t.pid, check=True)
    finally:
        t.close()


def test_live_backtrace_table(daemon):
    t = busy('/usr/bin/python3')
    try:
        rows = daemon.rows('SELECT func, file, lineno, depth, tid, thread, pid FROM'
                           ' python.backtrace ORDER BY tid, depth', '--pid', t.pid)
        funcs = [r[0] for r in rows if r[4] == t.pid]
        assert funcs[-1] == '<module>' and 'outer_loop' in funcs
        assert any(r[0] == 'sleeper' and r[4] != t.pid for r in rows)
        assert all(r[1].endswith('busy.py') for r in rows if r[0] in ('middle', 'outer_loop'))
        # Without --pid it shows the attached targets only; with locals, JSON objects.
        assert daemon.rows('SELECT count(*) FROM python.backtrace')[0][0] == 0
        daemon.ctl('attach', t.pid, check=True)
        # a live read is one instant: between two calls the thread may be in middle()
        rows = wait_for(lambda: daemon.rows("SELECT func, locals FROM python.backtrace"
                                            " WHERE func = 'spin_inner'"),
                        what='a live stack inside spin_inner')
        assert 'n' in json.loads(rows[0][1])
        # The seeds' query, as written there.
        out = daemon.ctl('query', 'SELECT func, file, lineno FROM python.backtrace ORDER BY'
                         ' depth LIMIT 5', check=True).stdout
        assert out.splitlines()[0].split() == ['func', '|', 'file', '|', 'lineno']
    finally:
        t.close()


@pytest.mark.parametrize('sql,why', [
    ('DELETE FROM samples', 'may not be modified'),  # a virtual table: no writes
    ('DELETE FROM sample_blocks', 'read-only'),
    ('INSERT INTO strings VALUES (1, 2)', 'read-only'),
    ('UPDATE targets SET pid = 1', 'read-only'),
    ('DROP TABLE samples', 'read-only'),
    ('CREATE TABLE x(a)', 'read-only'),
    ("ATTACH '/tmp/evil.db' AS evil", 'ATTACH'),
    ('PRAGMA journal_mode = DELETE', 'PRAGMA'),
    ('PRAGMA writable_schema = 1', 'PRAGMA'),
    ('SELECT 1; DELETE FROM samples', 'one statement'),
    ('SELEC nonsense', 'syntax error'),
])
def test_query_refuses_writes(daemon, sql, why):
    r = daemon.ctl('query', sql)
    assert r.returncode == 1 and why in r.stderr, r.stderr
    assert daemon.rows('PRAGMA user_version')[0][0] >= 1  # still serving


def test_query_time_limit():
    d = Daemon('--query-timeout', '1s')
    try:
        start = time.time()
        r = d.ctl('query', 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)'
                  ' SELECT count(*) FROM c')
        assert r.returncode == 1 and 'interrupted after 1000 ms' in r.stderr
        assert time.time() - start < 10
        assert d.rows('SELECT 42')[0][0] == 42
    finally:
        d.close()


def test_bad_requests_get_clear_errors(daemon):
    def call(*args):
        r = daemon.curl(*args)
        return json.loads(r.stdout)

    assert 'malformed JSON' in call('-X', 'POST', '-d', '{"pid": ', 'http://p/v1/targets')['error']
    assert 'pid' in call('-X', 'POST', '-d', '{"pid": "x"}', 'http://p/v1/targets')['error']
    assert 'no such process' in call('-X', 'POST', '-d', '{"pid": 999999999}',
                                     'http://p/v1/targets')['error'] or True
    assert 'no such endpoint' in call('http://p/v1/nothing')['error']
    sleeper = subprocess.Popen(['sleep', '60'])
    try:
        r = daemon.ctl('attach', sleeper.pid)
        assert r.returncode == 1 and 'Python' in r.stderr, r.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    r = daemon.ctl('attach', 2 ** 22 + 12345)
    assert r.returncode == 1 and 'no such process' in r.stderr
    r = daemon.ctl('detach', 4194303)  # a pid the kernel may give, not attached
    assert r.returncode == 1 and 'not attached' in r.stderr
    # rates: up to 100 kHz (the machine's limit is below: ticks kept say it); with native
    # stacks 10 kHz, which the kernel's copies cost the target
    assert 'from 1 to 100000 Hz' in call('-X', 'POST', '-d', '{"pid": 1, "rate": 100001}',
                                         'http://p/v1/targets')['error']
    assert 'at most 10000 Hz' in call('-X', 'POST', '-d',
                                      '{"pid": 1, "rate": 10001, "native": true}',
                                      'http://p/v1/targets')['error']
    # A huge body is refused, not buffered.
    big = daemon.curl('-o', '/dev/null', '-w', '%{http_code}', '-X', 'POST', '--data-binary',
                      '@-', 'http://p/v1/query')
    huge = subprocess.run(['curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', '--unix-socket',
                           daemon.socket, '-X', 'POST', '--data-binary', '@-', 'http://p/v1/query'],
                          input='x' * (2 << 20), stdout=subprocess.PIPE, universal_newlines=True)
    assert huge.stdout in ('413', '400'), huge.stdout
    del big
    # A slow-loris client holds one connection; the daemon keeps serving everyone else.
    loris = socket.socket(socket.AF_UNIX)
    loris.connect(daemon.socket)
    loris.send(b'GET /v1/status HTTP/1.1\r\nHost: p\r\n')
    assert daemon.rows('SELECT 1')[0][0] == 1
    loris.close()
    assert daemon.proc.poll() is None


def test_other_users_see_only_their_own(daemon):
    user = ensure_test_user()
    os.chmod(daemon.socket, 0o666)  # the group rule is tested by packaging; here: SO_PEERCRED
    root_target = busy('/usr/bin/python3')
    try:
        daemon.ctl('attach', root_target.pid, check=True)
        r = daemon.ctl('attach', root_target.pid, user=user)
        assert r.returncode == 1 and 'permission denied' in r.stderr
        r = daemon.ctl('detach', root_target.pid, user=user)
        assert r.returncode == 1
        assert json.loads(daemon.ctl('list', '--json', user=user, check=True).stdout) == {
            'targets': [], 'following': []}
        wait_for(lambda: daemon.rows('SELECT count(*) FROM samples')[0][0] > 0, what='samples')
        assert daemon.rows('SELECT count(*) FROM samples', user=user)[0][0] == 0
        assert daemon.rows('SELECT count(*) FROM sample_frames', user=user)[0][0] == 0
        assert daemon.rows('SELECT count(*) FROM python.backtrace', user=user)[0][0] == 0
        r = daemon.ctl('query', 'SELECT * FROM main.samples', user=user)
        assert r.returncode == 1 and 'reserved to root' in r.stderr
        r = daemon.ctl('flamegraph', root_target.pid, '--format', 'folded', user=user)
        assert r.returncode == 1
        r = daemon.ctl('backtrace', root_target.pid, user=user)
        assert r.returncode == 1 and 'permission denied' in r.stderr
        r = daemon.ctl('query', 'SELECT * FROM python.backtrace', '--pid', root_target.pid,
                       user=user)
        assert r.returncode == 1 and 'permission denied' in r.stderr
    finally:
        root_target.close()


def test_flamegraph_svg_and_folded(daemon):
    t = busy('/usr/bin/python3')
    try:
        daemon.ctl('attach', t.pid, '--rate', '200', check=True)
        wait_for(lambda: main_thread_samples(daemon, t.pid) > 200, what='samples')
        folded = daemon.ctl('flamegraph', t.pid, '--format', 'folded', check=True).stdout
        lines = folded.splitlines()
        assert lines and all(l.rsplit(' ', 1)[1].isdigit() for l in lines)
        hot = max(lines, key=lambda l: int(l.rsplit(' ', 1)[1]))
        assert hot.split(';')[-1].startswith('spin_inner (') and 'busy.py:' in hot
        assert hot.split(';')[0].startswith('<module> (')
        assert 'sleeper' not in folded  # idle threads only with --idle
        idle = daemon.ctl('flamegraph', t.pid, '--format', 'folded', '--idle', check=True).stdout
        assert 'sleeper (' in idle
        svg_path = os.path.join(daemon.dir, 'f.svg')
        daemon.ctl('flamegraph', t.pid, '--since', '5m', '-o', svg_path, check=True)
        svg = open(svg_path).read()
        assert svg.startswith('<?xml') and '<svg' in svg and 'spin_inner' in svg
        assert 'function zoom' in svg and 'function search' in svg
        tid_only = daemon.ctl('flamegraph', t.pid, '--format', 'folded', '--thread', t.pid,
                              '--idle', check=True).stdout
        assert 'sleeper' not in tid_only and 'spin_inner' in tid_only
        sc = json.loads(daemon.ctl('flamegraph', t.pid, '--format', 'speedscope',
                                   check=True).stdout)
        assert sc['$schema'].startswith('https://www.speedscope.app/') and sc['version']
        # one sampled profile per thread, in time order, each sample one period (200 Hz) in ns
        profiles = {p['name']: p for p in sc['profiles']}
        prof = profiles['MainThread (pid %d, tid %d)' % (t.pid, t.pid)]
        names = [f['name'] for f in sc['shared']['frames']]
        assert prof['type'] == 'sampled' and prof['unit'] == 'nanoseconds'
        assert len(prof['samples']) == len(prof['weights']) > 0
        assert set(prof['weights']) == {5000000} and prof['endValue'] > prof['startValue']
        hottest = max(prof['samples'], key=prof['samples'].count)
        assert names[hottest[0]] == '<module>' and names[hottest[-1]] == 'spin_inner'
        assert not any(n.startswith('sleeper') for n in profiles)  # not on a CPU: --idle
        assert all(f['file'].endswith('.py') for f in sc['shared']['frames'])
        # pprof: what `go tool pprof` itself reads back.
        pb = os.path.join(daemon.dir, 'p.pb.gz')
        daemon.ctl('flamegraph', t.pid, '--format', 'pprof', '-o', pb, check=True)
        r = subprocess.run(['go', 'tool', 'pprof', '-top', '-sample_index=samples', pb],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=120,
                           env=dict(os.environ, HOME=daemon.dir))
        assert r.returncode == 0, r.stdout
        rows = [l.split() for l in r.stdout.splitlines() if l.strip().endswith('spin_inner')]
        assert rows and float(rows[0][1].rstrip('%')) > 50, r.stdout
        r = subprocess.run(['go', 'tool', 'pprof', '-top', pb], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=120,
                           env=dict(os.environ, HOME=daemon.dir))
        assert 'Type: cpu' in r.stdout, r.stdout
        top = daemon.ctl('top', t.pid, '--once', check=True).stdout
        first = top.splitlines()[3]
        assert 'spin_inner' in first and float(first.split('%')[0]) > 50, top
        # shares of the same samples (one snapshot: two queries a flush apart gave 140 %)
        shares = [float(x) for l in top.splitlines()[3:] for x in l.split('%')[:2]]
        assert shares and all(0 <= x <= 100.0 for x in shares), top
    finally:
        t.close()


def test_the_counting_views_equal_counting_the_samples(daemon):
    """stack_minutes (stack_counts' minutes through minute_counts) and thread_stats (its hours)
    answer what counting the samples answers, in one snapshot each; bounds on ts_ns and pid
    reach the virtual tables under the views (EXPLAIN QUERY PLAN: the plan's idxNum has the
    bound), so a window reads that window, whatever the store holds."""
    t = busy('/usr/bin/python3')
    try:
        daemon.ctl('attach', t.pid, '--rate', '200', check=True)
        wait_for(lambda: daemon.rows('SELECT count(*) FROM samples')[0][0] >= 600,
                 what='600 samples')
        minutes = ("SELECT ts_ns, tid, stack_id, on_cpu | (holds_gil << 1) | (gc_collecting << 2),"
                   " n FROM stack_minutes WHERE pid = %d" % t.pid)
        counted = ("SELECT ts_ns / 60000000000 * 60000000000, tid, stack_id, state, count(*)"
                   " FROM samples s JOIN targets t ON t.id = s.target_id WHERE t.pid = %d"
                   " GROUP BY 1, 2, 3, 4" % t.pid)
        assert daemon.rows('SELECT (SELECT count(*) FROM (%s EXCEPT %s)),'
                           ' (SELECT count(*) FROM (%s EXCEPT %s)), (SELECT count(*) FROM (%s))'
                           % (minutes, counted, counted, minutes, minutes))[0][:2] == [0, 0]
        # a bound at a minute's start: the minutes from it, the samples from it
        last = ('(SELECT max(ts_ns) / 60000000000 * 60000000000 FROM samples)')
        n_minutes, n_samples = daemon.rows(
            'SELECT (SELECT sum(n) FROM stack_minutes WHERE ts_ns >= %s),'
            ' (SELECT count(*) FROM samples WHERE ts_ns >= %s)' % (last, last))[0]
        assert n_minutes == n_samples > 0, (n_minutes, n_samples)
        rows = daemon.rows(
            'SELECT a.samples, a.on_cpu_pct, a.gil_pct, a.gc_pct, a.no_python_pct, b.n, b.cpu,'
            ' b.gil, b.gc, b.none, a.thread FROM thread_stats a JOIN (SELECT pid, tid,'
            ' count(*) AS n, 100.0 * avg(on_cpu) AS cpu, 100.0 * avg(holds_gil) AS gil,'
            ' 100.0 * avg(gc_collecting) AS gc, 100.0 * avg(no_python_frames) AS none'
            ' FROM thread_states GROUP BY pid, tid) b USING (pid, tid) WHERE a.pid = %d'
            % t.pid)
        assert len(rows) == 2 and {r[10] for r in rows} == {'MainThread', 'sleeper'}, rows
        for r in rows:
            assert r[0] == r[5] and all(abs(r[i] - r[i + 5]) < 0.006 for i in (1, 2, 3, 4)), r
        spinning = [r for r in rows if r[10] == 'MainThread'][0]
        assert spinning[1] > 50, rows
        for sql, bits in (("SELECT * FROM stack_minutes WHERE ts_ns > ago('5m')", 2),
                          ("SELECT * FROM sample_frames WHERE ts_ns > ago('5m')", 2),
                          ("SELECT * FROM stack_minutes WHERE pid = %d AND ts_ns > ago('5m')"
                           " AND ts_ns < ago('1m')" % t.pid, 1 | 2 | 4),
                          ("SELECT * FROM thread_states WHERE tid = %d" % t.pid, 8)):
            plan = ' '.join(str(x) for row in daemon.rows('EXPLAIN QUERY PLAN ' + sql)
                            for x in row)
            idx = re.search(r'VIRTUAL TABLE INDEX (\d+)', plan)
            assert idx and int(idx.group(1)) & bits == bits, (sql, plan)
    finally:
        t.close()


def test_a_query_reading_every_sample_of_a_long_store_is_told_of_the_counting_views():
    """A store of an hour of 8 ranks x 10 threads at 100 Hz (28.8 M samples, built by
    bench/store_synth with the daemon's own schema and encoder): a query that counts every
    sample one by one runs into the time limit, and says which views count them; those views
    answer over the same store."""
    work = tempfile.mkdtemp(prefix='probed-test-')
    os.chmod(work, 0o755)
    built = subprocess.run([os.path.join(BUILD, 'bench', 'store_synth'),
                            os.path.join(work, 'probed.db'), '--hours', '1'],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, check=True)
    store = json.loads(built.stdout)
    d = Daemon('--query-timeout', '2s', '--retention', '0', '--max-db-size', '0', workdir=work)
    try:
        r = d.ctl('query', 'SELECT func, count(*) FROM sample_frames WHERE depth = 0'
                  ' GROUP BY func')
        assert r.returncode != 0 and 'the query time limit' in r.stderr, r.stderr
        assert re.search(r'having read \d+ samples one by one: bound ts_ns', r.stderr) and \
            'function_stats, thread_stats, stack_minutes' in r.stderr, r.stderr
        assert d.rows('SELECT sum(samples) FROM thread_stats')[0][0] == store['samples']
        assert d.rows('SELECT count(DISTINCT pid) FROM function_stats')[0][0] == 8
        first = d.rows("SELECT sum(n) FROM stack_minutes WHERE ts_ns < %d"
                       % (store['first_ns'] + 60 * 10 ** 9))[0][0]
        assert first == 8 * 10 * 60 * 100, first
    finally:
        d.close()
        shutil.rmtree(work, ignore_errors=True)


def counts_mismatch(tids=None):
    """The rows of stack_counts that counting the samples does not give, and the other way
    round, for both bucket lengths, as one statement (one snapshot while the writer goes on);
    of threads @tids only, when given."""
    parts = []
    only = ' AND tid IN (%s)' % ','.join(map(str, tids)) if tids else ''
    for span in (60, 3600):
        counts = ('SELECT target_id, bucket, tid, stack_id, state, n FROM stack_counts'
                  ' WHERE span_s = %d%s' % (span, only))
        counted = ('SELECT target_id, ts_ns / %d, tid, stack_id, state, count(*) FROM samples'
                   ' WHERE 1%s GROUP BY 1, 2, 3, 4, 5' % (span * 10 ** 9, only))
        parts += ['SELECT * FROM (%s EXCEPT %s)' % (counts, counted),
                  'SELECT * FROM (%s EXCEPT %s)' % (counted, counts)]
    return 'SELECT count(*) FROM (%s)' % ' UNION ALL '.join(parts)




def test_flamegraph_sums_the_counts_and_equals_counting_samples(tmp_path):
    """Flame graphs read stack_counts (per minute and per hour) and samples only for the part
    of a minute at the window's edge. Four hours of synthetic samples, one instant every 30 s
    (at 15 s past each half minute, so a window of whole minutes starting up to 15 s late takes
    the same ones), written into an older database (schema 11): the migration counts them,
    and every window (all, 7 minutes, 95 minutes, 3 hours), thread and --idle gives what
    counting the samples gives."""
    import random
    work = str(tmp_path)
    d = Daemon(workdir=work)  # the schema
    d.close()
    db = sqlite3.connect(d.db)
    db.executescript(AS_OF_SCHEMA_11)
    db.execute("INSERT INTO targets(id, pid, start_time, uid, cmdline, py_version, rate_hz,"
               " attached_ns) VALUES (1, 999998, 0, 0, 'synthetic', '3.12.0', 100, 0)")
    db.execute("INSERT INTO strings VALUES (1000, '/app/model.py')")
    for f in range(1, 9):
        db.execute('INSERT INTO strings VALUES (?, ?)', (f, 'f%d' % f))
        db.execute('INSERT INTO frames(id, func_id, file_id, line, first_line) VALUES'
                   ' (?, ?, 1000, ?, 1)', (f, f, f * 10))
    stacks = {}
    for sid in range(1, 7):  # root f1, then one to three frames, leaf f(sid + 2)
        chain = [1] + list(range(2, 2 + sid % 3)) + [sid + 2]
        stacks[sid] = chain
        for depth, fid in enumerate(reversed(chain)):
            db.execute('INSERT INTO stack_frames VALUES (?, ?, ?)', (sid, depth, fid))
    rnd = random.Random(7)
    base = time.time_ns()
    rows = []
    for i in range(4 * 120):
        ts = base - (i * 30 + 15) * 10 ** 9
        for tid in (11, 12, 13):
            rows.append((ts, 1, tid, rnd.choice(list(stacks) + [0]), rnd.choice((0, 1, 3))))
    db.executemany('INSERT INTO samples(ts_ns, target_id, tid, stack_id, state)'
                   ' VALUES (?, ?, ?, ?, ?)', rows)
    db.commit()
    db.close()
    d = Daemon('--retention', '0', workdir=work)
    try:
        assert sorted(tuple(r) for r in d.rows('SELECT ts_ns, target_id, tid, stack_id, state'
                                                ' FROM samples')) == sorted(rows)
        assert d.rows(counts_mismatch())[0][0] == 0
        assert d.rows('SELECT sum(n) FROM stack_counts WHERE span_s = 3600')[0][0] == len(rows)
        for since_s in (None, 7 * 60, 95 * 60, 3 * 3600):
            for tid in (None, 12):
                for idle in (False, True):
                    args = ['flamegraph', 999998, '--format', 'folded']
                    args += ['--since', '%ds' % since_s] if since_s else []
                    args += ['--thread', tid] if tid else []
                    args += ['--idle'] if idle else []
                    got = {}
                    for line in d.ctl(*args, check=True).stdout.splitlines():
                        chain, n = line.rsplit(' ', 1)
                        leaf = chain.split(';')[-1].split(' (')[0]
                        got[leaf] = got.get(leaf, 0) + int(n)
                    want = {}
                    for ts, _, t, sid, state in rows:
                        if (sid and (not since_s or ts >= base - since_s * 10 ** 9)
                                and (not tid or t == tid) and (idle or state & 1)):
                            leaf = 'f%d' % stacks[sid][-1]
                            want[leaf] = want.get(leaf, 0) + 1
                    assert got == want, (args, got, want)
        # windows with both ends (the web view's picks): whole hours, minutes and partial
        # minutes at either end, within one minute; only samples holding the GIL
        m = 60 * 10 ** 9
        for lo, hi in ((base - 200 * m - 7 * 10 ** 9, base - 20 * m + 3 * 10 ** 9),
                       (base - 95 * m, base - 37 * m), (base - 10 * m - 5 * 10 ** 9, base - 3 * m),
                       (base - 3 * m - 40 * 10 ** 9, base - 3 * m - 10 * 10 ** 9),
                       (base - 125 * m, base - 61 * m + 10 ** 9)):
            for gil in (False, True):
                out = d.curl('http://x/v1/flamegraph?pid=999998&format=folded&idle=1'
                             '&from_ns=%d&to_ns=%d%s' % (lo, hi, '&gil=1' if gil else '')).stdout
                got = {}
                for line in out.splitlines() if not out.startswith('{') else ():
                    chain, n = line.rsplit(' ', 1)
                    leaf = chain.split(';')[-1].split(' (')[0]
                    got[leaf] = got.get(leaf, 0) + int(n)
                want = {}
                for ts, _, t, sid, state in rows:
                    if sid and lo <= ts < hi and (not gil or state & 2):
                        leaf = 'f%d' % stacks[sid][-1]
                        want[leaf] = want.get(leaf, 0) + 1
                assert got == want and (want or hi - lo < m), (lo - base, hi - base, gil, got, want, out)
        assert d.api('GET', '/v1/flamegraph?pid=999998&from_ns=%d&to_ns=%d' % (base, base))[0] == 400
        assert d.api('GET', '/v1/flamegraph?pid=999998&from_ns=%d&since=5m' % base)[0] == 400
        assert time.time_ns() - base < 15 * 10 ** 9, 'too slow for the half-minute grid'
    finally:
        d.close()


def test_samples_on_the_tick_grid_and_minutes_merged_into_one_block_per_thread(tmp_path):
    """A tick's samples carry the instant it was due (sampler.c: tick_time()), so an idle
    thread's are 10 ms apart at 100 Hz, and the store merges each past minute's blocks (one
    per write, a second each) into one per thread, its samples and counts unchanged."""
    work = str(tmp_path)
    d = Daemon(workdir=work)
    t = Target('/usr/bin/python3', 'names.py')
    try:
        d.ctl('attach', t.pid, '--rate', '100', check=True)
        wait_for(lambda: d.rows('SELECT count(DISTINCT first_ns) FROM sample_blocks'
                                ' WHERE tid = %d' % t.pid)[0][0] >= 4, what='four writes')
        d.ctl('detach', t.pid, check=True)
        time.sleep(1.5)  # the last write
        before = sorted((tid, ts - 180 * 10 ** 9, stack, state) for tid, ts, stack, state in
                        d.rows('SELECT tid, ts_ns, stack_id, state FROM samples'))
        d.kill()
        db = sqlite3.connect(d.db)
        assert db.execute('SELECT sum(n) FROM sample_blocks').fetchone()[0] == len(before)
        per_thread = {}
        for tid, n in db.execute('SELECT tid, count(*) FROM sample_blocks GROUP BY tid'):
            per_thread[tid] = n
        assert len(per_thread) == 4 and min(per_thread.values()) >= 4, per_thread
        # three minutes back: the next daemon's writer merges the minutes past when it starts
        db.execute('UPDATE sample_blocks SET first_ns = first_ns - 180000000000,'
                   ' last_ns = last_ns - 180000000000')
        db.execute('UPDATE stack_counts SET bucket = bucket - 3 WHERE span_s = 60')
        # the hour counts as the moved samples fall: 3 minutes back crosses into the previous
        # hour for a test run in an hour's first 3 minutes (seen in CI at 15:00)
        target_id = db.execute('SELECT id FROM targets').fetchone()[0]
        hours = {}
        for tid, ts, stack, state in before:
            key = (ts // (3600 * 10 ** 9), tid, stack, state)
            hours[key] = hours.get(key, 0) + 1
        db.execute('DELETE FROM stack_counts WHERE span_s = 3600')
        db.executemany('INSERT INTO stack_counts (target_id, span_s, bucket, tid, stack_id, state,'
                       ' n) VALUES (?, 3600, ?, ?, ?, ?, ?)',
                       [(target_id,) + key + (n,) for key, n in hours.items()])
        # one thread's second block cut short: its blocks stay as written, the others merge
        damaged = min(tid for tid in per_thread if tid != t.pid)
        db.execute('UPDATE sample_blocks SET data = substr(data, 1, length(data) / 2) WHERE'
                   ' tid = ?1 AND first_ns = (SELECT first_ns FROM sample_blocks WHERE tid = ?1'
                   ' ORDER BY first_ns LIMIT 1 OFFSET 1)', (damaged,))
        kept = db.execute('SELECT first_ns, n, hex(data) FROM sample_blocks WHERE tid = ?'
                          ' ORDER BY first_ns', (damaged,)).fetchall()
        db.commit()
        db.close()
        d.start()
        before = [x for x in before if x[0] != damaged]
        minutes = {(tid, ts // (60 * 10 ** 9)) for tid, ts, _, _ in before}
        assert len(minutes) < sum(n for tid, n in per_thread.items() if tid != damaged)
        wait_for(lambda: d.rows('SELECT count(*) FROM sample_blocks WHERE tid != %d'
                                % damaged)[0][0] <= len(minutes), what='the blocks merged')
        # the damaged block's minute of that thread stays as written (store.c); its other
        # minutes merge like any (the writes can straddle a minute: seen in CI, 1 run in 15)
        got = [tuple(r) for r in d.rows('SELECT first_ns, n, hex(data) FROM sample_blocks'
                                        ' WHERE tid = %d ORDER BY first_ns' % damaged)]
        cut_minute = kept[1][0] // (60 * 10 ** 9)
        in_cut = lambda rows: [r for r in rows if r[0] // (60 * 10 ** 9) == cut_minute]
        assert in_cut(got) == in_cut(kept), (got, kept)
        assert sum(r[1] for r in got) == sum(r[1] for r in kept), (got, kept)
        # (a query that reads the damaged block fails: a thread's samples are read by its tid)
        whole = [tid for tid in per_thread if tid != damaged]
        after = sorted(tuple(r) for r in d.rows('SELECT tid, ts_ns, stack_id, state FROM samples'
                                                 ' WHERE tid IN (%s)' % ','.join(map(str, whole))))
        assert after == before
        for tid in whole:
            ts = [x[1] for x in after if x[0] == tid]
            steps = [b - a for a, b in zip(ts, ts[1:])]
            assert min(steps) > 0, "a thread's samples in time order, one per tick"
            assert steps.count(10 ** 7) >= 0.8 * len(steps), (tid, steps)
        assert d.rows(counts_mismatch(whole))[0][0] == 0
        assert d.rows('SELECT sum(n) FROM sample_blocks WHERE tid != %d'
                      % damaged)[0][0] == len(after)
    finally:
        t.close()
        d.close()


def test_cpu_readings_an_hour_old_thinned_to_one_a_minute_per_thread(tmp_path):
    """Each thread's CPU reading a second (thread_cpu) would outweigh a week's samples: a
    minute an hour old keeps each thread's last reading of it (store__thin), what is younger
    stays whole, and thread_cpu_usage gives a thread's use since its own previous reading."""
    from conftest import free_port
    port = free_port()
    d = Daemon('--metrics', '127.0.0.1:%d' % port, workdir=str(tmp_path))
    t = Target('/usr/bin/python3', 'busy.py')
    minute = 60 * 10 ** 9
    try:
        d.ctl('attach', t.pid, '--rate', '10', check=True)
        wait_for(lambda: d.rows('SELECT count(DISTINCT ts_ns) FROM thread_cpu')[0][0] >= 5,
                 what='five CPU readings')
        d.ctl('detach', t.pid, check=True)
        time.sleep(1.5)
        d.kill()
        db = sqlite3.connect(d.db)
        rows = db.execute('SELECT target_id, ts_ns, tid, cpu_ns FROM thread_cpu').fetchall()
        # the readings 62 minutes back, and a copy of them 30 minutes back
        old = sorted((tg, ts - 62 * minute, tid, cpu) for tg, ts, tid, cpu in rows)
        young = sorted((tg, ts - 30 * minute, tid, cpu) for tg, ts, tid, cpu in rows)
        db.execute('DELETE FROM thread_cpu')
        db.executemany('INSERT INTO thread_cpu VALUES (?, ?, ?, ?)', old + young)
        db.commit()
        db.close()
        last = {}
        for tg, ts, tid, cpu in old:
            key = (tg, tid, ts // minute)
            last[key] = max(last.get(key, (0, 0, 0, 0)), (tg, ts, tid, cpu))
        kept = sorted(last.values())
        assert len(kept) < len(old)
        d.start()
        wait_for(lambda: d.rows('SELECT count(*) FROM thread_cpu')[0][0] == len(kept) + len(young),
                 what='the old minutes thinned')
        assert sorted(tuple(r) for r in d.rows('SELECT target_id, ts_ns, tid, cpu_ns'
                                                ' FROM thread_cpu')) == sorted(kept + young)
        usage = {(tid, ts): pct for tid, ts, pct in
                 d.rows('SELECT tid, ts_ns, cpu_pct FROM thread_cpu_usage')}
        for rows_of in (kept, young):
            prev = {}
            for tg, ts, tid, cpu in rows_of:
                p = prev.get(tid)
                want = round(100.0 * (cpu - p[1]) / (ts - p[0]), 1) if p else None
                if rows_of is young and not p:  # the previous reading is the thinned one's
                    p = [x for x in kept if x[2] == tid][-1]
                    want = round(100.0 * (cpu - p[3]) / (ts - p[1]), 1)
                assert usage[(tid, ts)] == want, (tid, ts, usage[(tid, ts)], want)
                prev[tid] = (ts, cpu)
        assert max(usage.values(), key=lambda x: x or 0) > 50  # busy.py's main thread
        metrics = subprocess.run(['curl', '-s', 'http://127.0.0.1:%d/metrics' % port],
                                 stdout=subprocess.PIPE, universal_newlines=True).stdout
        assert 'probed_cpu_readings_thinned_total %d' % (len(old) - len(kept)) in metrics
        # the writer's page cache, part of the RSS, held to SQLite's default size
        cache = d.api('GET', '/v1/status')[1]['db_cache_bytes']
        assert 0 < cache <= 2000 * 1024, cache
        assert re.search(r'^probed_db_cache_bytes \d+$', metrics, re.M), metrics
    finally:
        t.close()
        d.close()


def test_flamegraph_names_holding_separators_stay_whole(daemon):
    """A script under a directory named 'a;b (c:1)': every flame graph format keeps each frame
    whole. The renderers used to re-split folded text, and this one path became bogus frames
    ('...a', 'b (c:1)/busy.py:N)') in speedscope and pprof (SQL on the same data was right)."""
    import shutil
    odd = os.path.join(daemon.dir, 'a;b (c:1)')
    os.mkdir(odd)
    script = os.path.join(odd, 'busy.py')
    shutil.copy(os.path.join(TARGETS, 'busy.py'), script)
    t = Target('/usr/bin/python3', script)
    try:
        daemon.ctl('attach', t.pid, '--rate', '200', check=True)
        wait_for(lambda: main_thread_samples(daemon, t.pid) > 100, what='samples')
        chain = ['<module>', 'main', 'outer_loop', 'middle', 'spin_inner']
        folded = daemon.ctl('flamegraph', t.pid, '--format', 'folded', check=True).stdout
        hot = max(folded.splitlines(), key=lambda l: int(l.rsplit(' ', 1)[1]))
        frames = hot.rsplit(' ', 1)[0].split(';')
        assert [f.split(' (')[0] for f in frames] == chain, hot
        shown = script.replace(';', '\uff1b')  # the folded format's separator, written as U+FF1B
        assert all(f.endswith(')') and ' (%s:' % shown in f for f in frames), hot
        sc = json.loads(daemon.ctl('flamegraph', t.pid, '--format', 'speedscope',
                                   check=True).stdout)
        prof = [p for p in sc['profiles'] if p['name'].startswith('MainThread (')][0]
        frames = sc['shared']['frames']
        hottest = max(prof['samples'], key=prof['samples'].count)
        assert [frames[i]['name'] for i in hottest] == chain
        assert all(frames[i]['file'] == script and frames[i]['line'] > 0 for i in hottest)
        assert {f['file'] for f in frames} == {script}, frames
        pb = os.path.join(daemon.dir, 'p.pb.gz')
        daemon.ctl('flamegraph', t.pid, '--format', 'pprof', '-o', pb, check=True)
        r = subprocess.run(['go', 'tool', 'pprof', '-raw', pb], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=120,
                           env=dict(os.environ, HOME=daemon.dir))
        assert r.returncode == 0, r.stdout
        text = r.stdout.split('Locations', 1)[1].split('Mappings', 1)[0]
        locations = [l for l in text.splitlines() if l.strip()]
        # "N: 0x0 M=1 middle /path/a;b (c:1)/busy.py:22 s=0": one location per frame, whole
        assert len(locations) >= len(chain), r.stdout
        assert all(' %s:' % script in l for l in locations), r.stdout
        assert {l.split()[3] for l in locations} >= set(chain[1:]), r.stdout
    finally:
        t.close()


def test_target_exit_and_duration(daemon):
    t = busy('/usr/bin/python3')
    t2 = busy('/usr/bin/python3')
    try:
        daemon.ctl('attach', t.pid, '--rate', '1', check=True)
        daemon.ctl('attach', t2.pid, '--duration', '1s', check=True)
        # Killed and left unreaped: a zombie (as `probectl run`'s target is until it is waited
        # for) has exited, though its pid and start time remain; its stack start reads 0, which
        # once ended it as "exec'd another program" (at 1 Hz, every tick checks who it is).
        t.proc.kill()

        def states():
            return {x['pid']: x for x in json.loads(
                daemon.ctl('list', '--json', check=True).stdout)['targets']}
        wait_for(lambda: states()[t.pid]['state'] == 'exited', what='exited')
        wait_for(lambda: states()[t2.pid]['state'] == 'detached', what='duration')
        wait_for(lambda: daemon.rows('SELECT end_reason FROM targets WHERE pid = %d' % t.pid)
                 != [[None]], what='exit recorded')
        assert open('/proc/%d/stat' % t.pid).read().rsplit(') ', 1)[1][0] == 'Z'
        t.proc.wait()
        assert daemon.rows('SELECT end_reason FROM targets WHERE pid = %d' % t.pid) == [['exited']]
        time.sleep(1.5)  # the last flush of what was sampled before the end
        n = main_thread_samples(daemon, t2.pid)
        assert 90 <= n <= 110  # 1 s at 100 Hz
        time.sleep(1.5)
        assert main_thread_samples(daemon, t2.pid) == n
    finally:
        t.close()
        t2.close()


def test_a_process_whose_memory_is_gone_has_exited(daemon):
    """Its main thread gone (pthread_exit) while another runs on, or the whole process tearing
    its memory down on its way out (CI: `probectl run`'s target, under ASan), a process's
    stack start reads 0: it has exited, not exec'd another program (at 1 Hz every tick checks
    who it is before reading it)."""
    t = subprocess.Popen(['/usr/bin/python3', os.path.join(TARGETS, 'leader_exits.py')],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True)
    try:
        assert t.stdout.readline().startswith('READY')
        daemon.ctl('attach', t.pid, '--rate', '1', check=True)
        wait_for(lambda: main_thread_samples(daemon, t.pid) > 0, what='a sample')
        t.stdin.write('\n')
        t.stdin.flush()
        wait_for(lambda: daemon.rows('SELECT end_reason FROM targets WHERE pid = %d' % t.pid)
                 != [[None]], what='the end recorded')
        with open('/proc/%d/stat' % t.pid) as f:
            state = f.read().rsplit(') ', 1)[1].split()
        assert state[0] == 'Z' and int(state[17]) == 2, state[:20]  # a zombie leader, alive
        assert daemon.rows('SELECT end_reason FROM targets WHERE pid = %d' % t.pid) == \
            [['exited']]
    finally:
        t.kill()
        t.wait()


def test_kill_9_keeps_committed_data_and_resumes():
    d = Daemon()
    t = busy('/usr/bin/python3')
    try:
        d.ctl('attach', t.pid, check=True)
        wait_for(lambda: main_thread_samples(d, t.pid) > 150, what='samples')
        before = main_thread_samples(d, t.pid)
        d.kill(signal.SIGKILL)
        db = sqlite3.connect(d.db)
        assert db.execute('PRAGMA integrity_check').fetchone()[0] == 'ok'
        assert db.execute('SELECT sum(n) FROM sample_blocks WHERE tid = ?',
                          (t.pid,)).fetchone()[0] >= before
        db.close()
        d.start()  # the stale socket file is cleared, the target picked up again
        lst = json.loads(d.ctl('list', '--json', check=True).stdout)['targets']
        assert [x['state'] for x in lst if x['pid'] == t.pid] == ['sampling']
        wait_for(lambda: main_thread_samples(d, t.pid) > before + 100, what='resumed samples')
        assert d.rows('SELECT count(*) FROM targets WHERE pid = %d' % t.pid)[0][0] == 1
    finally:
        t.close()
        d.close()


def test_backtrace_goes_through_the_daemon(daemon):
    t = busy('/usr/bin/python3')
    try:
        r = daemon.ctl('backtrace', t.pid, '--json', check=True)
        doc = json.loads(r.stdout)
        assert doc['pid'] == t.pid
        assert any(f['function'] == 'outer_loop' for th in doc['threads'] for f in th['frames'])
        daemon.kill()
        r = daemon.ctl('backtrace', t.pid, check=True)  # no daemon: read directly
        assert 'outer_loop' in r.stdout
    finally:
        t.close()


@pytest.mark.parametrize('python', [p for n, p in INTERPRETERS if n in ('pyenv-3.6', 'pyenv-3.13',
                                                                          'debian-python3')])
def test_run_attaches_from_the_start_and_passes_the_exit_status(daemon, python):
    require(python)
    env = dict(os.environ, PROBED_SOCKET=daemon.socket, EXIT_AFTER='2')
    started = time.monotonic()
    r = subprocess.run([PROBECTL, 'run', '--rate', '50', '--',
                        python, os.path.join(TARGETS, 'busy.py'), '7'],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    lifetime = time.monotonic() - started  # at least the process's: startup + 2 s + exit
    assert r.returncode == 7, r.stderr
    pid = json.loads(r.stdout.split('READY ', 1)[1].splitlines()[0])['pid']
    time.sleep(1.5)  # the last flush
    n = main_thread_samples(daemon, pid)
    # sampled from its start (more than 1 s of its 2 s), never above 50 Hz of its life (the
    # interpreter's start-up, slower on a busy machine, is part of it: 115 samples in 2.3 s)
    assert 50 <= n <= 50 * lifetime + 2, '%d samples in %.2f s at 50 Hz' % (n, lifetime)
    assert daemon.rows('SELECT end_reason FROM targets WHERE pid = %d' % pid) == [['exited']]
    r = subprocess.run([PROBECTL, 'run', '--', 'sh', '-c', 'exit 3'],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    assert r.returncode == 3


def test_children_are_followed_and_labelled(daemon):
    launcher = Target('/usr/bin/python3', 'launcher.py')
    try:
        daemon.ctl('attach', launcher.pid, '--children', check=True)

        def ranks():
            lst = json.loads(daemon.ctl('list', '--json', check=True).stdout)['targets']
            return sorted((x.get('rank'), x.get('local_rank'), x.get('world_size'))
                          for x in lst if x['state'] == 'sampling' and x['pid'] != launcher.pid)
        wait_for(lambda: ranks() == [(0, 0, 2), (1, 1, 2)], what='both ranks attached')
        wait_for(lambda: daemon.rows('SELECT count(DISTINCT t.rank) FROM samples s JOIN targets t'
                                     ' ON t.id = s.target_id WHERE t.rank IS NOT NULL')[0][0] == 2,
                 what='samples of both ranks')
    finally:
        subprocess.run(['pkill', '-P', str(launcher.pid)])
        launcher.close()


def test_children_of_a_shell_are_followed(daemon):
    """A shell parent (a Slurm batch script, `sh -c 'torchrun ...'`) is not Python: attach
    --children follows it without sampling it and attaches the Python programs it starts;
    it was refused ("is not a CPython 3 process")."""
    busy_py = os.path.join(TARGETS, 'busy.py')
    sh = subprocess.Popen(['sh', '-c', 'sleep 1; "$0" "$1" & "$0" "$1"; wait', '/usr/bin/python3',
                           busy_py], stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        out = daemon.ctl('attach', sh.pid, '--children', check=True).stdout
        assert 'following pid %d' % sh.pid in out, out
        listed = json.loads(daemon.ctl('list', '--json', check=True).stdout)
        assert [x['pid'] for x in listed['following']] == [sh.pid], listed
        assert 'following' in daemon.ctl('list', check=True).stdout

        def pythons():
            return sorted(x['pid'] for x in json.loads(daemon.ctl('list', '--json', check=True)
                                                       .stdout)['targets']
                          if x['state'] == 'sampling')
        kids = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(pythons()), timeout=30,
                        what="the shell's two Python children attached")
        assert sh.pid not in kids
        wait_for(lambda: daemon.rows("SELECT count(DISTINCT t.pid) FROM sample_frames f JOIN"
                                     " targets t ON t.id = f.target_id WHERE f.func ="
                                     " 'spin_inner'")[0][0] == 2, what='samples of both')
        out = daemon.ctl('detach', sh.pid, check=True).stdout
        assert 'no longer following pid %d' % sh.pid in out, out
        assert json.loads(daemon.ctl('list', '--json', check=True).stdout)['following'] == []
    finally:
        os.killpg(sh.pid, signal.SIGKILL)
        sh.wait()


MULTIPROCESSING_APP = '''
import multiprocessing, time

def work(seconds):
    deadline = time.time() + seconds
    total = 0
    while time.time() < deadline:
        total += 1
    return total

if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=work, args=(4,)) for _ in range(2)]
    for p in procs:
        p.start()
    work(4)
    for p in procs:
        p.join()
'''


def test_run_children_samples_multiprocessing_workers(daemon, tmp_path):
    """probectl run --children: the program's workers are sampled too, not the parent only."""
    app = tmp_path / 'mp_app.py'
    app.write_text(MULTIPROCESSING_APP)
    env = dict(os.environ, PROBED_SOCKET=daemon.socket)
    r = subprocess.run([PROBECTL, 'run', '--children', '--rate', '200', '--', '/usr/bin/python3',
                        str(app)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert 'unobserved' not in r.stderr, r.stderr
    pids = wait_for(lambda: (lambda n: n if n[0][0] == 3 else None)(daemon.rows(
        "SELECT count(DISTINCT t.pid) FROM sample_frames f JOIN targets t ON t.id = f.target_id"
        " WHERE f.func = 'work' AND t.cmdline LIKE '%%mp_app.py%%'")), timeout=30,
        what='samples in work() of the parent and both workers')
    assert pids == [[3]]


def test_children_followed_after_kill_9_and_restart():
    """A target attached with --children goes on following them when the daemon resumes it
    (and is resumed with nothing else: no allocation tracking, no torch trace)."""
    d = Daemon()
    launcher = Target('/usr/bin/python3', 'launcher.py', '4')
    try:
        d.ctl('attach', launcher.pid, '--children', check=True)
        wait_for(lambda: d.rows('SELECT count(*) FROM targets WHERE pid = %d'
                                % launcher.pid)[0][0], what='the attach stored')
        d.kill(signal.SIGKILL)
        d.start()

        def ranks():
            lst = json.loads(d.ctl('list', '--json', check=True).stdout)['targets']
            return sorted(x.get('rank') for x in lst
                          if x['state'] == 'sampling' and x['pid'] != launcher.pid)
        wait_for(lambda: ranks() == [0, 1], what='both ranks attached after the restart')
        log = d.read_log()
        assert 'allocation' not in log and 'torch' not in log, log
    finally:
        subprocess.run(['pkill', '-P', str(launcher.pid)])
        launcher.close()
        d.close()


def test_a_followed_child_that_execs_is_attached_again(daemon):
    """--children attaches a launcher's fork while it is still a copy of the launcher; when it
    execs the rank, the daemon ends that target ("exec'd another program": its layout is
    another program's now) and attaches the rank it became, with its RANK."""
    launcher = Target('/usr/bin/python3', 'forkexec.py', '2')
    child = launcher.info['child']
    try:
        daemon.ctl('attach', launcher.pid, '--children', check=True)

        def entries():
            return [x for x in json.loads(daemon.ctl('list', '--json', check=True).stdout)[
                'targets'] if x['pid'] == child]
        first = wait_for(lambda: entries(), what='the fork attached')[0]
        assert first.get('rank') is None, first  # the launcher's copy: no RANK yet
        rank = wait_for(lambda: [x for x in entries() if x['state'] == 'sampling' and
                                 x.get('rank') == 0], timeout=30, what='the rank attached')
        assert rank[0]['id'] != first['id']
        assert wait_for(lambda: daemon.rows("SELECT end_reason FROM targets WHERE id = %d AND"
                                            " ended_ns IS NOT NULL" % first['id']),
                        what='the fork ended in the store') == [["exec'd another program"]]
        wait_for(lambda: daemon.rows("SELECT count(*) FROM sample_frames WHERE target_id = %d"
                                     " AND func = 'spin_inner'" % rank[0]['id'])[0][0] > 0,
                 what="the rank's own frames stored")
    finally:
        subprocess.run(['pkill', '-P', str(launcher.pid)])
        launcher.close()


def test_retention_by_age_and_size():
    d = Daemon('--retention', '3s', '--max-db-size', '300K')
    t = busy('/usr/bin/python3')
    try:
        d.ctl('attach', t.pid, '--rate', '1000', check=True)
        time.sleep(1.5)
        first = d.rows('SELECT min(ts_ns) FROM samples')[0][0]
        # Retention runs every 10 flushes (10 s): by then the first samples must be gone.
        wait_for(lambda: d.rows('SELECT min(ts_ns) FROM samples')[0][0] > first + 5e9,
                 timeout=20, what='old samples deleted')
        oldest_age = (d.rows('SELECT now_ns() - min(ts_ns) FROM samples')[0][0]) / 1e9
        assert oldest_age < 3 + 10 + 2, oldest_age
        live = d.rows('PRAGMA page_count')[0][0] - d.rows('PRAGMA freelist_count')[0][0]
        assert live * d.rows('PRAGMA page_size')[0][0] < 600 * 1024
        # the counts of the buckets it cut are what the samples left in them give
        assert d.rows(counts_mismatch())[0][0] == 0
    finally:
        t.close()
        d.close()


def test_1000_hz(daemon):
    t = busy('/usr/bin/python3')
    try:
        daemon.ctl('attach', t.pid, '--rate', '1000', check=True)
        rate = measured_rate(daemon, t.pid, 2500)
        assert 900 <= rate <= 1100, 'sampled at %.1f Hz, asked 1000' % rate
    finally:
        t.close()


def run_state(d):
    return d.api('GET', '/v1/status')[1]['run_state']


def on_cpu_by_thread(d, pid):
    """{tid: (samples on CPU, samples)} of the process's stored samples."""
    rows = d.rows('SELECT s.tid, sum(s.state & 1), count(*) FROM samples s JOIN targets t'
                  ' ON t.id = s.target_id WHERE t.pid = %d GROUP BY s.tid' % pid)
    return {r[0]: (r[1], r[2]) for r in rows}


def check_busy_and_sleeper_states(d, t):
    """busy.py's main thread spins (preempted it is still runnable) and its sleeper never
    wakes: their samples say so, whichever way the daemon learns it."""
    d.ctl('attach', t.pid, '--rate', '100', check=True)
    got = wait_for(lambda: (lambda s: s if len(s) == 2 and min(n for _, n in s.values()) >= 150
                            else None)(on_cpu_by_thread(d, t.pid)),
                   what='150 samples of each thread')
    sleeper = next(tid for tid in got if tid != t.pid)
    assert got[t.pid][0] >= 0.95 * got[t.pid][1], got
    assert got[sleeper][0] == 0, got


def read_syscalls(pid):
    """The read syscalls of the daemon's sampler thread so far."""
    for tid in os.listdir('/proc/%d/task' % pid):
        with open('/proc/%d/task/%s/comm' % (pid, tid)) as f:
            if f.read().strip() != 'probed-sampler':
                continue
        with open('/proc/%d/task/%s/io' % (pid, tid)) as f:
            return int(next(line for line in f if line.startswith('syscr')).split()[1])
    raise AssertionError('no probed-sampler thread in pid %d' % pid)


def runboard_links(pid):
    """How many BPF links daemon @pid holds to a program named runstate_switch (the board's
    sched_switch program): its fds' fdinfo, so other daemons on the machine do not count."""
    out = subprocess.run(['bpftool', '-j', 'prog', 'show'], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    progs = {str(p['id']) for p in json.loads(out or '[]') if p.get('name') == 'runstate_switch'}
    n = 0
    for fd in os.listdir('/proc/%d/fdinfo' % pid):
        try:
            with open('/proc/%d/fdinfo/%s' % (pid, fd)) as f:
                info = dict(line.split(':', 1) for line in f.read().splitlines() if ':' in line)
        except FileNotFoundError:
            continue
        n += 'link_type' in info and info.get('prog_id', '').strip() in progs
    return n


def test_run_state_comes_from_the_scheduler_not_proc(daemon):
    """The sampler learns whether each thread runs, and whether it ran since its last look,
    from the run-state board (bpf/runboard.bpf.c on sched_switch), not from two /proc reads a
    thread a tick: the states are right, the daemon reads next to nothing per tick, a one-off
    backtrace and a detach give their threads' slots back, threads that exit free theirs, and
    with nothing watched the program is not attached at all."""
    assert run_state(daemon)['source'] == 'ebpf', run_state(daemon)
    assert run_state(daemon)['threads'] == 0 and runboard_links(daemon.proc.pid) == 0
    t = busy('/usr/bin/python3')
    other = busy('/usr/bin/python3')
    churn = Target('/usr/bin/python3', 'churn.py', '0')
    try:
        check_busy_and_sleeper_states(daemon, t)
        rs = run_state(daemon)
        assert rs['threads'] == 2 and rs['full'] == 0, rs
        assert runboard_links(daemon.proc.pid) == 1
        # /proc would be a schedstat read a thread and a stat read for the one that ran: 3
        # reads a tick; the sampler reads none (its process_vm_readv is not a read)
        before, t0 = read_syscalls(daemon.proc.pid), time.time()
        time.sleep(3)
        per_tick = (read_syscalls(daemon.proc.pid) - before) / ((time.time() - t0) * 100)
        assert per_tick < 0.5, '%.2f read syscalls a tick' % per_tick
        # a backtrace of a process not attached reads its threads' state once, then lets go
        out = daemon.ctl('backtrace', other.pid, check=True).stdout
        assert 'outer_loop' in out, out
        assert run_state(daemon)['threads'] == 2, run_state(daemon)
        # threads that come and go: those gone are freed
        daemon.ctl('attach', churn.pid, '--rate', '100', check=True)
        wait_for(lambda: run_state(daemon)['exited'] >= 20, what='20 exited threads freed')
        # a slot is freed at the tick after its thread exits; churn starts more meanwhile,
        # and on a busy machine its exits come late: the count comes down, or slots leak
        wait_for(lambda: run_state(daemon)['threads'] < 2 + 2 + 2 * 6 + 1,
                 what='only the live threads tracked')
        for p in (t.pid, churn.pid):
            daemon.ctl('detach', p, check=True)
        wait_for(lambda: run_state(daemon)['threads'] == 0, what='every slot given back')
        assert runboard_links(daemon.proc.pid) == 0
    finally:
        for x in (t, other, churn):
            x.close()


def test_run_state_from_proc_without_cap_bpf():
    """Without CAP_BPF the board cannot load: the daemon says why and reads /proc, and the
    states are just as right."""
    d = daemon_without('bpf', 'sys_admin')
    t = busy('/usr/bin/python3')
    try:
        rs = run_state(d)
        assert rs['source'] == 'proc' and 'CAP_BPF' in rs['error'], rs
        assert "threads' run state comes from /proc" in d.read_log()
        check_busy_and_sleeper_states(d, t)
        assert run_state(d)['threads'] == 0
    finally:
        t.close()
        d.close()
