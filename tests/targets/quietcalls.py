"""Python run where its caller calls nothing (tests/functional/test_stress.py): a thread runs
`mapped` from a `for` over map() (its caller stands at FOR_ITER, whose iterator is no
generator), and the main thread runs a signal handler (its caller stands at whatever quiet
instruction it had reached). <= 3.10 believes such a caller only when a second read finds it
again; these stacks must still be stored.

READY {"file": this file, "for_line": the mapper's for line, "version": [3, minor]}
"""
import itertools
import json
import signal
import sys
import threading
import time


def mapped(n):
    end = time.time() + 0.002
    while time.time() < end:
        pass
    return n


def run_mapper():
    for _ in map(mapped, itertools.count()):  # FOR_LINE
        pass


def handler(signum, frame):
    end = time.time() + 0.005
    while time.time() < end:
        pass


def spin_quiet():
    n = 0
    while True:
        n = 1


def main():
    with open(__file__) as f:
        for_line = [i for i, line in enumerate(f, 1) if line.rstrip().endswith('# FOR_LINE')][0]
    threading.Thread(target=run_mapper, name='mapper', daemon=True).start()
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
    print('READY ' + json.dumps({'file': __file__, 'for_line': for_line,
                                 'version': list(sys.version_info[:2])}), flush=True)
    spin_quiet()


if __name__ == '__main__':
    main()
