/*
 * findproc.h - the processes a job is made of, on this node: those of a user whose command
 * line matches a pattern (`cluster attach --match train.py`), or whose environment names a
 * job (`--job NAME`: SLURM_JOB_ID, SLURM_JOB_NAME or TORCHELASTIC_RUN_ID equal to NAME).
 *
 * Not matched, ever: the daemon itself, and the asking process with its ancestors (the
 * `probectl ... --match train.py` that names the pattern, the ssh and shell that carry it).
 * Threads: any (no state). Memory: the caller's array; a bounded read per process.
 * Failure: a process that ends while being looked at is left out.
 */
#ifndef PROBED_FINDPROC_H
#define PROBED_FINDPROC_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define FINDPROC_MAX 1024 /* matches returned at most; more are counted, not listed */

struct proc_query {
    const regex_t *cmdline; /* matched against the command line (arguments joined by spaces) */
    const char *job;        /* or the job's name or id */
    bool all_users;         /* root asks: any owner; else only @uid's */
    uid_t uid;
    pid_t asker;      /* the process asking (SO_PEERCRED): it and its ancestors are left out */
    int64_t until_ns; /* CLOCK_MONOTONIC: the scan stops there (0: no bound) */
    bool cut;         /* out: it stopped there, some processes not looked at */
};

/* The matching pids in @out (at most @cap, in pid order); returns how many match in all. */
size_t findproc(struct proc_query *q, pid_t *out, size_t cap);

/* Whether @env (/proc/PID/environ: NUL-separated, @len bytes) names job @job. */
bool findproc_env_names_job(const char *env, size_t len, const char *job);

#endif
