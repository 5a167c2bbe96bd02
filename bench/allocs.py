#!/usr/bin/python3
"""What allocation tracking costs a target; prints figures, asserts nothing.

usage: bench/allocs.py [--rounds 5]

`probectl memory PID --allocations on` runs tracemalloc in the target with probed's frame
count (probed/intarget/allocs.py: _PROBED_FRAMES, the line and its callers, so that probed's
own allocations can be left out). This times, in one process and interleaved round by round,
two workloads untraced (the baseline, same run) and traced with 1, 4 and 8 frames:
1. small objects: 200,000 tuples and strings made 10 calls deep;
2. a training step of a small MLP (torch, when it imports): forward, backward, SGD.
Each figure is the median of the rounds; the ratio is to the untraced median; the noise floor
is the untraced rounds' spread (max - min) over their median.
"""
import argparse
import os
import statistics
import sys
import time
import tracemalloc

# bench/torch.py is not torch: this folder off the path
sys.path = [p for p in sys.path if os.path.abspath(p or '.') != os.path.dirname(os.path.abspath(__file__))]

FRAMES = (1, 4, 8)


def deep(n, f):
    return f() if n == 0 else deep(n - 1, f)


def small_objects():
    out = []
    for i in range(200000):
        out.append((i, str(i)))
    return len(out)


def torch_steps():
    try:
        import torch
        import torch.nn as nn
    except ImportError:
        return None
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)

    def steps():
        for _ in range(200):
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return steps


def timed(fn, frames):
    if frames:
        tracemalloc.start(frames)
    t0 = time.perf_counter()
    deep(10, fn)
    dt = time.perf_counter() - t0
    if frames:
        tracemalloc.stop()
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=5)
    args = ap.parse_args()
    workloads = [('small objects', small_objects)]
    steps = torch_steps()
    if steps:
        workloads.append(('torch MLP steps', steps))
    else:
        print('torch: not installed, its workload not run')
    for name, fn in workloads:
        times = {f: [] for f in (0,) + FRAMES}
        timed(fn, 0)  # warm up
        for _ in range(args.rounds):
            for f in times:
                times[f].append(timed(fn, f))
        base = statistics.median(times[0])
        noise = (max(times[0]) - min(times[0])) / base
        print('%s: untraced %.3f s (noise floor %.0f %%)' % (name, base, 100 * noise))
        for f in FRAMES:
            print('  %d frame%s: %.3f s  ratio %.2f' % (f, '' if f == 1 else 's',
                                                      statistics.median(times[f]),
                                                      statistics.median(times[f]) / base))


if __name__ == '__main__':
    main()
