"""A target for the eval tests (tests/functional/test_eval.py); argv[1] says what it does.

busy     pure Python, counting            sleep   in time.sleep() between counts
read     blocked in os.read() on a pipe   cgil    in a C call that holds the GIL (2 s at a time)
float    a float loop that checks every result (a clobbered FPU register shows as wrong)
signals  the float loop with SIGALRM every millisecond (a handler counting `ticks`)
malloc   allocating and freeing large buffers (libc malloc/free) all the time
seccomp  sleeping under a seccomp filter that refuses openat() (the stub cannot be opened)
It never imports threading, prints READY {"pid": ...}, and keeps `counter` and `wrong` as
globals the tests read through eval.
"""
import json
import math
import os
import sys
import time

counter = 0
wrong = 0
remote_scripts = []  # 3.14+: the scripts PEP 768's external debugger hook ran here

if hasattr(sys, 'remote_exec'):
    sys.addaudithook(lambda event, args: event == 'cpython.remote_debugger_script'
                     and remote_scripts.append(args[0]))


def busy():
    global counter
    while True:
        counter += 1


def sleep():
    global counter
    while True:
        time.sleep(0.01)
        counter += 1


def read():
    r, _w = os.pipe()
    os.read(r, 1)  # never written: blocked for good


def cgil():
    import ctypes
    libc = ctypes.PyDLL(None)  # PyDLL: the GIL stays held during the call
    global counter
    while True:
        libc.usleep(2000000)  # 2 s: an eval asked at its start must time out at 1 s
        counter += 1


def float_loop():
    global counter, wrong
    x = 1.5
    while True:
        for _ in range(1000):
            y = math.sqrt(x)
            if abs(y * y - x) > 1e-9 * x or abs(math.exp(math.log(x)) - x) > 1e-9 * x:
                wrong += 1
            x = x * 1.000001 + 0.25
        counter += 1


def signals():
    """the float loop, interrupted by SIGALRM every millisecond: its C handler returns through
    the same glibc restorer an injected call does, on another stack."""
    import signal
    global ticks
    ticks = 0

    def on_alarm(signum, frame):
        global ticks
        ticks += 1
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
    float_loop()


def malloc_loop():
    global counter
    while True:
        for n in (100000, 300000, 70000):
            b = bytearray(n)
            b[-1] = 1
            del b
        counter += 1


def seccomp():
    """sleep, under a seccomp filter that refuses every openat() with EPERM (so no dlopen)."""
    import ctypes
    import struct
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    ld_nr = struct.pack('HBBI', 0x20, 0, 0, 0)                # ld [nr]
    is_openat = struct.pack('HBBI', 0x15, 0, 1, 257)          # jeq openat, 0, 1
    deny = struct.pack('HBBI', 0x06, 0, 0, 0x00050000 | 1)   # ret ERRNO(EPERM)
    allow = struct.pack('HBBI', 0x06, 0, 0, 0x7fff0000)       # ret ALLOW
    code = ctypes.create_string_buffer(ld_nr + is_openat + deny + allow)
    prog = struct.pack('HxxxxxxP', 4, ctypes.addressof(code))
    prog_buf = ctypes.create_string_buffer(prog)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.addressof(prog_buf), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), 'seccomp')
    sleep()


MODES = {'signals': signals, 'seccomp': seccomp, 'busy': busy, 'sleep': sleep, 'read': read, 'cgil': cgil, 'float': float_loop,
         'malloc': malloc_loop}

if __name__ == '__main__':
    mode = sys.argv[1] if len(sys.argv) > 1 else 'busy'
    print('READY ' + json.dumps({'pid': os.getpid(), 'mode': mode}))
    sys.stdout.flush()
    MODES[mode]()
