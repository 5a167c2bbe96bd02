/* meter.c - see meter.h. */
#define _GNU_SOURCE
#include "sample/meter.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "common/procfs.h"
#include "sample/hashid.h"

#define IDLE_CHECK_NS 60000000000LL /* memory_interval 0: a change wakes us; this is a backstop */
/* memory_interval 0 and nccl_calls on: NCCL's calls are still drained, this often (the ring
 * buffer holds about 65,000 calls) */
#define NCCL_ALONE_NS 1000000000LL

#define METER_THREADS_MAX 4096 /* threads read per target */

#define NVML_RETRY_NS 60000000000LL /* a failed load of NVML is tried again this much later */

struct due_list {
    struct target_key items[TARGETS_MAX]; /* who to read this pass, copied from the registry */
    size_t n;
    struct ob_thread_cpu threads[METER_THREADS_MAX]; /* one target's, being read */
    struct gpu_snapshot gpu;                         /* this pass's GPU reading */
    int64_t gpu_bytes[TARGETS_MAX];                  /* per item: its memory on the GPUs */
};

/* Every thread's CPU time into @l->threads (a directory listing and one small read per
 * thread); how many. */
static size_t read_threads(struct due_list *l, const struct target_key *d, int64_t ts)
{
    char path[48];
    struct dirent *e;
    size_t n = 0;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)d->pid);
    dir = opendir(path);
    if (!dir)
        return 0;
    while ((e = readdir(dir)) && n < METER_THREADS_MAX) {
        struct ob_thread_cpu c = {.target_id = d->id, .ts_ns = ts, .tid = atoi(e->d_name)};
        if (c.tid > 0 && procfs_thread_cpu(d->pid, c.tid, &c.cpu_ns) == 0)
            l->threads[n++] = c;
    }
    closedir(dir);
    return n;
}

static void read_target(struct meter *m, struct due_list *l, const struct target_key *d)
{
    struct proc_usage u;
    int64_t ts = real_ns();
    struct ob_half *h;
    size_t n;

    /* A target that exited is the sampler's to notice; a reused pid is not ours to read. */
    if (procfs_usage(d->pid, &u) < 0 || u.start_time != d->start_time) {
        m->failures++;
        return;
    }
    n = read_threads(l, d, ts);
    m->readings++;
    /* One hold of the outbox: the reading and its threads reach the same transaction. */
    h = outbox__lock(m->ob);
    ob_half__usage(h, &(struct ob_usage){.target_id = d->id,
                                         .ts_ns = ts,
                                         .rss = u.rss,
                                         .pss = u.pss,
                                         .uss = u.uss,
                                         .swap = u.swap,
                                         .cpu_ns = u.cpu_ns,
                                         .threads = u.threads});
    for (size_t i = 0; i < n; i++)
        ob_half__thread_cpu(h, &l->threads[i]);
    outbox__unlock(m->ob);
    targets__set_usage(m->reg, d->id, &u, ts);
}

/* The GPU status says @why (NULL: reading fine); logged when it changes, not each interval. */
static void gpu_status(struct meter *m, const char *why)
{
    bool changed;

    pthread_mutex_lock(&m->gpu_lock);
    changed = strcmp(m->gpu_status.error, why ? why : "") != 0;
    snprintf(m->gpu_status.error, sizeof(m->gpu_status.error), "%s", why ? why : "");
    m->gpu_status.reading = !why;
    if (why)
        m->gpu_status.failures++;
    pthread_mutex_unlock(&m->gpu_lock);
    if (changed && why)
        log_msg(LOG_INFO, "GPU readings: none: %s", why);
}

/* NVML loaded, or why not (a minute later it is tried again). */
static bool nvml_ready(struct meter *m)
{
    char path[CONFIG_VALUE_MAX];
    struct errbuf err;

    if (m->nvml)
        return true;
    if (mono_ns() < m->nvml_retry_ns)
        return false;
    m->nvml_retry_ns = mono_ns() + NVML_RETRY_NS;
    config_text(m->cfg, CFG_NVML, path, sizeof(path));
    if (strcmp(path, "off") == 0) {
        gpu_status(m, "turned off (nvml = off in probed.conf)");
        return false;
    }
    if (nvml_open(path, &m->nvml, &err) < 0) {
        gpu_status(m, err.msg);
        return false;
    }
    pthread_mutex_lock(&m->gpu_lock);
    snprintf(m->gpu_status.driver, sizeof(m->gpu_status.driver), "%s", nvml__driver(m->nvml));
    snprintf(m->gpu_status.library, sizeof(m->gpu_status.library), "%s", nvml__path(m->nvml));
    pthread_mutex_unlock(&m->gpu_lock);
    log_msg(LOG_INFO, "GPU readings: NVML %s, driver %s", nvml__path(m->nvml),
            nvml__driver(m->nvml));
    return true;
}

/* The devices' Xid counts follow them by UUID: a device that goes (a lost GPU) takes its own. */
static void count_xids(struct meter *m, const struct gpu_snapshot *s)
{
    struct meter_gpu_xids now[GPU_DEVICES_MAX];

    memset(now, 0, sizeof(now));
    for (size_t i = 0; i < s->n_devices; i++) {
        snprintf(now[i].uuid, sizeof(now[i].uuid), "%s", s->devices[i].uuid);
        for (size_t k = 0; k < GPU_DEVICES_MAX && m->gpu_xids[k].uuid[0]; k++)
            if (strcmp(m->gpu_xids[k].uuid, now[i].uuid) == 0)
                now[i] = m->gpu_xids[k];
    }
    for (size_t x = 0; x < s->n_xids; x++)
        if (s->xids[x].device >= 0) {
            now[s->xids[x].device].n++;
            now[s->xids[x].device].last = s->xids[x].xid;
        }
    memcpy(m->gpu_xids, now, sizeof(now));
    m->gpu_status.xids += s->n_xids;
}

/* The GPUs, and each target's memory on them, at this pass's instant. */
static void read_gpus(struct meter *m, struct due_list *l)
{
    struct gpu_snapshot *s = &l->gpu;
    struct errbuf err;
    struct ob_half *h;

    for (size_t i = 0; i < l->n; i++)
        l->gpu_bytes[i] = -1;
    if (!nvml_ready(m)) {
        for (size_t i = 0; i < l->n; i++)
            targets__set_gpu(m->reg, l->items[i].id, -1);
        return;
    }
    if (nvml__read(m->nvml, s, &err) < 0) {
        gpu_status(m, err.msg);
        s->n_devices = s->n_procs = s->n_xids = 0;
    } else {
        gpu_status(m, NULL);
        for (size_t i = 0; i < l->n; i++)
            l->gpu_bytes[i] = 0;
    }
    h = outbox__lock(m->ob);
    for (size_t i = 0; i < s->n_devices; i++)
        ob_half__gpu(h, &(struct ob_gpu){.ts_ns = s->ts_ns,
                                         .gpu_id = hashid_string(s->devices[i].uuid),
                                         .d = s->devices[i]});
    for (size_t p = 0; p < s->n_procs; p++)
        for (size_t i = 0; i < l->n; i++) { /* a process not attached is not ours to store */
            const struct gpu_process *gp = &s->procs[p];
            if (l->items[i].pid != gp->pid)
                continue;
            ob_half__gpu_proc(
                h, &(struct ob_gpu_proc){.target_id = l->items[i].id,
                                         .ts_ns = s->ts_ns,
                                         .gpu_id = hashid_string(s->devices[gp->device].uuid),
                                         .pid = gp->pid,
                                         .mem_used_bytes = gp->mem_used_bytes,
                                         .sm_util_pct = gp->sm_util_pct});
            l->gpu_bytes[i] += gp->mem_used_bytes;
        }
    for (size_t x = 0; x < s->n_xids; x++)
        ob_half__gpu_xid(h, &(struct ob_gpu_xid){
                                .ts_ns = s->ts_ns,
                                .gpu_id = s->xids[x].device >= 0
                                              ? hashid_string(s->devices[s->xids[x].device].uuid)
                                              : 0,
                                .xid = s->xids[x].xid});
    outbox__unlock(m->ob);
    for (size_t i = 0; i < l->n; i++)
        targets__set_gpu(m->reg, l->items[i].id, l->gpu_bytes[i]);
    pthread_mutex_lock(&m->gpu_lock);
    *m->gpu_last = *s;
    m->gpu_status.readings++;
    count_xids(m, s);
    pthread_mutex_unlock(&m->gpu_lock);
}

static void nccl_status(struct meter *m, const char *why, uint64_t dropped)
{
    bool changed;

    pthread_mutex_lock(&m->gpu_lock);
    changed = strcmp(m->nccl_status.error, why ? why : "") != 0;
    snprintf(m->nccl_status.error, sizeof(m->nccl_status.error), "%s", why ? why : "");
    m->nccl_status.watching = !why;
    m->nccl_status.dropped += dropped;
    if (m->nccl)
        nccl__stats(m->nccl, &m->nccl_status.stats);
    else
        m->nccl_status.stats.processes = 0;
    pthread_mutex_unlock(&m->gpu_lock);
    if (changed && why)
        log_msg(LOG_INFO, "NCCL calls: not recorded: %s", why);
}

struct nccl_pass {
    struct ob_half *h;
    uint64_t dropped;
};

static void on_nccl_call(void *ctx, const struct nccl_call *c)
{
    struct nccl_pass *np = ctx;
    struct ob_comm oc = {.target_id = c->target_id,
                         .call_id = NCCL_CALL_ID_BASE + c->ts_ns,
                         .ts_ns = c->ts_ns,
                         .seq = c->seq,
                         .bytes = c->bytes,
                         .group_size = c->group_size,
                         .peer = c->peer};

    snprintf(oc.op, sizeof(oc.op), "%s", c->op);
    snprintf(oc.dtype, sizeof(oc.dtype), "%s", c->dtype);
    snprintf(oc.source, sizeof(oc.source), "%s", c->source);
    snprintf(oc.group, sizeof(oc.group), "%s", c->group);
    if (!ob_half__comm(np->h, &oc))
        np->dropped++;
}

/* The targets' NCCL calls since the last pass, into the outbox; new targets with a libnccl
 * watched (nccl.h): every target with nccl_calls on, else those attached --nccl. */
static void read_nccl(struct meter *m, struct due_list *l)
{
    struct nccl_target targets[TARGETS_MAX];
    bool all = config_num(m->cfg, CFG_NCCL_CALLS) != 0;
    struct nccl_pass np = {0};
    struct errbuf err;
    size_t n = 0;

    for (size_t i = 0; i < l->n; i++)
        if (all || l->items[i].nccl_wanted)
            targets[n++] = (struct nccl_target){
                .id = l->items[i].id, .start_time = l->items[i].start_time, .pid = l->items[i].pid};
    if (n == 0 && !all) {
        nccl_free(m->nccl); /* every probe removed */
        m->nccl = NULL;
        m->nccl_retry_ns = 0; /* turned on again: loaded at once */
        nccl_status(m, "turned off (nccl_calls = off, and no target attached --nccl)", 0);
        return;
    }
    if (!m->nccl) {
        if (mono_ns() < m->nccl_retry_ns)
            return;
        m->nccl_retry_ns = mono_ns() + NVML_RETRY_NS;
        if (nccl_open(&m->nccl, &err) < 0) {
            nccl_status(m, err.msg, 0);
            return;
        }
    }
    nccl__watch(m->nccl, targets, n);
    np.h = outbox__lock(m->ob);
    nccl__drain(m->nccl, on_nccl_call, &np);
    outbox__unlock(m->ob);
    nccl_status(m, NULL, np.dropped);
}

/* The sampled targets, into @l. */
static void list_targets(struct meter *m, struct due_list *l)
{
    l->n = targets__keys(m->reg, &(struct targets_filter){.all_users = true, .sampling_only = true},
                         l->items, TARGETS_MAX);
    l->n = l->n < TARGETS_MAX ? l->n : TARGETS_MAX;
}

static void pass(struct meter *m, struct due_list *l)
{
    int64_t t0 = mono_ns();

    list_targets(m, l);
    for (size_t i = 0; i < l->n; i++)
        read_target(m, l, &l->items[i]);
    read_gpus(m, l);
    read_nccl(m, l);
    m->last_pass_ns = mono_ns() - t0;
}

/* memory_interval 0 turns memory and GPU readings off, not NCCL's calls: a pass of those alone
 * (and one more after the last of them is turned off, which removes the probes and says so;
 * the status is this thread's to write, read here without its lock). */
static bool nccl_alone(struct meter *m)
{
    struct target_key k;

    return config_num(m->cfg, CFG_NCCL_CALLS) != 0 || m->nccl ||
           (!m->nccl_status.watching && !m->nccl_status.error[0]) ||
           targets__keys(m->reg,
                         &(struct targets_filter){
                             .all_users = true, .sampling_only = true, .nccl_only = true},
                         &k, 1) > 0;
}

static void *meter_main(void *arg)
{
    struct meter *m = arg;
    struct due_list *l = malloc(sizeof(*l));
    int64_t due = mono_ns(), nccl_due = due;

    if (!l) {
        log_msg(LOG_ERR, "meter: out of memory: no memory timeline");
        return NULL;
    }
    pthread_mutex_lock(&m->bg.lock);
    while (!m->bg.stopping) {
        int64_t interval = config_num(m->cfg, CFG_MEMORY_INTERVAL), now = mono_ns();

        if (interval > 0 && now >= due) {
            pthread_mutex_unlock(&m->bg.lock);
            pass(m, l);
            pthread_mutex_lock(&m->bg.lock);
            /* on the interval's grid; after a slow pass, from now */
            due = due + interval > now ? due + interval : now + interval;
            continue;
        }
        if (interval <= 0 && nccl_alone(m) && now >= nccl_due) {
            pthread_mutex_unlock(&m->bg.lock);
            list_targets(m, l);
            read_nccl(m, l);
            pthread_mutex_lock(&m->bg.lock);
            nccl_due = now + NCCL_ALONE_NS;
            continue;
        }
        if (interval > 0 && due > now + interval)
            due = now + interval; /* the interval was shortened */
        /* interval 0: sleep until woken (meter__wake), or NCCL's next drain */
        bgthread_wait_until(&m->bg, interval > 0    ? due
                                    : nccl_alone(m) ? nccl_due
                                                    : now + IDLE_CHECK_NS);
    }
    pthread_mutex_unlock(&m->bg.lock);
    free(l);
    return NULL;
}

int meter_start(struct meter *m)
{
    int r;

    pthread_mutex_init(&m->gpu_lock, NULL);
    m->gpu_last = calloc(1, sizeof(*m->gpu_last));
    if (!m->gpu_last)
        return -ENOMEM;
    r = bgthread_start(&m->bg, "probed-meter", meter_main, m);
    if (r < 0) {
        free(m->gpu_last);
        m->gpu_last = NULL;
    }
    return r;
}

void meter_stop(struct meter *m)
{
    bgthread_stop(&m->bg);
    nvml_free(m->nvml);
    m->nvml = NULL;
    nccl_free(m->nccl);
    m->nccl = NULL;
    free(m->gpu_last);
    m->gpu_last = NULL;
    pthread_mutex_destroy(&m->gpu_lock);
}

void meter__gpu(struct meter *m, struct gpu_snapshot *ret_last, struct meter_gpu_status *ret_status,
                struct meter_gpu_xids *ret_xids)
{
    pthread_mutex_lock(&m->gpu_lock);
    if (ret_last) {
        if (m->gpu_last)
            *ret_last = *m->gpu_last;
        else
            ret_last->n_devices = ret_last->n_procs = ret_last->n_xids = 0;
    }
    if (ret_status)
        *ret_status = m->gpu_status;
    if (ret_xids)
        memcpy(ret_xids, m->gpu_xids, sizeof(m->gpu_xids));
    pthread_mutex_unlock(&m->gpu_lock);
}

void meter__nccl(struct meter *m, struct meter_nccl_status *ret)
{
    pthread_mutex_lock(&m->gpu_lock);
    *ret = m->nccl_status;
    pthread_mutex_unlock(&m->gpu_lock);
}

void meter__wake(struct meter *m)
{
    bgthread_wake(&m->bg);
}
