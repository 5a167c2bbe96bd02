#!/usr/bin/python3
"""Torch trace benchmark; prints figures, asserts nothing.

usage: bench/torch.py [--build DIR] [--window S] [--rounds N] [--every 1,10] [--models mlp,...]
                     [--exprs loss@train]

For each model of tests/targets/torchjob.py (a small MLP; an embedding + transformer block +
head at dim 64, the tests' model, and at dim 128), one training job runs without end under a
real probed, attached (sampled at 100 Hz throughout, so that sampling costs the same in every
window). Windows of S seconds alternate: trace off (the baseline), trace on with --every N,
off, on, ... (ABAB, so that a drift of the machine falls on both). Each step's time comes
from the job's own clock (its log: perf_counter after each optimizer step); the first steps
after a switch are left out. Printed: median step time per phase and their ratio (the
slowdown of a recorded step), the ratio of the mean step times (the job's throughput; with
--every N it mixes recorded and unrecorded steps), and the daemon's CPU while on vs off. The
job runs torch with one thread on one core, the daemon on the other when there are two.
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
sys.path.insert(0, os.path.join(ROOT, 'tests', 'functional'))
from procstat import cpu_seconds  # noqa: E402
import conftest  # noqa: E402

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from torch_bench_util import SETTLE_S, step_times  # noqa: E402


def run_model(build, model, every, window, rounds, exprs):
    from daemon import Daemon
    d = Daemon()
    tmp = tempfile.mkdtemp(prefix='probed-bench-torch-')
    go, log = os.path.join(tmp, 'go'), os.path.join(tmp, 'steps.log')
    open(go, 'w').close()
    cmd = [sys.executable, os.path.join(ROOT, 'tests', 'targets', 'torchjob.py'), model, 'train',
           '1', '100000000', go, log]
    if os.cpu_count() >= 2:
        cmd = ['taskset', '-c', '0'] + cmd
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, universal_newlines=True)
    pid = job.pid if os.cpu_count() < 2 else None
    try:
        ready = job.stdout.readline()
        pid = json.loads(ready[5:])['pid']
        if os.cpu_count() >= 2:
            subprocess.run(['taskset', '-p', '-c', '1', str(d.proc.pid)],
                           stdout=subprocess.DEVNULL, check=True)
        d.ctl('attach', pid, check=True)
        phases = {'off': [], 'on': []}
        cpu = {'off': 0.0, 'on': 0.0}
        for _ in range(rounds):
            for phase in ('off', 'on'):
                if phase == 'on':
                    d.ctl('torch', pid, 'on', '--every', every, *(
                        ['--exprs', exprs] if exprs else []), check=True)
                else:
                    d.ctl('torch', pid, 'off')  # the first is refused: not on yet
                start = time.perf_counter()
                c0 = cpu_seconds(d.proc.pid)
                time.sleep(window)
                cpu[phase] += cpu_seconds(d.proc.pid) - c0
                phases[phase] += step_times(log, start + SETTLE_S, time.perf_counter())
        d.ctl('torch', pid, 'off')
        off, on = statistics.median(phases['off']), statistics.median(phases['on'])
        mean_off, mean_on = statistics.mean(phases['off']), statistics.mean(phases['on'])
        print('%-12s every %-3s steps off %6d on %6d   median step off %7.3f ms on %7.3f ms'
              ' ratio %.3f   mean ratio %.3f   daemon CPU off %4.1f%% on %4.1f%%'
              % (model, every, len(phases['off']), len(phases['on']), off * 1e3, on * 1e3,
                 on / off, mean_on / mean_off, 100 * cpu['off'] / (rounds * window),
                 100 * cpu['on'] / (rounds * window)))
        sys.stdout.flush()
    finally:
        job.kill()
        job.wait()
        d.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--window', type=float, default=1.0)
    ap.add_argument('--rounds', type=int, default=15)
    ap.add_argument('--every', default='1,10')
    ap.add_argument('--models', default='mlp,transformer,transformer-128')
    ap.add_argument('--exprs', default='loss@train', help="the trace's --exprs ('' for none)")
    args = ap.parse_args()
    os.environ['PROBED_BUILD'] = os.path.abspath(args.build)
    conftest.BUILD = os.environ['PROBED_BUILD']
    import daemon
    daemon.PROBED = os.path.join(conftest.BUILD, 'probed', 'probed')
    daemon.PROBECTL = os.path.join(conftest.BUILD, 'probed', 'probectl')
    print('torch trace: step time with the trace on vs off, same run, same job (%s windows of'
          ' %.1f s, ABAB)' % (2 * args.rounds, args.window))
    for model in args.models.split(','):
        for every in args.every.split(','):
            run_model(args.build, model, every, args.window, args.rounds, args.exprs)


if __name__ == '__main__':
    main()
