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

/* Who may act on a process, by the kernel's own ptrace rule (ptrace_may_access() for a caller
 * without CAP_SYS_PTRACE): its real, effective and saved uids all the caller's, its real,
 * effective and saved gids all the caller's group, no permitted capability the caller lacks
 * (a user's client has none), and dumpable (the kernel makes /proc/PID root's otherwise) --
 * or, in a user namespace the caller owns (rootless containers), any of its processes: the
 * owner holds every capability there. A root process that only seteuid()'d to a user is not
 * that user's. */
struct proc_owner {
    int64_t start_time; /* which process of that pid: the one granted */
    uid_t uid[3];       /* real, effective, saved */
    gid_t gid[3];
    uid_t dump_owner; /* the owner of /proc/PID: its euid, or root while not dumpable */
    bool has_caps;    /* a permitted capability */
    uid_t ns_owner;   /* the owner of its user namespace; (uid_t)-1 in ours */
};
/* Reads @pid's ids, all through one open of /proc/PID (so all of one process). -ESRCH: gone. */
int procfs_owner(pid_t pid, struct proc_owner *ret);
/* Whether @o admits a caller of @uid and @gid (root: always). */
bool procfs_owner_admits(const struct proc_owner *o, bool root, uid_t uid, gid_t gid);

/* A caller's leave to act on one process, given when its request was authorised and carried to
 * every later step (injection, the stub's socket, ptrace, a later capture): the process must
 * still be the one granted (its start time) and still admit the caller (an exec of a setuid
 * program keeps the pid and the start time, not the owner). */
struct proc_grant {
    pid_t pid;
    int64_t start_time;
    bool root; /* the caller */
    uid_t uid;
    gid_t gid;
};
/* 0 while @g holds; -ESRCH (the process exited, or its pid is another's now) or -EPERM, with
 * why in @why. */
int procfs_grant_check(const struct proc_grant *g, char *why, size_t why_size);

/* Whether this process runs in the initial pid namespace (its NSpid line names one id): where
 * the kernel's global ids, which BPF programs see, are ours. */
bool procfs_in_initial_pidns(void);

/* The addresses of @pid's network namespace but loopback's, read from its /proc/PID/net
 * (fib_trie's local IPv4 routes, if_inet6's addresses of global scope): no namespace is
 * joined, so no capability is needed. @fn gets each (struct in_addr or in6_addr), an IPv4
 * one twice (the trie's two tables). 0, or -errno where the process is gone. */
typedef void (*procfs_address_fn)(int family, const void *addr, void *ctx);
int procfs_net_addresses(pid_t pid, procfs_address_fn fn, void *ctx);

#endif
