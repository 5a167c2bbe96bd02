"""Python -> torch (C++) -> BLAS: a matrix product in a loop, for mixed backtraces with C++
frames. Debian's /usr/bin/python3 with python3-torch. Prints `READY {"pid": N}`."""
import json
import os

import torch

torch.set_num_threads(1)
a = torch.randn(384, 384)
b = torch.randn(384, 384)


def matmul_forever():
    while True:
        torch.mm(a, b)  # MARK:mm


print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
matmul_forever()
