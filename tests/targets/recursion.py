"""Ground truth for torn reads (tests/functional/test_stress.py): two threads recurse up and
down, 1 to 20 calls deep, as fast as they can, so frames are freed and reused (on <= 3.10
through the frame free list and each code object's zombie frame) between any two reads.

The deepest stack is 23 frames: <module>, main, recurse x 21 (20 down to 0); the thread's is
Thread._bootstrap, _bootstrap_inner, run, climb, recurse x 21 = 25. Every stack a reader
returns must start at <module> or _bootstrap and be no deeper than that.
"""
import json
import os
import threading


def recurse(n):
    if n == 0:
        return 0
    return recurse(n - 1) + 1


def climb():
    while True:
        for depth in range(21):
            recurse(depth)


def main():
    threading.Thread(target=climb, daemon=True).start()
    print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
    climb()


if __name__ == '__main__':
    main()
