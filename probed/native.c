/* native.c - see native.h. */
#define _GNU_SOURCE
#include "native.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perfstack.h"

#define SLOTS 1024      /* thread stacks of one tick, by tid (open addressing) */
#define NAME_SLOTS 8192 /* direct-mapped: pc -> frame id */

struct name_slot {
    uint64_t pc;
    int64_t id;
    bool eval_loop;
};

struct native {
    pid_t pid;
    struct perfstack *ps;
    struct pyf_native *nat;
    struct native_stats stats;
    bool maps_stale; /* a pc in no known object, or a copy not unwound past its first frame */
    uint64_t maps_reread_ns; /* when the mappings were last read again */
    /* this tick's stacks: a table by tid, and the order they were filled in */
    struct native_stack *slots;
    uint16_t used[SLOTS];
    size_t n_used, next_unclaimed;
    struct name_slot names[NAME_SLOTS];
};

int native_open(pid_t pid, uint32_t rate_hz, struct native **ret, char *err, size_t errlen)
{
    struct native *n = calloc(1, sizeof(*n));
    struct pyf_err e;
    int r;

    if (!n || !(n->slots = calloc(SLOTS, sizeof(*n->slots)))) {
        free(n);
        snprintf(err, errlen, "pid %d: out of memory for native stacks", (int)pid);
        return -ENOMEM;
    }
    n->pid = pid;
    r = pyf_native_open(pid, &n->nat, &e);
    if (r < 0) {
        snprintf(err, errlen, "%s", e.msg);
        native_free(n);
        return r;
    }
    /* every object's CFI and symbols now: the first ticks would otherwise take long enough
     * to let the rings overflow */
    pyf_native__prepare(n->nat);
    r = perfstack_open(pid, rate_hz, NATIVE_STACK_BYTES, NATIVE_RING_PAGES, &n->ps, err, errlen);
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
    pyf_native_free(n->nat);
    free(n->slots);
    free(n);
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
static void on_sample(void *ctx, const struct pyf_stack_copy *copy, uint64_t time_ns)
{
    struct native *n = ctx;
    struct native_stack *s = slot_of(n, copy->tid);
    uint64_t t0 = now_ns();
    bool truncated;
    struct pyf_err e;

    n->stats.samples++;
    if (!s)
        return;
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
}

void native__collect(struct native *n, bool refresh_threads)
{
    char err[256];
    uint64_t lost = 0;

    for (size_t i = 0; i < n->n_used; i++) /* the previous tick's table goes */
        n->slots[n->used[i]] = (struct native_stack){0};
    n->n_used = n->next_unclaimed = 0;
    perfstack__drain(n->ps, on_sample, n, &lost);
    n->stats.lost += lost;
    if (!refresh_threads)
        return;
    perfstack__refresh(n->ps, err, sizeof(err)); /* fails only once the process is gone */
    /* at most once a second: JIT code stays in no object however often they are read */
    if (n->maps_stale && now_ns() - n->maps_reread_ns > 1000000000u) {
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
    size_t i = (size_t)tid % SLOTS;

    for (size_t probes = 0; probes < SLOTS; probes++, i = (i + 1) % SLOTS) {
        struct native_stack *s = &n->slots[i];
        if (s->tid == 0)
            return NULL;
        if (s->tid == tid) {
            if (s->taken || s->n_pcs == 0)
                return NULL;
            s->taken = true;
            return s;
        }
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
    perfstack__set_rate(n->ps, rate_hz);
}

struct native_stats *native__stats(struct native *n)
{
    return &n->stats;
}
