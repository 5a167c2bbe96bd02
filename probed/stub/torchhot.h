/*
 * torchhot.h - the torch trace's hot path, in C, inside the target.
 *
 * torchtrace.py (run in the target by the daemon) keeps what happens once a step: steps,
 * module names, the optimizer, variables. What happens once per module call is here, where it
 * costs a fraction of the same Python (bench/torch.py): torch's global forward pre/post hooks,
 * the autograd node pre-hooks that time each module's backward, and the buffer of records.
 * torch_hot_register() publishes them as the module `_probed_stub` (torch_* functions).
 *
 * Threads: the hooks run on the training thread (or autograd's) with the GIL held; the daemon
 * drains on the stub's thread, which formats the records with the GIL released, so that a
 * drain never holds the training thread up: the buffer has a mutex of its own.
 * Memory: the trace's state lives in the stub's one object; buffers grow as needed up to the
 * record limit torchtrace.py gives, and torch_stop frees them.
 * Failure: a hook never raises into the user's code. What fails is counted, with its reason,
 * and torchtrace.py reports it in the trace's state.
 */
#ifndef PROBED_STUB_TORCHHOT_H
#define PROBED_STUB_TORCHHOT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "capi.h"

/* The torch_* functions' version, published as _probed_stub.TORCH_ABI: 3 added device time
 * (torch_device, torch_mark, a record's device ns, torch_info's device counters); 2 took
 * read_cuda out of torch_start and added backward_min_ns (1: no TORCH_ABI). A process keeps the
 * stub it was first given for its life; torchtrace.py asks for a restart when it finds another
 * version. */
#define TORCH_HOT_ABI 3

struct cudaev;
struct hot_thread;
struct hot_name_stat {
    uint8_t calls;  /* forwards seen, up to the number that decides */
    bool timed;     /* its backward is timed */
    int64_t min_ns; /* the fastest of those forwards */
};
struct hot_node;
struct hot_span;
struct hot_event;
struct hot_record;

struct torch_hot {
    const struct capi *api;
    bool started, active, sampled, cuda;
    int64_t step;
    /* device time (torch_device): CUDA events around each timed module on the step's stream */
    bool device;
    uint64_t stream;      /* torch's current stream on the training thread at the step's start */
    struct cudaev *marks; /* the events: opened at the first torch_device, closed by torch_stop */
    /* torchtrace.py's side, held from torch_start to torch_stop: */
    PyObject *ids;        /* dict id(module) -> name id; a module's entry goes when it dies */
    PyObject *name_of;    /* name_of(module) -> name id, for a module not in ids */
    PyObject *top_level;  /* top_level(module): a forward begins on an empty stack */
    PyObject *first_node; /* first_node(value) -> node or None, for outputs not a tensor,
                             tuple or list */
    PyObject *grad_enabled, *queue_callback, *tensor_type;
    PyObject *node_ids; /* dict id(node) -> index in nodes, this backward pass */
    PyObject *pass_end; /* torch_pass_end, bound to this object: queued once per pass */
    char **names;       /* name id -> text (JSON-ready), owned */
    struct hot_name_stat *name_stats; /* name id -> whether its backward is timed (torchhot.c) */
    int64_t n_names, cap_names, cap_stats;
    int64_t backward_min_ns; /* see name_stats; 0: every module's backward is timed */
    /* forward stacks, per thread */
    struct hot_thread *threads;
    int n_threads;
    /* backward: the nodes hooked this pass, the spans (module backwards) and their events */
    struct hot_node *nodes;
    struct hot_span *spans;
    struct hot_event *events;
    int64_t n_nodes, cap_nodes, n_spans, cap_spans, n_events, cap_events;
    uint32_t generation; /* a node hook from an earlier pass finds it changed and does nothing */
    bool pass_queued;
    int64_t pass_end_ns; /* when the last backward pass ended (CLOCK_MONOTONIC), or 0 */
    /* memory: set at step boundaries (torchtrace.py reads it: RSS, or CUDA's allocator) */
    int64_t mem_ns, allocated_kb, reserved_kb; /* -1: no figure */
    int64_t offset_ns;                         /* CLOCK_REALTIME - CLOCK_MONOTONIC */
    int64_t errors;
    char last_error[160];
    /* the records, shared with the drain */
    pthread_mutex_t lock;       /* records, n_records, cap_records, dropped */
    pthread_mutex_t drain_lock; /* a drain's formatting vs torch_stop freeing the names */
    struct hot_record *records;
    int64_t n_records, cap_records, max_records, dropped;
};

/* Creates the module `_probed_stub` in sys.modules, with the torch_* functions bound to @hot.
 * GIL held. -1 with a Python error set when it cannot. */
int torch_hot_register(struct torch_hot *hot, const struct capi *api);

#endif
