#!/usr/bin/python3
"""Query benchmark over a day of a training job; prints figures, asserts nothing.

usage: PROBED_BUILD=DIR bench/queries.py [--hours 24] [--baseline-hours 1] [--targets 8]
                        [--threads 10] [--rate 100] [--reps 3] [--timeout 60s] [--work DIR]

Builds two stores with build/bench/store_synth (the daemon's own schema and block encoder, a
realistic mix: ranks of one program, a main thread changing stack every few samples, loader
threads, waiting threads): --hours of TARGETS x THREADS at RATE Hz (24 h of 8 x 10 at 100 Hz:
691 M samples, ~2 GB; ~40 s to build here) and --baseline-hours of the same (the baseline,
measured in the same run). A daemon is started on each (retention off) and every documented
query (docs/query.md, README.md, the man page, docs/cluster.md), and the sample views'
unbounded reads beside them, is timed end to end through probectl, --reps times: the median,
and the spread of the reps (the noise) beside it. The ratio big/baseline says whether a query
follows the store's size (the sample views unbounded: x hours) or the window it asks for (the
counting views, and bounded reads: ~1x). Goal: every counting view and every bounded example
at most 1 s over the day. A query that runs into --timeout says so.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'functional'))
os.environ.setdefault('PROBED_BUILD', os.path.join(ROOT, 'build'))
from daemon import Daemon  # noqa: E402

# (what, kind, SQL): kind "counts" (a counting view: the goal is 1 s), "bounded" (a sample
# view bounded by time or process: 1 s), "every sample" (unbounded: follows the store)
QUERIES = [
    ('README: top functions', 'counts', 'SELECT func, self_pct FROM function_stats LIMIT 10'),
    ('function_stats_all', 'counts', 'SELECT func, self_pct FROM function_stats_all LIMIT 10'),
    ('man page: self samples', 'counts',
     'SELECT func, self_samples FROM function_stats_all LIMIT 10'),
    ('GIL share per thread', 'counts',
     'SELECT pid, thread, tid, gil_pct, on_cpu_pct FROM thread_stats'),
    ('cluster.md: samples per rank', 'counts',
     'SELECT rank, sum(samples) AS n FROM thread_stats GROUP BY rank'),
    ('last 5 min: stack_minutes', 'counts',
     "SELECT func, sum(n) AS n FROM stack_minutes JOIN stacks USING (stack_id) WHERE depth = 0"
     " AND on_cpu AND ts_ns > ago('5m') GROUP BY func ORDER BY n DESC LIMIT 10"),
    ('last hour per minute, one rank', 'counts',
     "SELECT ts_ns, sum(n) FROM stack_minutes WHERE pid = 900001 AND ts_ns > ago('1h')"
     " GROUP BY ts_ns"),
    ('last 5 min: sample_frames', 'bounded',
     "SELECT func, count(*) AS n FROM sample_frames WHERE depth = 0 AND on_cpu"
     " AND ts_ns > ago('5m') GROUP BY func ORDER BY n DESC LIMIT 10"),
    ('GIL share, last minute', 'bounded',
     "SELECT thread, tid, round(100.0 * avg(holds_gil), 1) AS gil_pct FROM thread_states"
     " WHERE ts_ns > ago('1m') GROUP BY tid"),
    ('one thread, last 10 min', 'bounded',
     "SELECT count(*) FROM samples WHERE tid = 14400016 AND ts_ns > ago('10m')"),
    ('count(*) of one rank', 'every sample',
     'SELECT count(*) FROM samples WHERE target_id = 1'),
    ('count(*) FROM samples', 'every sample', 'SELECT count(*) FROM samples'),
    ('self per func, every sample', 'every sample',
     'SELECT func, count(*) FROM sample_frames WHERE depth = 0 GROUP BY func'),
]


def build(path, hours, a):
    t0 = time.time()
    out = subprocess.run([os.path.join(os.environ['PROBED_BUILD'], 'bench', 'store_synth'),
                          path, '--hours', str(hours), '--targets', str(a.targets),
                          '--threads', str(a.threads), '--rate', str(a.rate)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True,
                         universal_newlines=True).stdout
    info = json.loads(out)
    info['build_s'] = time.time() - t0
    info['bytes'] = os.path.getsize(path)
    return info


def time_queries(work, a):
    d = Daemon('--query-timeout', a.timeout, '--retention', '0', '--max-db-size', '0',
               workdir=work, start_timeout=600)
    try:
        d.ctl('query', 'SELECT count(*) FROM stacks', check=True)  # the dictionaries cached
        floor = []
        for _ in range(a.reps):
            t0 = time.time()
            d.ctl('query', 'SELECT 1', check=True)
            floor.append(time.time() - t0)
        times = {}
        for what, _, sql in QUERIES:
            runs, failed = [], None
            for _ in range(a.reps):
                t0 = time.time()
                r = d.ctl('query', sql, '--format', 'csv', timeout=3600)
                runs.append(time.time() - t0)
                if r.returncode != 0:
                    failed = r.stderr.strip().splitlines()[-1][:100]
                    break  # a timeout again is the same figure
            times[what] = (statistics.median(runs), max(runs) - min(runs), failed)
        return statistics.median(floor), times
    finally:
        d.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--hours', type=float, default=24)
    p.add_argument('--baseline-hours', type=float, default=1)
    p.add_argument('--targets', type=int, default=8)
    p.add_argument('--threads', type=int, default=10)
    p.add_argument('--rate', type=int, default=100)
    p.add_argument('--reps', type=int, default=3)
    p.add_argument('--timeout', default='60s')
    p.add_argument('--work', help='a folder for the stores (default: a temporary one, removed)')
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix='probed-bench-queries-')
    results = {}
    try:
        for name, hours in (('baseline', a.baseline_hours), ('big', a.hours)):
            sub = os.path.join(work, name)
            shutil.rmtree(sub, ignore_errors=True)
            os.makedirs(sub)
            os.chmod(sub, 0o755)
            info = build(os.path.join(sub, 'probed.db'), hours, a)
            print('%-8s %5.1f h: %11d samples, %8d blocks, %9d stack_counts rows, %7.1f MB,'
                  ' built in %.0f s' % (name, hours, info['samples'], info['blocks'],
                                        info['stack_counts'], info['bytes'] / 1e6,
                                        info['build_s']), flush=True)
            results[name] = time_queries(sub, a)
            shutil.rmtree(sub, ignore_errors=True)  # a day's store is 2 GB
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    (bfloor, base), (floor, big) = results['baseline'], results['big']
    print('probectl round trip (SELECT 1): %.3f s, %.3f s' % (bfloor, floor))
    print('%-32s %-13s %10s %10s %7s %9s  %s' % ('query', 'kind', '%gh (s)' % a.baseline_hours,
                                                 '%gh (s)' % a.hours, 'ratio', 'noise (s)',
                                                 'goal'))
    for what, kind, _ in QUERIES:
        (bt, _, bfail), (t, noise, fail) = base[what], big[what]
        goal = 'n/a' if kind == 'every sample' else ('met' if t <= 1.0 and not fail else
                                                     'MISSED')
        print('%-32s %-13s %10s %10s %7.1f %9.3f  %s%s' % (
            what, kind, '%.3f' % bt + ('!' if bfail else ''), '%.3f' % t + ('!' if fail else ''),
            t / max(bt, 1e-3), noise, goal, ('  (' + fail + ')') if fail else ''))


if __name__ == '__main__':
    main()
