"""A bench target for bench/daemon.py: a torch-like process of many threads (argv[1], 150),
one of them working, the others parked a few frames deep as a thread pool's are; every 0.25 s
it prints how much work it has done (a counter of a pure-Python loop), the figure whose rate
the bench compares with and without sampling."""
import sys
import threading
import time

done = 0


def work():
    global done
    x = 0
    while True:
        for i in range(1000):
            x = (x * 31 + i) % 1000003
        done += 1


def park(n, ev):
    if n:
        return park(n - 1, ev)
    ev.wait()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    ev = threading.Event()
    for i in range(n - 2):
        threading.Thread(target=park, args=(5, ev), name='pool-%d' % i, daemon=True).start()
    threading.Thread(target=work, name='worker', daemon=True).start()
    print('READY', flush=True)
    while True:
        time.sleep(0.25)
        print(time.monotonic(), done, flush=True)


main()
