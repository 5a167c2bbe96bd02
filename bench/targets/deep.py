"""Benchmark target: a CPU-bound main thread whose stack is 30 frames of known shape.

lvl_0 .. lvl_29 are generated into a real file (so lines are real): lvl_k calls lvl_k+1 twice
from the line `base + 6k + 2`; lvl_29 counts. The innermost frames change every microsecond
or so; deeper ones more rarely. A helper thread prints the count every 0.1 s, which is how
bench/run.py measures the target's work rate. The first line printed is
`READY <file> <base line> <depth>`.
"""
import os
import sys
import tempfile
import threading
import time

DEPTH = 30


def generate(path):
    lines = ['count = 0', '', '']
    base = len(lines) + 1
    for k in range(DEPTH - 1):
        lines += ['def lvl_%d(n):' % k, '    for i in range(2):', '        lvl_%d(n)' % (k + 1),
                  '    return n', '', '']
    lines += ['def lvl_%d(n):' % (DEPTH - 1), '    global count', '    count += 1',
              '    return n', '']
    with open(path, 'w') as f:
        f.write('\n'.join(lines))
    return base


def reporter(mod):
    while True:
        time.sleep(0.1)
        sys.stdout.write('%.6f %d\n' % (time.time(), mod.count))
        sys.stdout.flush()


def main():
    tmp = tempfile.mkdtemp(prefix='probed-bench-')
    path = os.path.join(tmp, 'deepmod.py')
    base = generate(path)
    sys.path.insert(0, tmp)
    import deepmod
    print('READY %s %d %d' % (path, base, DEPTH))
    sys.stdout.flush()
    threading.Thread(target=reporter, args=(deepmod,), daemon=True).start()
    while True:
        deepmod.lvl_0(0)


if __name__ == '__main__':
    main()
