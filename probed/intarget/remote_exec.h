/*
 * remote_exec.h - makes a CPython 3.14+ target run a script through PEP 768's safe external
 * debugger hook, the way sys.remote_exec() does: the script's path, a pending-call flag and
 * one eval-breaker bit are written into the main thread's state (process_vm_writev), and the
 * main thread runs the file the next time it checks its eval breaker (while it runs Python:
 * at least every switch interval; blocked in a C call, once the call returns). No ptrace, no
 * code written into the target, no register touched.
 *
 * Only the main thread is asked: its thread state lives as long as the interpreter, where
 * another thread's is freed when the thread ends, and a write into it after the list was read
 * could land in memory the target has given to something else.
 *
 * Threads: any; one request per target at a time (the caller serialises). Memory: the
 * request holds where it wrote, nothing else. Failure: -errno with why in @err, nothing
 * written: -ENOSYS the version has no such hook (before 3.14), -EOPNOTSUPP it runs with the
 * hook off (-X disable_remote_debug), has no main thread state, or cannot be read so, and the
 * caller falls back to ptrace (inject.h); -ESRCH/-EPERM the granted process is gone or
 * another's (procfs.h).
 */
#ifndef PROBED_REMOTE_EXEC_H
#define PROBED_REMOTE_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "errbuf.h"
#include "pyframes.h"

struct remote_exec {
    pid_t pid;
    struct pyf_remote_exec at; /* where its main thread takes a request */
    bool sent;
};

/* Whether @target's main thread can be asked (its version has the hook, and it is on): 0 and
 * where, in @ret; nothing is written. */
int remote_exec_find(const struct proc_grant *target, struct remote_exec *ret, struct errbuf *err);

/* Asks it to run @script_in_target (the path as the target sees it) at its next safe point,
 * once @target's grant still holds. */
int remote_exec_send(struct remote_exec *req, const struct proc_grant *target,
                     const char *script_in_target, struct errbuf *err);

/* Withdraws a request the main thread has not taken yet (its flag still 1): true then; false
 * when it was taken (the script runs, or ran). Taken in the same instant, the script runs all
 * the same: it must allow that (stubctl.c's loads the copy ptrace then loads, which the
 * loader does not load twice). */
bool remote_exec_withdraw(struct remote_exec *req);

#endif
