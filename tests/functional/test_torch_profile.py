"""probectl torch PID profile: torch.profiler turned on in a running job for some steps, then
off, its events stored (torch_profiles, torch_ops, gpu_kernels) and written as a Chrome trace.
On CPU the profiler records CPU ops; a GPU's kernels need a GPU (that test says so when there
is none)."""
import importlib.util
import json
import os
import re
import subprocess
import tempfile

import pytest
from conftest import SANITIZED, wait_for
from daemon import Daemon
from test_torch import PYTHON, TRANSFORMER_MODULES, Job, hooks_left, torch_installed  # noqa: F401


def profile_row(d, pid, number):
    rows = d.rows("SELECT p.state, p.steps, p.events, p.dropped, p.activities, p.profiler,"
                  " p.ts_ns, p.duration_ns, p.error FROM torch_profiles p JOIN targets t ON"
                  " t.id = p.target_id WHERE t.pid = %d AND p.profile = %d" % (pid, number))
    return rows[0] if rows else None


def test_a_training_job_profiled_for_three_steps():
    d = Daemon()
    job = Job('transformer', 'train', 1, 5000)
    out_file = os.path.join(tempfile.mkdtemp(prefix='probed-profile-'), 'trace.json')
    try:
        job.start()
        r = d.ctl('torch', job.pid, 'profile', '--steps', '3', '-o', out_file)
        assert r.returncode == 0, r.stderr
        assert 'armed' in r.stderr, r.stderr
        assert 'profile 1 done: 3 steps in ' in r.stdout, r.stdout
        assert 'CPU ops (host time' in r.stdout and 'aten::' in r.stdout, r.stdout
        assert 'wrote %s' % out_file in r.stdout, r.stdout
        assert re.search(r'^steps: [\d.]+ ms mean \([\d.]+-[\d.]+\), no device work$', r.stdout,
                         re.M), r.stdout

        state, steps, events, dropped, activities, profiler, ts_ns, duration_ns, error = \
            profile_row(d, job.pid, 1)
        assert (state, steps, dropped, activities, error) == ('done', 3, 0, 'cpu', None)
        assert profiler in ('legacy', 'kineto')
        ops = d.rows("SELECT name, module, stage, step, ts_ns, duration_ns, kind FROM torch_ops"
                     " WHERE pid = %d AND profile = 1" % job.pid)
        assert len(ops) == events > 100
        assert d.rows("SELECT count(*) FROM gpu_kernels WHERE pid = %d" % job.pid) == [[0]]
        # every event within the profile's time, in one of its three steps
        assert all(ts_ns - 10 ** 6 <= o[4] and o[4] + o[5] <= ts_ns + duration_ns + 10 ** 7
                   for o in ops), [o for o in ops if not ts_ns <= o[4]][:3]
        assert {o[3] for o in ops} <= {0, 1, 2, None} and {0, 1, 2} <= {o[3] for o in ops}
        # each module's forward is a range, and the ops it ran are attributed to it
        ranges = {o[1] for o in ops if o[0].startswith('nn.Module: ')}
        assert ranges == TRANSFORMER_MODULES, ranges ^ TRANSFORMER_MODULES
        assert all(o[0] == 'nn.Module: ' + o[1] for o in ops if o[0].startswith('nn.Module: '))
        linear_in = {o[1] for o in ops if o[0] in ('aten::linear', 'aten::addmm')}
        assert {'head', 'block.mlp.0', 'block.mlp.2'} <= linear_in, linear_in
        assert {o[1] for o in ops if o[0] == 'aten::embedding'} == {'embed'}
        # the stages: the autograd engine's work is the backward, the optimizer's the step
        assert {o[2] for o in ops if o[0].startswith('autograd::engine::evaluate_function')} \
            == {'backward'}
        assert 'step' in {o[2] for o in ops if o[0].startswith('Optimizer.step#')}
        # each step's wall time, boundary to boundary; no device, no GPU share, on CPU
        steps_rows = d.rows("SELECT step, ts_ns, step_ms, device, busy_ms, idle_ms, kernels FROM"
                            " gpu_step_busy WHERE pid = %d AND profile = 1 ORDER BY step"
                            % job.pid)
        assert [r[0] for r in steps_rows] == [0, 1, 2], steps_rows
        assert all(r[3] is None and r[4] is None and r[6] == 0 for r in steps_rows), steps_rows
        assert steps_rows[0][1] == ts_ns
        assert abs(sum(r[2] for r in steps_rows) * 1e6 - duration_ns) < 1e6, (steps_rows,
                                                                             duration_ns)

        # the trace file is the stored rows, in Chrome's format
        with open(out_file) as f:
            trace = json.load(f)
        spans = trace['traceEvents']
        assert len(spans) == events
        assert all(e['ph'] == 'X' and e['pid'] == 'pid %d' % job.pid and e['ts'] >= 0 and
                   e['dur'] >= 0 for e in spans)
        assert [e['ts'] for e in spans] == sorted(e['ts'] for e in spans)
        assert trace['otherData']['profile'] == 1
        assert {e['args']['module'] for e in spans} >= TRANSFORMER_MODULES

        # a second profile gets the next number; --duration profiles whole steps
        r = d.ctl('torch', job.pid, 'profile', '--duration', '300ms')
        assert r.returncode == 0 and 'profile 2 done: ' in r.stdout, (r.stdout, r.stderr)
        state, steps, _, _, _, _, _, duration_ns, _ = profile_row(d, job.pid, 2)
        assert state == 'done' and steps >= 1 and duration_ns >= 300 * 10 ** 6
        assert d.rows("SELECT code FROM evals WHERE mode = 'torch' ORDER BY ts_ns") == [
            ['torch profile --steps 3'], ['torch profile --duration 300ms']]
        # the job goes on, its hooks out once the next forward runs
        wait_for(lambda: hooks_left(d, job.pid)[:2] == ['0', '0'], what='hooks removed')
        assert job.target.proc.poll() is None
    finally:
        job.close()
        d.close()


# What the sanitizers check is probed's C: these two run the daemon's and probectl's paths of
# the tests above and below (arm, poll, cancel), with other Python in the job.
SAME_C_PATHS = pytest.mark.skipif(SANITIZED, reason='not run under the sanitizers: its C paths'
                                  ' are those of the other profile tests (CI time)')


@SAME_C_PATHS
def test_an_inference_job_steps_at_each_call():
    d = Daemon()
    job = Job('transformer', 'infer', 1, 5000)
    try:
        job.start()
        r = d.ctl('torch', job.pid, 'profile', '--steps', '2')
        assert r.returncode == 0 and 'profile 1 done: 2 steps' in r.stdout, (r.stdout, r.stderr)
        ops = d.rows("SELECT module, stage, step FROM torch_ops WHERE pid = %d" % job.pid)
        assert {o[0] for o in ops} >= TRANSFORMER_MODULES - {'CrossEntropyLoss'}
        assert {o[1] for o in ops} <= {'forward', None}  # no_grad: no backward, no optimizer
        assert {o[2] for o in ops} >= {0, 1}
    finally:
        job.close()
        d.close()


@SAME_C_PATHS
def test_a_job_that_does_not_step_is_cancelled_at_the_timeout():
    d = Daemon()
    job = Job('mlp', 'train', 1, 2)  # waits for its go file: torch loaded, never steps
    try:
        r = d.ctl('torch', job.pid, 'profile', '--steps', '2', '--timeout', '2s')
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert 'still armed after 2 s: cancelled' in r.stderr and 'step boundaries' in r.stderr
        assert profile_row(d, job.pid, 1)[0] == 'cancelled'
        # its hooks go (no forward runs to take them out: a drain does, a few seconds on)
        wait_for(lambda: hooks_left(d, job.pid)[:2] == ['0', '0'], timeout=30,
                 what='hooks removed')
    finally:
        job.close()
        d.close()


def test_one_profile_at_a_time_and_bad_requests():
    d = Daemon()
    job = Job('mlp', 'train', 1, 2)
    try:
        d.ctl('attach', job.pid, check=True)
        status, reply = d.api('POST', '/v1/torch', {'pid': job.pid, 'action': 'profile',
                                                    'steps': 2})
        assert status == 200 and reply['profile']['state'] == 'armed', reply
        status, reply = d.api('POST', '/v1/torch', {'pid': job.pid, 'action': 'profile',
                                                    'steps': 2})
        assert status == 409 and 'profile 1 is armed in this process: one at a time' in \
            reply['error'], (status, reply)
        status, reply = d.api('POST', '/v1/torch', {'pid': job.pid, 'action': 'profile',
                                                    'cancel': True})
        assert status == 200 and reply['profile']['state'] == 'cancelled', reply
        for body in [{'pid': job.pid, 'action': 'profile'},
                     {'pid': job.pid, 'action': 'profile', 'steps': 2, 'duration_ms': 100},
                     {'pid': job.pid, 'action': 'profile', 'steps': 0},
                     {'pid': job.pid, 'action': 'profile', 'steps': 1001},
                     {'pid': job.pid, 'action': 'profile', 'duration_ms': 'x'},
                     {'pid': job.pid, 'action': 'profile', 'steps': 1, 'cancel': 'yes'}]:
            status, reply = d.api('POST', '/v1/torch', body)
            assert status == 400, (body, status, reply)
        for args, why in [(['--steps', '0'], '--steps takes'),
                          (['--steps', '2', '--duration', '1s'], 'not both'),
                          (['--duration', 'soon'], '--duration takes'),
                          (['--timeout', '-1'], '--timeout takes')]:
            r = d.ctl('torch', job.pid, 'profile', *args)
            assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
        r = d.ctl('torch', job.pid, 'on', '--steps', '3')
        assert r.returncode == 2 and "profile's" in r.stderr, r.stderr
    finally:
        job.close()
        d.close()


def test_on_a_gpu_the_kernels_are_recorded():
    """Needs a CUDA device and a torch built for it: says so when either is missing."""
    have = subprocess.run([PYTHON, '-c', 'import torch; print(torch.cuda.is_available())'],
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    if have != 'True':
        pytest.skip('not run: no GPU (torch.cuda.is_available() is %s for %s)' % (have, PYTHON))
    d = Daemon()
    job = Job('transformer-cuda', 'train', 1, 5000)
    try:
        job.start()
        r = d.ctl('torch', job.pid, 'profile', '--steps', '3')
        assert r.returncode == 0 and 'GPU kernels' in r.stdout, (r.stdout, r.stderr)
        kernels = d.rows("SELECT name, module, stage, device, stream, duration_ns FROM"
                         " gpu_kernels WHERE pid = %d AND kind = 'kernel'" % job.pid)
        assert kernels and all(k[3] is not None and k[4] is not None and k[5] > 0
                               for k in kernels)
        assert {k[1] for k in kernels} & TRANSFORMER_MODULES, kernels[:5]
        assert {k[2] for k in kernels} >= {'forward', 'backward'}
    finally:
        job.close()
        d.close()


def trace_module():
    """probed/intarget/torchtrace.py, as the daemon loads it into a job (without a stub here)."""
    path = os.path.join(os.path.dirname(__file__), '..', '..', 'probed', 'intarget',
                        'torchtrace.py')
    spec = importlib.util.spec_from_file_location('_probed_torch_test', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kineto_trace_becomes_rows_with_modules_stages_steps_and_gpu_busy_time():
    """Kineto's Chrome trace, as torch 2.x's profiler exports it on a GPU (categories, the
    correlation between a launch and its kernel, sequence numbers from a forward op to its
    backward, times in microseconds since baseTimeNanoseconds), written out by hand here where
    no GPU is: each row's module, stage and step, and each step's GPU busy time, are known."""
    base = 1795000000000000000
    wall_start = base + 1000 * 1000  # the profiler started 1 ms past the base
    bounds = [wall_start, wall_start + 10 ** 7, wall_start + 2 * 10 ** 7]  # two steps of 10 ms

    def x(cat, name, ts_us, dur_us, **kw):
        e = {'ph': 'X', 'cat': cat, 'name': name, 'ts': ts_us, 'dur': dur_us, 'pid': 1,
             'tid': kw.pop('tid', 7), 'args': kw.pop('args', {})}
        e.update(kw)
        return e

    trace = {'baseTimeNanoseconds': base, 'traceEvents': [
        x('Trace', 'PyTorch Profiler (0)', 1000, 20000),
        x('user_annotation', 'nn.Module: fc1', 1100, 300),
        x('cpu_op', 'aten::linear', 1150, 200, args={'Sequence number': 42}),
        x('cuda_runtime', 'cudaLaunchKernel', 1200, 10, args={'correlation': 11}),
        x('cuda_runtime', 'cudaLaunchKernel', 1250, 10, args={'correlation': 12}),
        # launched in step 0, run on the GPU in step 1's host time
        x('kernel', 'sgemm_128x64', 10900, 400, tid=7, pid=0,
          args={'correlation': 11, 'device': 0, 'stream': 7}),
        # on another stream, overlapping the first by 100 us
        x('kernel', 'bias_add', 11200, 300, pid=0,
          args={'correlation': 12, 'device': 0, 'stream': 8}),
        x('ac2g', 'flow', 1200, 0, ph='s'),  # a flow arrow: not a span
        x('cpu_op', 'autograd::engine::evaluate_function: AddmmBackward0', 12000, 500, tid=8,
          args={'Sequence number': 42, 'Fwd thread id': 1}),
        x('cpu_op', 'aten::mm', 12100, 100, tid=8),
        x('cuda_runtime', 'cudaLaunchKernel', 12150, 10, tid=8, args={'correlation': 13}),
        x('kernel', 'sgemm_backward', 12300, 200, pid=0,
          args={'correlation': 13, 'device': 0, 'stream': 7}),
        x('gpu_memcpy', 'Memcpy HtoD (Pageable -> Device)', 13000, 50, pid=0,
          args={'device': 0, 'stream': 7}),
        x('user_annotation', 'Optimizer.step#AdamW.step', 15000, 1000),
        x('cpu_op', 'aten::_foreach_add_', 15100, 100),
    ]}
    torchtrace = trace_module()
    rows = torchtrace.profile_rows(trace, wall_start, bounds[-1], bounds)
    by_name = {r[1]: r for r in rows}
    assert 'PyTorch Profiler (0)' not in by_name and 'flow' not in by_name
    us = 1000
    # [kind, name, module, stage, step, ts_ns, duration_ns, tid, device, stream]
    assert by_name['aten::linear'] == ['cpu_op', 'aten::linear', 'fc1', 'forward', 0,
                                       base + 1150 * us, 200 * us, 7, None, None]
    assert by_name['sgemm_128x64'] == ['kernel', 'sgemm_128x64', 'fc1', 'forward', 0,
                                       base + 10900 * us, 400 * us, None, 0, 7]
    assert by_name['bias_add'][2:5] == ['fc1', 'forward', 0] and by_name['bias_add'][9] == 8
    assert by_name['autograd::engine::evaluate_function: AddmmBackward0'][2:5] == [
        'fc1', 'backward', 1]
    assert by_name['aten::mm'][2:5] == ['fc1', 'backward', 1]
    assert by_name['sgemm_backward'][2:5] == ['fc1', 'backward', 1]
    assert by_name['Memcpy HtoD (Pageable -> Device)'][2:5] == [None, None, 1]
    assert by_name['aten::_foreach_add_'][3:5] == ['step', 1]
    assert [r[5] for r in rows] == sorted(r[5] for r in rows)
    # step 0 launched 400 + 300 us of kernels that overlap by 100: 600 us busy; step 1 200 + 50
    steps = torchtrace.profile_steps(rows, bounds)
    assert steps == [[0, bounds[0], 10 ** 7, 0, 600 * us, 2],
                     [1, bounds[1], 10 ** 7, 0, 250 * us, 2]], steps

    # the legacy profiler's trace (a list, times since it began, no categories)
    legacy = [{'name': 'nn.Module: head', 'ph': 'X', 'ts': 5, 'dur': 50, 'tid': 1,
               'pid': 'CPU functions', 'args': {}},
              {'name': 'aten::addmm', 'ph': 'X', 'ts': 10, 'dur': 20, 'tid': 1,
               'pid': 'CPU functions', 'args': {}}]
    rows = torchtrace.profile_rows(legacy, wall_start, bounds[-1], bounds)
    assert rows == [['user_annotation', 'nn.Module: head', 'head', 'forward', 0, wall_start,
                     50 * us, 1, None, None],
                    ['cpu_op', 'aten::addmm', 'head', 'forward', 0, wall_start + 5 * us,
                     20 * us, 1, None, None]], rows


def test_gpu_memory_of_a_job_without_cuda_is_refused_and_bad_requests():
    d = Daemon()
    job = Job('mlp', 'train', 1, 2)
    try:
        r = d.ctl('torch', job.pid, 'memory', '--record', '100ms')
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert 'CUDA is not initialised in this process' in r.stderr, r.stderr
        assert d.rows("SELECT count(*) FROM gpu_memory") == [[0]]
        assert d.rows("SELECT code FROM evals WHERE mode = 'torch'") == [
            ['torch memory --record 100ms']]
        for body in [{'pid': job.pid, 'action': 'memory', 'record_ms': 0},
                     {'pid': job.pid, 'action': 'memory', 'record_ms': 30001},
                     {'pid': job.pid, 'action': 'memory', 'record_ms': '5s'}]:
            status, reply = d.api('POST', '/v1/torch', body)
            assert status == 400, (body, status, reply)
        for args, why in [(['--record', '31s'], '--record takes'),
                          (['--format', 'png'], '--format takes'),
                          (['--steps', '2'], 'memory takes')]:
            r = d.ctl('torch', job.pid, 'memory', *args)
            assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
        r = d.ctl('torch', job.pid, 'profile', '--record', '1s')
        assert r.returncode == 2 and "memory's" in r.stderr, r.stderr
    finally:
        job.close()
        d.close()


def test_an_allocator_snapshot_becomes_live_memory_by_stack():
    """torch.cuda.memory._snapshot() as torch 2.x returns it (segments of blocks, each live
    block with its state and the Python frames that allocated it, innermost first; torch 2.0's
    under history), written out by hand here where no GPU is."""
    def frames(*names):  # innermost first
        return [{'filename': '/app/train.py', 'line': 10 * (i + 1), 'name': n}
                for i, n in enumerate(names)]

    snapshot = {'segments': [
        {'device': 0, 'total_size': 8 << 20, 'blocks': [
            {'size': 2 << 20, 'requested_size': 2000000, 'state': 'active_allocated',
             'frames': frames('forward', 'train')},
            {'size': 2 << 20, 'requested_size': 2000000, 'state': 'active_allocated',
             'frames': frames('forward', 'train')},
            {'size': 1 << 20, 'state': 'active_allocated'},  # before the recording
            {'size': 3 << 20, 'state': 'inactive'},
        ]},
        {'device': 1, 'total_size': 2 << 20, 'blocks': [
            {'size': 2 << 20, 'state': 'active_allocated',
             'history': [{'frames': frames('step', 'train')}]},  # torch 2.0
        ]},
    ]}
    rows = trace_module().gpu_memory_rows(snapshot)
    stack = [['python', 'train', '/app/train.py', 20], ['python', 'forward', '/app/train.py', 10]]
    assert rows == [
        [0, json.dumps(stack), 4000000, 2],
        [0, json.dumps([['label', '<reserved by the caching allocator, free>', None, 0]]),
         3 << 20, 0],
        [1, json.dumps([['python', 'train', '/app/train.py', 20],
                        ['python', 'step', '/app/train.py', 10]]), 2 << 20, 1],
        [0, json.dumps([['label', '<allocated before recording>', None, 0]]), 1 << 20, 1],
    ], rows


def test_on_a_gpu_live_memory_by_stack():
    """Needs a CUDA device and a torch built for it: says so when either is missing."""
    have = subprocess.run([PYTHON, '-c', 'import torch; print(torch.cuda.is_available())'],
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    if have != 'True':
        pytest.skip('not run: no GPU (torch.cuda.is_available() is %s for %s)' % (have, PYTHON))
    d = Daemon()
    job = Job('transformer-cuda', 'train', 1, 100000)
    out = os.path.join(tempfile.mkdtemp(prefix='probed-gpu-memory-'), 'memory.svg')
    try:
        job.start()
        r = d.ctl('torch', job.pid, 'memory', '--record', '3s', '-o', out)
        assert r.returncode == 0 and 'GPU memory snapshot 1: ' in r.stdout, (r.stdout, r.stderr)
        rows = d.rows("SELECT frames, bytes FROM gpu_memory ORDER BY bytes DESC")
        assert any('torchjob.py' in f for f, _ in rows), rows[:5]
        assert open(out).read().startswith('<?xml')
    finally:
        job.close()
        d.close()
