"""A rank of a job that calls NCCL's C API through ctypes, as torch's ProcessGroupNCCL, DDP's
Reducer or FSDP end up calling it: libnccl.so.2 from NCCL_LIB (test_nccl.py gives its stand-in,
whose calls do nothing). Env: RANK (0 or 1 of 2), NCCL_ID (the ncclUniqueId all ranks share,
as text), GO (a file), ITER, DESYNC_RANK, SUB_SKIP_RANK, LATE.

At once (before any attach): a communicator "early" (never seen made), then READY. Once GO
exists: "comm" made from NCCL_ID, "sub" split from it (color 3), then ITER rounds of, on comm,
all_reduce, broadcast (root 0), all_gather, reduce_scatter, reduce (root 1), a send to and a
receive from the other rank; an all_reduce on sub, from a thread of its own as DDP's Reducer
issues its buckets' from autograd's (not in the last round on SUB_SKIP_RANK: it falls one
behind on sub), and one on early. Then a last all_reduce on
comm, of half the elements on DESYNC_RANK (a desync: NCCL would hang or reduce garbage), DONE,
and an all_reduce on early every 20 ms for ever, TICK N NOW_NS every 20 of them.
With FLOOD=N, once GO exists: an all_reduce of 2^62 float64s on early (its bytes past int64),
then N all_reduces each on a communicator address never made (a process filling the probes'
table), FLOODED, and the loop.
With LATE=1: libnccl is loaded only once GO exists (a job that imports torch after the attach),
and only early's all_reduces are made (LATE, then the loop).
With NEWER=1, once GO exists, the API of the NCCLs jobs run now (2.23 to 2.28): "cfg" made by
ncclCommInitRankConfig, nonblocking (its making returns ncclInProgress), "wide" (8 ranks) by
ncclCommInitRankScalable from two ids, "shrunk" by ncclCommShrink of wide without ranks 5 and 7
(each rank lists them in its own order); ITER rounds of, on cfg, ncclBcast (root 0), an
all_to_all, a gather (root 1) and a scatter (root 0), then an all_reduce each on wide (from a
thread of its own) and shrunk (by ncclAllReduceConfig, of NCCLs after 2.28); cfg aborted
(ncclCommAbort) and "again" made in its place (its address likely cfg's), an all_reduce on it;
"local" made by ncclCommInitAll of 4 GPUs (torch.cuda.nccl's, nn.DataParallel's way), and 2
rounds of an all_reduce (3 float32s) on each of its 4; NEWER, then the loop."""
import ctypes
import os
import struct
import sys
import threading
import time

INT8, UINT8, INT32, INT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = 0, 1, 2, 4, 6, 7, 8, 9
SUM = 0


class UniqueId(ctypes.Structure):
    _fields_ = [('internal', ctypes.c_char * 128)]


def unique_id(text):
    uid = UniqueId()
    uid.internal = text.encode()[:127]
    return uid


def main():
    rank, go = int(os.environ['RANK']), os.environ['GO']
    late = os.environ.get('LATE') == '1'
    if late:
        print('READY', flush=True)
        while not os.path.exists(go):
            time.sleep(0.02)
    nccl = ctypes.CDLL(os.environ['NCCL_LIB'])
    comm_t, stream = ctypes.c_void_p, ctypes.c_void_p(1)
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(comm_t), ctypes.c_int, UniqueId, ctypes.c_int]
    nccl.ncclCommSplit.argtypes = [comm_t, ctypes.c_int, ctypes.c_int, ctypes.POINTER(comm_t),
                                   ctypes.c_void_p]
    sz, vp, i = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int
    nccl.ncclAllReduce.argtypes = [vp, vp, sz, i, i, comm_t, vp]
    nccl.ncclBroadcast.argtypes = [vp, vp, sz, i, i, comm_t, vp]
    nccl.ncclReduce.argtypes = [vp, vp, sz, i, i, i, comm_t, vp]
    nccl.ncclAllGather.argtypes = [vp, vp, sz, i, comm_t, vp]
    nccl.ncclReduceScatter.argtypes = [vp, vp, sz, i, i, comm_t, vp]
    nccl.ncclSend.argtypes = [vp, sz, i, i, comm_t, vp]
    nccl.ncclRecv.argtypes = [vp, sz, i, i, comm_t, vp]
    nccl.ncclCommInitRankConfig.argtypes = [ctypes.POINTER(comm_t), ctypes.c_int, UniqueId,
                                            ctypes.c_int, ctypes.c_void_p]
    nccl.ncclCommInitRankScalable.argtypes = [ctypes.POINTER(comm_t), ctypes.c_int, ctypes.c_int,
                                              ctypes.c_int, ctypes.POINTER(UniqueId),
                                              ctypes.c_void_p]
    nccl.ncclCommShrink.argtypes = [comm_t, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                    ctypes.POINTER(comm_t), ctypes.c_void_p, ctypes.c_int]
    nccl.ncclCommAbort.argtypes = [comm_t]
    nccl.ncclCommInitAll.argtypes = [ctypes.POINTER(comm_t), ctypes.c_int, ctypes.c_void_p]
    nccl.ncclBcast.argtypes = [vp, sz, i, i, comm_t, vp]
    nccl.ncclAllReduceConfig.argtypes = [vp, vp, sz, i, i, comm_t, vp, vp]
    nccl.ncclAlltoAll.argtypes = [vp, vp, sz, i, comm_t, vp]
    nccl.ncclGather.argtypes = [vp, vp, sz, i, i, comm_t, vp]
    nccl.ncclScatter.argtypes = [vp, vp, sz, i, i, comm_t, vp]
    buf = ctypes.create_string_buffer(1 << 16)
    src, dst = ctypes.cast(buf, vp), ctypes.c_void_p(ctypes.addressof(buf) + 4096)

    def make(text):
        c = comm_t()
        assert nccl.ncclCommInitRank(ctypes.byref(c), 2, unique_id(text), rank) == 0
        return c

    early = make('early-%d' % rank)  # each rank's own: its id is not shared
    flood = int(os.environ.get('FLOOD', '0'))
    if not late:
        print('READY', flush=True)
        while not os.path.exists(go):
            time.sleep(0.02)
    newer = os.environ.get('NEWER') == '1'
    if newer:
        cfg, wide, shrunk, again = comm_t(), comm_t(), comm_t(), comm_t()
        config = ctypes.create_string_buffer(64)
        # ncclConfig_t: size, NCCL_CONFIG_INITIALIZER's magic, version, blocking = 0
        nonblocking = ctypes.create_string_buffer(
            struct.pack('=QIIi', 64, 0xcafebeef, 22809, 0), 64)
        assert nccl.ncclCommInitRankConfig(ctypes.byref(cfg), 2, unique_id(os.environ['NCCL_ID']),
                                           rank, nonblocking) == 7  # ncclInProgress
        ids = (UniqueId * 2)(unique_id(os.environ['NCCL_ID'] + '-a'),
                             unique_id(os.environ['NCCL_ID'] + '-b'))
        assert nccl.ncclCommInitRankScalable(ctypes.byref(wide), 8, rank, 2, ids, None) == 0
        left_out = (ctypes.c_int * 2)(*((5, 7) if rank == 0 else (7, 5)))
        assert nccl.ncclCommShrink(wide, left_out, 2, ctypes.byref(shrunk), None, 0) == 0
        for k in range(int(os.environ.get('ITER', '20'))):
            nccl.ncclBcast(src, 256, BFLOAT16, 0, cfg, stream)
            nccl.ncclAlltoAll(src, dst, 32, FLOAT32, cfg, stream)
            nccl.ncclGather(src, dst, 16, INT32, 1, cfg, stream)
            nccl.ncclScatter(src, dst, 8, FLOAT64, 0, cfg, stream)
            t = threading.Thread(target=nccl.ncclAllReduce,
                                 args=(src, dst, 4, FLOAT32, SUM, wide, stream))
            t.start()
            t.join()
            nccl.ncclAllReduceConfig(src, dst, 2, FLOAT32, SUM, shrunk, stream, None)
            time.sleep(0.005)
        assert nccl.ncclCommAbort(cfg) == 0
        assert nccl.ncclCommInitRankConfig(ctypes.byref(again), 2,
                                           unique_id(os.environ['NCCL_ID'] + '-again'), rank,
                                           config) == 0
        nccl.ncclAllReduce(src, dst, 1, FLOAT32, SUM, again, stream)
        local = (comm_t * 4)()
        assert nccl.ncclCommInitAll(local, 4, None) == 0
        for k in range(2):
            for dev in range(4):
                nccl.ncclAllReduce(src, dst, 3, FLOAT32, SUM, local[dev], stream)
    elif flood:
        nccl.ncclAllReduce(src, dst, 1 << 62, FLOAT64, SUM, early, stream)
        for k in range(flood):
            nccl.ncclAllReduce(src, dst, 1, FLOAT32, SUM, comm_t(0x100000 + 64 * k), stream)
    elif not late:
        comm, sub = make(os.environ['NCCL_ID']), comm_t()
        assert nccl.ncclCommSplit(comm, 3, rank, ctypes.byref(sub), None) == 0
        other, n_iter = 1 - rank, int(os.environ.get('ITER', '20'))
        skip_sub = int(os.environ.get('SUB_SKIP_RANK', '-1')) == rank
        for k in range(n_iter):
            nccl.ncclAllReduce(src, dst, 1024, FLOAT32, SUM, comm, stream)
            nccl.ncclBroadcast(src, dst, 256, BFLOAT16, 0, comm, stream)
            nccl.ncclAllGather(src, dst, 128, FLOAT16, comm, stream)
            nccl.ncclReduceScatter(src, dst, 64, FLOAT32, SUM, comm, stream)
            nccl.ncclReduce(src, dst, 8, INT64, SUM, 1, comm, stream)
            nccl.ncclSend(src, 16, UINT8, other, comm, stream)
            nccl.ncclRecv(dst, 16, UINT8, other, comm, stream)
            if not (skip_sub and k == n_iter - 1):  # from another thread, as DDP's buckets
                t = threading.Thread(target=nccl.ncclAllReduce,
                                     args=(src, dst, 2, FLOAT64, SUM, sub, stream))
                t.start()
                t.join()
            nccl.ncclAllReduce(src, dst, 4, FLOAT32, SUM, early, stream)
            time.sleep(0.005)
        desync = int(os.environ.get('DESYNC_RANK', '-1')) == rank
        nccl.ncclAllReduce(src, dst, 512 if desync else 1024, FLOAT32, SUM, comm, stream)
    print('LATE' if late else 'NEWER' if newer else 'FLOODED' if flood else 'DONE', flush=True)
    n = 0
    while True:
        nccl.ncclAllReduce(src, dst, 4, FLOAT32, SUM, early, stream)
        n += 1
        if n % 20 == 0:
            print('TICK %d %d' % (n, time.time_ns()), flush=True)
        time.sleep(0.02)


if __name__ == '__main__':
    sys.exit(main())
