#!/usr/bin/python3
"""Operations benchmark; prints figures, asserts nothing.

usage: bench/ops.py [--build DIR] [--targets 64] [--window S] [--scrapes N]

One probed serving /metrics, first with no target (the baseline, same run), then with N
targets (bench/targets/idle_deep.py: two threads 20+ frames deep) attached at 100 Hz:
1. /metrics scrape latency: N sequential GETs, each on a new connection as Prometheus makes
   them, median / p90 / p99 and the body size; the ratio to the baseline's median.
2. The daemon's CPU (% of one core over the window, /proc/PID/stat) and RSS, and per attached
   target: (with N - baseline) / N. Then the same window with memory_interval=0, changed
   live, to show what the memory timeline (smaps_rollup + per-thread CPU once a second) adds.
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'functional'))
from procstat import cpu_seconds, rss_mib  # noqa: E402
from conftest import free_port  # noqa: E402


def scrape(port):
    """(seconds, bytes) of one GET /metrics on a new connection."""
    t0 = time.perf_counter()
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b'GET /metrics HTTP/1.1\r\nHost: probed\r\nConnection: close\r\n\r\n')
    data = b''
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    elapsed = time.perf_counter() - t0
    assert data.startswith(b'HTTP/1.1 200'), data[:100]
    return elapsed, len(data)


def scrape_stats(port, n):
    times, size = [], 0
    for _ in range(n):
        t, size = scrape(port)
        times.append(t)
    times.sort()
    return (statistics.median(times), times[int(0.9 * n)], times[int(0.99 * n)], size)


def cpu_window(pid, window):
    c0, t0 = cpu_seconds(pid), time.time()
    time.sleep(window)
    return 100 * (cpu_seconds(pid) - c0) / (time.time() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--targets', type=int, default=64)
    ap.add_argument('--window', type=float, default=10)
    ap.add_argument('--scrapes', type=int, default=300)
    args = ap.parse_args()
    os.environ['PROBED_BUILD'] = args.build
    from daemon import Daemon  # noqa: E402

    port = free_port()
    d = Daemon('--metrics', '127.0.0.1:%d' % port)
    targets = []
    try:
        time.sleep(1)
        base_scrape = scrape_stats(port, args.scrapes)
        base_cpu = cpu_window(d.proc.pid, args.window)
        base_rss = rss_mib(d.proc.pid)
        print('baseline, no target: scrape median %.3f ms, p90 %.3f ms, p99 %.3f ms,'
              ' %d bytes; daemon CPU %.2f%% of a core, RSS %.1f MiB'
              % (1e3 * base_scrape[0], 1e3 * base_scrape[1], 1e3 * base_scrape[2],
                 base_scrape[3], base_cpu, base_rss))

        targets = [subprocess.Popen([sys.executable, os.path.join(ROOT, 'bench', 'targets',
                                                                  'idle_deep.py')],
                                    stdout=subprocess.PIPE, universal_newlines=True)
                   for _ in range(args.targets)]
        for t in targets:
            t.stdout.readline()
        for t in targets:
            d.ctl('attach', t.pid, '--rate', '100', check=True)
        time.sleep(3)  # every target has memory readings
        n = args.targets
        sc = scrape_stats(port, args.scrapes)
        cpu = cpu_window(d.proc.pid, args.window)
        rss = rss_mib(d.proc.pid)
        print('%d targets at 100 Hz: scrape median %.3f ms (%.2fx the baseline), p90 %.3f ms,'
              ' p99 %.3f ms, %d bytes' % (n, 1e3 * sc[0], sc[0] / base_scrape[0], 1e3 * sc[1],
                                          1e3 * sc[2], sc[3]))
        print('%d targets at 100 Hz: daemon CPU %.2f%% of a core, RSS %.1f MiB; per target'
              ' %.3f%% of a core and %.2f MiB' % (n, cpu, rss, (cpu - base_cpu) / n,
                                                   (rss - base_rss) / n))
        d.ctl('config', 'memory_interval=0', check=True)
        time.sleep(1)
        cpu_nomem = cpu_window(d.proc.pid, args.window)
        print('%d targets, memory_interval=0 (set live): daemon CPU %.2f%% of a core: the'
              ' memory timeline costs %.3f%% of a core per target'
              % (n, cpu_nomem, (cpu - cpu_nomem) / n))
    finally:
        d.close()
        for t in targets:
            t.kill()
            t.wait()


if __name__ == '__main__':
    main()
