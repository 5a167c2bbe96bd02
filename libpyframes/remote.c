/* remote.c - process_vm_readv() wrappers, or a core file's reader; see remote.h. */
#define _GNU_SOURCE
#include "remote.h"

#include "core.h"

#include <errno.h>
#include <limits.h>

#ifdef PYF_FAULTS
struct remote_faults remote_faults;

static int fault_hit(void)
{
    remote_faults.n_reads++;
    if (remote_faults.countdown <= 0 || --remote_faults.countdown > 0)
        return 0;
    return remote_faults.err ? -remote_faults.err : -EFAULT;
}
#else
static inline int fault_hit(void)
{
    return 0;
}
#endif

int remote_readv(const struct remote_src *src, const struct iovec *local,
                 const struct iovec *remote, size_t n)
{
    if (src->core)
        return core_readv(src->core, local, remote, n);
    /* process_vm_readv() takes at most IOV_MAX ranges on each side. */
    while (n > 0) {
        size_t batch = n < IOV_MAX ? n : IOV_MAX;
        size_t want = 0;
        ssize_t got;
        int r = fault_hit();

        if (r < 0)
            return r;
        for (size_t i = 0; i < batch; i++)
            want += remote[i].iov_len;
        got = process_vm_readv(src->pid, local, batch, remote, batch, 0);
        if (got < 0)
            return -errno;
        if ((size_t)got != want)
            return -EFAULT; /* a range was (partly) unmapped */
        local += batch;
        remote += batch;
        n -= batch;
    }
    return 0;
}

int remote_read(const struct remote_src *src, uint64_t raddr, void *buf, size_t size)
{
    struct iovec l = {.iov_base = buf, .iov_len = size};
    struct iovec r = {.iov_base = (void *)(uintptr_t)raddr, .iov_len = size};

    if (size == 0)
        return 0;
    return remote_readv(src, &l, &r, 1);
}

int remote_read_u64(const struct remote_src *src, uint64_t raddr, uint64_t *ret_value)
{
    uint64_t v;
    int r = remote_read(src, raddr, &v, sizeof(v));

    if (r == 0)
        *ret_value = v;
    return r;
}
