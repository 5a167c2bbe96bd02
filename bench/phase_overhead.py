#!/usr/bin/python3
"""Each phase's step times, from a job's step log, for the GPU recipes (gpu_torch.sh,
gpu_comm.sh); prints figures, asserts nothing.

usage: bench/phase_overhead.py STEPS.jsonl PHASES

STEPS.jsonl: a line per step, {"t": unix seconds at its end, "dt": its seconds} (train_gpu.py's
--log). PHASES: "name unix-seconds" lines, each phase's start, the last one the end. Printed:
each phase's steps, median and mean step, and its mean over the first phase's (the last phase,
back to the first's settings, is the noise floor). A phase's first second is left out: the
switch settles."""
import json
import sys


def main():
    steps = [json.loads(line) for line in open(sys.argv[1])]
    phases = [line.split() for line in open(sys.argv[2])]
    base = None
    for (name, t0), (_, t1) in zip(phases, phases[1:]):
        t0, t1 = float(t0) + 1.0, float(t1)
        d = sorted(s['dt'] for s in steps if t0 <= s['t'] < t1)
        if not d:
            print(name, 'no steps')
            continue
        med, mean = d[len(d) // 2], sum(d) / len(d)
        base = base or mean
        print('%-13s steps %5d median %8.3f ms mean %8.3f ms ratio %.4f'
              % (name, len(d), med * 1e3, mean * 1e3, mean / base))


if __name__ == '__main__':
    main()
