/*
 * remote.h - reading another process's memory: the live process with process_vm_readv(), or
 * a core file of one (core.h), behind the same calls, so that every reader of libpyframes
 * reads a core as it reads a process.
 *
 * A read is all or nothing: a short read (the target unmapped a page under us) is -EFAULT.
 * remote_readv() batches many ranges into as few syscalls as possible; that is what keeps a
 * sample cheap and what makes it near-atomic (one syscall gives the target one chance to
 * change the data under us, not one per frame).
 *
 * Threads: any. Memory: none. Failure: -errno (ESRCH: gone, EPERM: denied, EFAULT: torn).
 * In a PYF_FAULTS build, tests arm remote_faults to make the Nth read fail.
 */
#ifndef PYF_REMOTE_H
#define PYF_REMOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Addresses a 64-bit user-space pointer can hold; anything else is not a pointer. */
static inline int remote_plausible(uint64_t raddr)
{
    return raddr >= 4096 && raddr < (1ULL << 47);
}

struct pyf_core;

/* Where memory is read from: the live process @pid, or the core file @core when it is set. */
struct remote_src {
    pid_t pid;
    const struct pyf_core *core;
};

int remote_read(const struct remote_src *src, uint64_t raddr, void *buf, size_t size);
/* @n ranges; local[i] and remote[i] have the same length. */
int remote_readv(const struct remote_src *src, const struct iovec *local,
                 const struct iovec *remote, size_t n);
int remote_read_u64(const struct remote_src *src, uint64_t raddr, uint64_t *ret_value);

#ifdef PYF_FAULTS
/* Fault injection for tests/fault: the @countdown-th read from now fails with -@err, or
 * (err == 0) returns a short read. */
struct remote_faults {
    long countdown;
    int err;
    unsigned long n_reads; /* reads seen, so a test can sweep every position */
};
extern struct remote_faults remote_faults;
#endif

#endif
