#!/usr/bin/env python3
"""Cluster benchmark: prints figures, asserts nothing. Run as root (namespaces).

usage: bench/cluster.py [--build DIR] [--nodes N] [--ranks R] [--latency-ms L] [--reps K]

Makes N nodes on this machine (PID namespaces, each with its own real probed and R ranks of
tests/targets/rank_job.py, one stalled: tests/functional/nodes.py), reached through a local
transport that waits L ms before joining the node's daemon (a stand-in for ssh's connection
set-up, which is what a fan-out over many nodes pays). Measures, median of K runs:
  - `probectl cluster query` over all nodes, against the baseline users run today: a loop
    of `probectl -H NODE query` over the nodes, one after the other (the same transport);
  - `probectl hang` over all nodes: its wall time and the spread of its reads;
and prints the noise floor (the baseline against itself, two sets of runs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'functional'))


def timed(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError('%s failed: %s' % (cmd[:4], r.stderr))
    return time.perf_counter() - t0, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--nodes', type=int, default=8)
    ap.add_argument('--ranks', type=int, default=4)
    ap.add_argument('--latency-ms', type=float, default=50)
    ap.add_argument('--reps', type=int, default=5)
    a = ap.parse_args()
    os.environ['PROBED_BUILD'] = os.path.abspath(a.build)
    from conftest import PROBECTL, TARGETS  # after PROBED_BUILD: they read it
    from nodes import Node, workdir

    wd = workdir()
    nodes = []
    try:
        for i in range(a.nodes):
            nodes.append(Node('n%d' % i, i, wd))
        procs = []
        for i, n in enumerate(nodes):
            for local in range(a.ranks):
                env = dict(os.environ, RANK=str(i * a.ranks + local), STALL_RANK='1')
                procs.append(n.spawn([sys.executable, os.path.join(TARGETS, 'rank_job.py')],
                                     env=env, ready=True))
        Node.wait_ready(procs)
        for n in nodes:
            os.symlink(n.daemon.socket, os.path.join(wd, n.name + '.sock'))
        transport = ('sleep %.3f; PROBED_SOCKET=%s/{host}.sock %s proxy'
                     % (a.latency_ms / 1000, wd, PROBECTL))
        env = dict(os.environ, PROBED_TRANSPORT=transport)
        hosts = 'n[0-%d]' % (a.nodes - 1)
        subprocess.run([PROBECTL, 'cluster', 'attach', '--match', r'rank_job\.py', '--hosts', hosts],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        time.sleep(1)
        sql = 'SELECT count(*) FROM samples'

        def fan_out():
            return timed([PROBECTL, 'cluster', 'query', sql, '--hosts', hosts], env)[0]

        def loop():
            t0 = time.perf_counter()
            for n in nodes:
                timed([PROBECTL, '-H', n.name, 'query', sql], env)
            return time.perf_counter() - t0

        base1, fan, base2, hang, spread = [], [], [], [], []
        for _ in range(a.reps):  # interleaved: the machine's drift falls on both alike
            base1.append(loop())
            fan.append(fan_out())
            base2.append(loop())
            t, out = timed([PROBECTL, 'hang', '--hosts', hosts, '--json'], env)
            hang.append(t)
            spread.append(json.loads(out)['spread_ms'])
        med = statistics.median
        print('%d nodes x %d ranks, transport set-up %.0f ms, %d runs each (medians)'
              % (a.nodes, a.ranks, a.latency_ms, a.reps))
        print('  loop of probectl -H NODE query (baseline): %7.3f s' % med(base1))
        print('  probectl cluster query:                    %7.3f s   %.2fx the baseline'
              % (med(fan), med(fan) / med(base1)))
        print('  noise floor (baseline vs itself):                        %.2fx'
              % (med(base2) / med(base1)))
        print('  probectl hang:                             %7.3f s   reads spread %.1f ms'
              ' (min %.1f, max %.1f)' % (med(hang), med(spread), min(spread), max(spread)))
    finally:
        for n in nodes:
            n.close()


if __name__ == '__main__':
    main()
