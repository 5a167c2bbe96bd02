#!/usr/bin/python3
"""What one module call costs the job under the torch trace, against what torch's own hook
machinery costs; prints figures, asserts nothing.

usage: bench/torch_hooks.py [--build DIR] [--layers N] [--rounds N] [--steps N] [--device D]

A training step of a chain of N small Linear layers (plus the Sequential around them: N + 1
module calls forward and backward, SGD) runs in this process, with probed's stub loaded here
the way the daemon loads it into a job (its library copied into a directory of its own, then
one request on its socket makes it publish `_probed_stub`) and probed/intarget/torchtrace.py as the
trace. Batches of steps alternate, round after round, between:

  off        no hook at all;
  dispatch   two global module hooks that do nothing: torch's slow path in Module._call_impl;
  floor      the same plus an autograd pre-hook that does nothing on each module's output
             node: what this design (docs/torch.md) costs before any of probed's code runs;
  trace      the torch trace, --every 1, no --exprs (--backward auto: the default);
  trace-all  the same with --backward all (every module's backward timed).

--device cuda runs the same on a GPU (each batch of steps ends with a synchronize, which the
trace never does): there the host's cost per call is what a launch-bound job pays.

Printed: the median step time of each, and per module call, the extra time over `off`. The
part of the trace's cost that is probed's own is `trace - floor`.
"""
import argparse
import ctypes
import importlib.util
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
# bench/torch.py would shadow the torch package
sys.path = [p for p in sys.path if os.path.abspath(p or '.') != os.path.dirname(
    os.path.abspath(__file__))]
STUB_MAGIC = 0x50524244  # probed/stub/stub_proto.h
STUB_RUN = 1


def stub_request(path, code):
    """One STUB_RUN request on the stub's socket; returns its text."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    body = code.encode()
    s.sendall(struct.pack('=IBBHII', STUB_MAGIC, STUB_RUN, 0, 0, 0, len(body)) + body)
    header = b''
    while len(header) < 12:
        header += s.recv(12 - len(header))
    n = struct.unpack('=IB3xI', header)[2]
    text = b''
    while len(text) < n:
        text += s.recv(n - len(text))
    return text.decode()


def load_stub(build):
    """Loads the stub into this process and waits until it has published _probed_stub."""
    lib_dir = tempfile.mkdtemp(prefix='probed-bench-stub-')
    shutil.copy(os.path.join(build, 'probed', 'libprobed-stub.so'),
                os.path.join(lib_dir, 'stub-bench.so'))
    ctypes.CDLL(os.path.join(lib_dir, 'stub-bench.so'))
    sock = os.path.join(lib_dir, 'sock')
    deadline = time.time() + 10
    while not os.path.exists(sock) and time.time() < deadline:
        time.sleep(0.01)
    done = []
    # the stub's thread needs the GIL to answer: this thread sleeps meanwhile
    threading.Thread(target=lambda: done.append(stub_request(sock, 'pass'))).start()
    while not done and time.time() < deadline:
        time.sleep(0.01)
    import _probed_stub  # noqa: F401  (fails here when the stub did not publish it)
    return lib_dir


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--layers', type=int, default=20)
    ap.add_argument('--rounds', type=int, default=40)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--device', default='cpu')
    args = ap.parse_args()

    import torch
    import torch.nn as nn
    from torch.nn.modules import module as hooks
    torch.set_num_threads(1)
    lib_dir = load_stub(args.build)
    spec = importlib.util.spec_from_file_location(
        '_probed_torch', os.path.join(ROOT, 'probed', 'intarget', 'torchtrace.py'))
    trace = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace)

    if args.device == 'cuda' and not torch.cuda.is_available():
        sys.exit('torch_hooks.py: not run: no GPU (torch.cuda.is_available() is False)')
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(args.layers)]).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(2, 4, device=args.device)
    sync = torch.cuda.synchronize if args.device == 'cuda' else (lambda: None)

    def steps(n):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        sync()
        return (time.perf_counter() - t0) / n

    def nothing_node(grads):
        return None

    def nothing_pre(module, inputs):
        return None

    def nothing_post(module, inputs, output):
        return None

    def node_post(module, inputs, output):
        if output.grad_fn is not None:
            output.grad_fn.register_prehook(nothing_node)

    def plain_hooks(post):
        handles = []

        def on():
            handles[:] = [hooks.register_module_forward_pre_hook(nothing_pre),
                          hooks.register_module_forward_hook(post)]

        def off():
            for h in handles:
                h.remove()
        return on, off

    def trace_on(backward):
        return lambda: trace.command({'action': 'on', 'every': 1, 'exprs': [],
                                      'backward': backward})

    def trace_off():
        trace.command({'action': 'off'})
        while trace._tracer is not None:
            trace.command({'action': 'drain'})

    variants = [('off', (lambda: None, lambda: None)), ('dispatch', plain_hooks(nothing_post)),
                ('floor', plain_hooks(node_post)), ('trace', (trace_on('auto'), trace_off)),
                ('trace-all', (trace_on('all'), trace_off))]
    steps(100)  # warm
    times = {name: [] for name, _ in variants}
    for _ in range(args.rounds):
        for name, (on, off) in variants:
            on()
            times[name].append(steps(args.steps))
            off()
    calls = args.layers + 1
    base = statistics.median(times['off'])
    print('torch trace hooks: %d Linear(4, 4) in a Sequential (%d module calls a step) on %s, %d'
          ' rounds of %d steps each, torch %s, Python %s'
          % (args.layers, calls, args.device, args.rounds, args.steps, torch.__version__,
             sys.version.split()[0]))
    # the noise floor: how far the medians of two halves of the baseline's rounds differ
    half = len(times['off']) // 2
    floor = abs(statistics.median(times['off'][:half]) - statistics.median(times['off'][half:]))
    print('noise floor: the baseline\'s two halves differ by %.1f us a step (ratio %.3f)'
          % (floor * 1e6, 1 + floor / base))
    for name, _ in variants:
        med = statistics.median(times[name])
        print('%-9s median step %7.1f us   per module call +%5.2f us over off   ratio %.3f'
              % (name, med * 1e6, (med - base) * 1e6 / calls, med / base))
    probed_own = (statistics.median(times['trace-all']) -
                  statistics.median(times['floor'])) / calls
    print("probed's own code per module call (trace-all - floor): %.2f us" % (probed_own * 1e6))
    shutil.rmtree(lib_dir, ignore_errors=True)


if __name__ == '__main__':
    main()
