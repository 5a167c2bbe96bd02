"""bench/gpu_events.py - what timing a module on the GPU costs from a hook, and what the CUDA
driver lets a hook do (prints figures, asserts nothing; needs CUDA).

The torch trace's device time records a CUDA event at each module's start and end on the
current stream. This measures, on a launch-bound loop of small kernels, the cost of one event
record through torch (torch.cuda.Event().record()) and through the driver API (cuEventRecord via
libcuda.so.1, as the stub's C hook would call it), whether cuEventQuery and cuEventElapsedTime
answer from a thread where no context is current (the stub's drain thread), and how far an
event's time agrees with torch's own Event.elapsed_time.

usage: python3 -P bench/gpu_events.py   (-P: not bench/torch.py for torch; or from another folder)
"""
import ctypes
import json
import threading
import time

import torch

N = 20000


def per_call(fn, n=N):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n / 1e3


def main():
    out = {'torch': getattr(torch, '__version__', '?'), 'cuda': torch.version.cuda}
    dev = torch.device('cuda')
    x = torch.randn(64, 64, device=dev)
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream().cuda_stream
    out['stream'] = stream
    # the baseline: one small kernel's launch
    out['launch_us'] = per_call(lambda: x.add_(1.0))
    torch.cuda.synchronize()
    # torch's own event, created once and recorded each time
    ev = torch.cuda.Event(enable_timing=True)
    out['torch_event_record_us'] = per_call(ev.record)
    out['torch_event_create_record_us'] = per_call(
        lambda: torch.cuda.Event(enable_timing=True).record(), 5000)
    torch.cuda.synchronize()
    # the driver the process already loaded (it may be off the loader's path, as in
    # /usr/local/nvidia/lib64): found in its maps, as the stub finds it
    path = next((line.split()[-1] for line in open('/proc/self/maps')
                 if '/libcuda.so' in line), 'libcuda.so.1')
    out['libcuda'] = path
    cu = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    for name in ('cuEventCreate', 'cuEventRecord', 'cuEventQuery', 'cuEventElapsedTime',
                 'cuEventElapsedTime_v2', 'cuEventDestroy_v2', 'cuCtxGetCurrent',
                 'cuStreamGetCtx'):
        out['has_' + name] = hasattr(cu, name)
    ctx = ctypes.c_void_p()
    out['ctx_current_rc'] = cu.cuCtxGetCurrent(ctypes.byref(ctx))
    out['ctx_current'] = ctx.value or 0
    evs = [ctypes.c_void_p() for _ in range(4)]
    out['create_rc'] = [cu.cuEventCreate(ctypes.byref(e), 0) for e in evs]
    rec = cu.cuEventRecord
    rec.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    e0 = evs[0].value
    out['driver_record_us_ctypes'] = per_call(lambda: rec(e0, stream))
    out['ctypes_floor_us'] = per_call(lambda: cu.cuCtxGetCurrent(ctypes.byref(ctx)))
    # a timed span: events around 200 kernels, resolved without synchronising
    rec(evs[1].value, stream)
    t0 = time.perf_counter_ns()
    for _ in range(200):
        x.add_(1.0)
    host_ms = (time.perf_counter_ns() - t0) / 1e6
    rec(evs[2].value, stream)
    tev0 = torch.cuda.Event(enable_timing=True)
    tev1 = torch.cuda.Event(enable_timing=True)
    tev0.record()
    for _ in range(200):
        x.add_(1.0)
    tev1.record()
    q = cu.cuEventQuery
    q.argtypes = [ctypes.c_void_p]
    out['query_right_after'] = q(evs[2].value)  # 600 (CUDA_ERROR_NOT_READY) while queued
    torch.cuda.synchronize()
    ms = ctypes.c_float()
    el = cu.cuEventElapsedTime
    el.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
    out['elapsed_rc'] = el(ctypes.byref(ms), evs[1].value, evs[2].value)
    out['span_device_ms'] = ms.value
    out['span_host_ms'] = host_ms
    out['torch_span_device_ms'] = tev0.elapsed_time(tev1)

    # from a thread with no context current: the stub's drain thread
    def other():
        c = ctypes.c_void_p()
        out['thread_ctx_rc'] = cu.cuCtxGetCurrent(ctypes.byref(c))
        out['thread_ctx'] = c.value or 0
        out['thread_query_rc'] = q(evs[2].value)
        m = ctypes.c_float()
        out['thread_elapsed_rc'] = el(ctypes.byref(m), evs[1].value, evs[2].value)
        out['thread_elapsed_ms'] = m.value
    th = threading.Thread(target=other)
    th.start()
    th.join()
    # the cost of a query on a completed event (the drain's per-event work)
    out['query_done_us'] = per_call(lambda: q(evs[2].value))
    print(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
