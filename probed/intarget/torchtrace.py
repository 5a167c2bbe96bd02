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
import collections
import json
import os
import sys
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
MAX_RECORDS = 200000  # buffered while the daemon does not drain; then counted as dropped
MAX_DRAIN = 20000  # records per drain; the daemon asks again when more are left
RSS_EVERY_NS = 50000000  # RSS (CPU) at step boundaries, at most every 50 ms (a 10-20 us read)
STAGE_STEP = 2  # torchhot.c's stages: forward, backward, step
CO_OPTIMIZED = 0x1  # a function's code: its locals are fast locals, f_locals a copy
_now = time.perf_counter_ns

_tracer = None


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


class Tracer:
    def __init__(self, every, exprs):
        self.every = every
        self.exprs = exprs  # [(name, function)]
        self.step = 0
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
        _hot.torch_start(self.ids, self.name_of, self.top_level, self.read_cuda, _first_node,
                         torch.is_grad_enabled,
                         torch.autograd.Variable._execution_engine.queue_callback,
                         torch.Tensor, self.offset_ns, MAX_RECORDS)
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
        if self.started:
            _hot.torch_stop()
            self.started = False
        self.ids.clear()
        self.refs.clear()
        os.close(self.statm)

    # ---- what the C hooks call back (rarely) ----

    def read_memory(self, now):
        """(perf ns, allocated KB, reserved KB); -1: no figure. On CUDA, torch's caching
        allocator (the C side reads it again at most every millisecond). On CPU, the process's
        RSS (no reserved figure), read at step boundaries at most every RSS_EVERY_NS: RSS is
        the whole process's and moves with the allocator's arenas, not with one module, and
        reading it costs 10-20 us in a torch process here."""
        if self.cuda:
            alloc, reserved = self.read_cuda()
        else:
            alloc = int(os.pread(self.statm, 64, 0).split()[1]) * self.page_kb
            reserved = -1
        self.mem = (now, alloc, reserved)
        return self.mem

    @staticmethod
    def read_cuda():
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
        """A forward begins on a thread running no other: names the tree the first time;
        in inference, the model called again begins a step."""
        try:
            key = id(module)
            if key not in self.ids:
                self.name_tree(module)
            if not self.opt_seen and key in self.roots:
                self.end_step(_now())
            self.roots.add(key)
        except Exception as e:
            self.failed(e)

    # ---- optimizer step ----

    def optimizer_pre(self, opt, args, kwargs):
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
        self.step_t0 = None
        if self.sampled and start is not None and (self.step_start is None or
                                                   start >= self.step_start):
            _hot.torch_record(self.step, self.name_id(type(opt).__name__), STAGE_STEP, start, end)
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
        self.step_start = now
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
        _, errors, last_error, dropped = _hot.torch_info()
        return {'tracing': self.active, 'step': self.step, 'steps_seen': self.steps_seen,
                'every': self.every, 'exprs': ['%s@%s' % e for e in self.exprs],
                'dropped': dropped, 'errors': self.errors + errors,
                'last_error': self.last_error or last_error,
                'device': 'cuda' if self.cuda else 'cpu',
                'torch': torch.__version__, 'optimizer_hooks':
                'global' if self.saved_step_code is None else '_optimizer_step_code'}


def tracing():
    return _tracer is not None


def command(args):
    """Runs one request from the daemon; returns the JSON line it prints."""
    global _tracer
    action = args['action']
    if action == 'on' and (_hot is None or not hasattr(_hot, 'torch_start')):
        return json.dumps({'error': "the stub loaded in this process comes from an older probed"
                           " and has no torch hooks: restart the process to trace it"})
    if action == 'on':
        exprs = [tuple(e) for e in args.get('exprs', [])]
        if _tracer is None:
            tracer = Tracer(args.get('every', 1), exprs)
            try:
                tracer.install()
            except BaseException:
                tracer.close()
                raise
            _tracer = tracer
            result = {'started': True}
        else:  # already on: new settings, same hooks
            _tracer.every, _tracer.exprs = args.get('every', 1), exprs
            result = {'started': False}
        result.update(_tracer.state())
        return json.dumps(result)
    if _tracer is None:
        return json.dumps({'error': 'the torch trace is off in this process'})
    if action == 'off':
        _tracer.remove()
    records, result = _tracer.drain()
    result.update(_tracer.state())
    if not _tracer.active and not result['more']:  # else the daemon drains again first
        _tracer.close()
        _tracer = None
        result['tracing'] = False
    return '{"records": %s, %s' % (records, json.dumps(result)[1:])
