#!/usr/bin/python3
"""Continuous native sampling benchmark; prints figures, asserts nothing.

usage: bench/native.py [--build DIR] [--python PATH] [--rate HZ] [--window S] [--rounds N]
                       [--stack BYTES]

The target (tests/targets/native_qsort.py: Python -> ctypes -> libc qsort -> a Python
callback, about 30 native frames deep) runs on CPU 0. Windows of S seconds alternate
between no sampling and sampling at HZ with build/tests/nativesample (perf events copying
registers and the stack top, unwound with libdw, names through a cache) on CPU 1: the same
path the daemon's --native sampling is to take (the daemon does not sample natively yet).
Printed: the target's work rate (sorts a second) with and without, and their ratio (its
slowdown); the sampler's CPU per sample once warm (draining the rings, unwinding, naming) and
with each window's start-up (loading symbols and CFI), the unwinding alone per sample, frames
per sample,
the share of stacks unwound to the thread's first frame, samples lost, and the hit rate of
the symbol cache.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))


def pinned(cpu, argv):
    return ['taskset', '-c', str(cpu)] + argv if os.cpu_count() >= 2 else argv


def count(log):
    with open(log) as f:
        return f.read().count('ok\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--python', default='/usr/bin/python3')
    ap.add_argument('--rate', type=int, default=100)
    ap.add_argument('--window', type=float, default=3.0)
    ap.add_argument('--rounds', type=int, default=8)
    ap.add_argument('--stack', type=int, default=16384)
    args = ap.parse_args()
    tool = os.path.join(args.build, 'tests', 'nativesample')
    log = os.path.join(tempfile.mkdtemp(prefix='probed-bench-native-'), 'sorts')
    target = subprocess.Popen(pinned(0, [args.python, os.path.join(ROOT, 'tests', 'targets',
                                                                   'native_qsort.py'), log]),
                              stdout=subprocess.PIPE, universal_newlines=True)
    target.stdout.readline()  # READY
    time.sleep(1)
    rates = {'off': [], 'on': []}
    figures, cpu = [], 0.0
    try:
        for _ in range(args.rounds):
            for phase in ('off', 'on'):
                before, t0 = count(log), time.perf_counter()
                if phase == 'on':
                    p = subprocess.Popen(pinned(1, [tool, str(target.pid), str(args.window),
                                                    str(args.rate), str(args.stack), '--quiet']),
                                         stdout=subprocess.PIPE, universal_newlines=True)
                    out = p.stdout.read()
                    _, status, usage = os.wait4(p.pid, 0)
                    p.returncode = os.waitstatus_to_exitcode(status)
                    if p.returncode != 0:
                        sys.exit('nativesample failed (%d)' % p.returncode)
                    figures.append(json.loads(out.splitlines()[-1]))
                    cpu += usage.ru_utime + usage.ru_stime
                else:
                    time.sleep(args.window)
                rates[phase].append((count(log) - before) / (time.perf_counter() - t0))
    finally:
        target.kill()
        target.wait()
    samples = sum(f['samples'] for f in figures)
    off, on = statistics.median(rates['off']), statistics.median(rates['on'])
    print('native sampling: %s, %d Hz, %d-byte stack copies, %d windows of %.1f s (ABAB)'
          % (args.python, args.rate, args.stack, 2 * args.rounds, args.window))
    print('target: %.1f sorts/s unsampled, %.1f sampled: ratio %.4f (slowdown %.2f %%)'
          % (off, on, on / off, (1 - on / off) * 100))
    print('samples: %d (%.1f/s), lost %d; frames/sample %.1f; complete stacks %.1f %%'
          % (samples, samples / (args.rounds * args.window), sum(f['lost'] for f in figures),
             statistics.mean(f['frames'] for f in figures),
             100 * statistics.mean(f['complete'] for f in figures)))
    print('sampler CPU per sample: %.1f us once warm (draining, unwinding, naming), %.1f us with'
          ' each window\'s start (loading symbols and CFI); unwinding alone %.1f us'
          % (statistics.mean(f['cpu_us'] for f in figures), cpu / samples * 1e6,
             statistics.mean(f['unwind_us'] for f in figures)))
    print('symbol cache hit rate %.1f %%' % (100 * sum(f['cache_hits'] for f in figures) /
                                            sum(f['lookups'] for f in figures)))


if __name__ == '__main__':
    main()
