"""A process that calls NVIDIA's own libnccl (NCCL_LIB: a release, not the tests' stand-in) on a
machine without a GPU, so that the probes are tried on NCCL's real code and its real ABI.

Without a GPU no communicator can be made: ncclCommInitRank fails (CUDA finds no device), and a
collective on a communicator NCCL did not make is refused by NCCL's own check of it (its magic
numbers) before anything else: ncclInvalidArgument (4). The probes see each call at its entry
all the same, as they see it on a GPU.

READY at once; once the file GO exists: ncclGetUniqueId, ncclCommInitRank of 2 ranks from it
(printed: INIT <result>), ncclCommInitAll of 2 GPUs (ALL <result>), then, on a zeroed buffer
that NCCL takes for no communicator of its own ("fake", printed: FAKE <address>), one call
each of CALLS below, in that order, each printed "<name> <result>"; then DONE, and it sleeps."""
import ctypes
import os
import sys
import time

INT8, UINT8, INT32, INT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = 0, 1, 2, 4, 6, 7, 8, 9
SUM = 0

# (function, its arguments after the buffers: count, dtype, and op/root/peer where it has one)
CALLS = [
    ('ncclAllReduce', (1024, FLOAT32, SUM)),
    ('ncclBroadcast', (256, BFLOAT16, 1)),
    ('ncclBcast', (100, INT8, 0)),
    ('ncclReduce', (8, INT64, SUM, 1)),
    ('ncclAllGather', (128, FLOAT16)),
    ('ncclReduceScatter', (64, FLOAT32, SUM)),
    ('ncclSend', (16, UINT8, 1)),
    ('ncclRecv', (24, UINT8, 1)),
    ('ncclAlltoAll', (32, FLOAT32)),
    ('ncclGather', (12, INT32, 1)),
    ('ncclScatter', (6, FLOAT64, 0)),
]


class UniqueId(ctypes.Structure):
    _fields_ = [('internal', ctypes.c_char * 128)]


def main():
    nccl = ctypes.CDLL(os.environ['NCCL_LIB'])
    vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    nccl.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(vp), i, UniqueId, i]
    nccl.ncclCommInitAll.argtypes = [ctypes.POINTER(vp), i, vp]
    sig = {'ncclAllReduce': [vp, vp, sz, i, i], 'ncclBroadcast': [vp, vp, sz, i, i],
           'ncclBcast': [vp, sz, i, i], 'ncclReduce': [vp, vp, sz, i, i, i],
           'ncclAllGather': [vp, vp, sz, i], 'ncclReduceScatter': [vp, vp, sz, i, i],
           'ncclSend': [vp, sz, i, i], 'ncclRecv': [vp, sz, i, i],
           'ncclAlltoAll': [vp, vp, sz, i], 'ncclGather': [vp, vp, sz, i, i],
           'ncclScatter': [vp, vp, sz, i, i]}
    for name, args in sig.items():
        getattr(nccl, name).argtypes = args + [vp, vp]  # comm, stream
    print('READY', flush=True)
    while not os.path.exists(os.environ['GO']):
        time.sleep(0.02)

    uid, comm = UniqueId(), vp()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    print('INIT %d' % nccl.ncclCommInitRank(ctypes.byref(comm), 2, uid, 0), flush=True)
    local = (vp * 2)()
    print('ALL %d' % nccl.ncclCommInitAll(local, 2, None), flush=True)
    fake = ctypes.create_string_buffer(1 << 20)  # NCCL reads its magic numbers: zeros
    buf = ctypes.create_string_buffer(1 << 16)
    src, dst = ctypes.cast(buf, vp), vp(ctypes.addressof(buf) + 4096)
    print('FAKE %d' % ctypes.addressof(fake), flush=True)
    for name, args in CALLS:
        bufs = (src,) if name in ('ncclBcast', 'ncclSend', 'ncclRecv') else (src, dst)
        r = getattr(nccl, name)(*(bufs + args + (vp(ctypes.addressof(fake)), None)))
        print('%s %d' % (name, r), flush=True)
    print('DONE', flush=True)
    while True:
        time.sleep(1)


if __name__ == '__main__':
    sys.exit(main())
