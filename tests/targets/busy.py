"""A CPU-bound target for the daemon tests (CPython 3.6+): the main thread spins in
outer_loop -> middle -> spin_inner forever, a second thread named "sleeper" sleeps.

Prints `READY {"pid": N}` once running. With an argument N, exits with status N after
`EXIT_AFTER` seconds (env, default: never), for `probectl run` tests.
"""
import json
import os
import sys
import threading
import time


def spin_inner(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def middle():
    return spin_inner(2000)


def outer_loop(deadline):
    while deadline is None or time.time() < deadline:
        middle()


def sleeper():
    while True:
        time.sleep(3600)


def main():
    threading.Thread(target=sleeper, name='sleeper', daemon=True).start()
    exit_after = os.environ.get('EXIT_AFTER')
    deadline = time.time() + float(exit_after) if exit_after else None
    print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
    outer_loop(deadline)
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)


if __name__ == '__main__':
    main()
