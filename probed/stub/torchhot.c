/* torchhot.c - see torchhot.h. Over 800 lines on purpose: it is the whole per-call path of the
 * torch trace inside the target (hooks, the record buffer, CUDA memory), kept in one file so that
 * the stub stays one translation unit a reviewer can read top to bottom. */
#define _GNU_SOURCE
#include "torchhot.h"
#include "cudaev.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOT_THREADS_MAX 64         /* threads running modules at once (DataParallel: one per GPU) */
#define HOT_DEPTH_MAX 1024         /* nested module calls timed per thread; deeper ones are not */
#define HOT_DECIDE_CALLS 8         /* forwards seen before deciding to time a module's backward */
#define GENERATION_MASK 0x7fffffff /* a node hook's key: generation << 32 | index, positive */

enum hot_stage { STAGE_FORWARD, STAGE_BACKWARD, STAGE_STEP };
static const char *const stage_names[] = {"forward", "backward", "step"};

struct hot_frame {
    PyObject *module; /* compared, never dereferenced */
    int64_t start_ns; /* 0: a step not recorded */
    int32_t event;    /* the CUDA event at its start (cudaev.h), or -1 */
};

struct hot_thread {
    unsigned long ident; /* pthread_self(), 0: a free slot */
    int64_t depth;       /* may pass HOT_DEPTH_MAX: those frames are counted, not kept */
    struct hot_frame *frames;
};

struct hot_node { /* an autograd node hooked this pass; holds a reference: its id stays its own */
    PyObject *node;
    int64_t first_event, last_event; /* -1: none (left), or it ran */
};

struct hot_span { /* one module's backward */
    int64_t step;
    const char *name;
    int64_t start_ns;    /* 0: not begun; -1: recorded */
    bool ends_with_pass; /* no input had a node: it ends with the backward pass */
    int32_t event;       /* the CUDA event at its start, or -1 */
};

struct hot_event { /* a span that begins (or ends) when a node is reached */
    int64_t span, next;
    bool is_end;
};

struct hot_record {
    int64_t step, start_ns, duration_ns, allocated_kb, reserved_kb;
    const char *name; /* JSON text, owned by the trace's names */
    enum hot_stage stage;
    int32_t event_start, event_end; /* CUDA events around it, or -1: resolved when drained */
    int64_t device_ns;              /* the GPU's time between them, or -1: none */
};

/* The stub's one trace (torch_hot_register sets it once, like stub.c's the_stub): the module
 * functions and the node hooks are plain C functions that torch calls without context. */
static struct torch_hot *the_hot;

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.perf_counter_ns's clock */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static PyObject *none(const struct capi *api)
{
    api->Py_IncRef(api->_Py_NoneStruct);
    return api->_Py_NoneStruct;
}

/* Counts a failure and clears the Python error it may have left: hooks never raise. */
static void failed(struct torch_hot *h, const char *what)
{
    h->errors++;
    snprintf(h->last_error, sizeof(h->last_error), "%s", what);
    if (h->api->PyErr_Occurred())
        h->api->PyErr_Clear();
}

/* Grows @*arr (of @size-byte items) to hold @need; -1 when memory is short. */
static int grow(void *arr, int64_t *cap, int64_t need, size_t size)
{
    int64_t n = *cap ? *cap : 64;
    void *p;

    if (need <= *cap)
        return 0;
    while (n < need)
        n *= 2;
    p = realloc(*(void **)arr, (size_t)n * size);
    if (!p)
        return -1;
    *(void **)arr = p;
    *cap = n;
    return 0;
}

/* ---- records ---- */

/* A CUDA event recorded now on the step's stream, when device time is on: its index, or -1. */
static int32_t mark(struct torch_hot *h)
{
    return h->device && h->marks ? cudaev_record(h->marks, h->stream) : -1;
}

/* A record of [start_ns, end_ns] host time, and of the GPU's time between @event_start and
 * @event_end when both are marks (else both are given back). */
static void add_record(struct torch_hot *h, int64_t step, const char *name, enum hot_stage stage,
                       int64_t start_ns, int64_t end_ns, int32_t event_start, int32_t event_end)
{
    bool kept = false;

    if (event_start < 0 || event_end < 0) {
        cudaev_release(h->marks, event_start);
        cudaev_release(h->marks, event_end);
        event_start = event_end = -1;
    }
    if (h->active) {
        pthread_mutex_lock(&h->lock);
        if (h->n_records >= h->max_records ||
            grow(&h->records, &h->cap_records, h->n_records + 1, sizeof(*h->records)) < 0) {
            h->dropped++;
        } else {
            h->records[h->n_records++] = (struct hot_record){
                step, start_ns, end_ns - start_ns, h->allocated_kb, h->reserved_kb,
                name, stage,    event_start,       event_end,       -1};
            kept = true;
        }
        pthread_mutex_unlock(&h->lock);
    }
    if (!kept) {
        cudaev_release(h->marks, event_start);
        cudaev_release(h->marks, event_end);
    }
}

/* A module's name id: its entry in torchtrace.py's dict, or name_of() for a new one; -1 when it
 * has none. */
static int64_t module_name(struct torch_hot *h, PyObject *module)
{
    const struct capi *api = h->api;
    PyObject *key = api->PyLong_FromVoidPtr(module), *id, *r = NULL;
    long long n = -1;

    id = key ? api->PyDict_GetItem(h->ids, key) : NULL;
    if (key)
        api->Py_DecRef(key);
    if (!id)
        id = r = api->PyObject_CallFunctionObjArgs(h->name_of, module, NULL);
    if (id)
        n = api->PyLong_AsLongLong(id);
    if (r)
        api->Py_DecRef(r);
    if (n < 0 || n >= h->n_names) {
        failed(h, "a module has no name");
        return -1;
    }
    return n;
}

/* ---- forward ---- */

static struct hot_thread *thread_of(struct torch_hot *h, bool create)
{
    unsigned long me = (unsigned long)pthread_self();
    struct hot_thread *spare = NULL;

    for (int i = 0; i < h->n_threads; i++) {
        if (h->threads[i].ident == me)
            return &h->threads[i];
        if (!spare && h->threads[i].depth == 0)
            spare = &h->threads[i]; /* a thread with no forward running loses nothing */
    }
    if (!create)
        return NULL;
    if (h->n_threads < HOT_THREADS_MAX) {
        spare = &h->threads[h->n_threads];
        spare->frames = malloc(HOT_DEPTH_MAX * sizeof(*spare->frames));
        if (!spare->frames)
            return NULL;
        h->n_threads++;
    }
    if (spare)
        *spare = (struct hot_thread){me, 0, spare->frames};
    return spare;
}

static PyObject *forward_pre(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    const struct capi *api = h->api;
    PyObject *module = api->PyTuple_GetItem(args, 0), *r;
    struct hot_thread *t;

    (void)self;
    if (!module || !h->started)
        goto out;
    t = thread_of(h, true);
    if (t && t->depth == 0) { /* a top-level call: torchtrace.py names the tree, counts steps */
        r = api->PyObject_CallFunctionObjArgs(h->top_level, module, NULL);
        if (r)
            api->Py_DecRef(r);
        else
            failed(h, "top_level() failed");
        t = thread_of(h, true); /* Python ran: another thread may have taken the slot */
    }
    if (!t) {
        failed(h, "too many threads run modules at once; some are not timed");
        goto out;
    }
    if (t->depth < HOT_DEPTH_MAX) {
        int32_t event = h->sampled ? mark(h) : -1; /* before the host's time: the span holds it */
        t->frames[t->depth] = (struct hot_frame){module, h->sampled ? now_ns() : 0, event};
    }
    t->depth++;
out:
    if (api->PyErr_Occurred())
        failed(h, "the forward pre-hook failed");
    return none(api);
}

static bool is_tensor(struct torch_hot *h, PyObject *v)
{
    int r = h->api->PyObject_IsInstance(v, h->tensor_type);

    if (r < 0)
        h->api->PyErr_Clear();
    return r == 1;
}

/* The tensor's grad_fn (a new reference), or NULL: it needs no gradient, or is a leaf. */
static PyObject *grad_fn_of(struct torch_hot *h, PyObject *tensor)
{
    const struct capi *api = h->api;
    PyObject *g = api->PyObject_GetAttrString(tensor, "grad_fn");

    if (!g)
        api->PyErr_Clear();
    else if (g == api->_Py_NoneStruct)
        api->Py_DecRef(g), g = NULL;
    return g;
}

/* The node that made the first tensor of @value that has one (a new reference), or NULL. */
static PyObject *first_node(struct torch_hot *h, PyObject *value)
{
    const struct capi *api = h->api;
    bool tuple = api->PyObject_IsInstance(value, api->PyTuple_Type) == 1;
    bool list = !tuple && api->PyObject_IsInstance(value, api->PyList_Type) == 1;
    PyObject *r;

    if (is_tensor(h, value))
        return grad_fn_of(h, value);
    if (tuple || list) {
        ssize_t n = tuple ? api->PyTuple_Size(value) : api->PyList_Size(value);
        for (ssize_t i = 0; i < n; i++) {
            PyObject *item = tuple ? api->PyTuple_GetItem(value, i) : api->PyList_GetItem(value, i);
            PyObject *g = item && is_tensor(h, item) ? grad_fn_of(h, item) : NULL;
            if (g)
                return g;
        }
        return NULL;
    }
    r = api->PyObject_CallFunctionObjArgs(h->first_node, value, NULL); /* a dict, ... */
    if (!r)
        failed(h, "first_node() failed");
    else if (r == api->_Py_NoneStruct)
        api->Py_DecRef(r), r = NULL;
    return r;
}

static PyObject *node_reached(PyObject *self, PyObject *args);
static struct py_method_def node_reached_def = {"probed_node_reached", node_reached,
                                                PY_METH_VARARGS, NULL};

/* Puts the pre-hook on @node once this pass (index in nodes), or finds it there; -1 fails. */
static int64_t node_index(struct torch_hot *h, PyObject *node)
{
    const struct capi *api = h->api;
    PyObject *key = api->PyLong_FromVoidPtr(node), *found, *index = NULL, *cb_key = NULL;
    PyObject *cb = NULL, *reg = NULL, *handle = NULL;
    int64_t i = -1;

    found = key ? api->PyDict_GetItem(h->node_ids, key) : NULL;
    if (found) {
        i = api->PyLong_AsLongLong(found);
        goto out;
    }
    if (!key || grow(&h->nodes, &h->cap_nodes, h->n_nodes + 1, sizeof(*h->nodes)) < 0)
        goto out;
    index = api->PyLong_FromLongLong(h->n_nodes);
    cb_key =
        api->PyLong_FromLongLong((long long)(h->generation & GENERATION_MASK) << 32 | h->n_nodes);
    cb = cb_key ? api->PyCFunction_NewEx(&node_reached_def, cb_key, NULL) : NULL;
    reg = api->PyObject_GetAttrString(node, "register_prehook");
    if (!index || !cb || !reg || api->PyDict_SetItem(h->node_ids, key, index) < 0)
        goto out;
    i = h->n_nodes++;
    api->Py_IncRef(node);
    h->nodes[i] = (struct hot_node){node, -1, -1};
    handle = api->PyObject_CallFunctionObjArgs(reg, cb, NULL);
    if (!handle)
        i = -1; /* the node stays listed, with no hook: harmless */
out:
    if (i < 0)
        failed(h, "hooking an autograd node failed");
    for (PyObject **p = (PyObject *[]){key, index, cb_key, cb, reg, handle}, **e = p + 6; p < e;
         p++)
        if (*p)
            api->Py_DecRef(*p);
    return i;
}

static void add_event(struct torch_hot *h, PyObject *node, int64_t span, bool is_end)
{
    int64_t n = node_index(h, node), e = h->n_events;

    if (n < 0)
        return;
    if (grow(&h->events, &h->cap_events, e + 1, sizeof(*h->events)) < 0) {
        failed(h, "out of memory");
        return;
    }
    h->events[e] = (struct hot_event){span, -1, is_end};
    h->n_events++;
    if (h->nodes[n].last_event >= 0)
        h->events[h->nodes[n].last_event].next = e;
    else
        h->nodes[n].first_event = e;
    h->nodes[n].last_event = e;
}

/* A module's backward begins when the node that made its output is about to run, and ends when
 * the node that made its input is (@in NULL: when the backward pass ends). */
static void hook_backward(struct torch_hot *h, const char *name, PyObject *out, PyObject *in)
{
    int64_t s = h->n_spans;

    if (grow(&h->spans, &h->cap_spans, s + 1, sizeof(*h->spans)) < 0) {
        failed(h, "out of memory");
        return;
    }
    h->spans[s] = (struct hot_span){h->step, name, 0, in == NULL, -1};
    h->n_spans++;
    add_event(h, out, s, false);
    if (in)
        add_event(h, in, s, true);
}

static PyObject *forward_post(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    const struct capi *api = h->api;
    int64_t end = now_ns(), start, id;
    int32_t event;
    PyObject *module = api->PyTuple_GetItem(args, 0), *inputs = api->PyTuple_GetItem(args, 1);
    PyObject *output = api->PyTuple_GetItem(args, 2), *grad, *out, *in;
    struct hot_thread *t = h->started && output ? thread_of(h, false) : NULL;

    (void)self;
    if (!t || t->depth == 0)
        goto out; /* its pre-hook ran before tracing began */
    if (t->depth > HOT_DEPTH_MAX) {
        t->depth--;
        goto out;
    }
    if (t->frames[t->depth - 1].module != module)
        goto out; /* likewise, for an inner module */
    start = t->frames[--t->depth].start_ns;
    event = t->frames[t->depth].event;
    if (!start || (id = module_name(h, module)) < 0) {
        cudaev_release(h->marks, event);
        goto out;
    }
    add_record(h, h->step, h->names[id], STAGE_FORWARD, start, end, event,
               event >= 0 ? mark(h) : -1);
    /* A module's backward is timed when the fastest of its first HOT_DECIDE_CALLS forwards
     * took backward_min_ns: the autograd pre-hooks cost a few microseconds a module (torch's,
     * mostly), too much for a small one, whose backward is inside its parent's. The fastest,
     * not one: a first call, or one preempted, is slow for other reasons. Decided once: the
     * rows do not flicker. A top-level module's always is timed: once a step, it times the
     * backward pass (whose end is where the optimizer's stage begins on a torch without
     * optimizer hooks). */
    if (t->depth > 0 && h->backward_min_ns > 0) {
        struct hot_name_stat *ns = &h->name_stats[id];
        if (ns->calls < HOT_DECIDE_CALLS) {
            if (ns->calls == 0 || end - start < ns->min_ns)
                ns->min_ns = end - start;
            if (++ns->calls == HOT_DECIDE_CALLS)
                ns->timed = ns->min_ns >= h->backward_min_ns;
        }
        if (!ns->timed)
            goto out;
    }
    grad = api->PyObject_CallFunctionObjArgs(h->grad_enabled, NULL);
    if (grad == api->_Py_TrueStruct && (out = first_node(h, output)) != NULL) {
        in = first_node(h, inputs);
        hook_backward(h, h->names[id], out, in);
        api->Py_DecRef(out);
        if (in)
            api->Py_DecRef(in);
    }
    if (grad)
        api->Py_DecRef(grad);
out:
    if (api->PyErr_Occurred())
        failed(h, "the forward hook failed");
    return none(api);
}

/* ---- backward ---- */

static void backward_end(struct torch_hot *h, int64_t s, int64_t now)
{
    struct hot_span *span = &h->spans[s];

    if (span->start_ns > 0) {
        add_record(h, span->step, span->name, STAGE_BACKWARD, span->start_ns, now, span->event,
                   span->event >= 0 ? mark(h) : -1);
        span->start_ns = -1;
        span->event = -1;
    }
}

/* Drops this pass's nodes (and the references that hold them) and spans. */
static void clear_pass(struct torch_hot *h)
{
    for (int64_t i = 0; i < h->n_nodes; i++)
        h->api->Py_DecRef(h->nodes[i].node);
    for (int64_t s = 0; s < h->n_spans; s++) /* begun, never ended: the pass was cut short */
        cudaev_release(h->marks, h->spans[s].event);
    if (h->node_ids)
        h->api->PyDict_Clear(h->node_ids);
    h->n_nodes = h->n_spans = h->n_events = 0;
    h->generation++;
}

/* Queued (once a pass) on autograd's engine: the backward pass ended. */
static PyObject *pass_end(PyObject *self, PyObject *unused)
{
    struct torch_hot *h = the_hot;
    int64_t now = now_ns();

    (void)self, (void)unused;
    if (h->started) {
        h->pass_queued = false;
        h->pass_end_ns = now;
        for (int64_t s = 0; s < h->n_spans; s++)
            if (h->spans[s].ends_with_pass)
                backward_end(h, s, now);
        clear_pass(h);
    }
    return none(h->api);
}

/* The node pre-hook: @self is (generation << 32 | node index); returns None, so the gradients go
 * on unchanged. */
static PyObject *node_reached(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    const struct capi *api = h->api;
    long long key = api->PyLong_AsLongLong(self);
    int64_t n = key & 0xffffffff, now = now_ns(), e;
    PyObject *r;

    (void)args;
    if (!h->started || !h->active || (key >> 32) != (h->generation & GENERATION_MASK) ||
        n >= h->n_nodes)
        return none(api);
    for (e = h->nodes[n].first_event; e >= 0; e = h->events[e].next) {
        int64_t s = h->events[e].span;
        if (h->events[e].is_end) {
            backward_end(h, s, now);
        } else if (h->spans[s].start_ns == 0) {
            h->spans[s].event = mark(h);
            h->spans[s].start_ns = now;
            if (!h->pass_queued) {
                h->pass_queued = true;
                r = api->PyObject_CallFunctionObjArgs(h->queue_callback, h->pass_end, NULL);
                if (r)
                    api->Py_DecRef(r);
                else
                    failed(h, "queue_callback() failed");
            }
        }
    }
    h->nodes[n].first_event = h->nodes[n].last_event = -1; /* a node runs once per pass */
    return none(api);
}

/* ---- torchtrace.py's side ---- */

static void free_names(struct torch_hot *h)
{
    for (int64_t i = 0; i < h->n_names; i++)
        free(h->names[i]);
    free(h->names);
    free(h->name_stats);
    h->names = NULL;
    h->name_stats = NULL;
    h->n_names = h->cap_names = h->cap_stats = 0;
}

/* Releases what torch_start took; the records go too. Idempotent. */
static void stop(struct torch_hot *h)
{
    const struct capi *api = h->api;
    PyObject **refs[] = {&h->ids,          &h->name_of,        &h->top_level,   &h->first_node,
                         &h->grad_enabled, &h->queue_callback, &h->tensor_type, &h->pass_end};

    clear_pass(h);
    h->started = h->active = false;
    for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++)
        if (*refs[i]) {
            api->Py_DecRef(*refs[i]);
            *refs[i] = NULL;
        }
    if (h->node_ids)
        api->Py_DecRef(h->node_ids);
    h->node_ids = NULL;
    for (int i = 0; i < h->n_threads; i++)
        free(h->threads[i].frames);
    free(h->threads);
    h->threads = NULL;
    h->n_threads = 0;
    free(h->nodes), free(h->spans), free(h->events);
    h->nodes = NULL, h->spans = NULL, h->events = NULL;
    h->cap_nodes = h->cap_spans = h->cap_events = 0;
    pthread_mutex_lock(&h->drain_lock); /* a drain formatting now still reads the names */
    pthread_mutex_lock(&h->lock);
    free(h->records);
    h->records = NULL;
    h->n_records = h->cap_records = h->dropped = 0;
    pthread_mutex_unlock(&h->lock);
    free_names(h);
    cudaev_close(h->marks); /* no record holds an event now */
    h->marks = NULL;
    h->device = false;
    pthread_mutex_unlock(&h->drain_lock);
}

static PyObject *py_raise(struct torch_hot *h, const char *what)
{
    h->api->PyErr_SetString(*h->api->PyExc_RuntimeError, what);
    return NULL;
}

/* torch_start(ids, name_of, top_level, first_node, is_grad_enabled, queue_callback, Tensor,
 *             offset_ns, max_records, backward_min_ns) */
static PyObject *torch_start(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    const struct capi *api = h->api;
    static struct py_method_def pass_end_def = {"probed_pass_end", pass_end, PY_METH_NOARGS, NULL};
    PyObject **refs[] = {&h->ids,          &h->name_of,        &h->top_level,  &h->first_node,
                         &h->grad_enabled, &h->queue_callback, &h->tensor_type};

    (void)self;
    if (h->started)
        return py_raise(h, "the torch trace is already started");
    if (api->PyTuple_Size(args) != 10)
        return py_raise(h, "torch_start() takes 10 arguments");
    for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) {
        *refs[i] = api->PyTuple_GetItem(args, (ssize_t)i);
        api->Py_IncRef(*refs[i]);
    }
    h->offset_ns = api->PyLong_AsLongLong(api->PyTuple_GetItem(args, 7));
    h->max_records = api->PyLong_AsLongLong(api->PyTuple_GetItem(args, 8));
    h->backward_min_ns = api->PyLong_AsLongLong(api->PyTuple_GetItem(args, 9));
    h->node_ids = api->PyDict_New();
    h->pass_end = api->PyCFunction_NewEx(&pass_end_def, NULL, NULL);
    h->threads = calloc(HOT_THREADS_MAX, sizeof(*h->threads));
    h->allocated_kb = h->reserved_kb = -1;
    h->mem_ns = h->pass_end_ns = h->step = h->errors = 0;
    h->last_error[0] = '\0';
    h->pass_queued = false;
    h->started = true;
    if (api->PyErr_Occurred() || !h->node_ids || !h->pass_end || !h->threads) {
        stop(h);
        return api->PyErr_Occurred() ? NULL : py_raise(h, "out of memory");
    }
    return none(api);
}

static PyObject *torch_stop(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    stop(the_hot);
    return none(the_hot->api);
}

/* The int arguments of a call, into @out; false (a Python error set) when they are not. */
static bool int_args(const struct capi *api, PyObject *args, long long *out, ssize_t n)
{
    if (api->PyTuple_Size(args) != n)
        return false;
    for (ssize_t i = 0; i < n; i++)
        out[i] = api->PyLong_AsLongLong(api->PyTuple_GetItem(args, i));
    return !api->PyErr_Occurred();
}

/* torch_step(step, sampled, allocated_kb, reserved_kb): a step begins (-1: no figure). */
static PyObject *torch_step(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    long long a[4];

    (void)self;
    if (!h->started || !int_args(h->api, args, a, 4))
        return h->api->PyErr_Occurred() ? NULL : py_raise(h, "torch_step(): bad arguments");
    h->step = a[0];
    h->sampled = a[1] != 0;
    h->allocated_kb = a[2];
    h->reserved_kb = a[3];
    h->mem_ns = now_ns();
    clear_pass(h);
    return none(h->api);
}

/* torch_flags(active, cuda) */
static PyObject *torch_flags(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    long long a[2];

    (void)self;
    if (!h->started || !int_args(h->api, args, a, 2))
        return h->api->PyErr_Occurred() ? NULL : py_raise(h, "torch_flags(): bad arguments");
    h->active = a[0] != 0;
    h->cuda = a[1] != 0;
    return none(h->api);
}

/* torch_backward_min(ns): from now on, a module's backward is timed when the fastest of its
 * first HOT_DECIDE_CALLS forwards took @ns (0: every module's). */
static PyObject *torch_backward_min(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    long long a;

    (void)self;
    if (!h->started || !int_args(h->api, args, &a, 1) || a < 0)
        return h->api->PyErr_Occurred() ? NULL : py_raise(h, "torch_backward_min(): bad arguments");
    h->backward_min_ns = a;
    return none(h->api);
}

/* torch_clear_stack(): the calling thread's forwards are over (one that raised never ran its
 * post hook). */
static PyObject *torch_clear_stack(PyObject *self, PyObject *unused)
{
    struct hot_thread *t = the_hot->started ? thread_of(the_hot, false) : NULL;

    (void)self, (void)unused;
    for (int64_t i = 0; t && i < t->depth && i < HOT_DEPTH_MAX; i++)
        cudaev_release(the_hot->marks, t->frames[i].event);
    if (t)
        t->depth = 0;
    return none(the_hot->api);
}

/* torch_device(on, stream): device time on (CUDA events on @stream, a cudaStream_t as an int;
 * the driver is found at the first call) or off. Called at each recorded step's start on the
 * training thread, where torch's current stream is the one its modules launch on. */
static PyObject *torch_device(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    long long a[2];
    char why[160];

    (void)self;
    if (!h->started || !int_args(h->api, args, a, 2))
        return h->api->PyErr_Occurred() ? NULL : py_raise(h, "torch_device(): bad arguments");
    if (a[0] && !h->marks && cudaev_open(&h->marks, why, sizeof(why)) < 0)
        return py_raise(h, why);
    h->stream = (uint64_t)a[1];
    h->device = a[0] != 0;
    return none(h->api);
}

/* torch_unmark(mark): a torch_mark() given back unused. */
static PyObject *torch_unmark(PyObject *self, PyObject *args)
{
    long long a;

    (void)self;
    if (!int_args(the_hot->api, args, &a, 1))
        return NULL;
    if (the_hot->started && a >= 0 && a < CUDAEV_MAX)
        cudaev_release(the_hot->marks, (int32_t)a);
    return none(the_hot->api);
}

/* torch_mark() -> a CUDA event recorded now (for torch_record's start), or -1. */
static PyObject *torch_mark(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return the_hot->api->PyLong_FromLongLong(the_hot->started ? mark(the_hot) : -1);
}

/* JSON text for a name: quoted, with quotes, backslashes and control characters escaped. */
static char *json_string(const char *s, size_t len)
{
    char *out = malloc(len * 6 + 3), *p = out;

    if (!out)
        return NULL;
    *p++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            *p++ = '\\', *p++ = (char)c;
        else if (c < 0x20)
            p += sprintf(p, "\\u%04x", c);
        else
            *p++ = (char)c;
    }
    *p++ = '"';
    *p = '\0';
    return out;
}

/* torch_name(id, text): names are numbered from 0, in order. */
static PyObject *torch_name(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    const struct capi *api = h->api;
    PyObject *text = api->PyTuple_GetItem(args, 1);
    ssize_t len = 0;
    const char *s = text ? api->PyUnicode_AsUTF8AndSize(text, &len) : NULL;
    long long id = api->PyLong_AsLongLong(api->PyTuple_GetItem(args, 0));
    char *json;

    (void)self;
    if (!s || api->PyErr_Occurred())
        return NULL;
    if (!h->started || id != h->n_names)
        return py_raise(h, "torch_name(): names are numbered in order");
    json = json_string(s, (size_t)len);
    if (!json || grow(&h->names, &h->cap_names, h->n_names + 1, sizeof(*h->names)) < 0 ||
        grow(&h->name_stats, &h->cap_stats, h->n_names + 1, sizeof(*h->name_stats)) < 0) {
        free(json);
        return py_raise(h, "out of memory");
    }
    h->name_stats[h->n_names] = (struct hot_name_stat){0, false, 0};
    h->names[h->n_names++] = json;
    return none(api);
}

/* torch_record(step, name id, stage 0|1|2, start_ns, end_ns, mark): a record made in Python;
 * mark: torch_mark()'s at its start, or -1. */
static PyObject *torch_record(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    long long a[6];

    (void)self;
    if (!h->started || !int_args(h->api, args, a, 6) || a[1] < 0 || a[1] >= h->n_names ||
        a[2] < STAGE_FORWARD || a[2] > STAGE_STEP || a[5] < -1 || a[5] >= CUDAEV_MAX)
        return h->api->PyErr_Occurred() ? NULL : py_raise(h, "torch_record(): bad arguments");
    add_record(h, a[0], h->names[a[1]], (enum hot_stage)a[2], a[3], a[4], (int32_t)a[5],
               a[5] >= 0 ? mark(h) : -1);
    return none(h->api);
}

/* torch_info() -> (last backward pass's end ns or 0, errors, last error or None, dropped,
 * (device events recorded, not recorded for want of one, driver errors, its last CUresult,
 * spans the GPU never reached) or None) */
static PyObject *torch_info(PyObject *self, PyObject *unused)
{
    struct torch_hot *h = the_hot;
    const struct capi *api = h->api;
    PyObject *t = api->PyTuple_New(5), *d = NULL;
    int64_t dropped;

    (void)self, (void)unused;
    pthread_mutex_lock(&h->lock);
    dropped = h->dropped;
    pthread_mutex_unlock(&h->lock);
    if (t && h->marks) {
        struct cudaev_stats st = cudaev_stats(h->marks);
        d = api->PyTuple_New(5);
        int64_t v[5] = {st.recorded, st.empty, st.errors, st.last_error, st.unresolved};
        for (int i = 0; d && i < 5; i++)
            api->PyTuple_SetItem(d, i, api->PyLong_FromLongLong(v[i]));
    }
    if (t) {
        api->PyTuple_SetItem(t, 4, d ? d : none(api));
        api->PyTuple_SetItem(t, 3, api->PyLong_FromLongLong(dropped));
        api->PyTuple_SetItem(t, 0, api->PyLong_FromLongLong(h->pass_end_ns));
        api->PyTuple_SetItem(t, 1, api->PyLong_FromLongLong(h->errors));
        api->PyTuple_SetItem(t, 2,
                             h->last_error[0] ? api->PyUnicode_FromStringAndSize(
                                                    h->last_error, (ssize_t)strlen(h->last_error))
                                              : none(api));
    }
    return t;
}

/* The records as a JSON array: [step, name, stage, ts ns, duration ns, allocated KB, reserved
 * KB, device ns]. No Python here: it runs with the GIL released. NULL when memory is short. */
static char *format_records(const struct hot_record *r, int64_t n, int64_t offset_ns)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);

    if (!f)
        return NULL;
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) {
        fprintf(f, "%s[%" PRId64 ",%s,\"%s\",%" PRId64 ",%" PRId64 ",", i ? "," : "", r[i].step,
                r[i].name, stage_names[r[i].stage], r[i].start_ns + offset_ns, r[i].duration_ns);
        if (r[i].allocated_kb < 0)
            fputs("null,", f);
        else
            fprintf(f, "%" PRId64 ",", r[i].allocated_kb);
        if (r[i].reserved_kb < 0)
            fputs("null,", f);
        else
            fprintf(f, "%" PRId64 ",", r[i].reserved_kb);
        if (r[i].device_ns < 0)
            fputs("null]", f);
        else
            fprintf(f, "%" PRId64 "]", r[i].device_ns);
    }
    fputc(']', f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* The GPU's time of @n records taken from the buffer (events resolved and given back). A
 * record whose end the GPU has not reached yet goes back to the buffer's front with those
 * after it, for a later drain: the number of records left to format. One the GPU has not
 * reached UNRESOLVED_NS after the host is stored without (counted). GIL released, drain_lock
 * held. */
#define UNRESOLVED_NS 5000000000LL
static int64_t resolve_device(struct torch_hot *h, struct hot_record *r, int64_t n)
{
    int64_t now = now_ns(), k = n;

    if (!h->marks)
        return n;
    cudaev_enter(h->marks);
    for (int64_t i = 0; i < n; i++) {
        int got;
        if (r[i].event_end < 0)
            continue;
        got = cudaev_elapsed(h->marks, r[i].event_start, r[i].event_end, &r[i].device_ns);
        if (got == 0 && now - (r[i].start_ns + r[i].duration_ns) < UNRESOLVED_NS) {
            k = i;
            break;
        }
        if (got == 0)
            cudaev_count_unresolved(h->marks);
        if (got <= 0)
            r[i].device_ns = -1;
        cudaev_release(h->marks, r[i].event_start);
        cudaev_release(h->marks, r[i].event_end);
        r[i].event_start = r[i].event_end = -1;
    }
    cudaev_leave(h->marks);
    if (k == n)
        return n;
    pthread_mutex_lock(&h->lock); /* back in front, in order, before what came meanwhile */
    if (grow(&h->records, &h->cap_records, h->n_records + (n - k), sizeof(*h->records)) == 0) {
        memmove(h->records + (n - k), h->records, (size_t)h->n_records * sizeof(*h->records));
        memcpy(h->records, r + k, (size_t)(n - k) * sizeof(*r));
        h->n_records += n - k;
    } else {
        h->dropped += n - k;
        for (int64_t i = k; i < n; i++) {
            cudaev_release(h->marks, r[i].event_start);
            cudaev_release(h->marks, r[i].event_end);
        }
    }
    pthread_mutex_unlock(&h->lock);
    return k;
}

/* torch_drain(max) -> (JSON array of up to max records, how many, how many are left, dropped).
 * The records are taken under the buffer's lock and formatted with the GIL released. */
static PyObject *torch_drain(PyObject *self, PyObject *args)
{
    struct torch_hot *h = the_hot;
    const struct capi *api = h->api;
    long long max;
    struct hot_record *taken = NULL;
    int64_t n = 0, left = 0, dropped = 0;
    char *text = NULL;
    PyThreadState *ts;
    PyObject *t = NULL;

    (void)self;
    if (!h->started || !int_args(api, args, &max, 1))
        return api->PyErr_Occurred() ? NULL : py_raise(h, "torch_drain(): bad arguments");
    pthread_mutex_lock(&h->drain_lock);
    pthread_mutex_lock(&h->lock);
    n = h->n_records < max ? h->n_records : max;
    taken = n ? malloc((size_t)n * sizeof(*taken)) : NULL;
    if (taken) {
        memcpy(taken, h->records, (size_t)n * sizeof(*taken));
        memmove(h->records, h->records + n, (size_t)(h->n_records - n) * sizeof(*taken));
        h->n_records -= n;
    } else {
        n = 0;
    }
    left = h->n_records;
    dropped = h->dropped;
    if (left == 0 && h->cap_records > 65536) { /* a burst's buffer is not kept for good */
        free(h->records);
        h->records = NULL;
        h->cap_records = 0;
    }
    pthread_mutex_unlock(&h->lock);
    ts = api->PyEval_SaveThread();
    n = resolve_device(h, taken, n); /* those the GPU has not reached wait: not "left" */
    text = format_records(taken, n, h->offset_ns);
    pthread_mutex_unlock(&h->drain_lock); /* before the GIL: torch_stop holds it, waiting */
    api->PyEval_RestoreThread(ts);
    free(taken);
    if (!text)
        return py_raise(h, "out of memory formatting the records");
    t = api->PyTuple_New(4);
    if (t) {
        api->PyTuple_SetItem(t, 0, api->PyUnicode_FromStringAndSize(text, (ssize_t)strlen(text)));
        api->PyTuple_SetItem(t, 1, api->PyLong_FromLongLong(n));
        api->PyTuple_SetItem(t, 2, api->PyLong_FromLongLong(left));
        api->PyTuple_SetItem(t, 3, api->PyLong_FromLongLong(dropped));
    }
    free(text);
    return t;
}

/* fork() while the stub's thread drains must not leave the child a lock held forever: a
 * DataLoader worker runs modules too (torchvision's transforms are modules). The child has no
 * stub thread, so no daemon drains it: its trace stays inert. */
static void before_fork(void)
{
    pthread_mutex_lock(&the_hot->drain_lock);
    pthread_mutex_lock(&the_hot->lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&the_hot->lock);
    pthread_mutex_unlock(&the_hot->drain_lock);
}

static void after_fork_child(void)
{
    after_fork_parent();
    the_hot->started = false;
}

int torch_hot_register(struct torch_hot *hot, const struct capi *api)
{
    static struct py_method_def defs[] = {
        {"torch_forward_pre", forward_pre, PY_METH_VARARGS, NULL},
        {"torch_forward_post", forward_post, PY_METH_VARARGS, NULL},
        {"torch_start", torch_start, PY_METH_VARARGS, NULL},
        {"torch_stop", torch_stop, PY_METH_NOARGS, NULL},
        {"torch_step", torch_step, PY_METH_VARARGS, NULL},
        {"torch_flags", torch_flags, PY_METH_VARARGS, NULL},
        {"torch_clear_stack", torch_clear_stack, PY_METH_NOARGS, NULL},
        {"torch_backward_min", torch_backward_min, PY_METH_VARARGS, NULL},
        {"torch_name", torch_name, PY_METH_VARARGS, NULL},
        {"torch_record", torch_record, PY_METH_VARARGS, NULL},
        {"torch_info", torch_info, PY_METH_NOARGS, NULL},
        {"torch_device", torch_device, PY_METH_VARARGS, NULL},
        {"torch_mark", torch_mark, PY_METH_NOARGS, NULL},
        {"torch_unmark", torch_unmark, PY_METH_VARARGS, NULL},
        {"torch_drain", torch_drain, PY_METH_VARARGS, NULL},
    };
    PyObject *mod = api->PyModule_New("_probed_stub");
    int ret = mod ? 0 : -1;

    hot->api = api;
    pthread_mutex_init(&hot->lock, NULL);
    pthread_mutex_init(&hot->drain_lock, NULL);
    the_hot = hot;
    if (pthread_atfork(before_fork, after_fork_parent, after_fork_child) != 0)
        return -1;
    for (size_t i = 0; ret == 0 && i < sizeof(defs) / sizeof(defs[0]); i++) {
        PyObject *fn = api->PyCFunction_NewEx(&defs[i], NULL, NULL);
        ret = fn && api->PyObject_SetAttrString(mod, defs[i].name, fn) == 0 ? 0 : -1;
        if (fn)
            api->Py_DecRef(fn);
    }
    if (ret == 0) { /* torchtrace.py refuses a stub whose torch_* functions are not its own */
        PyObject *abi = api->PyLong_FromLongLong(TORCH_HOT_ABI);
        ret = abi && api->PyObject_SetAttrString(mod, "TORCH_ABI", abi) == 0 ? 0 : -1;
        if (abi)
            api->Py_DecRef(abi);
    }
    if (ret == 0)
        ret = api->PyDict_SetItemString(api->PyImport_GetModuleDict(), "_probed_stub", mod);
    if (mod)
        api->Py_DecRef(mod);
    return ret;
}
