"""Native time spread over many libraries (tests/functional/test_mixed.py's debuginfod flood):
loads every library named in the file argv[1] and calls spin_for() in each in turn, forever,
so a native sampler meets each of them within seconds. Prints READY {"pid": N, "libs": n}."""
import ctypes
import json
import os
import sys

with open(sys.argv[1]) as f:
    libs = [ctypes.CDLL(line.strip()) for line in f if line.strip()]
for lib in libs:
    lib.spin_for.argtypes = [ctypes.c_ulong]
print('READY ' + json.dumps({'pid': os.getpid(), 'libs': len(libs)}), flush=True)
while True:
    for lib in libs:
        lib.spin_for(2000000)  # a few milliseconds in each
