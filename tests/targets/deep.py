"""A thread deeper than probed stores whole (tests/functional/test_stress.py): the main thread
recurses argv[1] calls deep in descend(), then spins in spin() at the bottom forever.

Stack, innermost first: spin, descend x argv[1], main, <module>.
"""
import json
import os
import sys


def spin():
    total = 0
    while True:
        total += 1


def descend(n):
    if n == 0:
        spin()
    descend(n - 1)


def main():
    depth = int(sys.argv[1])
    sys.setrecursionlimit(depth + 100)
    print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
    descend(depth - 1)


if __name__ == '__main__':
    main()
