"""A bench target for bench/daemon.py: two threads, each 20 Python frames deep, one waking
every millisecond (so its stack is real work to read), one asleep."""
import os
import sys
import threading
import time


def descend(n, leaf):
    if n == 0:
        return leaf()
    return descend(n - 1, leaf)


def ticking():
    while True:
        time.sleep(0.001)


def sleeping():
    time.sleep(1e6)


threading.Thread(target=descend, args=(20, sleeping), daemon=True).start()
print('READY', os.getpid(), flush=True)
descend(20, ticking)
