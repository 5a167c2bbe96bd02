#!/usr/bin/env python3
"""Sampling benchmark for libpyframes; prints figures, asserts nothing.

usage: bench/run.py [--build DIR] [--versions 3.9,3.11,3.12,3.13,3.14] [--window S] [--no-pin]
(pyenv's builds; 3.14 and 3.15 are Debian unstable's, from scripts/pythons.sh)

For each CPython: starts bench/targets/deep.py (a 30-frame CPU-bound stack that changes every
microsecond or so), then with build/bench/bench_sample measures
  - the maximum sustained rate (back-to-back samples) and the CPU per sample,
  - achieved vs requested rate at 100 Hz, 1 kHz and 10 kHz,
  - the share of samples whose main-thread stack is one the target really had,
  - the target's slowdown at 100 Hz and 1 kHz: its work rate in windows with and without
    sampling, alternating, in the same run (ratio sampled/unsampled).
CPU per sample is given twice: the sampler process's CPU over the run per sample (timer
wakeups and the benchmark's own checks included) and the CPU of the sampling calls alone
(thread CPU time read around each call, less what reading that clock costs, measured in the
same run: on this VM it is a syscall of about a microsecond). By default the target runs on CPU 0
and the sampler on CPU 1, as on a real node where they do not share a core; then the target
changes its stack while it is being read, the hard case for consistency. --no-pin lets the
scheduler place them (on 2 cores it often puts them on one, and a descheduled target cannot
tear a read).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
PYENV = os.environ.get('PYENV_ROOT', os.path.expanduser('~/.pyenv'))
PIN = True


def interpreters(spec):
    """A bench's --python: 'all' (tests/functional's list: each pyenv minor, then Debian's
    python3, a missing one as (name, None), to be said, never skipped silently), or paths,
    comma-separated: [(name, path)]."""
    if spec != 'all':
        return [(p, p) for p in spec.split(',') if p]
    sys.path.insert(0, os.path.join(ROOT, 'tests', 'functional'))
    from conftest import INTERPRETERS
    return INTERPRETERS


def pinned(cpu, argv):
    return ['taskset', '-c', str(cpu)] + argv if PIN and os.cpu_count() >= 2 else argv


class Target:
    def __init__(self, python):
        self.proc = subprocess.Popen(pinned(0, [python, os.path.join(ROOT, 'bench', 'targets', 'deep.py')]),
                                     stdout=subprocess.PIPE, universal_newlines=True)
        ready = self.proc.stdout.readline().split()
        self.file, self.base, self.depth = ready[1], ready[2], ready[3]
        self.points = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            ts, count = line.split()
            self.points.append((float(ts), int(count)))

    def rate_between(self, t0, t1):
        pts = [p for p in self.points if t0 <= p[0] <= t1]
        if len(pts) < 2:
            return float('nan')
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def close(self):
        self.proc.kill()
        self.proc.wait()


def sample(build, t, hz, secs):
    out = subprocess.run(pinned(1, [os.path.join(build, 'bench', 'bench_sample'), str(t.proc.pid),
                                    str(hz), str(secs), t.file, t.base, t.depth]),
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return json.loads(out)


def slowdown(build, t, hz, window, rounds=3):
    """Median over rounds of (rate while sampled / rate while not), adjacent windows."""
    ratios = []
    for _ in range(rounds):
        a = time.time(); time.sleep(window); b = time.time()
        sample(build, t, hz, window)
        c = time.time()
        ratios.append(t.rate_between(b, c) / t.rate_between(a, b))
    ratios.sort()
    return ratios[len(ratios) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--versions', default='3.9,3.11,3.12,3.13')
    ap.add_argument('--window', type=float, default=2.0)
    ap.add_argument('--no-pin', action='store_true')
    args = ap.parse_args()
    global PIN
    PIN = not args.no_pin
    print('%-6s %-14s %9s %9s %9s %9s %9s %11s' % ('python', 'mode', 'req Hz', 'got Hz', 'cpu us',
                                                     'work us', 'torn', 'consistent'))
    newer = dict(interpreters('all'))  # 3.14+: Debian unstable's (scripts/pythons.sh)
    for v in args.versions.split(','):
        builds = sorted(glob.glob(os.path.join(PYENV, 'versions', v + '.*', 'bin', 'python' + v)))
        if not builds and newer.get('debian-' + v):
            builds = [newer['debian-' + v]]
        if not builds:
            print('%-6s not installed' % v)
            continue
        t = Target(builds[-1])
        try:
            time.sleep(1.0)
            for hz, label in ((0, 'max rate'), (100, 'fixed'), (1000, 'fixed'), (10000, 'fixed')):
                r = sample(args.build, t, hz, args.window)
                print('%-6s %-14s %9s %9.0f %9.2f %9.2f %9d %10.2f%%' % (
                    v, label, hz or '-', r['achieved_hz'], r['cpu_us_per_sample'],
                    r['work_us_per_sample'], r['torn'],
                    100.0 * r['consistent'] / max(1, r['checked'])))
            for hz in (100, 1000):
                print('%-6s %-14s %9d  target work rate sampled/unsampled: %.3f' % (
                    v, 'slowdown', hz, slowdown(args.build, t, hz, args.window)))
            sys.stdout.flush()
        finally:
            t.close()


if __name__ == '__main__':
    main()
