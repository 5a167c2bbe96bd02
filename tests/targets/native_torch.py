"""Python -> torch (C++) -> BLAS: a matrix product in a loop, for mixed backtraces with C++
frames. Debian's /usr/bin/python3 with python3-torch. Prints `READY {"pid": N}`.

    native_torch.py [THREADS]   torch's intra-op threads (default 1: the product runs on the
                                Python thread; more: OpenMP threads with no Python frames)"""
import json
import os
import sys

import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
a = torch.randn(384, 384)
b = torch.randn(384, 384)
big = torch.randn(4000000)  # elementwise work on it is split over the intra-op threads


def matmul_forever():
    while True:
        torch.mm(a, b)  # MARK:mm
        if torch.get_num_threads() > 1:
            big.exp()


print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
matmul_forever()
