# torchtrace.py - the torch trace, inside a target (probed/torch.c embeds this file and loads it
# once as the module `_probed_torch`; later requests call command()).
#
# It uses PyTorch's global hooks and never touches the user's code:
#   - module forward pre/post hooks time each module's forward;
#   - in the forward post hook, a gradient hook on the module's output (backward starts) and on
#     its first input that needs a gradient (backward ends; the end of the backward pass when
#     none does). torch's global *full* backward hooks are not used: they wrap every module's
#     inputs and outputs in a custom autograd Function, and a model that then changes such an
#     output in place (nn.ReLU(inplace=True) after a BatchNorm, as in ResNet) fails with
#     "Output 0 of BackwardHookFunctionBackward is a view and is being modified inplace";
#   - the optimizer step: torch >= 2.0 has global step pre/post hooks; 1.x has none, and
#     Optimizer._optimizer_step_code, the no-op torch calls after each step for its own
#     profiler, marks the end (the stage then starts where the backward pass ended).
# Steps are counted at optimizer steps; until one is seen (inference), a new step starts when
# a top-level module is called again. Every Nth step is recorded (--every N); the others cost
# two hook calls per module. Records go to bounded deques, drained by the daemon from the
# stub's thread (never the training thread) about once a second.
import collections
import json
import os
import sys
import time
import weakref
from _thread import get_ident

import torch
from torch.nn.modules import module as _module

VERSION = 1
MAX_RECORDS = 200000  # buffered while the daemon does not drain; then counted as dropped
MAX_DRAIN = 20000  # records per drain; the daemon asks again when more are left
MEMORY_EVERY_NS = 1000000  # memory is read at most once a millisecond (it costs a syscall)
_MB = 1024.0 * 1024.0

_tracer = None


def _first_grad_tensor(value):
    """The first tensor in @value (a tensor, or a tuple/list/dict of them) that needs a
    gradient, else None."""
    if isinstance(value, torch.Tensor):
        return value if value.requires_grad else None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, torch.Tensor) and v.requires_grad:
                return v
    return None


def _plain(value):
    """A variable's value as something JSON holds: 0-d (or one-element) tensors are kept as a
    detached copy and read as a float at drain time, off the training thread."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            return value.detach().clone()
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
        self.stacks = {}  # thread ident -> [(module, name, start_ns)] of forwards running
        self.names = weakref.WeakKeyDictionary()
        self.records = collections.deque()
        self.variables = collections.deque()
        self.steps = collections.deque()
        self.dropped = 0
        self.steps_seen = 0
        self.offset_ns = time.time_ns() - time.perf_counter_ns()
        self.step_start = None  # perf ns; None: the step began before tracing
        self.step_t0 = None  # torch >= 2: when the optimizer step began
        self.bw_end = None  # perf ns of the last backward pass's end
        self.bw_queued = False
        self.cuda = False
        self.mem = (0, None, None)  # (perf ns read, allocated MB, reserved MB)
        self.statm = os.open('/proc/self/statm', os.O_RDONLY | os.O_CLOEXEC)
        self.page_mb = os.sysconf('SC_PAGE_SIZE') / _MB
        self.handles = []
        self.saved_step_code = None
        self.active = True
        self.errors = 0  # hook calls that failed; a hook never raises into the user's code
        self.last_error = None
        self.queue_callback = torch.autograd.Variable._execution_engine.queue_callback

    # ---- installing and removing ----

    def install(self):
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.handles.append(_module.register_module_forward_pre_hook(self.forward_pre))
        self.handles.append(_module.register_module_forward_hook(self.forward_post))
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

    def remove(self):
        """Takes every hook out (gradient hooks already on tensors of a step in flight find
        the tracer off and do nothing). Idempotent."""
        self.active = False
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.saved_step_code is not None:
            torch.optim.Optimizer._optimizer_step_code = self.saved_step_code
            self.saved_step_code = None

    def close(self):
        self.remove()
        os.close(self.statm)

    # ---- what the hooks record ----

    def memory(self, now):
        """(allocated, reserved) in MB: torch's CUDA caching allocator, or the process's RSS
        (and no reserved figure) on CPU; read at most once every MEMORY_EVERY_NS."""
        if now - self.mem[0] < MEMORY_EVERY_NS:
            return self.mem[1], self.mem[2]
        if self.cuda:
            alloc = torch.cuda.memory_allocated() / _MB
            reserved = torch.cuda.memory_reserved() / _MB
        else:
            alloc = int(os.pread(self.statm, 64, 0).split()[1]) * self.page_mb
            reserved = None
        self.mem = (now, alloc, reserved)
        return alloc, reserved

    def failed(self, e):
        self.errors += 1
        self.last_error = '%s: %s' % (type(e).__name__, e)

    def record(self, step, name, stage, start, end):
        if not self.active:
            return
        if len(self.records) >= MAX_RECORDS:
            self.dropped += 1
            return
        alloc, reserved = self.memory(end)
        self.records.append((step, name, stage, start + self.offset_ns, end - start, alloc,
                             reserved))

    def name_of(self, module):
        name = self.names.get(module)
        if name is None:
            name = type(module).__name__
            self.names[module] = name
        return name

    def name_tree(self, root):
        """Qualified names for @root and its submodules (named_modules order, first name
        wins); the root itself is named after its class."""
        for qualified, sub in root.named_modules():
            if sub not in self.names:
                self.names[sub] = qualified or type(root).__name__

    # ---- module hooks ----

    def forward_pre(self, module, inputs):
        try:
            self._forward_pre(module)
        except Exception as e:
            self.failed(e)

    def forward_post(self, module, inputs, output):
        try:
            self._forward_post(module, inputs, output)
        except Exception as e:
            self.failed(e)

    def _forward_pre(self, module):
        stack = self.stacks.get(get_ident())
        if stack is None:
            stack = self.stacks[get_ident()] = []
        if not stack:
            self.top_level(module)
        if self.sampled:
            stack.append((module, self.name_of(module), time.perf_counter_ns()))
        else:
            stack.append((module, None, 0))

    def _forward_post(self, module, inputs, output):
        end = time.perf_counter_ns()
        stack = self.stacks.get(get_ident())
        if not stack or stack[-1][0] is not module:
            return  # its pre hook ran before tracing began
        _, name, start = stack.pop()
        if name is None:
            return
        self.record(self.step, name, 'forward', start, end)
        if torch.is_grad_enabled():
            out = _first_grad_tensor(output)
            if out is not None:
                self.hook_backward(name, out, _first_grad_tensor(inputs))

    def top_level(self, module):
        if module not in self.names:
            self.name_tree(module)
        key = id(module)
        if not self.opt_seen and key in self.roots:
            self.end_step(time.perf_counter_ns())  # inference: the model is called again
        self.roots.add(key)

    # ---- backward ----

    def hook_backward(self, name, out, inp):
        span = [self.step, name, 0]
        out.register_hook(lambda grad: self.backward_start(span, inp is None))
        if inp is not None:
            inp.register_hook(lambda grad: self.backward_end(span))

    def backward_start(self, span, ends_with_pass):
        try:
            self._backward_start(span, ends_with_pass)
        except Exception as e:
            self.failed(e)

    def _backward_start(self, span, ends_with_pass):
        if span[2] or not self.active:
            return
        span[2] = time.perf_counter_ns()
        if not self.bw_queued:
            self.bw_queued = True
            self.queue_callback(self.backward_pass_end)
        if ends_with_pass:
            self.queue_callback(lambda: self.backward_end(span))

    def backward_end(self, span):
        try:
            self._backward_end(span)
        except Exception as e:
            self.failed(e)

    def _backward_end(self, span):
        start = span[2]
        if start > 0:
            span[2] = -1
            self.record(span[0], span[1], 'backward', start, time.perf_counter_ns())

    def backward_pass_end(self):
        self.bw_queued = False
        self.bw_end = time.perf_counter_ns()

    # ---- optimizer step ----

    def optimizer_pre(self, opt, args, kwargs):
        self.step_t0 = time.perf_counter_ns()

    def optimizer_post(self, opt, args, kwargs):
        try:
            self._optimizer_post(opt)
        except Exception as e:
            self.failed(e)

    def _optimizer_post(self, opt):
        end = time.perf_counter_ns()
        start = self.step_t0 if self.step_t0 is not None else self.bw_end
        self.step_t0 = None
        if self.sampled and start is not None and (self.step_start is None or
                                                   start >= self.step_start):
            self.record(self.step, type(opt).__name__, 'step', start, end)
        self.opt_seen = True
        stack = self.stacks.get(get_ident())
        if stack:
            del stack[:]  # a forward that raised never ran its post hook
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
        self.roots.clear()
        self.cuda = self.cuda or (torch.cuda.is_available() and torch.cuda.is_initialized())

    def read_variables(self, now):
        """Each tracked name, read in the innermost live frame of its function on this thread."""
        frames = []
        f = sys._getframe(1)
        while f is not None:
            frames.append(f)
            f = f.f_back
        for name, function in self.exprs:
            for f in frames:
                if f.f_code.co_name == function:
                    if name in f.f_locals and len(self.variables) < MAX_RECORDS:
                        self.variables.append((self.step, now + self.offset_ns, function, name,
                                               _plain(f.f_locals[name])))
                    break

    # ---- the daemon's side ----

    def drain(self):
        def take(dq):
            n = min(len(dq), MAX_DRAIN)
            return [dq.popleft() for _ in range(n)]

        records = take(self.records)
        variables = []
        for step, ts, function, name, value in take(self.variables):
            if isinstance(value, torch.Tensor):
                value = value.item()  # the training thread never waits for a device here
            if isinstance(value, float) and value != value:
                value = 'nan'
            elif isinstance(value, float) and value in (float('inf'), float('-inf')):
                value = str(value)
            variables.append((step, ts, function, name, value))
        return {'records': records, 'variables': variables, 'steps': take(self.steps),
                'more': bool(self.records or self.variables or self.steps)}

    def state(self):
        return {'tracing': self.active, 'step': self.step, 'steps_seen': self.steps_seen,
                'every': self.every, 'exprs': ['%s@%s' % e for e in self.exprs],
                'dropped': self.dropped, 'errors': self.errors, 'last_error': self.last_error,
                'device': 'cuda' if self.cuda else 'cpu',
                'torch': torch.__version__, 'optimizer_hooks':
                'global' if self.saved_step_code is None else '_optimizer_step_code'}


def tracing():
    return _tracer is not None


def command(args):
    """Runs one request from the daemon; returns the JSON line it prints."""
    global _tracer
    action = args['action']
    if action == 'on':
        exprs = [tuple(e) for e in args.get('exprs', [])]
        if _tracer is None:
            _tracer = Tracer(args.get('every', 1), exprs)
            _tracer.install()
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
    result = _tracer.drain()
    result.update(_tracer.state())
    if not _tracer.active:
        if not result['more']:  # else the daemon drains again, and the tracer goes then
            _tracer.close()
            _tracer = None
            result['tracing'] = False
    return json.dumps(result)
