"""A long native loop in a library whose file is deleted once loaded (as after a package
upgrade under a job that runs for days), for mixed backtraces (test_native.py).

    native_spin.py LIBRARY    the built tests/functional/spin_lib.c

Prints `READY {"pid": N}` once the library is loaded and its file gone.
"""
import ctypes
import json
import os
import shutil
import sys
import tempfile


def work(lib):
    while True:
        lib.spin_for(50000000)  # MARK:spin


def main():
    copy = os.path.join(tempfile.mkdtemp(prefix='probed-spin-'), 'libspin.so')
    shutil.copy(sys.argv[1], copy)
    lib = ctypes.CDLL(copy)
    os.unlink(copy)
    os.rmdir(os.path.dirname(copy))
    lib.spin_for.argtypes = [ctypes.c_ulong]
    print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
    work(lib)


main()
