/* remote_exec.c - PEP 768's external debugger hook, written from outside; see remote_exec.h. */
#define _GNU_SOURCE
#include "intarget/remote_exec.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "pyframes.h"

#define THREADS_MAX 4096 /* read to find the main one */

static int write_at(pid_t pid, uint64_t raddr, const void *buf, size_t len)
{
    struct iovec local = {.iov_base = (void *)buf, .iov_len = len};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)raddr, .iov_len = len};
    ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);

    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EFAULT;
}

static int read_at(pid_t pid, uint64_t raddr, void *buf, size_t len)
{
    struct iovec local = {.iov_base = buf, .iov_len = len};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)raddr, .iov_len = len};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EFAULT;
}

/* One thread: the path, then the flag, then the bit (the order sys.remote_exec() uses: the
 * thread reads the path only once it sees the flag, and looks only once it sees the bit). */
static int ask_thread(pid_t pid, const struct pyf_remote_exec *at, const char *script)
{
    size_t len = strlen(script) + 1;
    int32_t one = 1;
    uint64_t breaker;
    unsigned byte;
    int r;

    if (len > at->script_size || at->eval_breaker_bit == 0)
        return -ENAMETOOLONG;
    if ((r = write_at(pid, at->script_raddr, script, len)) < 0 ||
        (r = write_at(pid, at->pending_raddr, &one, sizeof(one))) < 0 ||
        (r = read_at(pid, at->eval_breaker_raddr, &breaker, sizeof(breaker))) < 0)
        return r;
    /* Not atomic against the thread's own updates of the word, as in sys.remote_exec(): a
     * bit it sets in between is lost until it sets it again. Only the byte holding our bit
     * is written (x86-64: little-endian), which narrows that to the few bits it shares. */
    byte = (unsigned)__builtin_ctzll(at->eval_breaker_bit) / 8;
    breaker |= at->eval_breaker_bit;
    return write_at(pid, at->eval_breaker_raddr + byte, (const uint8_t *)&breaker + byte, 1);
}

/* A libpyframes failure: the process gone or another's stays so (no fallback); anything else
 * means this way is closed, and ptrace may still work. */
static int unsupported(struct errbuf *err, const struct pyf_err *e)
{
    int r = errbuf_from_pyf(err, e);

    return r == -ESRCH || r == -EPERM ? r : -EOPNOTSUPP;
}

int remote_exec_find(const struct proc_grant *target, struct remote_exec *ret, struct errbuf *err)
{
    struct pyf_thread *threads = calloc(THREADS_MAX, sizeof(*threads));
    const struct pyf_thread *main_thread = NULL;
    struct pyf_target *t = NULL;
    struct pyf_err e = {0};
    size_t n = 0;
    int r;

    *ret = (struct remote_exec){.pid = target->pid};
    if (!threads)
        return errbuf_set(err, -ENOMEM, "pid %d: remote exec: out of memory", (int)target->pid);
    r = pyf_target_open(target->pid, &t, &e);
    if (r == 0)
        r = pyf_target__threads(t, threads, THREADS_MAX, &n, &e);
    if (r < 0) {
        r = unsupported(err, &e);
        goto out;
    }
    for (size_t i = 0; i < n && !main_thread; i++)
        if (threads[i].tid == target->pid && threads[i].interp_id <= 0)
            main_thread = &threads[i];
    if (pyf_target__remote_exec(t, main_thread ? main_thread : &threads[0], &ret->at, &e) < 0) {
        r = PYF_VERSION_MINOR(pyf_target__info(t)->version) < 14
                ? errbuf_set(err, -ENOSYS, "%s", e.msg)
                : unsupported(err, &e);
        goto out;
    }
    if (!main_thread)
        r = errbuf_set(err, -EOPNOTSUPP, "pid %d: its main thread has no Python state to ask",
                       (int)target->pid);
out:
    pyf_target_free(t);
    free(threads);
    return r;
}

int remote_exec_send(struct remote_exec *req, const struct proc_grant *target,
                     const char *script_in_target, struct errbuf *err)
{
    int r;

    /* the process asked for, still: a pid taken since gets nothing */
    if ((r = procfs_grant_check(target, err->msg, sizeof(err->msg))) < 0)
        return r;
    r = ask_thread(req->pid, &req->at, script_in_target);
    if (r < 0)
        return errbuf_set(err, r, "pid %d: write the remote-exec request of its main thread: %s",
                          (int)req->pid, strerror(-r));
    req->sent = true;
    return 0;
}

bool remote_exec_withdraw(struct remote_exec *req)
{
    int32_t flag = 0, zero = 0;
    bool withdrawn = false;

    if (req->sent && read_at(req->pid, req->at.pending_raddr, &flag, sizeof(flag)) == 0 &&
        flag == 1)
        withdrawn = write_at(req->pid, req->at.pending_raddr, &zero, sizeof(zero)) == 0;
    req->sent = false;
    return withdrawn;
}
