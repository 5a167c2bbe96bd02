/* targets.c - see targets.h. */
#define _GNU_SOURCE
#include "sample/targets.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"

int targets_new(struct outbox *ob, int64_t next_id, struct targets **ret)
{
    struct targets *reg = calloc(1, sizeof(*reg));

    if (!reg || pyf_symcache_new(&reg->symbols) < 0) {
        free(reg);
        return -ENOMEM;
    }
    reg->ob = ob;
    reg->next_id = next_id;
    pthread_mutex_init(&reg->lock, NULL);
    *ret = reg;
    return 0;
}

void targets_free(struct targets *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n; i++)
        target_free(reg->list[i]);
    pyf_symcache_free(reg->symbols); /* after every target that used it */
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}

void targets__lock(struct targets *reg)
{
    atomic_fetch_add(&reg->lock_waiters, 1);
    pthread_mutex_lock(&reg->lock);
    atomic_fetch_sub(&reg->lock_waiters, 1);
}

void targets__unlock(struct targets *reg)
{
    pthread_mutex_unlock(&reg->lock);
}

/* A futex of our own rather than a condition variable: glibc's takes the mutex back marked
 * contended, so the unlock after every tick made a FUTEX_WAKE syscall that woke nobody. Here
 * a tick costs the one timed wait. A wake between reading the word and the wait changes the
 * word, and the wait returns at once. */
void targets__sleep_until(struct targets *reg, int64_t when_ns)
{
    struct timespec ts = {.tv_sec = when_ns / 1000000000LL, .tv_nsec = when_ns % 1000000000LL};
    uint32_t seq = atomic_load(&reg->wake_seq);

    pthread_mutex_unlock(&reg->lock);
    syscall(SYS_futex, &reg->wake_seq, FUTEX_WAIT_BITSET_PRIVATE, seq, &ts, NULL,
            FUTEX_BITSET_MATCH_ANY); /* absolute, on CLOCK_MONOTONIC */
    pthread_mutex_lock(&reg->lock);
}

void targets__wake(struct targets *reg)
{
    atomic_fetch_add(&reg->wake_seq, 1);
    syscall(SYS_futex, &reg->wake_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Without this, targets due at the same moment are sampled back to back under the lock for
 * milliseconds, and a mutex is not fair. */
void targets__let_others_in(struct targets *reg)
{
    if (atomic_load(&reg->lock_waiters) == 0)
        return;
    pthread_mutex_unlock(&reg->lock);
    while (atomic_load(&reg->lock_waiters) > 0)
        sched_yield();
    pthread_mutex_lock(&reg->lock);
}

void targets__end(struct targets *reg, struct target *t, enum target_state state,
                  const char *reason)
{
    struct ob_half *h = outbox__lock(reg->ob);

    t->ended_ns = real_ns();
    ob_half__end(h, t->id, t->ended_ns, reason);
    outbox__unlock(reg->ob);
    t->state = state;
    snprintf(t->end_reason, sizeof(t->end_reason), "%s", reason);
    target_release(t);
}

static bool selected(const struct target *t, const struct targets_filter *f)
{
    return (f->all_users || t->uid == f->uid) && (!f->pid || t->pid == f->pid) &&
           (!f->sampling_only || t->state == TARGET_SAMPLING) &&
           (!f->following_only || t->follow_children) && (!f->nccl_only || t->nccl_wanted);
}

static void info_of(const struct target *t, struct target_info *i)
{
    *i = (struct target_info){
        .id = t->id,
        .pid = t->pid,
        .uid = t->uid,
        .start_time = t->start_time,
        .rank = t->rank,
        .local_rank = t->local_rank,
        .world_size = t->world_size,
        .rate_hz = t->rate_hz,
        .follow_children = t->follow_children,
        .native_wanted = t->native_wanted,
        .native_perf_only = t->native_perf_only,
        .nccl_wanted = t->nccl_wanted,
        .allocation_tracking = t->allocation_tracking,
        .torch_tracing = t->torch_tracing,
        .catching = t->catching,
        .attached_ns = t->attached_ns,
        .ended_ns = t->ended_ns,
        .state = t->state,
        .stats = t->stats,
        .task_stats = t->tasks.stats,
        .gap = t->gap,
        .usage = t->usage,
        .usage_ns = t->usage_ns,
        .gpu_bytes = t->gpu_bytes,
        .main_stack_since_ns = t->main_stack_since_ns,
        .torch = t->torch,
        .threads_room = t->threads_cap,
        .mode = target_mode(t),
        .has_native = t->native != NULL,
    };
    snprintf(i->cmdline, sizeof(i->cmdline), "%s", t->cmdline);
    snprintf(i->py_version, sizeof(i->py_version), "%s", t->py_version);
    snprintf(i->end_reason, sizeof(i->end_reason), "%s", t->end_reason);
    if (t->native_wanted)
        snprintf(i->native_error, sizeof(i->native_error), "%s", t->native_error.msg);
    if (t->native) {
        i->native_stats = *native__stats(t->native);
        snprintf(i->native_backend, sizeof(i->native_backend), "%s", native__backend(t->native));
        snprintf(i->native_ebpf_error, sizeof(i->native_ebpf_error), "%s",
                 native__ebpf_error(t->native));
    }
}

static void key_of(const struct target *t, struct target_key *k)
{
    *k = (struct target_key){.id = t->id,
                             .start_time = t->start_time,
                             .pid = t->pid,
                             .uid = t->uid,
                             .state = t->state,
                             .ended_ns = t->ended_ns,
                             .rate_hz = t->rate_hz,
                             .follow_children = t->follow_children,
                             .native_wanted = t->native_wanted,
                             .native_perf_only = t->native_perf_only,
                             .nccl_wanted = t->nccl_wanted};
}

/* Fills @out[i] (@size bytes each, at most @cap) with @fill of each target @f selects; returns
 * how many there are. */
static size_t copy_out(struct targets *reg, const struct targets_filter *f,
                       void (*fill)(const struct target *t, void *item), void *out, size_t size,
                       size_t cap)
{
    size_t n = 0;

    targets__lock(reg);
    for (size_t i = 0; i < reg->n; i++) {
        if (!selected(reg->list[i], f))
            continue;
        if (n < cap)
            fill(reg->list[i], (char *)out + n * size);
        n++;
    }
    targets__unlock(reg);
    return n;
}

static void fill_info(const struct target *t, void *item)
{
    info_of(t, item);
}

static void fill_key(const struct target *t, void *item)
{
    key_of(t, item);
}

size_t targets__copy(struct targets *reg, const struct targets_filter *f, struct target_info *out,
                     size_t cap)
{
    return copy_out(reg, f, fill_info, out, sizeof(*out), cap);
}

size_t targets__keys(struct targets *reg, const struct targets_filter *f, struct target_key *out,
                     size_t cap)
{
    return copy_out(reg, f, fill_key, out, sizeof(*out), cap);
}

int targets__find(struct targets *reg, pid_t pid, bool sampling_only, struct target_key *ret)
{
    const struct target *found = NULL;

    targets__lock(reg);
    for (size_t i = 0; i < reg->n; i++) {
        const struct target *t = reg->list[i];
        if (t->pid == pid && (!sampling_only || t->state == TARGET_SAMPLING))
            found = t; /* the last attach of it */
    }
    if (found)
        key_of(found, ret);
    targets__unlock(reg);
    return found ? 0 : -ENOENT;
}

/* The targets row of a new attach. */
static void record_attach(struct targets *reg, const struct target *t)
{
    struct ob_target row = {
        .id = t->id,
        .start_time = t->start_time,
        .attached_ns = t->attached_ns,
        .pid = t->pid,
        .uid = (int32_t)t->uid,
        .rate_hz = (int32_t)t->rate_hz,
        .rank = t->rank,
        .local_rank = t->local_rank,
        .world_size = t->world_size,
        .follow_children = t->follow_children,
        .native = t->native_wanted,
        .nccl = t->nccl_wanted,
    };
    struct ob_half *h;

    snprintf(row.cmdline, sizeof(row.cmdline), "%s", t->cmdline);
    snprintf(row.py_version, sizeof(row.py_version), "%s", t->py_version);
    h = outbox__lock(reg->ob);
    ob_half__target(h, &row);
    outbox__unlock(reg->ob);
}

/* Drops an ended target from the list to make room: the one of @pid if any, else (when the
 * list is full) the one that ended first. Ended targets stay listed only for `list`. */
static void make_room(struct targets *reg, pid_t pid)
{
    size_t drop = reg->n;

    for (size_t i = 0; i < reg->n; i++) {
        const struct target *t = reg->list[i];
        if (t->state == TARGET_SAMPLING)
            continue;
        if (t->pid == pid) {
            drop = i;
            break;
        }
        if (reg->n == TARGETS_MAX && drop == reg->n)
            drop = i; /* the list keeps attach order: the oldest attach that ended */
    }
    if (drop == reg->n)
        return;
    target_free(reg->list[drop]);
    memmove(&reg->list[drop], &reg->list[drop + 1], (reg->n - drop - 1) * sizeof(reg->list[0]));
    reg->n--;
}

/* The listed target with id @id, under the lock; NULL when it is no longer listed. */
static struct target *by_id(struct targets *reg, int64_t id)
{
    for (size_t i = 0; i < reg->n; i++)
        if (reg->list[i]->id == id)
            return reg->list[i];
    return NULL;
}

/* The sampled target of @pid under the lock; NULL when none is. */
static struct target *sampled(struct targets *reg, pid_t pid)
{
    for (size_t i = 0; i < reg->n; i++)
        if (reg->list[i]->pid == pid && reg->list[i]->state == TARGET_SAMPLING)
            return reg->list[i];
    return NULL;
}

int targets__add(struct targets *reg, struct target *t, const struct attach_opts *o,
                 struct target_info *ret_info)
{
    int r = 0;

    targets__lock(reg);
    if (sampled(reg, t->pid))
        r = -EEXIST;
    if (r == 0)
        make_room(reg, t->pid);
    if (r == 0 && reg->n == TARGETS_MAX)
        r = -ENOSPC; /* every one of them is being sampled */
    if (r == 0) {
        t->id = o->resume_id ? o->resume_id : reg->next_id++;
        reg->list[reg->n++] = t;
        if (!o->resume_id)
            record_attach(reg, t);
        if (ret_info)
            info_of(t, ret_info);
        targets__wake(reg);
    }
    targets__unlock(reg);
    return r;
}

int targets__attach(struct targets *reg, pid_t pid, const struct attach_opts *o,
                    struct target_info *ret_info, struct pyf_err *reterr)
{
    struct target *t = NULL;
    int r = target_new(pid, o->rate_hz, &t, reterr);

    if (r < 0)
        return r;
    t->resumed = o->resume_id != 0;
    t->follow_children = o->follow_children;
    t->rate_is_default = o->rate_is_default;
    t->native_wanted = o->native || o->native_perf_only;
    t->native_perf_only = o->native_perf_only;
    t->nccl_wanted = o->nccl;
    t->allocation_tracking = o->allocation_tracking;
    t->torch_tracing = o->torch_tracing;
    t->catching = o->catching;
    if (o->duration_ns > 0)
        t->deadline_ns = mono_ns() + o->duration_ns;
    if (t->native_wanted) /* not fatal: the Python frames are still there */
        target__open_native(t, reg->symbols);
    r = targets__add(reg, t, o, ret_info);
    if (r < 0) {
        target_free(t);
        *reterr = (struct pyf_err){.kind = PYF_INVALID, .sys = -r};
        snprintf(reterr->msg, sizeof(reterr->msg), "pid %d: %s", (int)pid,
                 r == -EEXIST ? "already attached" : "too many targets");
    }
    return r;
}

int targets__set_native(struct targets *reg, pid_t pid, const struct attach_opts *o,
                        struct target_info *ret_info, struct pyf_err *reterr)
{
    bool want = o->native || o->native_perf_only;
    struct native *nat = NULL, *old;
    struct errbuf nerr = {0};
    struct pyf_chain chain;
    struct target *t;
    uint32_t rate;
    int64_t id;

    targets__lock(reg);
    t = sampled(reg, pid);
    if (t && t->native_wanted == want && (!want || t->native) &&
        t->native_perf_only == o->native_perf_only) {
        info_of(t, ret_info);
        targets__unlock(reg);
        return 1;
    }
    if (t && want && t->rate_hz > CONFIG_NATIVE_RATE_MAX_HZ) {
        *reterr = (struct pyf_err){.kind = PYF_INVALID, .sys = EINVAL};
        snprintf(reterr->msg, sizeof(reterr->msg),
                 "pid %d is sampled at %u Hz; with native stacks the rate is at most %d Hz"
                 " (detach it, then attach --native --rate %d)",
                 (int)pid, (unsigned)t->rate_hz, CONFIG_NATIVE_RATE_MAX_HZ,
                 CONFIG_NATIVE_RATE_MAX_HZ);
        targets__unlock(reg);
        return -EINVAL;
    }
    if (t) {
        id = t->id;
        rate = t->rate_hz;
        pyf_target__chain(t->pyf, &chain);
    }
    targets__unlock(reg);
    if (!t)
        goto gone;
    if (want) /* not fatal, as at an attach: Python frames go on, native_error says why */
        target_native_open(pid, rate, &chain, o->native_perf_only, reg->symbols, &nat, &nerr);

    targets__lock(reg);
    t = by_id(reg, id);
    if (!t || t->state != TARGET_SAMPLING) {
        targets__unlock(reg);
        native_free(nat);
        goto gone;
    }
    old = t->native;
    t->native = nat;
    t->native_wanted = want;
    t->native_perf_only = o->native_perf_only;
    t->native_error = nerr;
    /* no stack id carried over from the other mode: each thread's next one is read whole */
    memset(t->stack_ids, 0, t->threads_cap * sizeof(t->stack_ids[0]));
    record_attach(reg, t); /* the same row, its native column rewritten: a restart resumes it */
    info_of(t, ret_info);
    targets__unlock(reg);
    native_free(old);
    return 0;

gone:
    *reterr = (struct pyf_err){.kind = PYF_INVALID, .sys = ENOENT};
    snprintf(reterr->msg, sizeof(reterr->msg), "pid %d is not attached", (int)pid);
    return -ENOENT;
}

int targets__set_nccl(struct targets *reg, pid_t pid, bool want, struct target_info *ret_info)
{
    struct target *t;
    int r = 1;

    targets__lock(reg);
    t = sampled(reg, pid);
    if (!t) {
        targets__unlock(reg);
        return -ENOENT;
    }
    if (t->nccl_wanted != want) {
        t->nccl_wanted = want;
        record_attach(reg, t); /* the same row, its nccl column rewritten */
        r = 0;
    }
    info_of(t, ret_info);
    targets__unlock(reg);
    return r;
}

int targets__detach(struct targets *reg, pid_t pid, const struct targets_filter *f,
                    struct target_info *ret_info)
{
    struct target *t = NULL;

    targets__lock(reg);
    for (size_t i = 0; i < reg->n; i++) {
        if (reg->list[i]->pid == pid && selected(reg->list[i], f)) {
            t = reg->list[i];
            memmove(&reg->list[i], &reg->list[i + 1], (reg->n - i - 1) * sizeof(reg->list[0]));
            reg->n--;
            break;
        }
    }
    if (t && t->state == TARGET_SAMPLING)
        targets__end(reg, t, TARGET_DETACHED, "detached");
    if (t)
        info_of(t, ret_info);
    targets__unlock(reg);
    target_free(t); /* its buffers went with the end; what is left is freed outside the lock */
    /* and what it left free in the heaps of the threads that served it goes back to the
     * system (a target's code cache and names are many small blocks: they stayed, and the
     * daemon's RSS crept up over attach/detach cycles) */
    if (t)
        malloc_trim(0);
    return t ? 0 : -ENOENT;
}

void targets__set_usage(struct targets *reg, int64_t id, const struct proc_usage *u, int64_t ts_ns)
{
    struct target *t;

    targets__lock(reg);
    if ((t = by_id(reg, id)) != NULL) {
        t->usage = *u;
        t->usage_ns = ts_ns;
    }
    targets__unlock(reg);
}

void targets__set_gpu(struct targets *reg, int64_t id, int64_t bytes)
{
    struct target *t;

    targets__lock(reg);
    if ((t = by_id(reg, id)) != NULL)
        t->gpu_bytes = bytes;
    targets__unlock(reg);
}

void targets__add_lost(struct targets *reg, int64_t id, uint64_t n, int64_t from_ns, int64_t to_ns,
                       const char *why)
{
    struct target *t;

    targets__lock(reg);
    if ((t = by_id(reg, id)) != NULL) {
        t->stats.lost += n;
        if (!t->gap.samples || from_ns - t->gap.to_ns > 60 * 1000000000LL) /* a new gap */
            t->gap = (struct target_gap){.from_ns = from_ns};
        t->gap.to_ns = to_ns;
        t->gap.samples += n;
        snprintf(t->gap.why, sizeof(t->gap.why), "%s", why);
    }
    targets__unlock(reg);
}

void targets__add_torch(struct targets *reg, int64_t id, const struct torch_totals *d,
                        uint64_t dropped, bool tracing)
{
    struct target *t;

    targets__lock(reg);
    if ((t = by_id(reg, id)) != NULL) {
        struct target_torch *tt = &t->torch;

        tt->tracing = tracing;
        if (d) { /* else the drains stopped: only tracing changes */
            tt->on = true;
            tt->steps += d->steps;
            tt->step_seconds += d->step_seconds;
            tt->ddp_steps += d->ddp_steps;
            tt->ddp_compute_seconds += d->ddp_compute_seconds;
            tt->ddp_wait_seconds += d->ddp_wait_seconds;
            tt->dropped = dropped;
            if (d->has_memory) {
                tt->has_memory = true;
                tt->allocated_mb = d->allocated_mb;
                tt->has_reserved = d->has_reserved;
                tt->reserved_mb = d->reserved_mb;
            }
            if (d->comm) {
                tt->comm = true;
                tt->comm_calls += d->comm_calls;
                tt->comm_bytes += d->comm_bytes;
                tt->comm_seconds += d->comm_seconds;
                if (d->has_comm_seq && (!tt->has_comm_seq || d->comm_seq > tt->comm_seq)) {
                    tt->has_comm_seq = true;
                    tt->comm_seq = d->comm_seq;
                }
                tt->comm_in_flight_since_ns = d->comm_in_flight_since_ns;
            }
        }
        if (!tracing) /* its calls in flight are no longer watched */
            tt->comm_in_flight_since_ns = 0;
    }
    targets__unlock(reg);
}

void targets__default_rate(struct targets *reg, uint32_t hz)
{
    targets__lock(reg);
    for (size_t i = 0; i < reg->n; i++) {
        struct target *t = reg->list[i];
        if (!t->rate_is_default || t->rate_hz == hz)
            continue;
        t->rate_hz = hz;
        t->period_ns = 1000000000LL / hz;
        if (t->native)
            native__set_rate(t->native, hz);
        t->next_ns = clock_tick_at_or_after(mono_ns(), t->period_ns);
    }
    targets__wake(reg);
    targets__unlock(reg);
}
