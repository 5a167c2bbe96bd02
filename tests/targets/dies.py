"""A target that ends the way it is told, once the file argv[2] appears (the test attached it
by then): `exit N` (sys.exit), `segv` (a read of address 0 through ctypes), `abort`
(os.abort), `wait` (sleeps until killed), `oom` (allocates until the OOM killer ends it).
Each waits in a function named after its end, so that its last sampled stack says which."""
import ctypes
import os
import sys
import time


def wait_for(flag):
    while not os.path.exists(flag):
        time.sleep(0.02)


def before_exit(flag, code):
    wait_for(flag)
    sys.exit(code)


def before_segv(flag):
    wait_for(flag)
    ctypes.string_at(0)


def before_abort(flag):
    wait_for(flag)
    os.abort()


def before_kill(flag):
    while True:
        time.sleep(0.05)


def before_oom(flag):
    wait_for(flag)
    hoard = []
    while True:
        hoard.append(bytearray(16 << 20))  # touched: bytearray zeroes what it allocates


mode, flag = sys.argv[1], sys.argv[2]
print('READY {}', flush=True)
if mode == 'exit':
    before_exit(flag, int(sys.argv[3]))
elif mode == 'segv':
    before_segv(flag)
elif mode == 'abort':
    before_abort(flag)
elif mode == 'oom':
    before_oom(flag)
else:
    before_kill(flag)
