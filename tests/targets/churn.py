"""A target whose threads and stacks never stop changing (tests/functional/test_stress.py).

Threads are started and joined all the time, each recursing to a random depth; the main
thread exits by itself after argv[1] seconds (0: never), so a reader sees it vanish. One more
thread waits, 10 calls deep, for the whole run, so every read has at least two stacks to
check even when the target is not scheduled at all while it is read (a busy 2-core CI
machine: workers are short-lived, and reads that all found only the main thread in join()
would check nothing about threads coming and going).
"""
import random
import sys
import threading
import time


def dive(n):
    if n == 0:
        return sum(range(200))
    return dive(n - 1) + 1


def worker(depth):
    for _ in range(50):
        dive(depth)


def park(n, forever):
    if n == 0:
        forever.wait()
    park(n - 1, forever)


def main():
    threading.Thread(target=park, args=(10, threading.Event()), name='parked', daemon=True).start()
    limit = float(sys.argv[1]) if len(sys.argv) > 1 else 0
    start = time.time()
    print('READY {}')
    sys.stdout.flush()
    while not limit or time.time() - start < limit:
        threads = [threading.Thread(target=worker, args=(random.randint(1, 60),))
                   for _ in range(random.randint(1, 6))]
        for t in threads:
            t.start()
        dive(random.randint(1, 40))
        for t in threads:
            t.join()


if __name__ == '__main__':
    main()
