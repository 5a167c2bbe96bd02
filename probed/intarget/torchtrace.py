# torchtrace.py - the torch trace, inside a target (probed/intarget/torchtrace.c embeds this file and
# loads it once as the module `_probed_torch`; later requests call command()).
#
# It uses PyTorch's global hooks and never touches the user's code. What runs once per module
# call is C, in the stub (probed/stub/torchhot.c, the module _probed_stub); this file keeps
# what happens once a step (steps, names, the optimizer, variables) and is called back by the
# C hooks only when a forward begins on an empty stack or a module has no name yet:
#   - module forward pre/post hooks time each module's forward;
#   - in the forward post hook, an autograd pre-hook on the node that made the module's output
#     (its backward starts) and on the node that made its first input (its backward ends; the
#     end of the backward pass when no input has one). torch's global *full* backward hooks
#     are not used: they wrap every module's inputs and outputs in a custom autograd
#     Function, and a model that then changes such an output in place (nn.ReLU(inplace=True)
#     after a BatchNorm, as in ResNet) fails with "Output 0 of BackwardHookFunctionBackward
#     is a view and is being modified inplace";
#   - the optimizer step: torch >= 2.0 has global step pre/post hooks; 1.x has none, and
#     Optimizer._optimizer_step_code, the no-op torch calls after each step for its own
#     profiler, marks the end (the stage then starts where the backward pass ended).
# Steps are counted at optimizer steps; until one is seen (inference), a new step starts when
# a top-level module is called again. Every Nth step is recorded (--every N); in training the
# module hooks are out during the others. Records go to a bounded buffer in the stub (steps
# and variables to deques here), drained by the daemon from the stub's thread (never the
# training thread) about once a second; the records are formatted with the GIL released.
import bisect
import collections
import functools
import inspect
import itertools
import json
import os
import sys
import tempfile
import threading
import time
import weakref
from functools import partial

import torch
from torch.nn.modules import module as _module

try:
    import _probed_stub as _hot
except ImportError:  # a stub loaded by an older probed
    _hot = None

VERSION = 1
TORCH_ABI = 3  # the stub's torch_* functions this file calls (torchhot.h's TORCH_HOT_ABI)
MAX_RECORDS = 200000  # buffered while the daemon does not drain; then counted as dropped
MAX_DRAIN = 20000  # records per drain; the daemon asks again when more are left
RSS_EVERY_NS = 50000000  # RSS (CPU) at step boundaries, at most every 50 ms (a 10-20 us read)
STAGE_STEP = 2  # torchhot.c's stages: forward, backward, step
# --backward: a module's backward is timed when the fastest of its first 8 forwards took this
# long (ns); a top-level module's always is (the backward pass). The autograd pre-hooks that
# time a backward cost ~5 us a module (torch's, mostly: bench/torch_hooks.py), more than 2-3 %
# of a smaller module; its backward is inside its parent's.
BACKWARD_MIN_NS = {'auto': 200000, 'all': 0, 'none': 1 << 62}
CO_OPTIMIZED = 0x1  # a function's code: its locals are fast locals, f_locals a copy
_now = time.perf_counter_ns

_tracer = None
_comm = None
_profile = None  # the on-demand profile, armed, running or being drained


def _first_node(value):
    """The autograd node that made the first tensor of @value (a tensor, or a tuple, list or
    dict of them) that has one, else None: one property read per tensor (grad_fn is None for
    a tensor that needs no gradient, and for a leaf)."""
    if isinstance(value, torch.Tensor):
        return value.grad_fn
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, torch.Tensor):
                node = v.grad_fn
                if node is not None:
                    return node
    return None


def _plain(value):
    """A variable's value as something JSON holds. A 0-d (or one-element) tensor: read now
    when it is on the CPU; on a device, a detached copy (queued like a kernel) read at drain
    time, off the training thread, which must never wait for the device."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            return value.item() if value.is_cpu else value.detach().clone()
        return '<Tensor %s>' % (list(value.shape),)
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value[:256]
    if hasattr(value, 'item') and hasattr(value, 'dtype'):  # a numpy scalar
        try:
            return value.item()
        except Exception:
            pass
    return '<%s>' % type(value).__name__


def _outermost_module(module):
    """The outermost module whose call (Module._call_impl, torch 1.x and 2.x) is on this
    thread's Python stack, or @module. Looked for only when a module is first seen."""
    outer = module
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == '_call_impl' and 'self' in f.f_code.co_varnames[:1]:
            candidate = f.f_locals.get('self')
            if isinstance(candidate, _module.Module):
                outer = candidate
        f = f.f_back
    return outer


class Tracer:
    def __init__(self, every, exprs, backward='auto', device_time=False):
        self.every = every
        self.backward = backward
        # device time (--device-time): CUDA events around each timed module and stage, on the
        # stream torch's current one on the training thread at each recorded step's start
        self.device_time = device_time
        self.device_on = False  # the stub records events now
        self.device_error = None  # why it cannot
        self.step_mark = -1  # the optimizer step's start event
        self.exprs = exprs  # [(name, function)]
        # Steps are numbered on from the process's last trace session (kept in the stub's
        # module, which lives as long as the process): an `on` after an `off` goes on from
        # there, so that a step number means one step of the job, whatever the sessions.
        self.session = getattr(_hot, 'trace_sessions', 0) + 1
        _hot.trace_sessions = self.session
        self.step = getattr(_hot, 'next_step', 0)
        self.sampled = True
        self.opt_seen = False
        self.roots = set()  # ids of top-level modules called during this step
        self.ids = {}  # id(module) -> name id; the C hooks read it; a module's entry goes with it
        self.refs = {}  # id(module) -> weak reference, whose callback forgets the module
        self.name_ids = {}  # name -> name id (the C side keeps the texts)
        self.variables = collections.deque()
        self.steps = collections.deque()
        self.steps_seen = 0
        self.offset_ns = time.time_ns() - _now()
        self.step_start = None  # perf ns; None: the step began before tracing
        self.step_t0 = None  # torch >= 2: when the optimizer step began
        self.cuda = False
        self.mem = (0, -1, -1)  # (perf ns read, allocated KB, reserved KB); -1: no figure
        self.statm = os.open('/proc/self/statm', os.O_RDONLY | os.O_CLOEXEC)
        self.page_kb = os.sysconf('SC_PAGE_SIZE') >> 10
        self.handles = []  # the optimizer's
        self.module_handles = []
        self.saved_step_code = None
        self.started = False
        self.active = True
        self.errors = 0  # callbacks that failed; a hook never raises into the user's code
        self.last_error = None

    # ---- installing and removing ----

    def install(self):
        self.cuda = torch.cuda.is_initialized() and torch.cuda.is_available()
        if self.device_time and not self.cuda:
            self.device_error = ('device time needs CUDA: torch.cuda is not initialised in '
                                 'this process')
        _hot.torch_start(self.ids, self.name_of, self.top_level, _first_node,
                         torch.is_grad_enabled,
                         torch.autograd.Variable._execution_engine.queue_callback,
                         torch.Tensor, self.offset_ns, MAX_RECORDS,
                         BACKWARD_MIN_NS[self.backward])
        self.started = True
        mem = self.read_memory(_now())
        _hot.torch_step(self.step, 1, mem[1], mem[2])
        _hot.torch_flags(1, self.cuda)
        self.module_hooks(True)
        optimizer = sys.modules['torch.optim.optimizer']
        if hasattr(optimizer, 'register_optimizer_step_post_hook'):
            self.handles.append(optimizer.register_optimizer_step_pre_hook(self.optimizer_pre))
            self.handles.append(optimizer.register_optimizer_step_post_hook(self.optimizer_post))
        elif hasattr(torch.optim.Optimizer, '_optimizer_step_code'):
            self.saved_step_code = torch.optim.Optimizer.__dict__['_optimizer_step_code']
            tracer = self

            def _optimizer_step_code(opt):
                tracer.optimizer_post(opt, None, None)

            torch.optim.Optimizer._optimizer_step_code = _optimizer_step_code

    def module_hooks(self, on):
        """The global module hooks (the stub's C functions), in or out. In training they are
        out during the steps --every leaves unrecorded, so that those cost only the optimizer
        hook."""
        if on and not self.module_handles:
            self.module_handles = [
                _module.register_module_forward_pre_hook(_hot.torch_forward_pre),
                _module.register_module_forward_hook(_hot.torch_forward_post)]
        elif not on:
            for h in self.module_handles:
                h.remove()
            self.module_handles = []

    def remove(self):
        """Takes every hook out (node hooks already on a step in flight find the trace off
        and do nothing); the records stay for the drain. Idempotent."""
        self.active = False
        if self.started:
            _hot.torch_flags(0, self.cuda)
        self.module_hooks(False)
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.saved_step_code is not None:
            torch.optim.Optimizer._optimizer_step_code = self.saved_step_code
            self.saved_step_code = None

    def close(self):
        self.remove()
        _hot.next_step = self.step + 1  # the step in flight was cut: its number is taken
        if self.started:
            _hot.torch_stop()
            self.started = False
        self.ids.clear()
        self.refs.clear()
        os.close(self.statm)

    # ---- what the C hooks call back (rarely) ----

    def read_memory(self, now):
        """(perf ns, allocated KB, reserved KB); -1: no figure. Read at the boundaries of
        recorded steps, and carried by the step's records. On CUDA, torch's caching allocator
        (read_cuda). On CPU, the process's RSS (no reserved figure), at most every
        RSS_EVERY_NS: RSS is the whole process's and moves with the allocator's arenas, not
        with one module, and reading it costs 10-20 us in a torch process here."""
        if self.cuda:
            alloc, reserved = self.read_cuda()
        else:
            alloc = int(os.pread(self.statm, 64, 0).split()[1]) * self.page_kb
            reserved = -1
        self.mem = (now, alloc, reserved)
        return self.mem

    @staticmethod
    def read_cuda():
        """The current device's allocated and reserved KB, from the allocator's counters as
        torch's C++ hands them over. torch.cuda.memory_allocated() (and _reserved) flattens
        and sorts that whole nested dict into another at every call: read once a module call,
        that was 35 % of a launch-bound GPU job's samples (../shared/gpu results)."""
        try:
            stats = torch._C._cuda_memoryStats(torch.cuda.current_device())
            return (stats['allocated_bytes']['all']['current'] >> 10,
                    stats['reserved_bytes']['all']['current'] >> 10)
        except (AttributeError, KeyError, TypeError):  # a torch that has them elsewhere
            return torch.cuda.memory_allocated() >> 10, torch.cuda.memory_reserved() >> 10

    def failed(self, e):
        self.errors += 1
        self.last_error = '%s: %s' % (type(e).__name__, e)

    def name_id(self, name):
        n = self.name_ids.get(name)
        if n is None:
            n = len(self.name_ids)
            _hot.torch_name(n, name)
            self.name_ids[name] = n
        return n

    def name_new(self, module, name):
        key = id(module)
        self.refs[key] = weakref.ref(module, partial(self.forget, key))
        self.ids[key] = self.name_id(name)

    def forget(self, key, ref):
        """A module died: its id may be reused by another."""
        if self.refs.get(key) is ref:
            del self.refs[key]
            self.ids.pop(key, None)

    def name_of(self, module):
        """The name id of a module called outside any tree named so far: its class."""
        try:
            self.name_new(module, type(module).__name__)
            return self.ids[id(module)]
        except Exception as e:
            self.failed(e)
            return -1

    def name_tree(self, root):
        """Qualified names for @root and its submodules (named_modules order, first name
        wins); the root itself is named after its class."""
        for qualified, sub in root.named_modules():
            if id(sub) not in self.ids:
                self.name_new(sub, qualified or type(root).__name__)

    def top_level(self, module):
        """A forward begins on a thread running no other traced one: names the tree the
        first time; in inference, the model called again begins a step. A module not named
        yet may be no root: `on` came while the thread was inside its model's forward, whose
        pre-hook never ran. It is named from the outermost module whose call is on the
        thread's stack, as the model's own call names it."""
        try:
            if id(module) not in self.ids:
                module = _outermost_module(module)
                if id(module) not in self.ids:
                    self.name_tree(module)
                    if _comm is not None:
                        _comm.watch(module)
            key = id(module)
            if not self.opt_seen and key in self.roots:
                self.end_step(_now())
            self.roots.add(key)
        except Exception as e:
            self.failed(e)

    # ---- optimizer step ----

    def optimizer_pre(self, opt, args, kwargs):
        if self.step_mark >= 0:  # a pre without its post (the step raised)
            _hot.torch_unmark(self.step_mark)
        self.step_mark = _hot.torch_mark() if self.device_on and self.sampled else -1
        self.step_t0 = _now()

    def optimizer_post(self, opt, args, kwargs):
        try:
            self._optimizer_post(opt)
        except Exception as e:
            self.failed(e)

    def _optimizer_post(self, opt):
        end = _now()
        bw_end = _hot.torch_info()[0] or None
        start = self.step_t0 if self.step_t0 is not None else bw_end
        mark, self.step_mark = self.step_mark, -1
        self.step_t0 = None
        if self.sampled and start is not None and (self.step_start is None or
                                                   start >= self.step_start):
            _hot.torch_record(self.step, self.name_id(type(opt).__name__), STAGE_STEP, start, end,
                              mark)
        elif mark >= 0:
            _hot.torch_unmark(mark)
        self.opt_seen = True
        _hot.torch_clear_stack()  # a forward that raised never ran its post hook
        self.end_step(end)

    def end_step(self, now):
        if self.sampled and self.exprs:
            self.read_variables(now)
        if self.step_start is not None and len(self.steps) < MAX_RECORDS:
            self.steps.append((self.step, self.step_start + self.offset_ns, now - self.step_start))
        self.steps_seen += 1
        self.step += 1
        _hot.next_step = self.step
        self.step_start = now
        if _comm is not None and _comm.ddps:
            _comm.step_ended()
        self.sampled = self.step % self.every == 0
        if self.opt_seen and self.active:  # training: a step ends between two forwards
            self.module_hooks(self.sampled)
        self.roots.clear()
        if not self.cuda and torch.cuda.is_initialized() and torch.cuda.is_available():
            self.cuda = True
            _hot.torch_flags(int(self.active), 1)
        mem = self.mem
        if self.sampled and (self.cuda or now - mem[0] >= RSS_EVERY_NS):
            mem = self.read_memory(now)
        _hot.torch_step(self.step, int(self.sampled), mem[1], mem[2])
        if self.device_time and self.sampled:
            self.device_stream()

    def device_stream(self):
        """Device time for the step beginning: events on torch's current stream of this (the
        training) thread, where the step's modules launch their kernels."""
        if not self.cuda:
            self.device_error = ('device time needs CUDA: torch.cuda is not initialised in '
                                 'this process')
            return
        try:
            _hot.torch_device(1, torch.cuda.current_stream().cuda_stream)
            self.device_on, self.device_error = True, None
        except Exception as e:
            self.device_time = self.device_on = False
            self.device_error = 'device time is off: %s' % e

    def read_variables(self, now):
        """Each tracked name, read in the innermost live frame of its function on this thread.
        Before 3.13 a function frame's f_locals is a snapshot dict kept on the frame, holding
        every local until it is read again: the last step's output, loss and graph would stay
        alive through the next step (on a GPU, a second copy of the logits). So the snapshot is
        emptied once read (locals() and debuggers fill it again first); 3.13's is a view."""
        wanted = {}
        for name, function in self.exprs:
            wanted.setdefault(function, []).append(name)
        f = sys._getframe(1)
        while f is not None and wanted:
            names = wanted.pop(f.f_code.co_name, None)
            if names is not None:
                local = f.f_locals
                for name in names:
                    if name in local and len(self.variables) < MAX_RECORDS:
                        self.variables.append((self.step, now + self.offset_ns,
                                               f.f_code.co_name, name, _plain(local[name])))
                if f.f_code.co_flags & CO_OPTIMIZED and type(local) is dict:
                    local.clear()
                del local
            f = f.f_back

    # ---- the daemon's side ----

    def drain(self):
        """(records as JSON text, the rest of the reply) with up to MAX_DRAIN of each."""
        def take(dq):
            n = min(len(dq), MAX_DRAIN)
            return [dq.popleft() for _ in range(n)]

        records, _, left, _ = _hot.torch_drain(MAX_DRAIN)
        variables = []
        for step, ts, function, name, value in take(self.variables):
            if isinstance(value, torch.Tensor):
                value = value.item()  # the training thread never waits for a device here
            if isinstance(value, float) and value != value:
                value = 'nan'
            elif isinstance(value, float) and value in (float('inf'), float('-inf')):
                value = str(value)
            variables.append((step, ts, function, name, value))
        return records, {'variables': variables, 'steps': take(self.steps),
                         'more': bool(left or self.variables or self.steps)}

    def state(self):
        _, errors, last_error, dropped, device = _hot.torch_info()
        if device is not None:
            device = dict(zip(('events', 'no_event', 'driver_errors', 'last_cuda_error',
                               'unresolved'), device))
        return {'device_time': self.device_time or self.device_on,
                'device_time_error': self.device_error, 'device_events': device,
                'tracing': self.active, 'session': self.session, 'step': self.step,
                'steps_seen': self.steps_seen,
                'every': self.every, 'exprs': ['%s@%s' % e for e in self.exprs],
                'backward': self.backward,
                'dropped': dropped, 'errors': self.errors + errors,
                'last_error': self.last_error or last_error,
                'device': 'cuda' if self.cuda else 'cpu',
                'torch': torch.__version__, 'optimizer_hooks':
                'global' if self.saved_step_code is None else '_optimizer_step_code'}


# ---- collective tracing (probectl torch PID on --comm) ----
#
# Every torch.distributed collective and point-to-point call the job makes through the
# module's functions is recorded: op, process group, its c10d sequence number (the same for
# one collective on every rank: c10d's counter starts from a value rank 0 hands the others),
# bytes, dtype, rank, peer, start, and duration (an async op's, until its Work completes).
# A call still running when the daemon drains is sent as in flight (no duration), and again
# once it completes: a rank stuck in a collective is visible while it is stuck.
# The functions are replaced in torch.distributed and distributed_c10d (a call torch makes
# inside another, all_gather_object calling all_gather, is the outer call's); `off` puts the
# originals back. Code that kept its own reference to a function before tracing began is not
# seen.
#
# DistributedDataParallel's gradient all_reduce is issued from C++ (its Reducer, a bucket at a
# time): no Python function sees it. With the module trace on, a DDP module is found when it
# is first called (DdpWatch), and DDP's own logger, which times every iteration on CPU (every
# 100th on CUDA, where each timed iteration waits for the GPU), gives each step's buckets,
# bytes, and the window from the first bucket's launch to the last one's completion (one row
# per step, op all_reduce, seq_source 'ddp'), and the step's forward, backward and exposed
# communication times (ddp_steps: the straggler's measure). c10d's counter of the group says
# which sequence numbers the step's collectives took, and, read at each drain, that a rank
# issued collectives which have not completed since its last step ended: a row in flight,
# the first of them, which `hang` compares across ranks.

COMM_OPS = ('all_reduce', 'all_gather', 'all_gather_into_tensor', '_all_gather_base',
            'reduce_scatter', 'reduce_scatter_tensor', '_reduce_scatter_base', 'broadcast',
            'reduce', 'barrier', 'gather', 'scatter', 'all_to_all', 'all_to_all_single',
            'send', 'recv', 'isend', 'irecv', 'monitored_barrier')
COMM_P2P = ('send', 'recv', 'isend', 'irecv')
COMM_PEER_ARG = {'send': 'dst', 'isend': 'dst', 'recv': 'src', 'irecv': 'src',
                 'broadcast': 'src', 'scatter': 'src', 'reduce': 'dst', 'gather': 'dst'}
# the argument whose tensors the call sends (its bytes), in order of preference
COMM_INPUTS = ('input', 'input_tensor', 'input_list', 'input_tensor_list', 'tensor',
               'scatter_list', 'tensor_list')


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


# torch's kDDPRuntimeLoggingSampleRate, put back by `off` (DDP also times its first 10
# iterations, whatever the rate)
DDP_LOGGING_SAMPLE_RATE = 100


class DdpWatch:
    """One DDP module: its group, and what its steps' ends saw of c10d's counter."""

    def __init__(self, ddp, tracer):
        self.ref = weakref.ref(ddp)
        self.group = ddp.process_group
        self.gname = tracer.group_name(self.group)
        self.size = self.group.size()
        self.module = type(ddp.module).__name__
        self.ends = collections.deque(maxlen=64)  # (unix ns, c10d counter) at each step end
        self.iteration = None  # the logger's iteration last recorded
        self.pending = None  # the row in flight: collectives issued since the last step end
        self.awaiting = {}  # seq -> call id of a row sent in flight, completed by its step
        self.sizes, self.dtype = [], None  # the buckets, as the training thread last read them
        self.cuda = any(p.is_cuda for p in itertools.islice(ddp.module.parameters(), 1))
        get_rate = getattr(getattr(ddp, 'reducer', None), '_get_ddp_runtime_logging_sample_rate',
                           None)  # torch has no getter yet: its default then
        self.saved_rate = get_rate() if get_rate else DDP_LOGGING_SAMPLE_RATE
        if not self.cuda:  # on CUDA each timed iteration waits for the GPU: DDP's 1 in 100
            ddp._set_ddp_runtime_logging_sample_rate(1)

    def restore(self):
        ddp = self.ref()
        if ddp is not None and not self.cuda:
            ddp._set_ddp_runtime_logging_sample_rate(self.saved_rate)


def _bucket_sizes(d):
    """The bytes of each of DDP's buckets now (rebuilt after the first step, in the order the
    gradients became ready)."""
    text = d.get('rebuilt_bucket_sizes') if d.get('has_rebuilt_buckets') else None
    text = text or d.get('bucket_sizes') or ''
    return [int(x) for x in str(text).replace(' ', '').split(',') if x]


class CommTracer:
    def __init__(self):
        self.dist = sys.modules['torch.distributed']
        self.c10d = sys.modules['torch.distributed.distributed_c10d']
        self.saved = []  # (module, name, original)
        self.done = collections.deque()  # completed calls, drained
        self.open = {}  # call id -> record of a call in flight
        self.ids = itertools.count()
        self.own_seq = collections.defaultdict(int)  # (group, peer) -> count: p2p, old torch
        self.local = threading.local()  # a call inside a traced call is not recorded again
        self.signatures = {}
        self.calls = 0
        self.dropped = 0
        self.errors = 0
        self.last_error = None
        self.active = True
        self.ddps = []  # DdpWatch, one per DDP module found
        self.ddp_steps = collections.deque()  # ddp_steps rows, drained
        self.claimed = collections.defaultdict(set)  # group -> c10d seqs of the calls above
        self.lock = threading.Lock()  # the DDP state: the training thread and the drain's

    def install(self):
        for name in COMM_OPS:
            original = getattr(self.c10d, name, None)
            if original is None or getattr(original, '_probed_original', None) is not None:
                continue
            traced = self.wrapper(name, original)
            for module in (self.c10d, self.dist):
                if getattr(module, name, None) is original:
                    self.saved.append((module, name, original))
                    setattr(module, name, traced)

    def remove(self):
        self.active = False
        for module, name, original in self.saved:
            setattr(module, name, original)
        self.saved = []
        with self.lock:
            for w in self.ddps:
                w.restore()
            self.ddps = []
            # in flight as the trace goes: their end will not be seen; sent (the last drain
            # follows) as 'untraced', never left 'issued', which hang would take for a rank
            # still waiting there
            for rec in list(self.open.values()):
                rec[13] = 'untraced'
                if len(self.done) < MAX_RECORDS:
                    self.done.append(rec)
            self.open.clear()

    # ---- DistributedDataParallel's collectives (C++) ----

    def watch(self, module):
        """@module was called as a top-level module: a DDP one is watched."""
        ddp_class = getattr(sys.modules.get('torch.nn.parallel.distributed'),
                            'DistributedDataParallel', None)
        if not self.active or ddp_class is None or not isinstance(module, ddp_class):
            return
        with self.lock:
            if any(w.ref() is module for w in self.ddps):
                return
            try:
                self.ddps.append(DdpWatch(module, self))
            except Exception as e:
                self.failed(e)

    def claim(self, gname, seq):
        """A traced Python call took c10d number @seq in @gname: not one of DDP's."""
        claimed = self.claimed[gname]
        claimed.add(seq)
        if len(claimed) > 4096:
            floor = max(claimed) - 2048
            self.claimed[gname] = {s for s in claimed if s > floor}

    def first_unclaimed(self, gname, low, high):
        """The first c10d number in (@low, @high] no traced Python call took, or None."""
        claimed = self.claimed.get(gname, ())
        for s in range(low + 1, min(high, low + 4096) + 1):
            if s not in claimed:
                return s
        return None

    def step_ended(self):
        """The training thread ended a step: each DDP group's counter now, and the iteration
        DDP's logger timed since, as a row."""
        with self.lock:
            for w in self.ddps:
                try:
                    self.ddp_step(w)
                except Exception as e:
                    self.failed(e)

    def ddp_step(self, w):
        ddp = w.ref()
        if ddp is None:
            return
        now = time.time_ns()
        w.ends.append((now, w.group._get_sequence_number_for_group()))
        if w.pending is not None and w.pending[4] <= w.ends[-1][1]:
            # what was in flight completed before this step ended: sent so at once, and again
            # with the step's timing (DDP logs an iteration at the next forward)
            self.open.pop(w.pending[0], None)
            w.pending[13] = 'completed'
            if len(self.done) < MAX_RECORDS:
                self.done.append(w.pending)
            w.awaiting[w.pending[4]] = w.pending[0]
            w.pending = None
        elif len(w.ends) > 1 and w.sizes:
            # the step's collectives, done: a row now (ts: this instant, no duration yet), so
            # that a rank that stalls before its next step shows how far it got
            first = self.first_unclaimed(w.gname, w.ends[-2][1], w.ends[-1][1])
            if first is not None and first not in w.awaiting and len(self.done) < MAX_RECORDS:
                rec = [next(self.ids), 'all_reduce', w.gname, w.size, first, 'ddp',
                       self.dist.get_rank(), None, sum(w.sizes), w.dtype, True, now, None,
                       'completed']
                self.done.append(rec)
                w.awaiting[first] = rec[0]
        d = ddp._get_ddp_logging_data()
        it = d.get('iteration')
        if it == w.iteration or 'backward_comm_time_end' not in d:
            return
        w.iteration = it
        start, end = d['backward_comm_time_start'], d['backward_comm_time_end']
        # the step end after the buckets completed, and the one before: their counters bound
        # the c10d numbers the step's collectives took
        k = next((i for i, e in enumerate(w.ends) if e[0] >= end), None)
        seq = None
        if k is not None and k > 0:
            seq = self.first_unclaimed(w.gname, w.ends[k - 1][1], w.ends[k][1])
        sizes = w.sizes = _bucket_sizes(d)
        w.dtype = d.get('dtypes') or None
        call_id = w.awaiting.pop(seq, None) if seq is not None else None
        if len(w.awaiting) > 64:
            w.awaiting.clear()
        rec = [call_id if call_id is not None else next(self.ids), 'all_reduce', w.gname,
               w.size, seq, 'ddp', self.dist.get_rank(), None, sum(sizes),
               d.get('dtypes') or None, True, start, max(end - start, 0), 'completed']
        if len(self.done) < MAX_RECORDS and len(self.ddp_steps) < MAX_RECORDS:
            self.done.append(rec)
            self.calls += 1
            comm, overlap = d.get('backward_comm_time'), d.get('backward_compute_comm_overlap_time')
            self.ddp_steps.append([w.module, w.gname, it, d.get('forward_compute_time_start'),
                                   d.get('forward_compute_time'), d.get('backward_compute_time'),
                                   comm, overlap, len(sizes), sum(sizes), rec[0]])
        else:
            self.dropped += 1

    def ddp_in_flight(self):
        """At a drain: collectives a DDP group issued since its last step end are in flight
        (the first of them, the one a rank blocked in the step waits on first)."""
        with self.lock:
            for w in self.ddps:
                try:
                    if not w.ends or w.ref() is None:
                        continue
                    last_end, now = w.ends[-1][1], w.group._get_sequence_number_for_group()
                    first = self.first_unclaimed(w.gname, last_end, now) if now > last_end \
                        else None
                    if first is None or (w.pending is not None and w.pending[4] == first):
                        continue
                    if w.pending is not None:
                        self.open.pop(w.pending[0], None)
                    # never DDP's logger from here: a rank blocked in a bucket's all_reduce
                    # holds the Reducer's mutex, which reading it takes (with the GIL held)
                    w.pending = [next(self.ids), 'all_reduce', w.gname, w.size, first, 'ddp',
                                 self.dist.get_rank(), None, w.sizes[0] if w.sizes else 0,
                                 w.dtype, True, time.time_ns(), None, 'issued']
                    self.open[w.pending[0]] = w.pending
                except Exception as e:
                    self.failed(e)

    def failed(self, e):
        self.errors += 1
        self.last_error = '%s: %s' % (type(e).__name__, e)

    def wrapper(self, name, original):
        tracer = self

        @functools.wraps(original)
        def traced(*args, **kwargs):
            if not tracer.active or getattr(tracer.local, 'inside', False):
                return original(*args, **kwargs)
            tracer.local.inside = True
            try:
                rec = tracer.begin(name, original, args, kwargs)
                try:
                    result = original(*args, **kwargs)
                except BaseException:
                    tracer.end(rec, failed=True)
                    raise
                tracer.finish(rec, name, result)
                return result
            finally:
                tracer.local.inside = False

        traced._probed_original = original
        return traced

    def group_of(self, bound):
        group = bound.get('group')
        return group if group is not None else self.c10d._get_default_group()

    def group_name(self, group):
        name = getattr(group, 'group_name', None)
        if name is None and hasattr(self.c10d, '_pg_names'):
            name = self.c10d._pg_names.get(group)
        return str(name) if name is not None else '?'

    def begin(self, name, original, args, kwargs):
        """The record of a call about to start; None when it cannot be made (counted)."""
        try:
            sig = self.signatures.get(name)
            if sig is None:
                sig = self.signatures[name] = inspect.signature(original)
            bound = sig.bind_partial(*args, **kwargs).arguments
            group = self.group_of(bound)
            gname = self.group_name(group)
            tensors = []
            for arg in COMM_INPUTS:
                tensors = _tensors(bound.get(arg))
                if tensors:
                    break
            nbytes = sum(t.numel() * t.element_size() for t in tensors)
            dtype = str(tensors[0].dtype).replace('torch.', '') if tensors else None
            peer = bound.get(COMM_PEER_ARG.get(name, ''))
            rank = self.dist.get_rank()
            if name in COMM_P2P or not hasattr(group, '_get_sequence_number_for_group'):
                key = (gname, name in COMM_P2P and peer)
                self.own_seq[key] += 1
                seq, source = self.own_seq[key], 'trace'
            else:  # c10d's counter, this call's number once it is counted
                seq, source = group._get_sequence_number_for_group() + 1, 'c10d'
                self.claim(gname, seq)
            rec = [next(self.ids), name, gname, group.size(), seq, source, rank,
                   peer if isinstance(peer, int) else None, nbytes, dtype,
                   bool(bound.get('async_op')) or name in ('isend', 'irecv'),
                   time.time_ns(), None, None]
            if len(self.open) < MAX_RECORDS:
                self.open[rec[0]] = rec
            else:
                self.dropped += 1
                return None
            self.calls += 1
            return rec
        except Exception as e:
            self.failed(e)
            return None

    def end(self, rec, failed=False):
        if rec is None:
            return
        rec[12] = time.time_ns() - rec[11]
        if self.open.pop(rec[0], None) is None:
            return
        if failed:
            rec[1] += ' (failed)'
        if len(self.done) < MAX_RECORDS:
            self.done.append(rec)
        else:
            self.dropped += 1

    def finish(self, rec, name, result):
        """A call returned: over, or (async) over when its Work completes."""
        if rec is None:
            return
        if name == 'recv' and isinstance(result, int) and rec[7] is None:
            rec[7] = result  # recv from any source: the sender
        if not rec[10] or result is None:
            self.end(rec)
            return
        try:
            result.get_future().add_done_callback(lambda _f: self.end(rec))
        except Exception:  # a backend without futures: over when its wait() returns
            self.end(rec)

    def drain(self):
        """(the calls done and in flight, ddp_steps rows), and whether more are left."""
        if self.ddps:
            self.ddp_in_flight()
        n = min(len(self.done), MAX_DRAIN)
        rows = [self.done.popleft() for _ in range(n)]
        rows += [list(r) for r in list(self.open.values())[:MAX_DRAIN]]
        steps = [self.ddp_steps.popleft() for _ in range(min(len(self.ddp_steps), MAX_DRAIN))]
        return rows, steps, bool(self.done or self.ddp_steps)

    def state(self):
        return {'calls': self.calls, 'in_flight': len(self.open), 'dropped': self.dropped,
                'errors': self.errors, 'last_error': self.last_error, 'tracing': self.active,
                'ddp': [{'module': w.module, 'group': w.gname, 'timed_every':
                         DDP_LOGGING_SAMPLE_RATE if w.cuda else 1} for w in self.ddps]}


# ---- the on-demand op and kernel trace (probectl torch PID profile) ----
#
# torch.profiler (Kineto/CUPTI where torch has it, the legacy autograd profiler otherwise) is
# turned on in the running job for N steps, or for a duration, then off, as dynolog's gputrace
# does. Its state is the enabling thread's: it is started and stopped on the training thread,
# at step boundaries (an optimizer step; in inference, a top-level module called again), never
# from the stub's. While it runs, global module hooks wrap each module's forward in a
# record_function "nn.Module: <qualified name>", which is how each op and kernel is given the
# module it ran under. Once stopped, the stub's thread exports the profiler's Chrome trace to a
# private temporary file, reads it back into rows (each with module, stage and step) and deletes
# it; the daemon drains them into torch_profile_events (views torch_ops, gpu_kernels).

PROFILE_MAX_EVENTS = 500000  # rows kept of one profile; more are counted as dropped
PROFILE_MODULE = 'nn.Module: '  # torch's own prefix for a module's range in its traces
PROFILE_GPU_KINDS = ('kernel', 'gpu_memcpy', 'gpu_memset', 'gpu_user_annotation')
PROFILE_SKIP_KINDS = ('Trace', 'python_function')  # the profiler's own span; with_stack's
# A finished profile's hooks are taken out by the next top-level forward, on the training
# thread; a drain does it only when none came for this long: torch >= 2 iterates its global
# optimizer hooks' dict itself while calling them, and one taken out from another thread
# then could make the job's optimizer step raise.
PROFILE_UNHOOK_NS = 5000000000


class Profiler:
    def __init__(self, number, steps, duration_ns):
        self.number = number
        self.steps_wanted = steps  # 0: for duration_ns
        self.duration_ns = duration_ns
        self.state = 'armed'  # armed -> running -> stopped -> done | failed | cancelled
        self.error = None
        self.prof = None
        self.kind = None  # 'kineto' | 'legacy'
        self.activities = None
        self.wall_start = self.perf_start = self.perf_stop = None
        self.bounds = []  # perf ns of the step boundaries while running
        self.rows = collections.deque()
        self.events = 0
        self.dropped = 0
        self.cancel = False
        self.local = threading.local()  # per thread: depth, open ranges
        self.names = {}  # id(module) -> qualified name, for the modules seen while running
        self.roots = set()
        self.opt_seen = False
        self.handles = []
        self.saved_step_code = None
        self.finished_ns = None  # when a drain first found it finished
        self.step_rows = []  # torch_profile_steps' rows, sent with the first drain after

    # ---- hooks (training thread) ----

    def install(self):
        self.handles = [_module.register_module_forward_pre_hook(self.forward_pre),
                        _module.register_module_forward_hook(self.forward_post)]
        optimizer = sys.modules['torch.optim.optimizer']
        if hasattr(optimizer, 'register_optimizer_step_post_hook'):
            self.handles.append(optimizer.register_optimizer_step_post_hook(self.optimizer_post))
        elif hasattr(torch.optim.Optimizer, '_optimizer_step_code'):
            self.saved_step_code = saved = torch.optim.Optimizer.__dict__['_optimizer_step_code']
            profiler = self

            def _optimizer_step_code(opt):
                saved(opt)  # the trace's, when it is on, or torch's no-op
                profiler.optimizer_post(opt, None, None)

            _optimizer_step_code._probed_profile = self
            torch.optim.Optimizer._optimizer_step_code = _optimizer_step_code

    def remove(self):
        """Takes the hooks out. Safe from the forward pre-hook (torch copies its hook dicts
        before calling them) and from the stub's thread; not from the optimizer hook, which
        torch calls while iterating its dict."""
        for h in self.handles:
            h.remove()
        self.handles = []
        code = torch.optim.Optimizer.__dict__.get('_optimizer_step_code')
        if self.saved_step_code is not None and getattr(code, '_probed_profile', None) is self:
            torch.optim.Optimizer._optimizer_step_code = self.saved_step_code
        self.saved_step_code = None

    def finished(self):
        return self.state in ('stopped', 'done', 'failed', 'cancelled')

    def forward_pre(self, module, args):
        try:
            local = self.local
            depth = getattr(local, 'depth', 0)
            if depth == 0:
                if self.finished():
                    self.remove()
                    return None
                self.top_level(module)
            local.depth = depth + 1
            ranges = local.__dict__.setdefault('ranges', [])
            if self.state == 'running':
                name = self.names.get(id(module))
                if name is None:
                    name = self.names[id(module)] = type(module).__name__
                r = torch.autograd.profiler.record_function(PROFILE_MODULE + name)
                r.__enter__()
                ranges.append(r)
            else:
                ranges.append(None)
        except Exception as e:
            self.fail(e)
        return None

    def forward_post(self, module, args, output):
        try:
            local = self.local
            ranges = getattr(local, 'ranges', None)
            if not ranges:
                return None
            local.depth -= 1
            r = ranges.pop()
            if r is not None:
                r.__exit__(None, None, None)
        except Exception as e:
            self.fail(e)
        return None

    def top_level(self, module):
        """A forward on an empty stack: names the tree; in inference, the model called again
        ends a step."""
        key = id(module)
        if not self.opt_seen and key in self.roots:
            self.roots.clear()
            self.boundary()
        if key not in self.names:
            for qualified, sub in module.named_modules():
                self.names.setdefault(id(sub), qualified or type(module).__name__)
        self.roots.add(key)

    def optimizer_post(self, opt, args, kwargs):
        try:
            self.opt_seen = True
            self.roots.clear()
            self.close_ranges()
            self.boundary()
        except Exception as e:
            self.fail(e)

    def close_ranges(self):
        """A forward that raised never ran its post hook: its ranges close here."""
        for r in reversed(getattr(self.local, 'ranges', [])):
            if r is not None:
                r.__exit__(None, None, None)
        self.local.ranges = []
        self.local.depth = 0

    def boundary(self):
        """A step ends (and the next begins) on this thread."""
        now = _now()
        if self.cancel and not self.finished():
            self.stop(now, 'cancelled')
        elif self.state == 'armed':
            self.start(now)
        elif self.state == 'running':
            self.bounds.append(now)
            if (len(self.bounds) > self.steps_wanted if self.steps_wanted else
                    now - self.perf_start >= self.duration_ns):
                self.stop(now, 'stopped')

    def start(self, now):
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
        self.activities = ','.join(a.name.lower() for a in activities)
        self.kind = 'kineto' if torch.autograd.kineto_available() else 'legacy'
        prof = profile(activities=activities)
        self.wall_start, self.perf_start = time.time_ns(), _now()
        try:
            prof.__enter__()
        except Exception as e:  # another profiler running in the job, ...
            self.state, self.error = 'failed', '%s: %s' % (type(e).__name__, e)
            return
        self.prof = prof
        self.bounds = [self.perf_start]
        # named afresh from a step boundary: installed in the middle of a step, the hooks
        # took the module running then for a top-level one
        self.names = {}
        self.state = 'running'

    def stop(self, now, state):
        if self.prof is not None:
            self.close_ranges()
            try:
                self.prof.__exit__(None, None, None)
            except Exception as e:
                state, self.error = 'failed', '%s: %s' % (type(e).__name__, e)
        self.perf_stop = now
        self.state = state

    def fail(self, e):
        if self.error is None:
            self.error = '%s: %s' % (type(e).__name__, e)

    # ---- the stub's thread ----

    def wall(self, perf_ns):
        return self.wall_start + (perf_ns - self.perf_start)

    def collect(self):
        """Once stopped: the profiler's events into rows (the stub's thread)."""
        fd, path = tempfile.mkstemp(prefix='probed-profile-', suffix='.json')
        os.close(fd)
        try:
            self.prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        finally:
            os.unlink(path)
        self.prof = None
        bounds = [self.wall(b) for b in self.bounds]
        rows = profile_rows(trace, self.wall_start, self.wall(self.perf_stop), bounds)
        self.step_rows = [[self.number] + r for r in profile_steps(rows, bounds)]
        for row in rows:
            if self.events < PROFILE_MAX_EVENTS:
                self.rows.append([self.number, self.events] + row)
                self.events += 1
            else:
                self.dropped += 1

    def drain(self):
        if self.state == 'stopped':
            try:
                self.collect()
                self.state = 'done'
            except Exception as e:
                self.state, self.error = 'failed', '%s: %s' % (type(e).__name__, e)
        if self.finished():
            self.prof = None
            if self.finished_ns is None:
                self.finished_ns = _now()
            elif _now() - self.finished_ns > PROFILE_UNHOOK_NS:
                self.remove()  # no forward came to do it on the training thread
        n = min(len(self.rows), MAX_DRAIN)
        rows = [self.rows.popleft() for _ in range(n)]
        steps, self.step_rows = self.step_rows, []
        return rows, steps, bool(self.rows)

    def summary(self):
        """The torch_profiles row, stored with the rows of the same drain: its state is
        'storing' until the last of them is drained."""
        running = self.perf_stop or (_now() if self.perf_start else None)
        state = 'storing' if self.state == 'done' and self.rows else self.state
        return [self.number, self.wall_start or time.time_ns(),
                running - self.perf_start if self.perf_start else 0,
                max(len(self.bounds) - 1, 0), self.events, self.dropped,
                self.activities or '', self.kind or '', state, self.error]

    def state_dict(self):
        return {'number': self.number, 'state': self.state, 'error': self.error,
                'steps': max(len(self.bounds) - 1, 0), 'steps_wanted': self.steps_wanted,
                'duration_ms': self.duration_ns // 1000000, 'events': self.events,
                'dropped': self.dropped, 'activities': self.activities,
                'profiler': self.kind, 'left': len(self.rows)}


def profile_steps(rows, bounds):
    """Each profiled step: [step, ts_ns, duration_ns (host, boundary to boundary), device,
    busy_ns, kernels] per GPU that ran its kernels (device and busy_ns None for a step with
    none): busy_ns is the union of the device intervals of the kernels, memcpys and memsets the
    step launched, so the GPU idled for duration_ns - busy_ns of the step's time."""
    out = []
    for i in range(len(bounds) - 1):
        spans = collections.defaultdict(list)  # device -> [(start, end)]
        for kind, _, _, _, step, ts_ns, dur_ns, _, device, _ in rows:
            if step == i and kind in PROFILE_GPU_KINDS and kind != 'gpu_user_annotation':
                spans[device].append((ts_ns, ts_ns + dur_ns))
        if not spans:
            out.append([i, bounds[i], bounds[i + 1] - bounds[i], None, None, 0])
        for device, intervals in sorted(spans.items(), key=lambda kv: str(kv[0])):
            intervals.sort()
            busy, end = 0, None
            for a, b in intervals:  # the union: overlaps (several streams) count once
                if end is None or a > end:
                    busy += b - a
                    end = b
                elif b > end:
                    busy += b - end
                    end = b
            out.append([i, bounds[i], bounds[i + 1] - bounds[i], device, busy, len(intervals)])
    return out


def _trace_kind(event, legacy):
    cat = event.get('cat')
    if cat:
        return cat
    name = event.get('name', '')
    return 'cpu_op' if '::' in name or not legacy else 'user_annotation'


def profile_rows(trace, wall_start, wall_stop, bounds):
    """A Chrome trace of torch.profiler (Kineto's: a dict with traceEvents; the legacy
    profiler's: a list) as rows [kind, name, module, stage, step, ts_ns, duration_ns, tid,
    device, stream], in time order. Each op gets the innermost module range open on its thread,
    or, in the backward pass, the module of the forward op of the same sequence number; a
    kernel, memcpy or memset those of the runtime call that launched it (its correlation id).
    Steps are numbered from 0, the first step profiled."""
    legacy = isinstance(trace, list)
    events = trace if legacy else trace.get('traceEvents', [])
    base = None if legacy else trace.get('baseTimeNanoseconds')
    spans = [e for e in events if isinstance(e, dict) and e.get('ph') == 'X' and
             isinstance(e.get('ts'), (int, float)) and isinstance(e.get('dur'), (int, float))]
    if not spans:
        return []
    # Kineto's times are microseconds since baseTimeNanoseconds (or the epoch); the legacy
    # profiler's, since it began: those are set on the time the profiler started
    offset = base or 0
    first = min(e['ts'] for e in spans) * 1000 + offset
    if not wall_start - 10 ** 10 <= first <= wall_stop + 10 ** 10:
        offset = wall_start - min(e['ts'] for e in spans) * 1000
    spans.sort(key=lambda e: (e['ts'], -e['dur']))
    stacks = {}  # tid -> open spans [(end, module, stage, seq)]
    seq_module = {}  # forward op's sequence number -> module
    launches = {}  # correlation id -> (module, stage, step)
    out = []
    for e in spans:
        kind = _trace_kind(e, legacy)
        if kind in PROFILE_SKIP_KINDS:
            continue
        args = e.get('args') or {}
        name = str(e.get('name', ''))
        ts_ns = int(e['ts'] * 1000 + offset)
        dur_ns = int(e['dur'] * 1000)
        step = bisect.bisect_right(bounds, ts_ns) - 1
        step = step if 0 <= step < len(bounds) - 1 else None
        if kind in PROFILE_GPU_KINDS:  # its launch's module, stage and step: it may run later
            module, stage, launched = launches.get(args.get('correlation'), (None, None, step))
            out.append([kind, name, module, stage, launched, ts_ns, dur_ns, None,
                        args.get('device'), args.get('stream')])
            continue
        tid = e.get('tid')
        stack = stacks.setdefault(tid, [])
        while stack and stack[-1][0] <= ts_ns:
            stack.pop()
        module, stage, seq = (stack[-1][1], stack[-1][2], stack[-1][3]) if stack else (
            None, None, None)
        if name.startswith(PROFILE_MODULE):
            module, stage = name[len(PROFILE_MODULE):], stage or 'forward'
        elif name.startswith('autograd::engine::evaluate_function'):
            stage = 'backward'
        elif name.startswith('Optimizer.step#') or name.startswith('Optimizer.zero_grad#'):
            stage = 'step'
        number = args.get('Sequence number')
        if isinstance(number, int):
            if stage == 'backward':
                module = seq_module.get(number, module)
            elif module is not None:
                seq_module.setdefault(number, module)
        correlation = args.get('correlation')
        if correlation is not None:
            launches[correlation] = (module, stage, step)
        stack.append((ts_ns + dur_ns, module, stage, seq))
        out.append([kind, name, module, stage, step, ts_ns, dur_ns, tid, None, None])
    return out


# ---- live GPU memory by allocating stack (probectl torch PID memory) ----
#
# The caching allocator records the Python stack of each allocation while its history is on
# (torch.cuda.memory._record_memory_history); its snapshot lists every block of every segment
# with its state and, for those allocated while recording, that stack. The history is turned on
# for the time asked (the stub's thread sleeps meanwhile, the GIL free), the snapshot taken, the
# history turned off again (unless the job had it on itself), and the live blocks summed by
# stack. Blocks allocated before recording have no stack: they are summed under one label, and
# so is what the allocator holds reserved but free.

GPU_MEMORY_STACKS = 2000  # stacks kept, largest first; the rest summed as one
GPU_BEFORE = '<allocated before recording>'
GPU_FREE = '<reserved by the caching allocator, free>'
GPU_OTHER = '<other stacks>'


def _history(on):
    """Turns the allocator's history on (Python stacks) or off, whatever this torch calls it."""
    record = torch.cuda.memory._record_memory_history
    try:  # torch >= 2.1
        if on:
            record(enabled='all', context='alloc', stacks='python', max_entries=100000)
        else:
            record(enabled=None)
    except TypeError:  # torch 1.13 and 2.0: a bool
        record(on)


def gpu_memory_rows(snapshot):
    """A torch.cuda.memory._snapshot() as rows [device, frames, bytes, blocks], largest first:
    frames is the JSON text of the allocating stack, root first, as flame graphs take it
    ([kind, function, file, line]); the live blocks summed by device and stack."""
    sums = collections.defaultdict(lambda: [0, 0])
    free = collections.defaultdict(int)
    segments = snapshot.get('segments', []) if isinstance(snapshot, dict) else snapshot
    for seg in segments:
        device = seg.get('device')
        used = 0
        for b in seg.get('blocks', []):
            if b.get('state') != 'active_allocated':
                continue
            size = b.get('requested_size') or b.get('size', 0)
            used += b.get('size', 0)
            frames = b.get('frames')
            if frames is None and b.get('history'):  # torch 2.0 and before
                frames = b['history'][-1].get('frames')
            if frames:  # innermost first
                stack = [['python', f.get('name'), f.get('filename'), f.get('line', 0)]
                         for f in reversed(frames)]
            else:
                stack = [['label', GPU_BEFORE, None, 0]]
            key = (device, json.dumps(stack))
            sums[key][0] += size
            sums[key][1] += 1
        free[device] += max(seg.get('total_size', 0) - used, 0)
    for device, n in free.items():
        if n:
            sums[(device, json.dumps([['label', GPU_FREE, None, 0]]))][0] += n
    rows = sorted(([d, f, n, blocks] for (d, f), (n, blocks) in sums.items()),
                  key=lambda r: -r[2])
    if len(rows) > GPU_MEMORY_STACKS:
        other = collections.defaultdict(lambda: [0, 0])
        for d, _, n, blocks in rows[GPU_MEMORY_STACKS:]:
            other[d][0] += n
            other[d][1] += blocks
        rows = rows[:GPU_MEMORY_STACKS] + [
            [d, json.dumps([['label', GPU_OTHER, None, 0]]), n, blocks]
            for d, (n, blocks) in other.items()]
    return rows


def gpu_memory(number, record_ms):
    """The 'memory' request: the job's live GPU memory by allocating stack."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {'error': 'CUDA is not initialised in this process (torch.cuda.is_initialized()'
                ' is False): it has no GPU memory to read', 'no_cuda': True}
    is_on = getattr(torch._C, '_cuda_isHistoryEnabled', None)
    ours = not (is_on and is_on())
    if ours:
        _history(True)
    try:
        time.sleep(record_ms / 1000.0)
        snapshot = torch.cuda.memory._snapshot()
    finally:
        if ours:
            _history(False)
    ts = time.time_ns()
    rows = [[number, ts] + r for r in gpu_memory_rows(snapshot)]
    return {'gpu_memory': rows, 'snapshot': number, 'recorded_ms': record_ms,
            'history': 'ours' if ours else "the job's own"}


def tracing():
    return _tracer is not None or _comm is not None or _profile is not None


def _comm_part():
    """The comm tracer's drain and state, for a reply."""
    if _comm is None:
        return {'comm': [], 'ddp_steps': [], 'comm_state': None}, False
    rows, steps, more = _comm.drain()
    return {'comm': rows, 'ddp_steps': steps, 'comm_state': _comm.state()}, more


def _profile_part(action, args):
    """The profile's part of a reply ('profile' arms one, 'off' cancels it): its state, its
    torch_profiles row and up to MAX_DRAIN of its rows; and whether more are left."""
    global _profile
    if action == 'profile' and args.get('cancel'):
        if _profile is not None and not _profile.finished():
            _profile.cancel = True
            if _profile.state == 'armed':  # never started: nothing to stop on its thread
                _profile.state = 'cancelled'
    elif action == 'profile':
        if _profile is not None and not _profile.finished():
            return {'error': 'profile %d is %s in this process: one at a time'
                    % (_profile.number, _profile.state)}, False
        if _profile is not None and _profile.rows:
            return {'error': 'profile %d is still being stored: try again in a second'
                    % _profile.number}, False
        if _profile is not None:
            _profile.remove()
        _profile = Profiler(args['number'], args.get('steps', 0),
                            args.get('duration_ms', 0) * 1000000)
        _profile.install()
    elif action == 'off' and _profile is not None and not _profile.finished():
        _profile.cancel = True
        if _profile.state == 'armed':
            _profile.state = 'cancelled'
    if _profile is None:
        return {'profile': None, 'profiles': [], 'profile_events': [], 'profile_steps': []}, False
    rows, steps, more = _profile.drain()
    part = {'profile': _profile.state_dict(), 'profiles': [_profile.summary()],
            'profile_events': rows, 'profile_steps': steps}
    if _profile.finished() and not more and not _profile.handles:
        _profile = None  # its hooks are out (the next forward took them out, or a drain)
    return part, more


def command(args):
    """Runs one request from the daemon; returns the JSON line it prints."""
    global _tracer, _comm
    action = args['action']
    modules, comm = args.get('modules', True), args.get('comm', False)
    if action == 'on' and modules and getattr(_hot, 'TORCH_ABI', None) != TORCH_ABI:
        return json.dumps({'error': "the stub loaded in this process comes from another"
                           " version of probed (its torch hooks are not this trace's): restart"
                           " the process to trace it"})
    if action == 'on' and comm and 'torch.distributed.distributed_c10d' not in sys.modules:
        return json.dumps({'error': 'torch.distributed is not loaded in this process: no'
                           ' collective to trace'})
    if action == 'on':
        result = {'started': False}
        if comm and _comm is None:
            tracer = CommTracer()
            tracer.install()
            _comm = tracer
            result['started'] = True
            if _tracer is not None:  # the module trace named its roots already
                for ref in list(_tracer.refs.values()):
                    module = ref()
                    if module is not None:
                        _comm.watch(module)
        if modules and _tracer is None:
            exprs = [tuple(e) for e in args.get('exprs', [])]
            tracer = Tracer(args.get('every', 1), exprs, args.get('backward', 'auto'),
                            bool(args.get('device_time')))
            try:
                tracer.install()
            except BaseException:
                tracer.close()
                raise
            _tracer = tracer
            result['started'] = True
        elif modules:  # already on: new settings, same hooks
            _tracer.every = args.get('every', 1)
            _tracer.exprs = [tuple(e) for e in args.get('exprs', [])]
            _tracer.backward = args.get('backward', 'auto')
            _hot.torch_backward_min(BACKWARD_MIN_NS[_tracer.backward])
            _tracer.device_time = bool(args.get('device_time'))
            if not _tracer.device_time and _tracer.device_on:
                _hot.torch_device(0, 0)
                _tracer.device_on = False
        part, _ = _comm_part()
        result.update(_tracer.state() if _tracer is not None else _idle_state())
        result.update(part)
        if _comm is not None:
            result['tracing'] = result['tracing'] or _comm.active
        result['profiling'] = _profile is not None
        return json.dumps(result)
    if action == 'memory':  # answered now, whatever else runs
        result = gpu_memory(args['number'], args.get('record_ms', 5000))
        result['tracing'] = _tracer is not None or _comm is not None
        result['profiling'] = _profile is not None
        return json.dumps(result)
    if action == 'profile':
        part, profile_more = _profile_part(action, args)
        if 'error' in part:
            return json.dumps(part)
    elif _tracer is None and _comm is None and _profile is None:
        return json.dumps({'error': 'the torch trace is off in this process'})
    if action == 'off':
        if _tracer is not None:
            _tracer.remove()
        if _comm is not None:
            _comm.remove()
    if action != 'profile':
        part, profile_more = _profile_part(action, args)
    records, result = _tracer.drain() if _tracer is not None else ('[]', {
        'variables': [], 'steps': [], 'more': False})
    comm, comm_more = _comm_part()
    result.update(_tracer.state() if _tracer is not None else _idle_state())
    result.update(comm)
    result.update(part)
    result['more'] = result['more'] or comm_more or profile_more
    if _comm is not None:
        result['tracing'] = result['tracing'] or _comm.active
    if _tracer is not None and not _tracer.active and not result['more']:
        _tracer.close()
        _tracer = None
    if _comm is not None and not _comm.active and not comm_more:
        _comm = None
    if _tracer is None and _comm is None:
        result['tracing'] = False
    result['profiling'] = _profile is not None
    return '{"records": %s, %s' % (records, json.dumps(result)[1:])


def _idle_state():
    """The module trace's state when only collectives are traced."""
    return {'tracing': False, 'step': 0, 'steps_seen': 0, 'every': 1, 'exprs': [],
            'backward': None,
            'dropped': 0, 'errors': 0, 'last_error': None, 'device': 'cpu',
            'torch': torch.__version__, 'optimizer_hooks': None, 'modules': False}
