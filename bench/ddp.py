#!/usr/bin/python3
"""Collective tracing on a DistributedDataParallel job; prints figures, asserts nothing.

usage: bench/ddp.py [--build DIR] [--window S] [--rounds N]

A 2-rank gloo DDP job (tests/targets/ddp_job.py: an MLP of 1.6 MB of gradients in two buckets,
no pause between steps) runs under a real probed, both ranks attached. Windows of S seconds
alternate (ABCABC): the trace off; `probectl torch PID on` on both ranks (the module trace
alone); `on --comm` (with torch.distributed's wrappers and the DDP watch: DDP's logger at
sample rate 1, its data and c10d's counter read at every step end, the counter at every
drain). Rank 0's step times come from its own clock (perf_counter after each optimizer step);
the first steps after a switch are left out. Printed: median step time of each phase and its
ratio to off; the noise floor is the ratio of the off windows of the first half of the rounds
to those of the second.
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
sys.path.append(os.path.join(ROOT, 'bench'))
import conftest  # noqa: E402
from torch_bench_util import SETTLE_S, step_times  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--window', type=float, default=2.0)
    ap.add_argument('--rounds', type=int, default=8)
    args = ap.parse_args()
    os.environ['PROBED_BUILD'] = os.path.abspath(args.build)
    conftest.BUILD = os.environ['PROBED_BUILD']
    import daemon
    daemon.PROBED = os.path.join(conftest.BUILD, 'probed', 'probed')
    daemon.PROBECTL = os.path.join(conftest.BUILD, 'probed', 'probectl')
    d = daemon.Daemon()
    tmp = tempfile.mkdtemp(prefix='probed-bench-ddp-')
    log = os.path.join(tmp, 'steps.log')
    env = dict(os.environ, WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', MASTER_PORT='29791',
               OMP_NUM_THREADS='1', STEP_SLEEP_S='0')
    procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, 'tests', 'targets', 'ddp_job.py')],
                              env=dict(env, RANK=str(r), **({'STEP_LOG': log} if r == 0 else {})),
                              stdout=subprocess.PIPE, universal_newlines=True) for r in range(2)]
    try:
        for p in procs:
            p.stdout.readline()
            d.ctl('attach', p.pid, check=True)
        phases = {'off': [], 'modules': [], 'comm': []}
        halves = ([], [])
        for k in range(args.rounds):
            for phase in ('off', 'modules', 'comm'):
                for p in procs:
                    d.ctl('torch', p.pid, 'off')  # the first is refused: not on yet
                    if phase != 'off':
                        d.ctl('torch', p.pid, 'on', *(['--comm'] if phase == 'comm' else []),
                              check=True)
                start = time.perf_counter()
                time.sleep(args.window)
                steps = step_times(log, start + SETTLE_S, time.perf_counter())
                phases[phase] += steps
                if phase == 'off':
                    halves[k >= args.rounds // 2].extend(steps)
        for p in procs:
            d.ctl('torch', p.pid, 'off')
        off = statistics.median(phases['off'])
        noise = statistics.median(halves[1]) / statistics.median(halves[0])
        rows = d.rows("SELECT count(*), min(bytes) FROM comm_metrics WHERE seq_source = 'ddp'")
        print('DDP 2 ranks, gloo (noise floor: off vs off %.3f; DDP rows stored %d, of %s bytes)'
              % (noise, rows[0][0], rows[0][1]))
        for phase, steps in phases.items():
            print('  %-8s steps %5d  median %8.3f ms  ratio %.3f'
                  % (phase, len(steps), statistics.median(steps) * 1e3,
                     statistics.median(steps) / off))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        d.close()


if __name__ == '__main__':
    main()
