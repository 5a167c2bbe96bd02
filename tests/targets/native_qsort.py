"""Python -> ctypes -> libc qsort -> a Python comparison callback, for mixed (native)
backtraces: the callback spins, so a stack read almost always lands inside it with libc's
sort below it and the caller's Python frames below that.

    native_qsort.py LOG_FILE [DEPTH]   appends "ok" (or "bad") to LOG_FILE after each whole
                                       sort; with DEPTH, sorts from that many calls of nest()

Also starts faulthandler's watchdog, a thread with no Python state. Prints `READY {"pid": N}`
once the first sort is under way.
"""
import ctypes
import faulthandler
import json
import os
import sys
import time

libc = ctypes.CDLL(None)
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def compare(a, b):
    x, y = a[0], b[0]
    until = time.time() + 0.0005
    while time.time() < until:  # MARK:spin
        pass
    return (x > y) - (x < y)


def sort_forever(log):
    callback = CMP(compare)
    while True:
        arr = (ctypes.c_int * 32)(*range(32, 0, -1))
        libc.qsort(arr, len(arr), ctypes.sizeof(ctypes.c_int), callback)  # MARK:qsort
        log.write('ok\n' if list(arr) == list(range(1, 33)) else 'bad\n')


def nest(depth, log):
    if depth > 0:
        nest(depth - 1, log)
    else:
        sort_forever(log)


def main():
    faulthandler.dump_traceback_later(3600)  # a thread of C only: its watchdog
    with open(sys.argv[1], 'w', buffering=1) as log:
        print('READY ' + json.dumps({'pid': os.getpid()}))
        sys.stdout.flush()
        nest(int(sys.argv[2]) if len(sys.argv) > 2 else 0, log)


main()
