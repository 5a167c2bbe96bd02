"""Locals of every common kind (tests/functional/test_backtrace.py): containers, a dict with a
deleted key, an instance's split-table __dict__, numpy values where numpy is installed, and
one corrupt object (a fake header whose type pointer is 0xe05), and torch tensors where torch
is installed (their expected text as catch shows them). Prints READY with repr() of
the values Python itself renders, then waits in containers()."""
import ctypes
import json
import os
import struct
import threading


class Obj:
    def __init__(self):
        self.p = 1
        self.q = 'two'


def containers(stop):
    a_list = [-1234, 5678]
    a_tuple = (1, 'two', 3.0)
    single = (1,)
    a_dict = {'a': False, 'b': (1, 2, 3)}
    a_set = {42}
    frozen = frozenset()
    empty_list = []
    nested = [[1, [2, [3, [4]]]]]
    long_list = list(range(100))
    deleted = {'x': 1, 'y': 2, 'z': 3}
    del deleted['y']
    split = Obj().__dict__
    fake = ctypes.create_string_buffer(64)
    struct.pack_into('qq', fake, 0, 1 << 40, 0xe05)  # refcount, type pointer
    bad = ctypes.cast(ctypes.addressof(fake), ctypes.py_object).value
    numbers = {}
    try:
        import numpy as np
        np_float, np_int, np_bool = np.float64(1.5), np.int64(42), np.bool_(True)
        np_f32, zero_d, arr = np.float32(0.1), np.array(2.5), np.zeros((3, 4))
        numbers = {'np_float': np_float, 'np_int': np_int}
    except ImportError:
        pass
    tensors = {}
    try:
        import torch
        t2d, t0d = torch.zeros(3, 4), torch.tensor(2.5, dtype=torch.float64)
        t6d = torch.zeros(2, 1, 3, 1, 2, 1, dtype=torch.int64)  # sizes kept out of line
        param, view = torch.nn.Parameter(torch.ones(7)), torch.zeros(5)[1:3]
        bf16, meta = torch.zeros(3, dtype=torch.bfloat16), torch.empty(2, 0, device='meta')
        sparse, flags = torch.zeros(2, 2).to_sparse(), torch.ones(4, 5, dtype=torch.bool)
        for name in ('t2d', 't0d', 't6d', 'param', 'view', 'bf16', 'meta', 'sparse', 'flags'):
            v = locals()[name]
            tensors[name] = '<%s shape=%s dtype=%s device=%s>' % (
                type(v).__name__, tuple(v.shape), v.dtype, v.device)
    except ImportError:
        pass
    expected = {name: repr(value) for name, value in locals().items()
                if name in ('a_list', 'a_tuple', 'single', 'a_dict', 'a_set', 'frozen',
                            'empty_list', 'deleted', 'split')}
    expected['numpy'] = bool(numbers)
    expected['tensors'] = tensors
    print('READY ' + json.dumps(expected), flush=True)
    stop.wait()  # MARK:containers
    return bad, a_list


if __name__ == '__main__':
    containers(threading.Event())
