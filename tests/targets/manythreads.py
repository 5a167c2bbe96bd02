"""Many threads (tests/functional/test_stress.py): argv[1] threads wait in park(), the main
thread spins in main_loop(). Prints READY once every thread has started."""
import json
import os
import sys
import threading


def park(stop):
    stop.wait()


def main_loop():
    total = 0
    while True:
        total += 1


def main():
    stop = threading.Event()
    for i in range(int(sys.argv[1])):
        threading.Thread(target=park, args=(stop,), name='parked-%d' % i, daemon=True).start()
    print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
    main_loop()


if __name__ == '__main__':
    main()
