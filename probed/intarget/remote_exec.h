/*
 * remote_exec.h - makes a CPython 3.14+ target run a script through PEP 768's safe external
 * debugger hook, the way sys.remote_exec() does: the script's path, a pending-call flag and
 * one eval-breaker bit are written into each thread's state (process_vm_writev), and the
 * first thread to check its eval breaker runs the file (threads in a blocking C call look
 * when it returns). No ptrace, no code written into the target, no register touched.
 *
 * Threads: any; one request per target at a time (the caller serialises). Memory: the
 * request holds where it wrote, nothing else. Failure: -errno with why in @err, nothing
 * written: -ENOSYS the version has no such hook (before 3.14), -EOPNOTSUPP it runs with the
 * hook off (-X disable_remote_debug) or cannot be read so, and the caller falls back to
 * ptrace (inject.h); -ESRCH/-EPERM the granted process is gone or another's (procfs.h).
 */
#ifndef PROBED_REMOTE_EXEC_H
#define PROBED_REMOTE_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "errbuf.h"

#define REMOTE_EXEC_THREADS_MAX 256 /* asked at once; a process with more: its first ones */

struct remote_exec {
    pid_t pid;
    size_t n;                                  /* threads asked */
    uint64_t pending[REMOTE_EXEC_THREADS_MAX]; /* each one's pending-call int32 */
};

/* Asks every Python thread of @target to run @script_in_target (the path as the target sees
 * it) at its next safe point. */
int remote_exec_request(const struct proc_grant *target, const char *script_in_target,
                        struct remote_exec *ret, struct errbuf *err);

/* Withdraws the request from the threads that have not taken it yet (their flag still 1):
 * once the script's work is seen done, or before falling back to ptrace. A thread taking it
 * in the same instant runs the script all the same; the script must allow that (stubctl.c's
 * loads one copy of the stub, whose second load is a no-op). */
void remote_exec_withdraw(struct remote_exec *req);

#endif
