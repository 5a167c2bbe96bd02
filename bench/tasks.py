#!/usr/bin/python3
"""What reading a process's asyncio tasks from outside costs; prints figures, asserts nothing.

usage: bench/tasks.py [--rounds 7] [--python /usr/bin/python3] [--build build]

tests/targets/tasks.py is started with 100, 1,000 and 10,000 idle tasks (plus its ten in
known states). For each, interleaved round by round: `probectl backtrace --direct --json` (the
baseline: every thread's stack, the same process, same run) and `probectl backtrace --tasks
--direct --json` (every task: its state, its coroutine chain read twice, who awaits it). Each
figure is the median of the rounds; the ratio is to the baseline's median; the noise floor is
the baseline rounds' spread (max - min) over their median. The target is frozen in its busy
task meanwhile, so every round reads the same tasks.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, '..', 'tests', 'targets', 'tasks.py')


def timed(cmd):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True).stdout
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=7)
    ap.add_argument('--python', default='/usr/bin/python3')
    ap.add_argument('--build', default=os.path.join(HERE, '..', 'build'))
    a = ap.parse_args()
    probectl = os.path.join(a.build, 'probed', 'probectl')
    print('%8s %12s %8s %12s %8s %10s' % ('tasks', 'baseline', 'noise', '--tasks', 'ratio',
                                         'per task'))
    for n_idle in (100, 1000, 10000):
        p = subprocess.Popen([a.python, TARGET, str(n_idle)], stdout=subprocess.PIPE,
                             universal_newlines=True)
        try:
            while not p.stdout.readline().startswith('READY'):
                pass
            base, tasks, total = [], [], 0
            for _ in range(a.rounds):
                base.append(timed([probectl, 'backtrace', str(p.pid), '--direct', '--json'])[0])
                s, out = timed([probectl, 'backtrace', str(p.pid), '--tasks', '--direct',
                                '--json'])
                tasks.append(s)
                total = json.loads(out)['total']
            b, t = statistics.median(base), statistics.median(tasks)
            print('%8d %10.1fms %7.0f%% %10.1fms %7.1fx %8.1fus' % (
                total, b * 1e3, (max(base) - min(base)) / b * 100, t * 1e3, t / b,
                (t - b) / total * 1e6))
        finally:
            p.kill()
            p.wait()


main()
