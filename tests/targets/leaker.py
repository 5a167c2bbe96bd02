"""A target whose memory leaks in one method and churns in a function (CPython 3.6+), for
the allocation tracking tests.

Every 20 ms, Cache.remember keeps 64 KiB more (the leak) and churn() allocates and frees
100 small objects. Prints `READY {"pid": N}` once running.
"""
import json
import os
import sys
import time

held = []


class Cache:
    def remember(self):
        held.append(bytearray(64 * 1024))  # MARK:leak


def churn():
    tmp = [bytes(1000) for _ in range(100)]
    return len(tmp)


def main():
    print('READY ' + json.dumps({'pid': os.getpid()}))
    sys.stdout.flush()
    cache = Cache()
    while True:
        cache.remember()
        churn()
        time.sleep(0.02)


main()
