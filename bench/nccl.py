#!/usr/bin/python3
"""What the NCCL uprobes cost a job per call; prints figures, asserts nothing.

usage: bench/nccl.py [--build DIR] [--lib libnccl.so.2] [--window S] [--rounds N]

bench/targets/nccl_loop.py calls ncclAllReduce through ctypes as fast as it can (the library:
--lib, by default NVIDIA's own where the machine has one (conftest.real_nccl), else the tests'
stand-in, whose call does nothing). The probe's cost does not depend on what the function does
after its entry, and stands out most against a call that costs little: without a GPU NVIDIA's
NCCL refuses each call at its first check of the communicator, after the probe. It depends on
the entry's first instruction: the kernel emulates a push (NCCL's entries begin with one, past
an endbr64 where CET built them) and steps most others out of line, as it does the stand-in's
first (a function that calls none). A real probed attaches it; windows of S seconds alternate
(ABAB): nccl_calls = off (no probe) and on (every call a uprobe and a ring buffer event,
drained by the meter every 200 ms). Printed: the call's time in each phase (median of 0.1 s
slices, first 0.5 s of a window left out), the difference (the probe's cost per call, in
microseconds) and the ratio; the noise floor is the ratio of the off windows of the first half
of the rounds to those of the second.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'functional'))
import conftest  # noqa: E402

SETTLE_S = 0.5


def per_call_us(log, start, end):
    """Microseconds a call, per 0.1 s slice of @log between @start and @end."""
    rows = []
    with open(log) as f:
        for line in f:
            t, n = line.split()
            rows.append((float(t), int(n)))
    rows = [r for r in rows if start <= r[0] <= end]
    return [(b[0] - a[0]) / (b[1] - a[1]) * 1e6 for a, b in zip(rows, rows[1:]) if b[1] > a[1]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--lib')
    ap.add_argument('--window', type=float, default=2.0)
    ap.add_argument('--rounds', type=int, default=6)
    args = ap.parse_args()
    os.environ['PROBED_BUILD'] = os.path.abspath(args.build)
    conftest.BUILD = os.environ['PROBED_BUILD']
    import daemon
    daemon.PROBED = os.path.join(conftest.BUILD, 'probed', 'probed')
    daemon.PROBECTL = os.path.join(conftest.BUILD, 'probed', 'probectl')
    lib = args.lib or conftest.real_nccl() or os.path.join(conftest.BUILD, 'tests', 'nccl',
                                                            'libnccl.so.2')
    d = daemon.Daemon('--memory-interval', '200ms')
    tmp = tempfile.mkdtemp(prefix='probed-bench-nccl-')
    log = os.path.join(tmp, 'calls.log')
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, 'bench', 'targets', 'nccl_loop.py')],
                         env=dict(os.environ, NCCL_LIB=lib, LOG=log), stdout=subprocess.PIPE,
                         universal_newlines=True)
    try:
        refused = p.stdout.readline().startswith('REFUSED')  # NVIDIA's NCCL, no GPU
        if refused:
            p.stdout.readline()
        d.ctl('attach', p.pid, check=True)
        phases = {'off': [], 'on': []}
        halves = ([], [])
        for k in range(args.rounds):
            for phase in ('off', 'on'):
                d.ctl('config', 'nccl_calls=' + phase, check=True)
                while d.api('GET', '/v1/status')[1]['nccl']['processes'] != (phase == 'on'):
                    time.sleep(0.05)
                start = time.perf_counter()
                time.sleep(args.window)
                us = per_call_us(log, start + SETTLE_S, time.perf_counter())
                phases[phase] += us
                if phase == 'off':
                    halves[k >= args.rounds // 2].extend(us)
        st = d.api('GET', '/v1/status')[1]['nccl']
        off, on = statistics.median(phases['off']), statistics.median(phases['on'])
        noise = (statistics.median(halves[1]) / statistics.median(halves[0])
                 if halves[0] and halves[1] else float('nan'))
        print('ncclAllReduce through ctypes, %s (noise floor: off vs off %.3f; calls recorded %d,'
              ' lost %d)' % (lib, noise, st['calls'], st['lost']))
        if refused:
            print('  (no GPU: NCCL refused each call at its check of the communicator, after its'
                  ' entry probe ran)')
        print('  off  %.3f us a call' % off)
        print('  on   %.3f us a call  (+%.3f us, ratio %.3f)' % (on, on - off, on / off))
    finally:
        p.kill()
        p.wait()
        d.close()


if __name__ == '__main__':
    main()
