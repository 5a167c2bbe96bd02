/* follow.c - see follow.h. */
#define _GNU_SOURCE
#include "sample/follow.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/bgthread.h"
#include "clock.h"
#include "log.h"
#include "common/procfs.h"

/* A process that is not Python, as remembered: pid + start time + executable. */
struct identity {
    pid_t pid;
    int64_t start_time;
    dev_t exe_dev;
    ino_t exe_ino;
};

/* Who one pass follows: the targets attached --children, then the watches. */
struct followed {
    pid_t pid;
    uid_t uid;
    struct attach_opts opts;
};

struct follower {
    struct targets *reg;
    struct bgthread bg;
    pthread_mutex_t lock; /* the watches */
    struct follow_watch watches[FOLLOW_WATCHES_MAX];
    size_t n_watches;

    /* the follower's thread only */
    struct identity not_python[FOLLOW_MAX]; /* a ring */
    size_t n_not_python, next_not_python;
    struct target_key sampled[TARGETS_MAX];
    size_t n_sampled;
    struct followed followed[TARGETS_MAX + FOLLOW_WATCHES_MAX];
    pid_t kids[FOLLOW_MAX];
};

/* Appends the direct children of every thread of @pid; returns the new count. */
static size_t children_of(pid_t pid, pid_t *out, size_t n, size_t cap)
{
    char path[64];
    struct dirent *d;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    dir = opendir(path);
    if (!dir)
        return n;
    while (n < cap && (d = readdir(dir)) != NULL) {
        char file[320];
        FILE *f;
        int child;

        if (d->d_name[0] < '0' || d->d_name[0] > '9')
            continue;
        snprintf(file, sizeof(file), "/proc/%d/task/%s/children", (int)pid, d->d_name);
        f = fopen(file, "re");
        if (!f)
            continue;
        while (n < cap && fscanf(f, "%d", &child) == 1)
            out[n++] = child;
        fclose(f);
    }
    closedir(dir);
    return n;
}

size_t follow_descendants(pid_t pid, pid_t *out, size_t cap)
{
    size_t n = children_of(pid, out, 0, cap), level_start = 0;

    /* Breadth first: each level's children are appended after it. */
    for (int depth = 1; depth < FOLLOW_DEPTH && level_start < n; depth++) {
        size_t level_end = n;
        for (size_t i = level_start; i < level_end; i++)
            n = children_of(out[i], out, n, cap);
        level_start = level_end;
    }
    return n;
}

/* @pid's identity, for the not-Python ring; false when it is gone. */
static bool identify(pid_t pid, struct identity *id)
{
    char path[64];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    if (procfs_start_time(pid, &id->start_time) < 0 || stat(path, &st) < 0)
        return false;
    id->pid = pid;
    id->exe_dev = st.st_dev;
    id->exe_ino = st.st_ino;
    return true;
}

static bool known_not_python(const struct follower *f, const struct identity *id)
{
    for (size_t i = 0; i < f->n_not_python; i++) {
        const struct identity *k = &f->not_python[i];
        if (k->pid == id->pid && k->start_time == id->start_time && k->exe_dev == id->exe_dev &&
            k->exe_ino == id->exe_ino)
            return true;
    }
    return false;
}

static bool sampled(const struct follower *f, pid_t pid)
{
    for (size_t i = 0; i < f->n_sampled; i++)
        if (f->sampled[i].pid == pid)
            return true;
    return false;
}

/* Attaches @child like its followed ancestor @anc, when it is Python and of the same owner. */
static void follow_child(struct follower *f, const struct followed *anc, pid_t child)
{
    struct pyf_err e = {0};
    struct target_info *info;
    struct identity id, after;
    char path[64];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%d", (int)child);
    if (!identify(child, &id) || known_not_python(f, &id) || stat(path, &st) < 0 ||
        st.st_uid != anc->uid)
        return;
    info = malloc(sizeof(*info));
    if (!info)
        return;
    if (targets__attach(f->reg, child, &anc->opts, info, &e) == 0) {
        log_msg(LOG_INFO, "attached pid %d, a descendant of pid %d (rank %d), %s", (int)child,
                (int)anc->pid, info->rank, info->mode);
    } else if ((e.kind == PYF_NOT_PYTHON || e.kind == PYF_UNSUPPORTED) && identify(child, &after) &&
               after.exe_dev == id.exe_dev && after.exe_ino == id.exe_ino) {
        /* Remembered only if it did not exec meanwhile: a launcher's fork (Python's exe) that
         * became `sh` under the check would otherwise have Python's identity remembered as not
         * Python, and the rank that `sh` execs next (Python's exe again, same pid and start
         * time) would never be attached. */
        f->not_python[f->next_not_python] = id;
        f->next_not_python = (f->next_not_python + 1) % FOLLOW_MAX;
        if (f->n_not_python < FOLLOW_MAX)
            f->n_not_python++;
    }
    free(info);
}

/* Forgets the watches that ended, or became a target themselves (an exec into Python: the
 * target follows its descendants from then on), and copies the rest into f->followed from
 * @at on; returns the new count. */
static size_t prune_and_copy_watches(struct follower *f, size_t at)
{
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n_watches;) {
        const struct follow_watch *w = &f->watches[i];
        int64_t start;

        if (procfs_start_time(w->pid, &start) < 0 || start != w->start_time || sampled(f, w->pid)) {
            f->watches[i] = f->watches[--f->n_watches];
            continue;
        }
        f->followed[at++] = (struct followed){.pid = w->pid, .uid = w->uid, .opts = w->opts};
        i++;
    }
    pthread_mutex_unlock(&f->lock);
    return at;
}

static void pass(struct follower *f)
{
    size_t n = 0, n_targets;

    f->n_sampled =
        targets__keys(f->reg, &(struct targets_filter){.all_users = true, .sampling_only = true},
                      f->sampled, TARGETS_MAX);
    if (f->n_sampled > TARGETS_MAX)
        f->n_sampled = TARGETS_MAX;
    for (size_t i = 0; i < f->n_sampled; i++) {
        const struct target_key *k = &f->sampled[i];
        if (k->follow_children)
            f->followed[n++] = (struct followed){.pid = k->pid,
                                                 .uid = k->uid,
                                                 .opts = {.rate_hz = k->rate_hz,
                                                          .follow_children = true,
                                                          .native = k->native_wanted,
                                                          .native_perf_only = k->native_perf_only,
                                                          .nccl = k->nccl_wanted}};
    }
    n_targets = n;
    n = prune_and_copy_watches(f, n);
    for (size_t i = 0; i < n; i++) {
        size_t n_kids = follow_descendants(f->followed[i].pid, f->kids, FOLLOW_MAX);

        if (i >= n_targets && n_kids < FOLLOW_MAX) /* a watch: itself too, once it execs Python */
            f->kids[n_kids++] = f->followed[i].pid;
        for (size_t k = 0; k < n_kids; k++)
            if (!sampled(f, f->kids[k]))
                follow_child(f, &f->followed[i], f->kids[k]);
    }
}

static void *follower_main(void *arg)
{
    struct follower *f = arg;

    pthread_mutex_lock(&f->bg.lock);
    while (!f->bg.stopping) {
        pthread_mutex_unlock(&f->bg.lock);
        pass(f);
        pthread_mutex_lock(&f->bg.lock);
        if (!f->bg.stopping)
            bgthread_wait_until(&f->bg, mono_ns() + FOLLOW_PERIOD_MS * 1000000LL);
    }
    pthread_mutex_unlock(&f->bg.lock);
    return NULL;
}

int follower_new(struct targets *reg, struct follower **ret)
{
    struct follower *f = calloc(1, sizeof(*f));

    if (!f)
        return -ENOMEM;
    f->reg = reg;
    pthread_mutex_init(&f->lock, NULL);
    *ret = f;
    return 0;
}

int follower_start(struct follower *f)
{
    return bgthread_start(&f->bg, "probed-follow", follower_main, f);
}

void follower_free(struct follower *f)
{
    if (!f)
        return;
    bgthread_stop(&f->bg);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

int follower__watch(struct follower *f, pid_t pid, const struct attach_opts *o,
                    struct follow_watch *ret_watch, struct pyf_err *reterr)
{
    struct follow_watch w = {.pid = pid, .opts = *o};
    char path[64];
    struct stat st;
    int r = 0;

    w.opts.follow_children = true;
    w.opts.duration_ns = 0;
    w.opts.rate_is_default = false; /* its descendants keep the rate asked */
    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    if (procfs_start_time(pid, &w.start_time) < 0 || stat(path, &st) < 0) {
        *reterr = (struct pyf_err){.kind = PYF_GONE, .sys = ESRCH};
        snprintf(reterr->msg, sizeof(reterr->msg), "pid %d: no such process", (int)pid);
        return -ESRCH;
    }
    w.uid = st.st_uid;
    procfs_cmdline(pid, w.cmdline, sizeof(w.cmdline));
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n_watches && r == 0; i++)
        if (f->watches[i].pid == pid) /* asked again (probectl run polls): the same answer */
            r = 1;
    if (r == 0 && f->n_watches == FOLLOW_WATCHES_MAX) {
        *reterr = (struct pyf_err){.kind = PYF_INVALID, .sys = ENOSPC};
        snprintf(reterr->msg, sizeof(reterr->msg), "pid %d: %d processes are followed already",
                 (int)pid, FOLLOW_WATCHES_MAX);
        r = -ENOSPC;
    }
    if (r == 0)
        f->watches[f->n_watches++] = w;
    pthread_mutex_unlock(&f->lock);
    if (r >= 0)
        *ret_watch = w;
    return r;
}

static bool visible(const struct follow_watch *w, const struct targets_filter *scope)
{
    return scope->all_users || w->uid == scope->uid;
}

int follower__unwatch(struct follower *f, pid_t pid, const struct targets_filter *scope)
{
    int r = -ENOENT;

    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n_watches && r < 0; i++)
        if (f->watches[i].pid == pid && visible(&f->watches[i], scope)) {
            f->watches[i] = f->watches[--f->n_watches];
            r = 0;
        }
    pthread_mutex_unlock(&f->lock);
    return r;
}

size_t follower__watches(struct follower *f, const struct targets_filter *scope,
                         struct follow_watch *out, size_t cap)
{
    size_t n = 0;

    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n_watches; i++) {
        if (!visible(&f->watches[i], scope))
            continue;
        if (n < cap)
            out[n] = f->watches[i];
        n++;
    }
    pthread_mutex_unlock(&f->lock);
    return n;
}
