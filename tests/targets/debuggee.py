"""A target to debug (tests/functional/test_debug.py): the main thread calls step() in a loop
and writes how many steps it made to the file argv[1] (so a test sees it go on, or stop); a
thread named "side" loops in side_loop(). `fail` as argv[2]: after argv[3] appears, step 3
raises an uncaught ValueError in the main thread. DEBUGGEE_STEP_S in the environment: each step's
sleep (0.02 s). Prints READY with the side thread's id."""
import json
import os
import sys
import threading
import time

COUNTER = sys.argv[1]
FAIL = len(sys.argv) > 3 and sys.argv[2] == 'fail'
STEP_S = float(os.environ.get('DEBUGGEE_STEP_S', '0.02'))


def step(i):
    total = i * 2
    time.sleep(STEP_S)  # MARK:step
    if FAIL and i >= 3 and os.path.exists(sys.argv[3]):
        ratio = total / 0.5
        raise ValueError('step %d: ratio %s out of range' % (i, ratio))
    return total


def side_loop():
    rounds = 0
    while True:
        rounds += 1
        time.sleep(0.02)  # MARK:side


def main():
    n = 0
    while True:
        n += 1
        step(n)
        with open(COUNTER + '.tmp', 'w') as f:
            f.write(str(n))
        os.replace(COUNTER + '.tmp', COUNTER)


side = threading.Thread(target=side_loop, name='side', daemon=True)
side.start()
time.sleep(0.05)
print('READY ' + json.dumps({'side': getattr(side, 'native_id', 0)}), flush=True)
main()
