/* meter.c - see meter.h. */
#define _GNU_SOURCE
#include "sample/meter.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>

#include "clock.h"
#include "log.h"
#include "common/procfs.h"

#define IDLE_CHECK_NS 60000000000LL /* memory_interval 0: a change wakes us; this is a backstop */

#define METER_THREADS_MAX 4096 /* threads read per target */

struct due_list {
    struct target_key items[TARGETS_MAX]; /* who to read this pass, copied from the registry */
    size_t n;
    struct ob_thread_cpu threads[METER_THREADS_MAX]; /* one target's, being read */
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

static void pass(struct meter *m, struct due_list *l)
{
    int64_t t0 = mono_ns();

    l->n = targets__keys(m->reg, &(struct targets_filter){.all_users = true, .sampling_only = true},
                         l->items, TARGETS_MAX);
    l->n = l->n < TARGETS_MAX ? l->n : TARGETS_MAX;
    for (size_t i = 0; i < l->n; i++)
        read_target(m, l, &l->items[i]);
    m->last_pass_ns = mono_ns() - t0;
}

static void *meter_main(void *arg)
{
    struct meter *m = arg;
    struct due_list *l = malloc(sizeof(*l));
    int64_t due = mono_ns();

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
        if (interval > 0 && due > now + interval)
            due = now + interval; /* the interval was shortened */
        /* interval 0: sleep until woken (meter__wake) */
        bgthread_wait_until(&m->bg, interval > 0 ? due : now + IDLE_CHECK_NS);
    }
    pthread_mutex_unlock(&m->bg.lock);
    free(l);
    return NULL;
}

int meter_start(struct meter *m)
{
    return bgthread_start(&m->bg, "probed-meter", meter_main, m);
}

void meter_stop(struct meter *m)
{
    bgthread_stop(&m->bg);
}

void meter__wake(struct meter *m)
{
    bgthread_wake(&m->bg);
}
