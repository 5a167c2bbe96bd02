/*
 * procfs.h - the few /proc files probed reads about a process: a whole small file, the
 * command line, the start time that tells a process from a later one with the same pid,
 * and its memory and CPU use.
 * Threads: any. Failure: -errno (ENOENT/ESRCH: the process is gone).
 */
#ifndef PROBED_PROCFS_H
#define PROBED_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* /proc/PID/@name into @buf, NUL-terminated and truncated to @size; returns bytes read. */
ssize_t procfs_read(pid_t pid, const char *name, char *buf, size_t size);

/* The command line, arguments joined by spaces, control characters as spaces ("" if gone). */
void procfs_cmdline(pid_t pid, char *buf, size_t size);

/* What a process uses: from /proc/PID/smaps_rollup (bytes) and /proc/PID/stat. */
struct proc_usage {
    int64_t rss, pss, uss, swap; /* uss: private pages, clean + dirty */
    int64_t cpu_ns;              /* user + system time of all its threads */
    int64_t start_time;          /* to tell it from a later process with the same pid */
    int32_t threads;
};
int procfs_usage(pid_t pid, struct proc_usage *u);

/* User + system time of thread @tid of @pid, in nanoseconds. */
int procfs_thread_cpu(pid_t pid, pid_t tid, int64_t *cpu_ns);

/* /proc/PID/stat starttime (field 22, clock ticks after boot). */
int procfs_start_time(pid_t pid, int64_t *ret);
/* starttime, and startstack (field 28): where its stack begins, chosen anew at each exec
 * (ASLR), so a process that exec'd another program since (a fork of a launcher that became a
 * rank) is told apart from what it was; 0 where it has no memory any more (exiting) or we
 * may not read it. -ESRCH for a process that has exited, a zombie included. */
int procfs_identity(pid_t pid, int64_t *ret_start_time, uint64_t *ret_start_stack);

/* Whether this process runs in the initial pid namespace (its NSpid line names one id): where
 * the kernel's global ids, which BPF programs see, are ours. */
bool procfs_in_initial_pidns(void);

#endif
