#!/usr/bin/python3
"""Continuous native sampling benchmark; prints figures, asserts nothing.

usage: bench/native.py [--build DIR] [--python PATH] [--rate HZ] [--window S] [--rounds N]
                       [--stack BYTES]

The target (tests/targets/native_qsort.py: Python -> ctypes -> libc qsort -> a Python
callback, about 30 native frames deep) runs on CPU 0, the sampler on CPU 1.

1. The unwinder alone: windows of S seconds alternate between no sampling and sampling at HZ
   with build/tests/nativesample (perf events copying registers and the stack top, unwound
   with libdw, names through a cache). Printed: the target's work rate (sorts a second) with
   and without, and their ratio (its slowdown); the sampler's CPU per sample once warm
   (draining the rings, unwinding, naming) and with each window's start-up (loading symbols
   and CFI), the unwinding alone per sample, frames per sample, the share of stacks unwound
   to the thread's first frame, samples lost, and the hit rate of the symbol cache.
2. The daemon: windows rotate between no attach, `probectl attach` (Python frames),
   `probectl attach --native=perf` (perf's samples) and `probectl attach --native` (the eBPF
   sampler) at HZ, each attach made before its window and detached after. Printed: the
   target's work rate in each and the ratios to unsampled; the daemon's CPU per tick in each
   (from /proc over the window), so the cost of the native part is the difference; and from
   `probectl list`, per native backend: samples, lost, merged, mismatched, merged with the
   Python frames of the same instant (eBPF), the lag between the kernel's sample and the
   Python frames merged with it, unwinding per sample, the naming cache's hit rate, and the
   eBPF program's own time per sample in the kernel (kernel.bpf_stats_enabled is turned on
   for the run).
3. Shared function tables: N torch processes (tests/targets/native_torch.py, Debian's python3
   with libtorch) attached --native one after the other. Printed: each attach's time, the
   daemon's RSS growth with each, and the shared tables (held, built, found built already).
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


def pinned(cpu, argv):
    return ['taskset', '-c', str(cpu)] + argv if os.cpu_count() >= 2 else argv


def count(log):
    with open(log) as f:
        return f.read().count('ok\n')


def start_target(args):
    log = os.path.join(tempfile.mkdtemp(prefix='probed-bench-native-'), 'sorts')
    target = subprocess.Popen(pinned(0, [args.python, os.path.join(ROOT, 'tests', 'targets',
                                                                   'native_qsort.py'), log]),
                              stdout=subprocess.PIPE, universal_newlines=True)
    target.stdout.readline()  # READY
    time.sleep(1)
    return target, log


def listed(d, pid):
    return [x for x in json.loads(d.ctl('list', '--json', check=True).stdout)['targets']
            if x['pid'] == pid][-1]


def daemon_windows(args):
    os.environ.setdefault('PROBED_BUILD', args.build)
    from daemon import Daemon
    from procstat import cpu_seconds
    target, log = start_target(args)
    d = Daemon(wrapper=pinned(1, []))
    phases = ('off', 'python', 'perf', 'ebpf')
    flags = {'python': [], 'perf': ['--native=perf'], 'ebpf': ['--native']}
    rates = {p: [] for p in phases}
    cpu = {p: [0.0, 0] for p in phases}  # daemon CPU seconds, ticks
    natives = {'perf': [], 'ebpf': []}
    stats_path = '/proc/sys/kernel/bpf_stats_enabled'
    with open(stats_path) as f:
        stats_were = f.read().strip()
    with open(stats_path, 'w') as f:
        f.write('1')
    try:
        for _ in range(args.rounds):
            for phase in phases:
                ticks0 = 0
                if phase != 'off':
                    out = d.ctl('attach', target.pid, '--rate', args.rate, *flags[phase],
                                check=True).stdout
                    if phase != 'python' and 'native-' + phase not in out:
                        sys.exit('attach did not use %s: %s' % (phase, out))
                    time.sleep(0.5)  # the attach's own work (symbols, CFI) left out
                    ticks0 = listed(d, target.pid)['stats']['ticks']
                before, t0, c0 = count(log), time.perf_counter(), cpu_seconds(d.proc.pid)
                time.sleep(args.window)
                rates[phase].append((count(log) - before) / (time.perf_counter() - t0))
                cpu[phase][0] += cpu_seconds(d.proc.pid) - c0
                if phase != 'off':
                    entry = listed(d, target.pid)
                    cpu[phase][1] += entry['stats']['ticks'] - ticks0
                    if phase in natives:
                        natives[phase].append(entry['native'])
                    d.ctl('detach', target.pid, check=True)
    finally:
        with open(stats_path, 'w') as f:
            f.write(stats_were)
        target.kill()
        target.wait()
        d.close()
    off = statistics.median(rates['off'])
    print('daemon: %s, %d Hz, %d rounds of %.1f s windows: unsampled, attach, attach'
          ' --native=perf, attach --native (eBPF)' % (args.python, args.rate, args.rounds,
                                                     args.window))
    for phase in ('python', 'perf', 'ebpf'):
        r = statistics.median(rates[phase])
        print('  %-7s target %.1f sorts/s vs %.1f unsampled: ratio %.4f (slowdown %.2f %%);'
              ' daemon CPU %.1f us per tick'
              % (phase, r, off, r / off, (1 - r / off) * 100,
                 cpu[phase][0] / max(cpu[phase][1], 1) * 1e6))
    for backend, ns in natives.items():
        total = {k: sum(n.get(k, 0) for n in ns)
                 for k in ('samples', 'lost', 'merged', 'mismatched', 'same_instant')}
        print('  %s: %d samples, %d lost, %d merged, %d mismatched (%.1f %% merged), %d with the'
              ' Python frames of the same instant; lag %.2f ms; unwinding %.1f us a sample;'
              ' naming cache hit rate %.1f %%'
              % (backend, total['samples'], total['lost'], total['merged'], total['mismatched'],
                 100 * total['merged'] / max(total['merged'] + total['mismatched'], 1),
                 total['same_instant'], statistics.mean(n['lag_ms'] for n in ns),
                 statistics.mean(n['unwind_us'] for n in ns),
                 100 * statistics.mean(n['name_cache_hit_rate'] for n in ns)))
        if backend == 'ebpf':
            print('  ebpf: the program runs %.2f us a sample in the kernel'
                  % statistics.mean(n.get('bpf_run_us', 0) for n in ns))


def unwinder_windows(args):
    tool = os.path.join(args.build, 'tests', 'nativesample')
    target, log = start_target(args)
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


def shared_tables(args):
    os.environ.setdefault('PROBED_BUILD', args.build)
    from daemon import Daemon
    from procstat import rss_mib
    ranks = [subprocess.Popen(['/usr/bin/python3', os.path.join(ROOT, 'tests', 'targets',
                                                                 'native_torch.py'), '1'],
                              stdout=subprocess.PIPE, universal_newlines=True)
             for _ in range(args.torch_ranks)]
    d = Daemon()
    try:
        pids = [json.loads(r.stdout.readline().split(' ', 1)[1])['pid'] for r in ranks]
        time.sleep(1)
        print('shared function tables: %d torch processes attached --native in turn'
              % len(pids))
        for i, pid in enumerate(pids):
            rss0, t0 = rss_mib(d.proc.pid), time.perf_counter()
            out = d.ctl('attach', pid, '--native', check=True).stdout
            took = time.perf_counter() - t0
            time.sleep(1)  # a second of sampling: the tables each sample needs are in use
            tables = json.loads(d.ctl('list', '--json', check=True).stdout)['native_symbols']
            print('  process %d: attach %.2f s (%s), daemon RSS +%.1f MiB; tables held %d'
                  ' (%.1f MiB), built %d, found built %d'
                  % (i + 1, took, out.split(', ')[-1].strip(), rss_mib(d.proc.pid) - rss0,
                     tables['tables'], tables['bytes'] / 2**20, tables['builds'],
                     tables['hits']))
    finally:
        for r in ranks:
            r.kill()
            r.wait()
        d.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--python', default='/usr/bin/python3')
    ap.add_argument('--rate', type=int, default=100)
    ap.add_argument('--window', type=float, default=3.0)
    ap.add_argument('--rounds', type=int, default=8)
    ap.add_argument('--stack', type=int, default=16384)
    ap.add_argument('--torch-ranks', type=int, default=3)
    args = ap.parse_args()
    unwinder_windows(args)
    daemon_windows(args)
    shared_tables(args)


if __name__ == '__main__':
    main()
