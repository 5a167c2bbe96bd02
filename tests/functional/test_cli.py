"""probectl record and run -o: one command from processes (or a command) to a profile file, as
py-spy record does, and the flame graph options and formats people rely on (issue 39): each
file is read back as the tool it is for reads it (flamegraph.pl's folded lines, speedscope's
file format, the Chrome trace format, `go tool pprof`) and checked against the samples the
daemon stored in the window the summary line names."""
import json
import os
import re
import signal
import subprocess
import time

from conftest import TARGETS, Target, wait_for

PY = '/usr/bin/python3'
SUMMARY = re.compile(r'wrote (\S+) \((\w+)\): (\d+) samples of (\d+) threads? in (\d+) process'
                     r'(?:es)? over ([\d.]+) s; (\d+) torn, (\d+) errors')


def summary(stderr):
    m = SUMMARY.search(stderr)
    assert m, stderr
    return m


def folded_counts(text):
    """{stack: count} of folded text, every line 'frame;frame count'."""
    out = {}
    for line in text.splitlines():
        stack, n = line.rsplit(' ', 1)
        out[stack] = out.get(stack, 0) + int(n)
    return out


def state(daemon, pid):
    return daemon.api('GET', '/v1/targets/%d' % pid)[1].get('state')


def test_record_several_pids_into_one_profile(daemon, target_factory, tmp_path):
    """Two processes into one folded file, each under a root naming it; the samples the
    summary counts are the file's, and those the store holds for the window; the one
    attached before stays attached, the other is detached."""
    a = target_factory(PY, 'busy.py')
    b = target_factory('/root/.pyenv/versions/3.12.1/bin/python3', 'busy.py')
    daemon.ctl('attach', a.pid, check=True)
    out = str(tmp_path / 'two.folded')
    r = daemon.ctl('record', '--duration', '2s', '-o', out, a.pid, b.pid)
    assert r.returncode == 0, r.stderr
    assert 'pid %d was attached already; it stays attached' % a.pid in r.stderr
    m = summary(r.stderr)
    assert m.group(1) == out and m.group(2) == 'folded' and m.group(5) == '2', r.stderr
    assert m.group(4) == '2' and 1.9 <= float(m.group(6)) < 4, r.stderr  # the main threads
    counts = folded_counts(open(out).read())
    assert sum(counts.values()) == int(m.group(3)), (counts, r.stderr)
    for t in (a, b):
        mine = {s: n for s, n in counts.items() if s.startswith('pid %d (' % t.pid)}
        assert mine, counts
        hot = max(mine, key=mine.get)
        assert hot.split(';')[1].startswith('<module> (') and \
            hot.split(';')[-1].startswith('spin_inner ('), hot
        # ~100 Hz for 2 s, on the CPU: not the sleeper thread
        assert 120 <= sum(mine.values()) <= 420, (t.pid, sum(mine.values()))
        assert not any('sleeper' in s for s in mine), mine
    assert state(daemon, a.pid) == 'sampling'
    assert state(daemon, b.pid) != 'sampling'
    daemon.ctl('detach', a.pid)
    # pprof is of one process at a time: said, nothing written
    r = daemon.ctl('record', '-d', '1', '-o', str(tmp_path / 'x.pb.gz'), a.pid, b.pid)
    assert r.returncode == 1 and 'pprof of one process at a time' in r.stderr, r.stderr
    assert not os.path.exists(str(tmp_path / 'x.pb.gz'))
    assert state(daemon, a.pid) != 'sampling' and state(daemon, b.pid) != 'sampling'


def test_record_by_rank(daemon, target_factory, tmp_path):
    """--by rank: a rank's processes under one root (a worker inherits its RANK), a process
    without a rank under its own pid."""
    env = lambda rank: dict(os.environ, RANK=rank) if rank else dict(os.environ)
    r0, r1, worker, plain = (target_factory(PY, 'busy.py', env=env(k))
                             for k in ('0', '1', '1', None))
    out = str(tmp_path / 'ranks.folded')
    r = daemon.ctl('record', '-d', '2s', '--by', 'rank', '-o', out, r0.pid, r1.pid, worker.pid,
                   plain.pid)
    assert r.returncode == 0, r.stderr
    roots = {}
    for stack, n in folded_counts(open(out).read()).items():
        roots[stack.split(';')[0]] = roots.get(stack.split(';')[0], 0) + n
    mine = 'pid %d (' % plain.pid
    assert {k if not k.startswith(mine) else mine for k in roots} == {'rank 0', 'rank 1', mine}, \
        roots
    # two busy processes under rank 1, one under rank 0 (each ~100 Hz on its CPU)
    assert 1.4 < roots['rank 1'] / roots['rank 0'] < 2.8, roots


def nested(events):
    """Whether a thread's complete events nest: any two are disjoint or one holds the other."""
    spans = sorted((e['ts'], -e['dur'], e['ts'] + e['dur']) for e in events)
    open_ends = []
    for start, _, end in spans:
        while open_ends and open_ends[-1] <= start + 1e-6:
            open_ends.pop()
        if open_ends and end > open_ends[-1] + 1e-6:
            return False
        open_ends.append(end)
    return True


def test_record_a_command_speedscope_and_chrometrace(daemon, tmp_path):
    """record -- COMMAND: attached from its start, a speedscope file of one sampled profile per
    thread in time order (ns, one period a sample) and exits with the command's status; run -o
    the same; the Chrome trace of that window nests each thread's frames, a frame's time the
    samples it was on."""
    out = str(tmp_path / 'cmd.speedscope.json')
    env = dict(os.environ, PROBED_SOCKET=daemon.socket, EXIT_AFTER='2')
    r = subprocess.run([daemon.probectl, 'record', '--idle', '-o', out, '--', PY,
                        os.path.join(TARGETS, 'busy.py'), '3'], env=env, timeout=60,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert r.returncode == 3, r.stderr  # the command's status
    m = summary(r.stderr)
    pid = int(json.loads(r.stdout.split('READY', 1)[1].splitlines()[0])['pid'])
    busy = os.path.join(TARGETS, 'busy.py')
    doc = json.load(open(out))
    assert doc['$schema'] == 'https://www.speedscope.app/file-format-schema.json'
    assert doc['version'] and doc['exporter'] == 'probed'
    names = [f['name'] for f in doc['shared']['frames']]
    profiles = {p['name']: p for p in doc['profiles']}
    main = profiles['MainThread (pid %d, tid %d)' % (pid, pid)]
    assert any(n.startswith('sleeper (pid %d' % pid) for n in profiles), list(profiles)
    assert sum(len(p['samples']) for p in doc['profiles']) == int(m.group(3))
    for p in doc['profiles']:
        assert p['type'] == 'sampled' and p['unit'] == 'nanoseconds'
        assert len(p['samples']) == len(p['weights']) and set(p['weights']) == {10000000}
        assert 0 <= p['startValue'] < p['endValue']
    leaves = [names[s[-1]] for s in main['samples']]
    assert sum(l == 'spin_inner' for l in leaves) > len(leaves) / 2, leaves[:20]
    # rooted at the script's <module> (but the start and the interpreter's exit: threading's
    # _shutdown joining the sleeper)
    roots = [names[s[0]] for s in main['samples']]
    assert sum(r == '<module>' for r in roots) > 0.9 * len(roots), set(roots)
    # the same process's window as a Chrome trace, through flamegraph -o NAME.trace.json
    trace = str(tmp_path / 'cmd.trace.json')
    daemon.ctl('flamegraph', pid, '--idle', '-o', trace, check=True)
    events = json.load(open(trace))['traceEvents']
    threads = {e['tid']: e['args']['name'] for e in events if e['ph'] == 'M' and
               e['name'] == 'thread_name'}
    assert threads[pid] == 'MainThread (pid %d, tid %d)' % (pid, pid), threads
    mine = [e for e in events if e['ph'] == 'X' and e['tid'] == pid]
    assert mine and nested(mine)
    module_us = sum(e['dur'] for e in mine
                    if e['name'] == '<module>' and e['args']['file'] == busy)
    # <module> runs from the first sample it is on to the first it is not: at least a period
    # a sample it is on, at most the main thread's sampled span
    on = sum(doc['shared']['frames'][s[0]] == {'name': '<module>', 'file': busy, 'line': 45}
             for s in main['samples'])
    lo, hi = daemon.rows('SELECT min(ts_ns), max(ts_ns) FROM samples s JOIN targets t'
                         ' ON t.id = s.target_id WHERE t.pid = %d AND s.tid = %d' % (pid, pid))[0]
    assert 0.95 * on * 1e4 <= module_us <= (hi - lo) / 1e3 + 1e4, (module_us, on, hi - lo)
    # run -o: the same file, the command's status
    out = str(tmp_path / 'run.folded')
    r = subprocess.run([daemon.probectl, 'run', '-o', out, '--', PY,
                        os.path.join(TARGETS, 'busy.py'), '4'], env=env, timeout=60,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert r.returncode == 4, r.stderr
    counts = folded_counts(open(out).read())
    assert sum(counts.values()) == int(summary(r.stderr).group(3)) > 100, r.stderr
    # a command that never runs Python: said, no profile, exit 1
    r = subprocess.run([daemon.probectl, 'record', '-o', str(tmp_path / 'no.svg'), '--', 'true'],
                       env=env, timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    assert r.returncode == 1 and 'ended before it ran Python' in r.stderr, r.stderr


def test_record_until_ctrl_c(daemon, target_factory, tmp_path):
    """No --duration: Ctrl-C ends the recording, which is still written (py-spy's way); the
    default name says the pid, and the process is detached."""
    t = target_factory(PY, 'busy.py')
    p = subprocess.Popen([daemon.probectl, 'record', '--function', str(t.pid)], cwd=str(tmp_path),
                         env=dict(os.environ, PROBED_SOCKET=daemon.socket),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    wait_for(lambda: state(daemon, t.pid) == 'sampling', what='attached')
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    m = summary(err)
    name = os.path.basename(m.group(1))
    assert re.match(r'probed-%d-\d{8}-\d{6}\.svg$' % t.pid, name), name
    svg = open(str(tmp_path / name)).read()
    # --function: one box per function, its file without a line
    assert 'spin_inner (%s)' % os.path.join(TARGETS, 'busy.py') in svg
    assert 'busy.py:' not in svg
    assert state(daemon, t.pid) != 'sampling'


def test_flamegraph_options_and_formats(daemon, target_factory, tmp_path):
    """flamegraph --threads roots each stack at its thread's name, --gil keeps the samples
    holding the GIL, --since/--until take times (and durations ago) and cut the window the
    store has, -o's name picks the format, and a quiet thread's empty graph says --idle."""
    t = target_factory(PY, 'busy.py')
    daemon.ctl('attach', t.pid, check=True)
    wait_for(lambda: daemon.rows('SELECT count(*) FROM samples s JOIN targets t ON'
                                 ' t.id = s.target_id WHERE t.pid = %d' % t.pid)[0][0] > 300,
             what='samples')
    threads = folded_counts(daemon.ctl('flamegraph', t.pid, '--threads', '--idle',
                                       '--format', 'folded', check=True).stdout)
    roots = {s.split(';')[0] for s in threads}
    assert 'MainThread (tid %d)' % t.pid in roots, roots
    assert any(r.startswith('sleeper (tid ') for r in roots), roots
    # the GIL: the spinning main thread holds it, the sleeper never does
    gil = folded_counts(daemon.ctl('flamegraph', t.pid, '--gil', '--idle', '--format',
                                   'folded', check=True).stdout)
    assert gil and not any('sleeper' in s for s in gil), gil
    # a window by wall-clock time: what the store has between the two instants
    span = ('SELECT min(ts_ns), max(ts_ns) FROM samples s JOIN targets t ON t.id = s.target_id'
            ' WHERE t.pid = %d' % t.pid)
    lo = daemon.rows(span)[0][0]
    cut = (lo // 10**9 + 2) * 10**9  # a whole second with samples before and after it
    wait_for(lambda: daemon.rows(span)[0][1] > cut + 10**9, what='samples past the cut')
    until = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(cut // 10**9))
    want = daemon.rows('SELECT count(*) FROM samples s JOIN targets t ON t.id = s.target_id'
                       ' WHERE t.pid = %d AND ts_ns < %d AND (state & 1) = 1' % (t.pid, cut))
    got = folded_counts(daemon.ctl('flamegraph', t.pid, '--since', '1h', '--until', until,
                                   '--format', 'folded', check=True).stdout)
    assert sum(got.values()) == want[0][0] > 0, (sum(got.values()), want)
    r = daemon.ctl('flamegraph', t.pid, '--until', 'yesterday-ish')
    assert r.returncode == 2 and 'or a time (14:05' in r.stderr, r.stderr
    # -o's name: folded text, and pprof that go tool pprof reads
    daemon.ctl('flamegraph', t.pid, '-o', str(tmp_path / 'f.collapsed'), check=True)
    assert all(l.rsplit(' ', 1)[1].strip().isdigit() for l in open(str(tmp_path / 'f.collapsed')))
    pb = str(tmp_path / 'f.pb.gz')
    daemon.ctl('flamegraph', t.pid, '-o', pb, check=True)
    r = subprocess.run(['go', 'tool', 'pprof', '-top', pb], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=120,
                       env=dict(os.environ, HOME=str(tmp_path)))
    assert r.returncode == 0 and 'spin_inner' in r.stdout, r.stdout
    # --function in the timeline formats too: a function once, with no line (the daemon draws
    # one process's)
    for fmt in ('speedscope', 'chrometrace'):
        text = daemon.ctl('flamegraph', t.pid, '--function', '--format', fmt, check=True).stdout
        doc = json.loads(text)
        if fmt == 'speedscope':
            names = [f['name'] for f in doc['shared']['frames']]
            assert not any('line' in f for f in doc['shared']['frames']), doc['shared']
        else:
            names = [e['name'] for e in doc['traceEvents'] if e.get('ph') == 'X']
            assert not any('line' in e.get('args', {}) for e in doc['traceEvents']), fmt
            names = list(dict.fromkeys(names))
        assert 'spin_inner' in names and len(names) == len(set(names)), names
    # a thread that only sleeps has no samples on the CPU: the error says --idle
    sleeper = daemon.rows("SELECT th.tid FROM threads th JOIN targets t ON t.id = th.target_id"
                          " WHERE t.pid = %d AND th.name = 'sleeper'" % t.pid)[0][0]
    r = daemon.ctl('flamegraph', t.pid, '--thread', sleeper, '--format', 'folded')
    assert r.returncode == 1 and '--idle' in r.stderr, r.stderr
    daemon.ctl('detach', t.pid)


def test_record_usage_errors(daemon, tmp_path):
    """What record cannot do is said, with exit 2 for usage and 1 for a process."""
    for args, code, words in ((('record',), 2, 'expected PID... or -- COMMAND'),
                              (('record', '--by', 'node', '1'), 2, '--by takes pid, rank, thread'),
                              (('record', '--format', 'png', '1'), 2, '--format takes'),
                              (('record', '-d', '5x', '1'), 2, 'takes a duration'),
                              (('record', 'python3'), 2, 'a command goes after --'),
                              (('record', '-d', '1', '999999'), 1, 'no such process')):
        r = daemon.ctl(*args)
        assert r.returncode == code and words in r.stderr, (args, r.returncode, r.stderr)
        assert ': No such file or directory' not in r.stderr
    # a finding ends with what was found, not an errno's text
    sleeper = subprocess.Popen(['sleep', '60'])
    try:
        r = daemon.ctl('attach', sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r.returncode == 1 and 'is not a CPython 3 process' in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith('holds a Python runtime'), r.stderr


def screen_of(fd, screen, stream, seconds):
    """What a terminal shows after @seconds more of @fd's output (pyte: a real emulator)."""
    import select
    end = time.time() + seconds
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                stream.feed(os.read(fd, 65536).decode('utf-8', 'replace'))
            except OSError:
                break
    return screen.display


def test_top_on_a_terminal_and_as_data(daemon, target_factory):
    """top on a terminal is interactive (ncurses, read through a terminal emulator): o/t sort
    by own or total, g keeps the GIL's samples, q quits with 0; --once prints the same ranking
    as a table, CSV or JSON, the shares those of the counts it prints."""
    import pty
    import pyte
    t = target_factory(PY, 'busy.py')
    daemon.ctl('attach', t.pid, check=True)
    wait_for(lambda: daemon.rows('SELECT count(*) FROM samples s JOIN targets t ON'
                                 ' t.id = s.target_id WHERE t.pid = %d' % t.pid)[0][0] > 100,
             what='samples')
    rows = json.loads(daemon.ctl('top', t.pid, '--once', '--json', check=True).stdout)
    assert rows[0]['function'] == 'spin_inner' and rows[0]['own'] > 0, rows
    # every share is of one count: the samples of the window
    window = {round(100.0 * r[k] / r[k + '_pct'], 6) for r in rows for k in ('own', 'total')
              if r[k]}
    assert len(window) == 1 and window.pop() >= rows[0]['total'], rows
    csv_lines = daemon.ctl('top', t.pid, '--once', '--format', 'csv', '--rows', '2',
                           check=True).stdout.splitlines()
    assert csv_lines[0] == 'own_pct,total_pct,own,total,function,file' and len(csv_lines) == 3
    by_total = json.loads(daemon.ctl('top', t.pid, '--once', '--json', '--sort', 'total',
                                     check=True).stdout)
    # by total, ties top-down: the script's <module> holds every sample and is the root
    assert by_total[0]['function'] == '<module>' and by_total[0]['total'] >= \
        by_total[-1]['total'], by_total
    r = daemon.ctl('top', t.pid, '--format', 'csv')
    assert r.returncode == 2 and 'goes with --once' in r.stderr, r.stderr
    screen = pyte.Screen(100, 24)
    stream = pyte.Stream(screen)
    child, fd = pty.fork()
    if child == 0:
        os.environ.update(TERM='xterm', LINES='24', COLUMNS='100', PROBED_SOCKET=daemon.socket)
        os.execv(daemon.probectl, ['probectl', 'top', str(t.pid), '--interval', '0.3'])
    try:
        shown = screen_of(fd, screen, stream, 2)
        assert shown[0].startswith('probectl top: pid %d' % t.pid), shown
        assert 'sorted by %Own' in shown[1] and 'spin_inner' in shown[3], shown
        assert shown[-1].startswith('q quit'), shown
        os.write(fd, b't')
        shown = screen_of(fd, screen, stream, 1)
        assert 'sorted by %Total' in shown[1] and 'spin_inner' not in shown[3], shown
        os.write(fd, b'g')
        shown = screen_of(fd, screen, stream, 1)
        assert 'holding the GIL' in shown[0], shown
        os.write(fd, b'q')
        screen_of(fd, screen, stream, 0.5)
        _, status = os.waitpid(child, 0)
        child = None
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        os.close(fd)
    daemon.ctl('detach', t.pid)


def test_one_output_convention(daemon, target_factory):
    """list, config, status, detach and query print a table for people, CSV with --format csv
    (RFC 4180) and the API's JSON with --json, reals at 15 significant digits; list shows the
    processes that ended lately (--all: every one); detach --match and --all detach several."""
    import csv
    import io
    a = target_factory(PY, 'busy.py')
    b = target_factory(PY, 'busy.py')
    for t in (a, b):
        daemon.ctl('attach', t.pid, check=True)
    table = daemon.ctl('list', check=True).stdout.splitlines()
    assert table[0].split() == ['PID', 'STATE', 'RATE', 'PYTHON', 'SAMPLES', 'TORN', 'MODE',
                                'COMMAND'], table
    mine = [l for l in table if l.split()[0] in (str(a.pid), str(b.pid))]
    assert len(mine) == 2 and all(l.split()[1] == 'sampling' for l in mine), table
    # the columns line up: each row's STATE starts under the heading's
    at = table[0].index('STATE')
    assert all(l[at:].startswith('sampling') for l in mine), table
    rows = list(csv.DictReader(io.StringIO(daemon.ctl('list', '--format', 'csv',
                                                       check=True).stdout)))
    assert {int(r['PID']) for r in rows} >= {a.pid, b.pid} and \
        all(r['COMMAND'].endswith('busy.py') for r in rows if int(r['PID']) == a.pid), rows
    listed = json.loads(daemon.ctl('list', '--json', check=True).stdout)
    assert {t['pid'] for t in listed['targets']} >= {a.pid, b.pid}
    # query: 20.9 is 20.9 in JSON, the table and CSV; a comma quoted
    r = daemon.ctl('query', '--json', "SELECT 20.9 AS x, 1.0 / 3 AS y, 'a,b' AS s", check=True)
    assert '20.9,' in r.stdout.replace(' ', '').replace('\n', '') and '20.899' not in r.stdout
    # and every digit a value needs: what reads back is the same double
    r = daemon.ctl('query', '--json', 'SELECT 0.1 + 0.2 AS z, 2.0 AS two', check=True)
    assert json.loads(r.stdout)['rows'] == [[0.1 + 0.2, 2.0]] and '2.0' in r.stdout, r.stdout
    r = daemon.ctl('query', '--format', 'csv', 'SELECT 0.1 + 0.2 AS z', check=True)
    assert float(r.stdout.splitlines()[1]) == 0.1 + 0.2, r.stdout
    r = daemon.ctl('query', '--format', 'csv', "SELECT 20.9 AS x, 'a,\"b' AS s", check=True)
    assert r.stdout == 'x,s\n20.9,"a,""b"\n', r.stdout
    r = daemon.ctl('query', '--format', 'xml', 'SELECT 1')
    assert r.returncode == 2 and 'table, csv or json' in r.stderr, r.stderr
    # config: probed.conf's lines, their values aligned whatever the longest key; CSV; JSON
    lines = [l for l in daemon.ctl('config', check=True).stdout.splitlines()
             if not l.startswith('#')]
    assert len({l.index(' = ') for l in lines}) == 1, lines
    settings = list(csv.DictReader(io.StringIO(daemon.ctl('config', '--format', 'csv',
                                                          check=True).stdout)))
    assert {'sample_rate', 'allocation_interval'} <= {s['key'] for s in settings}
    assert json.loads(daemon.ctl('config', '--json', check=True).stdout)['settings']
    # status
    st = json.loads(daemon.ctl('status', '--json', check=True).stdout)
    assert st['targets']['sampling'] >= 2 and st['database'] == daemon.db, st
    text = daemon.ctl('status', check=True).stdout
    assert re.search(r'^sampling\s+\d+', text, re.M) and daemon.db in text, text
    # one that ended lately is listed, with its end (--all: every one, however old)
    a.close()
    wait_for(lambda: {t['pid']: t['state'] for t in json.loads(
        daemon.ctl('list', '--json').stdout)['targets']}.get(a.pid) == 'exited',
        what='the ended target listed')
    ended = [t for t in json.loads(daemon.ctl('list', '--all', '--json').stdout)['targets']
             if t['pid'] == a.pid]
    assert ended and ended[0]['ended_ns'] > ended[0]['attached_ns'], ended
    # detach --match: the one whose command line matches and still runs; then --all
    r = daemon.ctl('detach', '--match', 'busy\\.py', '--json', check=True)
    assert b.pid in json.loads(r.stdout)['detached'], r.stdout
    r = daemon.ctl('detach', '--all', check=True)
    assert r.stdout.startswith('detached 0 processes'), r.stdout
    r = daemon.ctl('detach', '--all', '--match', 'x')
    assert r.returncode == 2 and 'not both' in r.stderr


def test_pprof_labels_start_lines_and_mapping(daemon, target_factory, tmp_path):
    """A pprof profile labels each sample with its pid and thread (go tool pprof -tags), names
    the program as its main binary (no 'Main binary filename not available'), and gives each
    function its def's line."""
    t = target_factory(PY, 'busy.py')
    daemon.ctl('attach', t.pid, check=True)
    wait_for(lambda: daemon.rows('SELECT count(*) FROM samples s JOIN targets t ON'
                                 ' t.id = s.target_id WHERE t.pid = %d' % t.pid)[0][0] > 100,
             what='samples')
    pb = str(tmp_path / 'p.pb.gz')
    daemon.ctl('flamegraph', t.pid, '--idle', '-o', pb, check=True)
    env = dict(os.environ, HOME=str(tmp_path))
    tags = subprocess.run(['go', 'tool', 'pprof', '-tags', pb], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=120, env=env)
    assert tags.returncode == 0, tags.stdout
    assert 'MainThread' in tags.stdout and 'sleeper' in tags.stdout, tags.stdout
    assert re.search(r'pid:.*\b%d\b' % t.pid, tags.stdout, re.S), tags.stdout
    raw = subprocess.run(['go', 'tool', 'pprof', '-raw', pb], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True, timeout=120, env=env)
    assert raw.returncode == 0 and 'Main binary filename not available' not in raw.stdout, \
        raw.stdout
    mappings = raw.stdout.split('Mappings', 1)[1]
    assert PY in mappings or 'python3' in mappings, mappings
    # each location's function starts at its def: "N: 0x0 M=1 spin_inner FILE:LINE s=START"
    src = open(os.path.join(TARGETS, 'busy.py')).read().splitlines()
    start = next(i for i, l in enumerate(src, 1) if l.startswith('def spin_inner'))
    locations = raw.stdout.split('Locations', 1)[1].split('Mappings', 1)[0]
    assert re.search(r'M=1 spin_inner \S+busy\.py:\d+ s=%d\b' % start, locations), locations
    daemon.ctl('detach', t.pid)


MAN = os.path.join(os.path.dirname(__file__), '..', '..', 'packaging', 'man', 'probectl.1')
COMPLETION = os.path.join(os.path.dirname(__file__), '..', '..', 'packaging', 'completion')


def test_usage_completion_and_man_page_agree(daemon):
    """Each command's options, as its --help names them (and so as completion offers them),
    are options getopt takes, and the man page names each command and each of its options;
    bash's completion, through the installed script, completes a command and an option."""
    env = dict(os.environ, PROBED_SOCKET=daemon.socket)

    def complete(*words):
        r = subprocess.run([daemon.probectl, '__complete'] + list(words), env=env, timeout=30,
                           stdout=subprocess.PIPE, universal_newlines=True)
        assert r.returncode == 0
        return r.stdout.split()
    commands = complete('')
    assert {'attach', 'record', 'flamegraph', 'top', 'status', 'help'} <= set(commands), commands
    assert complete('fl') == ['flamegraph'] and complete('--socket', 'x', 're') == \
        ['record', 'repl']
    # the man page's entries: the text under each ".TP" heading "command ...", by command
    entries, current = {}, None
    lines = open(MAN).read().replace('\\-', '-').splitlines()
    for i, line in enumerate(lines):
        if line.startswith('.SH'):
            current = None
        if line == '.TP' and i + 1 < len(lines):
            m = re.match(r'^\.B[IR]? "?([a-z]+)\b', lines[i + 1])
            current = m.group(1) if m else current
        if current:
            entries[current] = entries.get(current, '') + line + '\n'
    missing = []
    for cmd in commands:
        if cmd in ('help', 'dump'):
            continue
        if cmd not in entries:
            missing.append(cmd)
            continue
        for opt in complete(cmd, '--'):
            # getopt refuses an option it does not know at once; one it takes either fails
            # for want of more (a pid, an argument) or runs (web serves: stopped after 3 s)
            p = subprocess.Popen([daemon.probectl, cmd, opt], env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 universal_newlines=True)
            try:
                err = p.communicate(timeout=3)[1]
            except subprocess.TimeoutExpired:
                p.kill()
                err = p.communicate()[1]
            assert 'unrecognized option' not in err, (cmd, opt, err)
            if opt not in ('--help', '--socket') and not re.search(
                    re.escape(opt) + r'(?![a-z-])', entries[cmd]):
                missing.append('%s %s' % (cmd, opt))
    assert not missing, 'probectl.1 lacks: %s' % ', '.join(missing)
    # bash, through the script the package installs
    script = ('source %s; COMP_WORDS=(probectl flamegraph 1 --th); COMP_CWORD=3; _probectl;'
              ' printf "%%s\\n" "${COMPREPLY[@]}"' % os.path.join(COMPLETION, 'probectl.bash'))
    r = subprocess.run(['bash', '-c', script], env=dict(env, PATH=os.path.dirname(
        daemon.probectl) + ':' + os.environ['PATH']), stdout=subprocess.PIPE,
        universal_newlines=True, timeout=30)
    assert sorted(r.stdout.split()) == ['--thread', '--threads'], r.stdout


def test_export_pages_miss_no_row_as_the_daemon_deletes(tmp_path):
    """export pages through each table past the last row it copied (its key, or for a table
    without one its time), never by OFFSET: rows the daemon deletes meanwhile (retention, from
    the oldest) move no row out of reach or into the copy twice. 3,000 rows in a keyed table
    (memory) and 3,000 in one without a key (torch_values, 3 rows an instant) are copied 20 rows
    a page while the oldest 1,000 of each are deleted: every row never deleted is in the copy,
    once (OFFSET pages skipped up to the 1,000 deleted)."""
    import sqlite3
    import threading
    from daemon import Daemon
    work = str(tmp_path)
    d = Daemon(workdir=work)
    try:
        db = sqlite3.connect(d.db, timeout=30)
        base = time.time_ns()  # within the retention: only the deleter deletes
        db.execute("INSERT INTO targets(id, pid, start_time, uid, cmdline, py_version, rate_hz,"
                   " attached_ns) VALUES (999, 999999, 0, 0, 'synthetic', '3.12.0', 100, 0)")
        db.executemany('INSERT INTO memory VALUES (999, ?, 1, 1, 1, 0, 0, 1)',
                       [(base + i,) for i in range(3000)])
        db.executemany("INSERT INTO torch_values VALUES (999, 0, ?, 'f', ?, ?)",
                       [(base + i // 3, 'v%d' % (i % 3), i) for i in range(3000)])
        db.commit()
        done = threading.Event()

        def delete_oldest():  # 20 rows of each table every 5 ms, up to the oldest 1,000
            conn = sqlite3.connect(d.db, timeout=30)
            for k in range(50):
                if done.is_set():
                    break
                conn.execute('DELETE FROM memory WHERE target_id = 999 AND ts_ns < ?',
                             (base + 20 * (k + 1),))
                conn.execute('DELETE FROM torch_values WHERE target_id = 999 AND value < ?',
                             (20 * (k + 1),))
                conn.commit()
                time.sleep(0.005)
            conn.close()
        deleter = threading.Thread(target=delete_oldest)
        deleter.start()
        path = os.path.join(work, 'copy.db')
        r = d.ctl('export', '--db', path, '--page-rows', '20')
        done.set()
        deleter.join()
        assert r.returncode == 0, r.stderr
        copy = sqlite3.connect(path)
        mem = [t for (t,) in copy.execute('SELECT ts_ns - ? FROM memory WHERE target_id = 999'
                                          ' ORDER BY ts_ns', (base,))]
        assert set(range(1000, 3000)) <= set(mem) and len(mem) == len(set(mem)), \
            (len(mem), sorted(set(range(1000, 3000)) - set(mem))[:5])
        vals = [v for (v,) in copy.execute('SELECT value FROM torch_values WHERE target_id = 999'
                                           ' ORDER BY value')]
        assert set(range(1002, 3000)) <= set(vals) and len(vals) == len(set(vals)), \
            (len(vals), sorted(set(range(1002, 3000)) - set(vals))[:5])
        copy.close()
        r = d.ctl('export', '--db', os.path.join(work, 'x.db'), '--page-rows', '0')
        assert r.returncode == 2 and '--page-rows takes 1 to 100000' in r.stderr, r.stderr
    finally:
        d.close()


def test_export_a_self_contained_database(daemon, target_factory, tmp_path):
    """export --db: a file sqlite3 reads alone, with the samples as rows (those the daemon held
    when it began, and no more than it held after), the documented views as real views that
    answer as the daemon's do, --pid narrowing it; never over a file that exists; another user's
    copy holds nothing of root's processes."""
    import sqlite3
    from daemon import ensure_test_user
    t = target_factory(PY, 'busy.py')
    other = target_factory(PY, 'busy.py')
    for p in (t, other):
        daemon.ctl('attach', p.pid, check=True)
    count = ('SELECT count(*) FROM samples s JOIN targets t ON t.id = s.target_id'
             ' WHERE t.pid = %d' % t.pid)
    wait_for(lambda: daemon.rows(count)[0][0] > 200, what='samples')
    before = daemon.rows(count)[0][0]
    path = str(tmp_path / 'copy.db')
    r = daemon.ctl('export', '--db', path, '--pid', t.pid)
    after = daemon.rows(count)[0][0]
    assert r.returncode == 0 and 'wrote %s' % path in r.stderr, r.stderr
    db = sqlite3.connect(path)
    got = db.execute(count).fetchone()[0]
    assert before <= got <= after, (before, got, after)
    assert db.execute('SELECT count(*) FROM targets WHERE pid = %d' % other.pid).fetchone()[0] == 0
    views = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    assert {'stacks', 'sample_frames', 'function_stats', 'thread_states', 'memory_usage',
            'torch_trace', 'stack_minutes'} <= views, views
    top = db.execute('SELECT func FROM function_stats WHERE pid = %d LIMIT 1' % t.pid).fetchone()
    assert top == ('spin_inner',), top
    # a view over the copied rows answers as the daemon's over its own: the counts per minute
    minutes = db.execute('SELECT sum(n) FROM stack_minutes WHERE pid = %d' % t.pid).fetchone()[0]
    assert minutes and minutes >= got * 0.5, (minutes, got)
    frames = db.execute("SELECT count(*) FROM sample_frames WHERE pid = %d AND func ="
                        " 'spin_inner'" % t.pid).fetchone()[0]
    main = db.execute('SELECT count(*) FROM samples WHERE tid = %d' % t.pid).fetchone()[0]
    assert 0.9 * main <= frames <= main, (frames, main)  # the main thread spins there
    db.close()
    r = daemon.ctl('export', '--db', path)
    assert r.returncode == 1 and 'File exists' in r.stderr, r.stderr
    # another user: nothing of root's
    user = ensure_test_user()
    os.chmod(daemon.socket, 0o666)
    import tempfile
    shared = tempfile.mkdtemp(prefix='probed-export-')
    os.chmod(shared, 0o777)
    theirs = os.path.join(shared, 'theirs.db')
    r = daemon.ctl('export', '--db', theirs, user=user)
    assert r.returncode == 0, r.stderr
    db = sqlite3.connect(theirs)
    assert db.execute('SELECT count(*) FROM targets').fetchone()[0] == 0
    assert db.execute('SELECT count(*) FROM samples').fetchone()[0] == 0
    db.close()
    import shutil
    shutil.rmtree(shared)
    for p in (t, other):
        daemon.ctl('detach', p.pid)


class Ingest:
    """A Pyroscope-compatible receiver (POST /ingest as Pyroscope's HTTP API documents it),
    checking each request; it answers 503 to the requests numbered in @fail (an outage)."""

    def __init__(self, fail=()):
        import http.server
        import threading
        self.requests, self.errors, self.fail = [], [], set(fail)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                import email.parser
                import urllib.parse
                url = urllib.parse.urlparse(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                body = self.rfile.read(int(self.headers['Content-Length']))
                msg = email.parser.BytesParser().parsebytes(
                    b'Content-Type: ' + self.headers['Content-Type'].encode() + b'\r\n\r\n' + body)
                parts = {p.get_param('name', header='content-disposition'): p.get_payload(
                    decode=True) for p in msg.get_payload()} if msg.is_multipart() else {}
                m = re.match(r'^python\.cpu\{job=busy\.py,host=[^,{}=]+,pid=(\d+)\}$',
                             q.get('name', ''))
                why = [w for ok, w in (
                    (url.path == '/ingest', 'path %s' % url.path),
                    (m is not None, 'name %r' % q.get('name')),
                    (q.get('format') == 'pprof', 'format %r' % q.get('format')),
                    (q.get('spyName') == 'probed' and q.get('sampleRate') == '100', 'params %r' % q),
                    (int(q.get('from', 0)) < int(q.get('until', 0)), 'window %r' % q),
                    ('profile' in parts and parts['profile'][:2] == b'\x1f\x8b',
                     'no gzipped pprof in a multipart "profile" field: %r' % list(parts)))
                    if not ok]
                n = len(outer.requests) + len(outer.errors)
                if why:
                    outer.errors.append(why)
                    self.send_response(400)
                elif n in outer.fail:
                    outer.errors.append(['refused on purpose'])
                    self.send_response(503)
                else:
                    outer.requests.append((int(m.group(1)), int(q['from']), int(q['until']),
                                           parts['profile']))
                    self.send_response(200)
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def pprof_samples(path, env):
    """The samples/count total of a pprof file, as go tool pprof reads it."""
    r = subprocess.run(['go', 'tool', 'pprof', '-raw', path], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout
    text = r.stdout.split('Samples:', 1)[1].split('Locations', 1)[0]
    return sum(int(l.split()[0]) for l in text.splitlines()[2:] if l.strip() and
               l.split()[0].isdigit())


def test_profiles_pushed_to_pyroscope(daemon, target_factory, tmp_path):
    """pyroscope_url set: each target's profile is pushed to /ingest every pyroscope_interval as
    Pyroscope's API documents it (name with job, host, pid; whole-second windows; a multipart
    pprof that go tool pprof reads, labelled with the thread); through an outage (two pushes
    refused) no second is lost: the windows taken join end to end, and their samples are the
    samples stored in them."""
    t = target_factory(PY, 'busy.py')
    ingest = Ingest(fail=(1, 2))
    try:
        r = daemon.ctl('config', 'pyroscope_url=ftp://x')
        assert r.returncode == 1 and 'http://' in r.stderr, r.stderr
        r = daemon.ctl('config', 'pyroscope_url=http://me:secret@x:4040/')
        assert r.returncode == 1 and 'no user:password@' in r.stderr, r.stderr
        daemon.ctl('config', 'pyroscope_interval=1s', check=True)
        daemon.ctl('config', 'pyroscope_url=' + ingest.url, check=True)
        daemon.ctl('attach', t.pid, check=True)
        wait_for(lambda: len([q for q in ingest.requests if q[0] == t.pid]) >= 4,
                 timeout=40, what='four pushes accepted',
                 explain=lambda: (ingest.errors, daemon.api('GET', '/v1/status')[1].get(
                     'pyroscope')))
        daemon.ctl('config', 'pyroscope_url=', check=True)
        assert [e for e in ingest.errors if e != ['refused on purpose']] == [], ingest.errors
        assert len(ingest.errors) == 2
        mine = sorted(q for q in ingest.requests if q[0] == t.pid)
        for a, b in zip(mine, mine[1:]):
            assert a[2] == b[1], (a[1:3], b[1:3])  # end to end: nothing lost, nothing twice
        env = dict(os.environ, HOME=str(tmp_path))
        pushed = 0
        for i, (_, lo, hi, pb) in enumerate(mine):
            path = str(tmp_path / ('push%d.pb.gz' % i))
            open(path, 'wb').write(pb)
            pushed += pprof_samples(path, env)
        stored = daemon.rows('SELECT count(*) FROM samples s JOIN targets t ON t.id = s.target_id'
                             ' WHERE t.pid = %d AND ts_ns >= %d AND ts_ns < %d AND stack_id <> 0'
                             ' AND (state & 1) = 1' % (t.pid, mine[0][1] * 10**9,
                                                       mine[-1][2] * 10**9))[0][0]
        assert pushed == stored > 0, (pushed, stored)
        tags = subprocess.run(['go', 'tool', 'pprof', '-tags', path], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=120,
                              env=env).stdout
        assert 'MainThread' in tags and str(t.pid) in tags, tags
        st = daemon.api('GET', '/v1/status')[1]['pyroscope']
        assert st['pushes'] >= 4 and st['failures'] == 2 and 'HTTP 503' in st['last_error'], st
    finally:
        daemon.ctl('config', 'pyroscope_url=')
        ingest.close()
        daemon.ctl('detach', t.pid)
