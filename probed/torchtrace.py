# torchtrace.py - the torch trace, inside a target (probed/torchtrace.c embeds this file and
# loads it once as the module `_probed_torch`; later requests call command()).
#
# It uses PyTorch's global hooks and never touches the user's code:
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
# module hooks are out during the others. Records go to bounded deques, drained by the daemon
# from the stub's thread (never the training thread) about once a second.
import collections
import json
import os
import sys
import time
import weakref
from _thread import get_ident
from functools import partial

import torch
from torch.nn.modules import module as _module

VERSION = 1
MAX_RECORDS = 200000  # buffered while the daemon does not drain; then counted as dropped
MAX_DRAIN = 20000  # records per drain; the daemon asks again when more are left
MEMORY_EVERY_NS = 1000000  # CUDA memory is read at most once a millisecond
RSS_EVERY_NS = 50000000  # RSS (CPU) at step boundaries, at most every 50 ms (a 10-20 us read)
_now = time.perf_counter_ns
_grad_enabled = torch.is_grad_enabled

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
        self.stacks = {}  # thread ident -> [(module, start perf ns or 0)] of forwards running
        self.names = {}  # id(module) -> (weak reference, qualified name)
        self.records = collections.deque()
        self.variables = collections.deque()
        self.steps = collections.deque()
        self.dropped = 0
        self.steps_seen = 0
        self.offset_ns = time.time_ns() - _now()
        self.step_start = None  # perf ns; None: the step began before tracing
        self.step_t0 = None  # torch >= 2: when the optimizer step began
        self.bw_end = None  # perf ns of the last backward pass's end
        self.bw_queued = False
        self.nodes = {}  # id(autograd node) -> (node, [(is_end, span)]): prehooks this step
        self.pass_ends = []  # spans that end with the backward pass
        self.cuda = False
        self.mem = (0, None, None)  # (perf ns read, allocated KB, reserved KB)
        self.statm = os.open('/proc/self/statm', os.O_RDONLY | os.O_CLOEXEC)
        self.page_kb = os.sysconf('SC_PAGE_SIZE') >> 10
        self.handles = []  # the optimizer's
        self.module_handles = []
        self.saved_step_code = None
        self.active = True
        self.errors = 0  # hook calls that failed; a hook never raises into the user's code
        self.last_error = None
        self.queue_callback = torch.autograd.Variable._execution_engine.queue_callback

    # ---- installing and removing ----

    def install(self):
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
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
        """The global module hooks, in or out. In training they are out during the steps
        --every leaves unrecorded, so that those cost only the optimizer hook."""
        if on and not self.module_handles:
            self.module_handles = [_module.register_module_forward_pre_hook(self.forward_pre),
                                   _module.register_module_forward_hook(self.forward_post)]
        elif not on:
            for h in self.module_handles:
                h.remove()
            self.module_handles = []

    def remove(self):
        """Takes every hook out (gradient hooks already on tensors of a step in flight find
        the tracer off and do nothing). Idempotent."""
        self.active = False
        self.module_hooks(False)
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

    def read_memory(self, now):
        """(perf ns, allocated KB, reserved KB); integers, which the drain writes as JSON
        faster than floats. On CUDA, torch's caching allocator, read again by a record at
        most every MEMORY_EVERY_NS. On CPU, the process's RSS (no reserved figure), read at
        step boundaries at most every RSS_EVERY_NS: RSS is the whole process's and moves with
        the allocator's arenas, not with one module, and reading it costs 10-20 us in a torch
        process here."""
        if self.cuda:
            alloc = torch.cuda.memory_allocated() >> 10
            reserved = torch.cuda.memory_reserved() >> 10
        else:
            alloc = int(os.pread(self.statm, 64, 0).split()[1]) * self.page_kb
            reserved = None
        self.mem = (now, alloc, reserved)
        return self.mem

    def failed(self, e):
        self.errors += 1
        self.last_error = '%s: %s' % (type(e).__name__, e)

    def record(self, step, name, stage, start, end):
        if not self.active:
            return
        if len(self.records) >= MAX_RECORDS:
            self.dropped += 1
            return
        mem = self.mem
        if mem[1] is None or (self.cuda and end - mem[0] >= MEMORY_EVERY_NS):
            mem = self.read_memory(end)
        self.records.append((step, name, stage, start + self.offset_ns, end - start, mem[1],
                             mem[2]))

    def name_of(self, module):
        """A module's name: looked up by id (a plain dict is the cheapest lookup; a hook runs
        twice per module call), checked against a weak reference (the id of a module that
        was freed may be reused; the trace must not keep a model alive)."""
        entry = self.names.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        return self.name_new(module, type(module).__name__)

    def name_new(self, module, name):
        ref = weakref.ref(module, lambda r, key=id(module): self.name_freed(key, r))
        self.names[id(module)] = (ref, name)
        return name

    def name_freed(self, key, ref):
        entry = self.names.get(key)
        if entry is not None and entry[0] is ref:
            del self.names[key]

    def name_tree(self, root):
        """Qualified names for @root and its submodules (named_modules order, first name
        wins); the root itself is named after its class."""
        for qualified, sub in root.named_modules():
            entry = self.names.get(id(sub))
            if entry is None or entry[0]() is not sub:
                self.name_new(sub, qualified or type(root).__name__)

    # ---- module hooks ----

    def forward_pre(self, module, inputs):
        try:
            stack = self.stacks.get(get_ident())
            if stack is None:
                stack = self.stacks[get_ident()] = []
            if not stack:
                self.top_level(module)
            stack.append((module, _now() if self.sampled else 0))
        except Exception as e:
            self.failed(e)

    def forward_post(self, module, inputs, output):
        end = _now()
        try:
            stack = self.stacks.get(get_ident())
            if not stack or stack[-1][0] is not module:
                return  # its pre hook ran before tracing began
            start = stack.pop()[1]
            if not start:
                return  # a step not recorded
            name = self.name_of(module)
            self.record(self.step, name, 'forward', start, end)
            if _grad_enabled():
                out = _first_node(output)
                if out is not None:
                    self.hook_backward(name, out, _first_node(inputs))
        except Exception as e:
            self.failed(e)

    def top_level(self, module):
        entry = self.names.get(id(module))
        if entry is None or entry[0]() is not module:
            self.name_tree(module)
        key = id(module)
        if not self.opt_seen and key in self.roots:
            self.end_step(_now())  # inference: the model is called again
        self.roots.add(key)

    # ---- backward ----
    #
    # A module's backward starts when the gradient of its output is complete, that is when
    # the autograd node that made the output is about to run, and ends when the node that
    # made its input is (or, when no input needs a gradient, when the backward pass ends).
    # One prehook per node serves every module that starts or ends there (a module's output
    # is often its parent's, or the next module's input): a list of (is_end, span).

    def hook_backward(self, name, out, inp):
        """@out: the node that made the module's output; @inp: the one that made its input,
        or None (raw data, or a leaf tensor): then the backward ends with the pass."""
        span = [self.step, name, 0, inp is None]  # step, module, start ns, ends with the pass
        nodes = self.nodes
        for node, event in ((out, (False, span)), (inp, (True, span))):
            if node is None:
                break
            entry = nodes.get(id(node))
            if entry is None:
                events = [event]
                nodes[id(node)] = (node, events)  # holds the node: its id stays its own
                node.register_prehook(partial(self.node_reached, events))
            else:
                entry[1].append(event)

    def node_reached(self, events, grads):
        """The hook itself (a partial: no Python frame of its own); returns None, so the
        gradients go on unchanged."""
        try:
            self._node_reached(events)
        except Exception as e:
            self.failed(e)

    def _node_reached(self, events):
        if not self.active:
            return
        now = _now()
        for is_end, span in events:
            if is_end:
                self.backward_end(span, now)
            elif not span[2]:
                span[2] = now
                if not self.bw_queued:
                    self.bw_queued = True
                    self.queue_callback(self.backward_pass_end)
                if span[3]:
                    self.pass_ends.append(span)
        del events[:]  # a node runs once per backward pass

    def backward_end(self, span, now):
        start = span[2]
        if start > 0:
            span[2] = -1
            self.record(span[0], span[1], 'backward', start, now)

    def backward_pass_end(self):
        try:
            now = _now()
            self.bw_queued = False
            self.bw_end = now
            for span in self.pass_ends:
                self.backward_end(span, now)
            del self.pass_ends[:]
            self.nodes.clear()
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
        if self.opt_seen and self.active:  # training: a step ends between two forwards
            self.module_hooks(self.sampled)
        self.roots.clear()
        self.nodes.clear()
        self.cuda = self.cuda or (torch.cuda.is_available() and torch.cuda.is_initialized())
        if self.sampled and now - self.mem[0] >= RSS_EVERY_NS:
            self.read_memory(now)

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
