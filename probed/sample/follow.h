/*
 * follow.h - attach --children: the descendants of followed processes (torchrun's ranks,
 * DataLoader workers, what a shell or a Slurm batch script starts) are attached as they appear.
 *
 * A thread of its own looks every FOLLOW_PERIOD_MS for new descendants of the targets attached
 * --children and of the watches, and attaches those that are Python and of the same owner
 * through the registry (targets__attach), as their ancestor was. A watch is a process asked
 * for with --children that is not Python (a launcher): followed, not sampled; it is forgotten
 * when it ends or execs into Python (then it is a target). A process found not to be Python
 * is not tried again while it runs the same executable (pid + start time + the executable's
 * inode: `sh -c 'exec python ...'` keeps pid and start time); a ring, the oldest forgotten.
 * Descendants are read from /proc/PID/task/TID/children (every thread's children,
 * recursively), bounded: FOLLOW_MAX pids, FOLLOW_DEPTH levels.
 * Threads: follower_start/free from main; the watch functions from any thread (a lock guards
 * the watches); the pass on the follower's thread only. Memory: fixed, sized here.
 * Failure: a process that vanishes is skipped; the watch functions return -errno with the
 * reason in a struct pyf_err.
 */
#ifndef PROBED_FOLLOW_H
#define PROBED_FOLLOW_H

#include <stddef.h>
#include <sys/types.h>

#include "sample/targets.h"

#define FOLLOW_MAX 256        /* descendants read of one process, and not-Python remembered */
#define FOLLOW_DEPTH 8        /* levels of descendants */
#define FOLLOW_WATCHES_MAX 64 /* processes followed that are not Python */
#define FOLLOW_PERIOD_MS 500

/* A process followed for its Python descendants, not sampled. */
struct follow_watch {
    pid_t pid;
    uid_t uid;
    int64_t start_time;
    struct attach_opts opts; /* how its descendants are attached */
    char cmdline[128];
};

struct follower;

int follower_new(struct targets *reg, struct follower **ret);
int follower_start(struct follower *f);
void follower_free(struct follower *f); /* stops the thread; NULL is a no-op */

/* Follows @pid, not Python, for its descendants, attached with @o; *ret_watch: the watch.
 * 1: it was followed already (the same answer); -ESRCH: no such process; -ENOSPC: full. */
int follower__watch(struct follower *f, pid_t pid, const struct attach_opts *o,
                    struct follow_watch *ret_watch, struct pyf_err *reterr);
/* Stops following @pid if @scope lets its caller see it: 0, or -ENOENT. */
int follower__unwatch(struct follower *f, pid_t pid, const struct targets_filter *scope);
/* Copies of the watches @scope sees, at most @cap; returns how many there are. */
size_t follower__watches(struct follower *f, const struct targets_filter *scope,
                         struct follow_watch *out, size_t cap);

/* Fills @out with the descendants of @pid (not @pid itself); returns how many. */
size_t follow_descendants(pid_t pid, pid_t *out, size_t cap);

#endif
