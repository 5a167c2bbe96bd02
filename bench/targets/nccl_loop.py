"""bench/nccl.py's target: ncclAllReduce through ctypes in a loop, as fast as it goes, on a
communicator made before any attach (the library from NCCL_LIB). Each 0.1 s it appends
"perf_counter calls" to the file LOG, so the bench reads its call rate per window.

NVIDIA's own NCCL makes no communicator without a GPU: then the calls are on a zeroed buffer,
which NCCL refuses at its first check of the communicator (ncclInvalidArgument), after the
probe at its entry has run as it would on a GPU (printed: REFUSED)."""
import ctypes
import os
import time

nccl = ctypes.CDLL(os.environ['NCCL_LIB'])
vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int


class UniqueId(ctypes.Structure):
    _fields_ = [('internal', ctypes.c_char * 128)]


nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(vp), i, UniqueId, i]
nccl.ncclAllReduce.argtypes = [vp, vp, sz, i, i, vp, vp]
comm = vp()
if nccl.ncclCommInitRank(ctypes.byref(comm), 1, UniqueId(), 0) != 0:
    fake = ctypes.create_string_buffer(1 << 20)
    comm = vp(ctypes.addressof(fake))
    print('REFUSED', flush=True)
buf = ctypes.create_string_buffer(8192)
src, dst, stream = ctypes.cast(buf, vp), vp(ctypes.addressof(buf) + 4096), vp(1)
call = nccl.ncclAllReduce
print('READY', flush=True)
with open(os.environ['LOG'], 'a', buffering=1) as log:
    n, next_t = 0, time.perf_counter() + 0.1
    while True:
        for _ in range(1000):
            call(src, dst, 1024, 7, 0, comm, stream)
        n += 1000
        now = time.perf_counter()
        if now >= next_t:
            log.write('%.6f %d\n' % (now, n))
            next_t = now + 0.1
