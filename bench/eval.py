#!/usr/bin/env python3
"""Eval benchmark: prints figures, asserts nothing.

usage: bench/eval.py [--build DIR] [--targets N] [--evals N] [--python pyenv-3.13,debian-3.14]

Starts a real probed on a temporary socket, and for every CPython on the machine measures,
through the daemon's HTTP API (POST /v1/eval, timed here, client to reply):
  - the first eval of a process (the stub is injected, then runs the code), on a fresh
    process each time, idle (in time.sleep) and busy (a pure-Python loop): median and p90;
  - the next evals (the stub is there): median and p90, idle and busy;
  - the stub's footprint once loaded and idle: the busy target's work rate in a window after
    the injection over the window before it (bench/targets/deep.py reports its progress), and
    the CPU the sleeping target uses with the stub loaded.
"""
import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
EVALTARGET = os.path.join(ROOT, 'tests', 'targets', 'evaltarget.py')
DEEP = os.path.join(ROOT, 'bench', 'targets', 'deep.py')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  bench/run.py: the interpreters


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__('probed')
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)


def post_eval(sock, pid, code):
    c = UnixHTTP(sock)
    t0 = time.perf_counter()
    c.request('POST', '/v1/eval', json.dumps({'pid': pid, 'code': code}),
              {'Content-Type': 'application/json'})
    r = c.getresponse()
    body = json.loads(r.read())
    ms = (time.perf_counter() - t0) * 1000
    c.close()
    if r.status != 200 or body.get('status') != 'ok':
        raise RuntimeError('eval failed: %s' % body)
    return ms


def start(argv, env=None):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, universal_newlines=True, env=env)
    p.stdout.readline()  # READY
    return p


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def first_and_next(sock, python, mode, n_targets, n_evals, env=None):
    first, nxt = [], []
    for _ in range(n_targets):
        p = start([python, EVALTARGET, mode], env)
        try:
            time.sleep(0.2)
            first.append(post_eval(sock, p.pid, 'counter'))
        finally:
            p.kill()
            p.wait()
    p = start([python, EVALTARGET, mode])
    try:
        time.sleep(0.2)
        post_eval(sock, p.pid, 'counter')
        for _ in range(n_evals):
            nxt.append(post_eval(sock, p.pid, 'counter'))
    finally:
        p.kill()
        p.wait()
    return first, nxt


class Progress:
    """bench/targets/deep.py's work rate, from the counts it prints every 0.1 s."""

    def __init__(self, python):
        self.proc = subprocess.Popen([python, DEEP], stdout=subprocess.PIPE,
                                     universal_newlines=True)
        self.proc.stdout.readline()
        self.points = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            ts, n = line.split()
            self.points.append((float(ts), int(n)))

    def rate(self, t0, t1):
        pts = [p for p in self.points if t0 <= p[0] <= t1]
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def footprint(sock, python, window):
    busy = Progress(python)
    idle = start([python, EVALTARGET, 'sleep'])
    try:
        time.sleep(1)
        a = time.time()
        time.sleep(window)
        b = time.time()
        post_eval(sock, busy.proc.pid, '1')
        post_eval(sock, idle.pid, '1')
        c = time.time()
        time.sleep(window)
        d = time.time()
        ratio = busy.rate(c, d) / busy.rate(a, b)
        with open('/proc/%d/stat' % idle.pid) as f:
            f0 = f.read().split(')')[1].split()
        time.sleep(window)
        with open('/proc/%d/stat' % idle.pid) as f:
            f1 = f.read().split(')')[1].split()
        hz = os.sysconf('SC_CLK_TCK')
        cpu_ms_per_s = ((int(f1[11]) + int(f1[12])) - (int(f0[11]) + int(f0[12]))) / hz * 1000 / window
        return ratio, cpu_ms_per_s
    finally:
        busy.proc.kill()
        busy.proc.wait()
        idle.kill()
        idle.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--targets', type=int, default=10)
    ap.add_argument('--evals', type=int, default=50)
    ap.add_argument('--window', type=float, default=2.0)
    ap.add_argument('--python', default='', help='only these (ids as tests/functional: '
                    'pyenv-3.13,debian-3.14,...); default every one')
    args = ap.parse_args()
    only = set(filter(None, args.python.split(',')))
    work = tempfile.mkdtemp(prefix='probed-bench-eval-')
    sock = os.path.join(work, 's')
    daemon = subprocess.Popen([os.path.join(args.build, 'probed', 'probed'), '--foreground',
                               '--socket', sock, '--db', os.path.join(work, 'db'),
                               '--metrics', 'off'],
                              stderr=subprocess.DEVNULL)
    while not os.path.exists(sock):
        time.sleep(0.05)
    print('%-8s %-5s %21s %21s' % ('python', 'state', 'first eval ms p50/p90', 'next eval ms p50/p90'))
    try:
        for name, python in run.interpreters('all'):
            if only and name not in only:
                continue
            if not python or not os.path.exists(python):
                print('%-8s not installed' % name)
                continue
            # 3.14+: the stub enters through PEP 768's hook; the same interpreter with the hook
            # off (ptrace, as before 3.14) is the baseline, measured in the same run
            ways = [('', None)]
            if re.search(r'3\.1[4-9]$', name):
                ways = [(' pep768', None), (' ptrace', dict(os.environ, PYTHON_DISABLE_REMOTE_DEBUG='1'))]
            for way, env in ways:
                for mode in ('sleep', 'busy'):
                    first, nxt = first_and_next(sock, python, mode, args.targets, args.evals, env)
                    print('%-8s %-5s %10.1f / %-8.1f %10.2f / %-8.2f' % (
                        name + way, 'idle' if mode == 'sleep' else 'busy',
                        statistics.median(first), pct(first, 0.9), statistics.median(nxt),
                        pct(nxt, 0.9)))
            ratio, cpu = footprint(sock, python, args.window)
            print('%-8s stub loaded, idle: busy target work rate after/before %.3f, '
                  'sleeping target CPU %.2f ms/s' % (name, ratio, cpu))
            sys.stdout.flush()
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == '__main__':
    main()
