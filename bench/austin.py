#!/usr/bin/python3
"""probed beside austin, on the same target in alternating windows; prints figures, asserts
nothing.

usage: PROBED_BUILD=DIR bench/austin.py [--python all|PATH,...] [--rates 1000,10000]
                                        [--window S] [--rounds N] [--austin PATH]

The baseline is austin as this machine has it: Debian's package (austin 1.0.1, `apt-get
install austin`; the austin 3.7 the issue measured is not packaged, and its source is not
reachable from here). That austin reads CPython 3.6 to 3.10; for a newer interpreter it is
said to have no figures, and probed's are printed alone.

For each interpreter and rate: bench/targets/deep.py (a CPU-bound main thread 30 frames deep
whose innermost frames change every microsecond, and a thread printing its work count every
0.1 s) runs on CPU 0, the profilers on CPU 1 (as on a node where they do not share a core;
--no-pin lets the scheduler place them). In each of --rounds rounds, four windows of --window
seconds: nothing, probed (the daemon, attached for the window through its API), nothing,
austin (`austin -i 1e6/RATE -p PID`, stopped with SIGINT). Per profiler:
  - ticks a second: main-thread samples (probed: stored; austin: lines) over the window;
  - CPU per tick, in microseconds: probed's sampler thread (schedstat) and the whole daemon
    (writer, meter, API included); austin is one thread, so both are its process's CPU (its
    rusage, from wait4);
  - consistent: the share of the main thread's samples kept (probed: stored; austin:
    written) whose stack deep.py really had (lvl_0 .. lvl_k under main, each caller at its
    call line, the innermost in its own body); beside it, probed's reads dropped as torn
    (counted as `torn`, nothing stored), of all its reads (austin drops none);
  - the target's work rate in the window over the mean of the two windows without a
    profiler around it (1.000: no slowdown), the median over rounds; the noise floor beside
    it is the same ratio between windows that both had none.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'functional'))
os.environ.setdefault('PROBED_BUILD', os.path.join(ROOT, 'build'))
from daemon import Daemon  # noqa: E402
from procstat import cpu_seconds, thread_cpu_seconds  # noqa: E402

import run  # noqa: E402  bench/run.py: deep.py as a target, and the pinning


def pinned(cpu, argv):
    return run.pinned(cpu, argv)


class Target(run.Target):
    """bench/targets/deep.py, its work count over time, and its shape."""

    def consistent(self, frames):
        """@frames outermost first, each (func, file, line): a stack deep.py really has."""
        k = None
        for i, (func, file, line) in enumerate(frames):
            m = re.fullmatch(r'lvl_(\d+)', func)
            if not m or file != self.file:
                if k is not None:
                    return False
                continue
            j = int(m.group(1))
            if k is None and (j != 0 or i == 0 or frames[i - 1][0] != 'main'):
                return False
            if k is not None and j != k + 1:
                return False
            first = int(self.base) + 6 * j
            innermost = i == len(frames) - 1
            if innermost and not first <= line <= first + 3:
                return False
            if not innermost and line != first + 2:
                return False
            k = j
        return k is not None

    def close(self):
        self.proc.kill()
        self.proc.wait()


def probed_window(d, t, rate, window):
    """probed attached for @window seconds: (ticks, sampler CPU s, daemon CPU s, frames of
    each main-thread sample as {stack: count}, torn)."""
    status, reply = d.api('POST', '/v1/targets', {'pid': t.proc.pid, 'rate': rate})
    assert status == 200, reply
    time.sleep(0.3)  # past the attach's own work
    c0, s0 = cpu_seconds(d.proc.pid), thread_cpu_seconds(d.proc.pid, 'probed-sampler')
    a = time.time()
    time.sleep(window)
    b = time.time()
    c1, s1 = cpu_seconds(d.proc.pid), thread_cpu_seconds(d.proc.pid, 'probed-sampler')
    stats = [x for x in json.loads(d.ctl('list', '--json', check=True).stdout)['targets']
             if x['pid'] == t.proc.pid][-1]['stats']
    d.api('DELETE', '/v1/targets/%d' % t.proc.pid)
    time.sleep(1.5)  # the last write
    scope = ('target_id = (SELECT max(id) FROM targets WHERE pid = %d) AND tid = %d AND ts_ns'
             ' BETWEEN %d AND %d' % (t.proc.pid, t.proc.pid, a * 1e9, b * 1e9))
    counts = dict(d.rows('SELECT stack_id, count(*) FROM samples WHERE %s GROUP BY stack_id'
                         % scope))
    frames = {}
    if counts:
        for sid, depth, func, file, line in d.rows(
                'SELECT stack_id, depth, func, file, lineno FROM stacks WHERE stack_id IN (%s)'
                ' ORDER BY stack_id, depth DESC' % ','.join(map(str, counts))):
            frames.setdefault(sid, []).append((func, file, line))
    stacks = {tuple(frames.get(sid, ())): 0 for sid in counts}
    for sid, n in counts.items():
        stacks[tuple(frames.get(sid, ()))] += n
    return a, b, sum(counts.values()), s1 - s0, c1 - c0, stacks, stats['torn']


AUSTIN_FRAME = re.compile(r'^(.*) \((.*)\);L(\d+)$')


def austin_window(austin, t, rate, window):
    """austin attached for @window seconds: (ticks, CPU s, {stack: count}) of the main thread,
    or None when it read no stack of it."""
    out = tempfile.NamedTemporaryFile(prefix='austin-', suffix='.txt', delete=False)
    out.close()
    start = time.time()
    p = subprocess.Popen(pinned(1, [austin, '-i', str(max(1, 1000000 // rate)), '-o', out.name,
                                    '-p', str(t.proc.pid)]),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.3)  # its attach
    a = time.time()
    time.sleep(window)
    b = time.time()
    p.send_signal(signal.SIGINT)
    _, _, usage = os.wait4(p.pid, 0)
    end = time.time()
    p.returncode = 0
    stderr = p.stderr.read().decode(errors='replace')
    p.stderr.close()
    with open(out.name, errors='replace') as f:
        lines = f.read().splitlines()
    os.unlink(out.name)
    by_thread = {}
    for line in lines:
        if not line.startswith('Thread '):
            continue
        stack, _, _ = line.rpartition(' ')
        parts = stack.split(';')
        thread, rest = parts[0], parts[1:]
        frames = []
        for i in range(0, len(rest) - 1, 2):  # "func (file)", "Lline"
            m = AUSTIN_FRAME.match(rest[i] + ';' + rest[i + 1])
            if m:
                frames.append((m.group(1), m.group(2), int(m.group(3))))
        by_thread.setdefault(thread, []).append(tuple(frames))
    main = [s for s in by_thread.values() if any(f[1] == t.file for st in s for f in st)]
    if not main:
        return None, stderr.strip().splitlines()[-1:] or ['no output']
    stacks = {}
    for st in main[0]:
        stacks[st] = stacks.get(st, 0) + 1
    # its rate and CPU over its whole run (its rusage covers no less): the window is most of it
    cpu = usage.ru_utime + usage.ru_stime
    return (a, b, end - start, len(main[0]), cpu, stacks), None


def median(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float('nan')


def compare(python, austin, rates, window, rounds):
    t = Target(python)
    d = Daemon(wrapper=pinned(1, []))
    try:
        time.sleep(1.0)
        for rate in rates:
            rows = {'probed': [], 'austin': []}
            noise, why_not = [], None
            for _ in range(rounds):
                off0 = (time.time(), None)
                time.sleep(window)
                off0 = (off0[0], time.time())
                a, b, n, sampler, whole, stacks, torn = probed_window(d, t, rate, window)
                off1 = (time.time(), None)
                time.sleep(window)
                off1 = (off1[0], time.time())
                base = [t.rate_between(*off0), t.rate_between(*off1)]
                noise.append(base[1] / base[0])
                good = sum(c for st, c in stacks.items() if t.consistent(st))
                rows['probed'].append((n / (b - a), sampler / max(n, 1), whole / max(n, 1),
                                       good / max(n, 1),
                                       t.rate_between(a, b) / statistics.mean(base),
                                       torn / max(n + torn, 1)))
                if austin and not why_not:
                    r, why_not = austin_window(austin, t, rate, window)
                    off2 = (time.time(), None)
                    time.sleep(window)
                    off2 = (off2[0], time.time())
                    if r:
                        a, b, ran, n, cpu, stacks = r
                        good = sum(c for st, c in stacks.items() if t.consistent(st))
                        base = [t.rate_between(*off1), t.rate_between(*off2)]
                        rows['austin'].append((n / ran, cpu / max(n, 1), cpu / max(n, 1),
                                               good / max(n, 1),
                                               t.rate_between(a, b) / statistics.mean(base), 0))
            for tool, rs in rows.items():
                if not rs:
                    print('  %6d Hz  %-7s no figures: %s' % (
                        rate, tool, 'austin is not installed (apt-get install austin)'
                        if not austin else 'it reads no stack of this interpreter (%s)'
                        % ' '.join(why_not or [])))
                    continue
                med = [median([r[i] for r in rs]) for i in range(6)]
                print('  %6d Hz  %-7s %8.0f ticks/s  %6.1f us CPU/tick (%6.1f whole process)'
                      '  %6.2f%% of stacks kept consistent%s  target work %.3f (noise floor'
                      ' %.3f)'
                      % (rate, tool, med[0], 1e6 * med[1], 1e6 * med[2], 100 * med[3],
                         ' (%.2f%% dropped as torn)' % (100 * med[5]) if tool == 'probed' else
                         ' (none dropped)', med[4], median(noise)))
            if rows['probed'] and rows['austin']:
                p = [median([r[i] for r in rows['probed']]) for i in range(5)]
                q = [median([r[i] for r in rows['austin']]) for i in range(5)]
                print('  %6d Hz  probed/austin: rate %.2fx, CPU per tick %.2fx (whole %.2fx),'
                      ' slowdown %+.1f%% vs %+.1f%%'
                      % (rate, p[0] / q[0], p[1] / q[1], p[2] / q[2], 100 * (p[4] - 1),
                         100 * (q[4] - 1)))
            sys.stdout.flush()
    finally:
        d.close()
        t.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--python', default='all',
                    help="the target's interpreters: paths, comma-separated, or 'all'")
    ap.add_argument('--rates', default='1000,10000')
    ap.add_argument('--window', type=float, default=3.0)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--austin', default='/usr/bin/austin')
    ap.add_argument('--no-pin', action='store_true')
    args = ap.parse_args()
    run.PIN = not args.no_pin
    austin = args.austin if os.access(args.austin, os.X_OK) else None
    if austin:
        version = subprocess.run([austin, '--version'], stdout=subprocess.PIPE,
                                 universal_newlines=True).stdout.strip()
        print('baseline: %s (%s)' % (version, austin))
    for name, path in run.interpreters(args.python):
        if not path:
            print('%s: not installed on this machine: no figures' % name)
            continue
        print('%s (%s):' % (name, path))
        compare(path, austin, [int(x) for x in args.rates.split(',') if x], args.window,
                args.rounds)


if __name__ == '__main__':
    main()
