"""A long native loop in a library whose file is deleted once loaded (as after a package
upgrade under a job that runs for days), for mixed backtraces (test_native.py).

    native_spin.py LIBRARY [DELAY]   the built tests/functional/spin_lib.c

Prints `READY {"pid": N}` once the library is loaded and its file gone; with DELAY, at once,
and the library is loaded DELAY seconds later (a library loaded after an attach). With
SPIN_IN_PLACE=1 in its environment, LIBRARY is loaded where it is and kept (its debug files
beside it, test_mixed.py).
"""
import ctypes
import json
import os
import shutil
import sys
import tempfile
import time


def work(lib):
    while True:
        lib.spin_for(50000000)  # MARK:spin


def main():
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else None
    if delay is not None:
        print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
        time.sleep(delay)
    if os.environ.get('SPIN_IN_PLACE') == '1':
        lib = ctypes.CDLL(sys.argv[1])
    else:
        copy = os.path.join(tempfile.mkdtemp(prefix='probed-spin-'), 'libspin.so')
        shutil.copy(sys.argv[1], copy)
        lib = ctypes.CDLL(copy)
        os.unlink(copy)
        os.rmdir(os.path.dirname(copy))
    lib.spin_for.argtypes = [ctypes.c_ulong]
    if delay is None:
        print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
    work(lib)


main()
