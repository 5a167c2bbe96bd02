/* native.c - see native.h. */
#define _GNU_SOURCE
#include "native/native.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "native/bpfstack.h"
#include "native/perfstack.h"

#define SLOTS 1024        /* thread stacks of one tick, by tid (open addressing) */
#define NAME_SLOTS 8192   /* direct-mapped: pc -> frame id */
#define PY_COPIES 64      /* threads per tick whose Python frame copies are kept (eBPF) */
#define WAITING_SLOTS 512 /* waiting threads' stacks kept, by tid (direct-mapped) */
#define TIDS_MAX 1024     /* the process's threads a tick looks at for waiting ones */

/* One thread's Python frames as the eBPF sampler copied them. */
struct py_copy {
    struct pyf_frames_copy c; /* points into the arrays below */
    uint64_t raddrs[NATIVE_PY_FRAMES];
    uint8_t bytes[NATIVE_PY_FRAMES * NATIVE_PY_FRAME_BYTES];
};

struct name_slot {
    uint64_t pc;
    int64_t id;
    bool eval_loop;
};

struct native {
    pid_t pid;
    struct perfstack *ps; /* one of ps and bs samples */
    struct bpfstack *bs;
    struct errbuf ebpf_error;
    struct pyf_native *nat;
    struct native_stats stats;
    bool maps_stale; /* a pc in no known object, or a copy not unwound past its first frame */
    uint64_t maps_reread_ns; /* when the mappings were last read again */
    /* this tick's stacks: a table by tid, and the order they were filled in */
    struct native_stack *slots;
    uint16_t used[SLOTS];
    size_t n_used, next_unclaimed;
    struct py_copy *py_copies; /* PY_COPIES, handed out in this tick's order */
    size_t n_py_copies;
    uint64_t kernel_lost; /* the eBPF sampler's lost count when last read */
    /* where waiting threads wait, each with the schedstat it was read at (allocated at the
     * first one) */
    struct waiting {
        uint64_t sched[3];
        struct native_stack stack;
    } * waiting;
    pid_t *tids;         /* the process's threads at the last refresh, ascending (TIDS_MAX) */
    bool *tid_is_python; /* tids[i] has Python state, marked at this tick's first look */
    size_t n_tids, next_tid;
    bool python_marked;
    struct name_slot names[NAME_SLOTS];
};

/* The eBPF sampler, where it loads; ebpf_error says why not. */
static int open_ebpf(struct native *n, uint32_t rate_hz, const struct pyf_chain *chain)
{
    n->py_copies = calloc(PY_COPIES, sizeof(*n->py_copies));
    if (!n->py_copies) {
        errbuf_set(&n->ebpf_error, 0, "pid %d: out of memory", (int)n->pid);
        return -ENOMEM;
    }
    return bpfstack_open(n->pid, rate_hz, chain, &n->bs, &n->ebpf_error);
}

/* The kernel's rate: the target's, up to CONFIG_NATIVE_RATE_MAX_HZ (a faster tick merges
 * the latest stack; the API refuses more with --native, a default rate may be more). */
static uint32_t kernel_rate(uint32_t rate_hz)
{
    return rate_hz < CONFIG_NATIVE_RATE_MAX_HZ ? rate_hz : CONFIG_NATIVE_RATE_MAX_HZ;
}

int native_open(pid_t pid, uint32_t rate_hz, const struct pyf_chain *chain,
                enum native_backend backend, struct pyf_symcache *symbols, struct native **ret,
                struct errbuf *err)
{
    struct native *n = calloc(1, sizeof(*n));
    struct pyf_err e;
    int r;

    if (!n || !(n->slots = calloc(SLOTS, sizeof(*n->slots)))) {
        free(n);
        errbuf_set(err, 0, "pid %d: out of memory for native stacks", (int)pid);
        return -ENOMEM;
    }
    n->pid = pid;
    r = pyf_native_open(pid, symbols, &n->nat, &e);
    if (r < 0) {
        errbuf_set(err, 0, "%s", e.msg);
        native_free(n);
        return r;
    }
    /* every object's CFI and symbols now: the first ticks would otherwise take long enough
     * to let the rings overflow */
    pyf_native__prepare(n->nat);
    rate_hz = kernel_rate(rate_hz);
    if (backend == NATIVE_ANY && chain && open_ebpf(n, rate_hz, chain) == 0) {
        *ret = n;
        return 0;
    }
    r = perfstack_open(pid, rate_hz, NATIVE_STACK_BYTES, NATIVE_RING_PAGES, &n->ps, err);
    if (r < 0) {
        native_free(n);
        return r;
    }
    *ret = n;
    return 0;
}

void native_free(struct native *n)
{
    if (!n)
        return;
    perfstack_free(n->ps);
    bpfstack_free(n->bs);
    pyf_native_free(n->nat);
    free(n->slots);
    free(n->py_copies);
    free(n->waiting);
    free(n->tids);
    free(n->tid_is_python);
    free(n);
}

/* The slot of @tid in this tick's table; NULL when it has none. */
static struct native_stack *find_slot(struct native *n, pid_t tid)
{
    size_t i = (size_t)tid % SLOTS;

    for (size_t probes = 0; probes < SLOTS; probes++, i = (i + 1) % SLOTS) {
        if (n->slots[i].tid == 0)
            return NULL; /* one slot is always kept free, so a search ends */
        if (n->slots[i].tid == tid)
            return &n->slots[i];
    }
    return NULL;
}

/* The slot of @tid in this tick's table: found, or claimed (NULL when full). */
static struct native_stack *slot_of(struct native *n, pid_t tid)
{
    size_t i = (size_t)tid % SLOTS;

    for (size_t probes = 0; probes < SLOTS; probes++, i = (i + 1) % SLOTS) {
        struct native_stack *s = &n->slots[i];
        if (s->tid == tid)
            return s;
        if (s->tid == 0) {
            if (n->n_used == SLOTS - 1)
                return NULL; /* keep one free: a search for a tid not in it must end */
            s->tid = tid;
            n->used[n->n_used++] = (uint16_t)i;
            return s;
        }
    }
    return NULL;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A sample out of a ring: unwound now, while its copy is at hand; a newer one of the same
 * thread replaces it (the tick records one stack per thread). */
static struct native_stack *unwind_sample(struct native *n, const struct pyf_stack_copy *copy,
                                          uint64_t time_ns)
{
    struct native_stack *s = slot_of(n, copy->tid);
    uint64_t t0 = now_ns();
    bool truncated;
    struct pyf_err e;

    n->stats.samples++;
    if (!s)
        return NULL;
    n->stats.superseded += s->n_pcs > 0;
    s->mono_ns = (int64_t)time_ns;
    if (pyf_native__unwind_copy(n->nat, copy, s->pcs, NATIVE_DEPTH_MAX, &s->n_pcs, &truncated, &e) <
        0)
        s->n_pcs = 0; /* a copy libdw cannot start from: the sample is dropped */
    /* in a library loaded since the mappings were read, in a gap libdw counted as another's?
     * (a pc in no object at all is seen when it is named: native__name) */
    if (s->n_pcs < 2)
        n->maps_stale = true;
    n->stats.unwind_ns += now_ns() - t0;
    return s;
}

static void on_perf_sample(void *ctx, const struct pyf_stack_copy *copy, uint64_t time_ns)
{
    unwind_sample(ctx, copy, time_ns);
}

/* The slot's copy of its Python frames: the one it had (a superseded sample's), or a new one. */
static struct py_copy *py_copy_of(struct native *n, const struct native_stack *s)
{
    for (size_t i = 0; i < n->n_py_copies; i++)
        if (s->py == &n->py_copies[i].c)
            return &n->py_copies[i];
    return n->n_py_copies < PY_COPIES ? &n->py_copies[n->n_py_copies++] : NULL;
}

/* An eBPF sample: the native stack as perf's, and the Python frames of the same instant kept
 * until the sampler merges them. */
static void on_bpf_sample(void *ctx, const struct pyf_stack_copy *copy, uint64_t time_ns,
                          const struct pyf_frames_copy *py)
{
    struct native *n = ctx;
    struct native_stack *s = unwind_sample(n, copy, time_ns);
    struct py_copy *pc = NULL;

    if (!s)
        return;
    if (py && py->n <= NATIVE_PY_FRAMES && py->stride <= NATIVE_PY_FRAME_BYTES)
        pc = py_copy_of(n, s);
    s->py = NULL;
    if (!pc)
        return;
    memcpy(pc->raddrs, py->raddrs, py->n * sizeof(pc->raddrs[0]));
    for (size_t i = 0; i < py->n; i++)
        memcpy(pc->bytes + i * NATIVE_PY_FRAME_BYTES, py->bytes + i * py->stride, py->stride);
    pc->c = (struct pyf_frames_copy){
        .raddrs = pc->raddrs, .bytes = pc->bytes, .stride = NATIVE_PY_FRAME_BYTES, .n = py->n};
    s->py = &pc->c;
}

/* Empties the kernel's buffers into this tick's stacks. */
static void drain(struct native *n)
{
    uint64_t lost = 0;

    if (n->bs) {
        bpfstack__drain(n->bs, on_bpf_sample, n);
        return;
    }
    perfstack__drain(n->ps, on_perf_sample, n, &lost);
    n->stats.lost += lost;
}

/* Follows the process's threads; with eBPF, also reads the kernel's counters (two syscalls:
 * here, a few times a second, rather than at every tick). */
static int refresh(struct native *n, struct errbuf *err)
{
    if (n->bs) {
        struct bpfstack_stats bst;
        bpfstack__stats(n->bs, &bst);
        n->stats.lost += bst.lost - n->kernel_lost;
        n->kernel_lost = bst.lost;
        n->stats.bpf_run_ns = bst.run_ns;
        n->stats.bpf_runs = bst.run_cnt;
        return bpfstack__refresh(n->bs, err);
    }
    return perfstack__refresh(n->ps, err);
}

/* The process's threads, for those that wait without Python state (native__next_waiting). */
static int tid_cmp(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

    return (x > y) - (x < y);
}

static void list_threads(struct native *n)
{
    struct dirent *e;
    char path[64];
    DIR *dir;

    if (!n->tids && !(n->tids = calloc(TIDS_MAX, sizeof(*n->tids))))
        return;
    if (!n->tid_is_python && !(n->tid_is_python = calloc(TIDS_MAX, sizeof(bool))))
        return;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)n->pid);
    if (!(dir = opendir(path)))
        return;
    n->n_tids = 0;
    while ((e = readdir(dir)) != NULL && n->n_tids < TIDS_MAX) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0)
            n->tids[n->n_tids++] = tid;
    }
    closedir(dir);
    qsort(n->tids, n->n_tids, sizeof(*n->tids), tid_cmp); /* for mark_python's searches */
}

void native__collect(struct native *n, bool refresh_threads)
{
    struct errbuf err;

    for (size_t i = 0; i < n->n_used; i++) /* the previous tick's table goes */
        n->slots[n->used[i]] = (struct native_stack){0};
    n->n_used = n->next_unclaimed = n->n_py_copies = n->next_tid = 0;
    n->python_marked = false;
    drain(n);
    if (!refresh_threads)
        return;
    list_threads(n);
    refresh(n, &err); /* fails only once the process is gone */
    /* at most once a second: JIT code stays in no object however often they are read */
    /* debug files fetched since (pyf_symcache__fetch_debuginfo) name what had no name */
    if ((n->maps_stale || pyf_native__stale(n->nat)) &&
        now_ns() - n->maps_reread_ns > 1000000000u) {
        struct pyf_err e;
        if (pyf_native__reread_maps(n->nat, &e) == 0) {
            n->stats.maps_reread++;
            memset(n->names, 0, sizeof(n->names)); /* names given as [anon] may have files now */
        }
        n->maps_stale = false;
        n->maps_reread_ns = now_ns();
    }
}

struct native_stack *native__take(struct native *n, pid_t tid)
{
    struct native_stack *s = find_slot(n, tid);

    if (!s || s->taken || s->n_pcs == 0)
        return NULL;
    s->taken = true;
    return s;
}

struct native_stack *native__waiting(struct native *n, pid_t tid, const uint64_t sched[3])
{
    struct waiting *w;
    struct pyf_err e;

    if (!sched[2] || (!n->waiting && !(n->waiting = calloc(WAITING_SLOTS, sizeof(*n->waiting)))))
        return NULL; /* no schedstat: no proof that a stack read earlier still holds */
    w = &n->waiting[(size_t)tid % WAITING_SLOTS];
    if (w->stack.tid != tid || memcmp(w->sched, sched, sizeof(w->sched)) != 0) {
        uint64_t t0 = now_ns();
        n->stats.waiting_reads++;
        w->stack = (struct native_stack){.tid = tid, .mono_ns = (int64_t)t0};
        if (pyf_native__unwind_blocked(n->nat, tid, w->stack.pcs, NATIVE_DEPTH_MAX, &w->stack.n_pcs,
                                       w->sched, &e) < 0)
            w->stack.n_pcs = 0;
        n->stats.unwind_ns += now_ns() - t0;
        /* read since the tick's look: the same wait only if schedstat still says so */
        if (memcmp(w->sched, sched, sizeof(w->sched)) != 0)
            w->stack.n_pcs = 0;
        if (w->stack.n_pcs == 0)
            w->stack.tid = 0; /* read again at the next tick */
    }
    if (w->stack.tid != tid || w->stack.n_pcs == 0) {
        n->stats.waiting_unread++;
        return NULL;
    }
    return &w->stack;
}

/* Marks which of the listed threads are @py's: a binary search each, the list being sorted. */
static void mark_python(struct native *n, const struct pyf_thread *py, size_t n_py)
{
    n->python_marked = true;
    if (n->n_tids == 0)
        return;
    memset(n->tid_is_python, 0, n->n_tids * sizeof(*n->tid_is_python));
    for (size_t i = 0; i < n_py; i++) {
        const pid_t *at = bsearch(&py[i].tid, n->tids, n->n_tids, sizeof(*n->tids), tid_cmp);
        if (at)
            n->tid_is_python[at - n->tids] = true;
    }
}

struct native_stack *native__next_waiting(struct native *n, struct pyf_target *pyf,
                                          const struct pyf_thread *py, size_t n_py)
{
    if (!n->python_marked)
        mark_python(n, py, n_py);
    while (n->next_tid < n->n_tids) {
        size_t k = n->next_tid++;
        pid_t tid = n->tids[k];
        const struct native_stack *sampled = find_slot(n, tid);
        const struct waiting *w;
        uint64_t sched[3];

        if (n->tid_is_python[k] || (sampled && sampled->n_pcs > 0))
            continue; /* Python's, or the kernel saw it on CPU this tick */
        w = n->waiting ? &n->waiting[(size_t)tid % WAITING_SLOTS] : NULL;
        /* waiting: its stack, read once per wait (native__waiting() keeps it while schedstat
         * stays unmoved); running or gone: skipped, unless schedstat is still that of the wait
         * read before (it has not run since: runnable, not yet back on a CPU) */
        if (pyf_target__thread_running(pyf, tid, sched) != 0 &&
            !(w && w->stack.tid == tid && memcmp(w->sched, sched, sizeof(sched)) == 0))
            continue;
        struct native_stack *s = native__waiting(n, tid, sched);
        if (s)
            return s;
    }
    return NULL;
}

struct native_stack *native__next_unclaimed(struct native *n)
{
    while (n->next_unclaimed < n->n_used) {
        struct native_stack *s = &n->slots[n->used[n->next_unclaimed++]];
        if (!s->taken && s->n_pcs) {
            s->taken = true;
            return s;
        }
    }
    return NULL;
}

bool native__cached(struct native *n, uint64_t pc, int64_t *ret_id, bool *ret_eval_loop)
{
    const struct name_slot *s = &n->names[(pc >> 1) % NAME_SLOTS];

    n->stats.name_lookups++;
    if (s->id == 0 || s->pc != pc)
        return false;
    n->stats.name_hits++;
    *ret_id = s->id;
    *ret_eval_loop = s->eval_loop;
    return true;
}

void native__remember(struct native *n, uint64_t pc, int64_t id, bool eval_loop)
{
    n->names[(pc >> 1) % NAME_SLOTS] = (struct name_slot){pc, id, eval_loop};
}

void native__name(struct native *n, uint64_t pc, bool innermost, struct pyf_native_frame *ret)
{
    pyf_native__symbol(n->nat, pc, innermost, ret);
    if (!ret->object) /* in no object known: a library loaded since? (or JIT code) */
        n->maps_stale = true;
}

void native__set_rate(struct native *n, uint32_t rate_hz)
{
    rate_hz = kernel_rate(rate_hz);
    if (n->bs) {
        bpfstack__set_rate(n->bs, rate_hz);
        return;
    }
    perfstack__set_rate(n->ps, rate_hz);
}

void native__track(struct native *n, const struct pyf_thread *threads, size_t n_threads)
{
    if (n->bs)
        bpfstack__track(n->bs, threads, n_threads);
}

const char *native__backend(const struct native *n)
{
    return n->bs ? "ebpf" : "perf";
}

const char *native__ebpf_error(const struct native *n)
{
    return n->bs ? "" : n->ebpf_error.msg;
}

struct native_stats *native__stats(struct native *n)
{
    return &n->stats;
}
