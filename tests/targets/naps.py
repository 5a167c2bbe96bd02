"""Frames kept while a thread sleeps (tests/functional/test_stress.py): a thread naps 80 ms in
nap_a, then in nap_b three calls deeper, again and again, and appends to a log file, for every
nap, the instants (time.time()) it was inside it: after entering and before leaving. Eight
more threads are parked for good, and the main thread sleeps. A stack kept from before the
napper moved on would show the other nap inside such an interval.

READY {"log": path}; each log line: "nap_a|nap_b entered left"
"""
import json
import os
import tempfile
import threading
import time

LOG = os.path.join(tempfile.mkdtemp(prefix='probed-naps-'), 'naps.log')


def nap_a(out):
    entered = time.time()
    time.sleep(0.08)
    out.write('nap_a %.6f %.6f\n' % (entered, time.time()))


def nap_b(out):
    entered = time.time()
    time.sleep(0.08)
    out.write('nap_b %.6f %.6f\n' % (entered, time.time()))


def deeper(n, out):
    return nap_b(out) if n == 0 else deeper(n - 1, out)


def napper():
    with open(LOG, 'w', buffering=1) as out:
        while True:
            nap_a(out)
            deeper(2, out)


def parked(stop):
    stop.wait()


stop = threading.Event()
for _ in range(8):
    threading.Thread(target=parked, args=(stop,), daemon=True).start()
threading.Thread(target=napper, daemon=True).start()
print('READY ' + json.dumps({'log': LOG}), flush=True)
while True:
    time.sleep(3600)
