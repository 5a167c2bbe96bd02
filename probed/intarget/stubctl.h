/*
 * stubctl.h - the daemon's side of the injected stub (stub/stub.c): loads it into a target
 * the first time code must run there, then sends it requests and waits for the replies.
 *
 * The stub lives in /tmp/probed-PID-STARTTIME/ inside the target's mount namespace (reached
 * through /proc/PID/root): a directory owned by the target's user, mode 0700, holding the
 * library and its socket (0600), so only root and that user can reach the stub. A target
 * keeps its stub for life: the next request connects to the socket that is already there,
 * also after a restart of the daemon. That directory is the user's to change at any instant:
 * it is reached only through fds opened without following links and checked on the opened
 * object, its files are created with the user's fsuid, and the socket's peer must be the
 * target (SO_PEERCRED), else -EPERM (docs/SECURITY.md).
 * Threads: any worker; one injection at a time (a mutex), requests in parallel, but never
 * beside an exclusive one in the same target (struct stub_call).
 * Memory: a reply's text is the caller's (bounded by the stub's protocol).
 * Failure: -errno, with what failed and why in @err; a timeout is not an error (the code may
 * still be running in the target, and the reply says so).
 */
#ifndef PROBED_STUBCTL_H
#define PROBED_STUBCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "errbuf.h"

#include "stub/stub_proto.h"

struct stubctl;

/* @stub_path: libprobed-stub.so, copied into each target. */
int stubctl_new(const char *stub_path, struct stubctl **ret);
void stubctl_free(struct stubctl *sc); /* NULL is a no-op */

struct stub_call {
    enum stub_kind kind;
    unsigned flags; /* STUB_MAIN_THREAD */
    uint32_t session;
    const char *code;
    int64_t timeout_ms;
    bool may_inject; /* false: -ENOENT when the target has no stub yet */
    /* no other call of ours may be in the target meanwhile: tracemalloc's start and stop race
     * with a thread entering Python (its thread state is allocated through the hooks being
     * swapped) and crash the target (CPython 3.11 with an eval beside `allocations off`: 4 of
     * 15 targets died with SIGSEGV). Waits up to STUBCTL_EXCLUSIVE_WAIT_MS for the calls in it
     * (then -EBUSY); the others wait for it. */
    bool exclusive;
    /* STUB_CATCH_LISTEN: where the connection goes, kept open, when the stub answers STUB_OK
     * (the caller's to close); else it is closed */
    int *ret_fd;
};

#define STUBCTL_EXCLUSIVE_WAIT_MS 10000

struct stub_result {
    enum stub_status status;
    char *text;       /* owned by the caller (free()); NULL on a timeout */
    bool timed_out;   /* no reply within the timeout: the code may still be running */
    bool injected;    /* this call loaded the stub */
    double inject_ms; /* how long loading it took (0 when it was there) */
    /* how it was loaded: "remote_exec" (PEP 768's hook, 3.14+), "ptrace", or NULL (it was
     * there) */
    const char *entry;
};

/* Calls the stub of @target's process, which must still be the one granted (checked before it
 * is opened, once held for an injection, and after its socket is connected: -ESRCH or -EPERM
 * otherwise, and nothing is sent). */
int stubctl__call(struct stubctl *sc, const struct proc_grant *target, const struct stub_call *call,
                  struct stub_result *ret, struct errbuf *err);

#endif
