/* perfstack.c - see perfstack.h. */
#define _GNU_SOURCE
#include "native/perfstack.h"

#include <asm/perf_regs.h>
#include <dirent.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "errbuf.h"

/* The user registers asked for, in the order the kernel writes them (bit order), and where
 * each goes in DWARF's numbering. */
#define REGS_MASK                                                                                  \
    ((1ull << PERF_REG_X86_AX) | (1ull << PERF_REG_X86_BX) | (1ull << PERF_REG_X86_CX) |           \
     (1ull << PERF_REG_X86_DX) | (1ull << PERF_REG_X86_SI) | (1ull << PERF_REG_X86_DI) |           \
     (1ull << PERF_REG_X86_BP) | (1ull << PERF_REG_X86_SP) | (1ull << PERF_REG_X86_IP) |           \
     (0xffull << PERF_REG_X86_R8))
static const int dwarf_of_perf[] = {
    0 /* ax */,
    3 /* bx */,
    2 /* cx */,
    1 /* dx */,
    4 /* si */,
    5 /* di */,
    6 /* bp */,
    7 /* sp */,
    16 /* ip */,
    8,
    9,
    10,
    11,
    12,
    13,
    14,
    15 /* r8-r15 */,
};
#define N_REGS (sizeof(dwarf_of_perf) / sizeof(dwarf_of_perf[0]))

struct ring {
    pid_t tid;
    int fd;
    struct perf_event_mmap_page *page; /* ring_pages data pages follow */
    bool seen;                         /* in the last /proc/PID/task pass */
};

struct perfstack {
    pid_t pid;
    int prog_fd; /* >= 0: each event runs this BPF program and has no ring */
    uint32_t rate_hz, stack_bytes, ring_pages;
    size_t page_size;
    struct ring rings[PERFSTACK_THREADS_MAX];
    size_t n_rings;
    uint8_t *record; /* one record, unwrapped from a ring's end */
    size_t record_cap;
};

/* A cpu-clock event firing every 1/rate_hz of the thread's CPU time, with a ring of its own or
 * running the BPF program. */
static int open_event(struct perfstack *ps, pid_t tid, struct errbuf *err)
{
    struct perf_event_attr attr = {
        .size = sizeof(attr),
        .type = PERF_TYPE_SOFTWARE,
        .config = PERF_COUNT_SW_CPU_CLOCK, /* no PMU in VMs; cpu-clock works everywhere */
        /* a fixed period of CPU time, not .freq: in freq mode the kernel starts at a period of
         * one and retunes it at ticks, so each time a thread starts (or after a stall) it
         * fires a burst that can fill the ring between two drains */
        .sample_period = 1000000000u / ps->rate_hz,
        .exclude_hv = 1,
    };
    int fd;

    if (ps->prog_fd >= 0) {
        attr.disabled = 1; /* enabled once the program is in place */
    } else {
        attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                           PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
        attr.sample_regs_user = REGS_MASK;
        attr.sample_stack_user = ps->stack_bytes;
        attr.use_clockid = 1;
        attr.clockid = CLOCK_MONOTONIC;
        attr.watermark = 1;
        attr.wakeup_watermark = ps->ring_pages * 4096 / 2; /* nobody waits: we poll */
    }
    fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ESRCH)
            return -ESRCH;              /* the thread exited meanwhile */
        if (e == EMFILE || e == ENFILE) /* an event is a file: not a matter of rights */
            return errbuf_set(err, -e,
                              "pid %d: perf_event_open for thread %d: %s (an event a thread; "
                              "raise the daemon's open-files limit, LimitNOFILE)",
                              (int)ps->pid, (int)tid, strerror(e));
        return errbuf_set(
            err, -e,
            "pid %d: perf_event_open for thread %d: %s (root or CAP_PERFMON needed, or "
            "kernel.perf_event_paranoid <= 1)",
            (int)ps->pid, (int)tid, strerror(e));
    }
    if (ps->prog_fd >= 0 && (ioctl(fd, PERF_EVENT_IOC_SET_BPF, ps->prog_fd) < 0 ||
                             ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) < 0)) {
        int e = errno;
        close(fd);
        return errbuf_set(err, -e, "pid %d: attaching the eBPF sampler to thread %d: %s",
                          (int)ps->pid, (int)tid, strerror(e));
    }
    return fd;
}

static int open_ring(struct perfstack *ps, pid_t tid, struct errbuf *err)
{
    struct ring *r = &ps->rings[ps->n_rings];
    int fd;
    void *map = NULL;

    if (ps->n_rings == PERFSTACK_THREADS_MAX)
        return 0; /* the first PERFSTACK_THREADS_MAX threads are sampled */
    fd = open_event(ps, tid, err);
    if (fd < 0)
        return fd == -ESRCH ? 0 : fd;
    if (ps->prog_fd < 0) {
        map = mmap(NULL, (ps->ring_pages + 1) * ps->page_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return errbuf_set(err, -e, "pid %d: mapping the perf ring of thread %d: %s",
                              (int)ps->pid, (int)tid, strerror(e));
        }
    }
    *r = (struct ring){.tid = tid, .fd = fd, .page = map, .seen = true};
    ps->n_rings++;
    return 0;
}

static void close_ring(struct perfstack *ps, struct ring *r)
{
    if (r->page)
        munmap(r->page, (ps->ring_pages + 1) * ps->page_size);
    close(r->fd);
}

int perfstack__refresh(struct perfstack *ps, struct errbuf *err)
{
    char path[64];
    DIR *d;
    struct dirent *de;
    int rc = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)ps->pid);
    d = opendir(path);
    if (!d)
        return errbuf_set(err, -errno, "pid %d: listing its threads: %s", (int)ps->pid,
                          strerror(errno));
    for (size_t i = 0; i < ps->n_rings; i++)
        ps->rings[i].seen = false;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(de->d_name);
        size_t i;
        if (tid <= 0)
            continue;
        for (i = 0; i < ps->n_rings && ps->rings[i].tid != tid; i++)
            ;
        if (i < ps->n_rings)
            ps->rings[i].seen = true;
        else
            rc = open_ring(ps, tid, err);
    }
    closedir(d);
    for (size_t i = 0; i < ps->n_rings;) { /* threads gone: their rings go (drained first) */
        if (ps->rings[i].seen) {
            i++;
            continue;
        }
        close_ring(ps, &ps->rings[i]);
        ps->rings[i] = ps->rings[--ps->n_rings];
    }
    return rc;
}

static int open_common(pid_t pid, uint32_t rate_hz, int prog_fd, uint32_t stack_bytes,
                       uint32_t ring_pages, struct perfstack **ret, struct errbuf *err)
{
    struct perfstack *ps = calloc(1, sizeof(*ps));
    int r;

    if (!ps)
        return errbuf_set(err, -ENOMEM, "pid %d: out of memory", (int)pid);
    *ps = (struct perfstack){.pid = pid,
                             .prog_fd = prog_fd,
                             .rate_hz = rate_hz,
                             .stack_bytes = stack_bytes & ~7u, /* the kernel wants 8-aligned */
                             .ring_pages = ring_pages,
                             .page_size = (size_t)sysconf(_SC_PAGESIZE),
                             .record_cap = 64 * 1024};
    ps->record = malloc(ps->record_cap);
    r = ps->record ? perfstack__refresh(ps, err)
                   : errbuf_set(err, -ENOMEM, "pid %d: out of memory", (int)pid);
    if (r == 0 && ps->n_rings == 0)
        r = errbuf_set(err, -ESRCH, "pid %d: no thread to sample (gone?)", (int)pid);
    if (r < 0) {
        perfstack_free(ps);
        return r;
    }
    *ret = ps;
    return 0;
}

int perfstack_open(pid_t pid, uint32_t rate_hz, uint32_t stack_bytes, uint32_t ring_pages,
                   struct perfstack **ret, struct errbuf *err)
{
    return open_common(pid, rate_hz, -1, stack_bytes, ring_pages, ret, err);
}

int perfstack_open_bpf(pid_t pid, uint32_t rate_hz, int prog_fd, struct perfstack **ret,
                       struct errbuf *err)
{
    return open_common(pid, rate_hz, prog_fd, 0, 0, ret, err);
}

void perfstack_free(struct perfstack *ps)
{
    if (!ps)
        return;
    for (size_t i = 0; i < ps->n_rings; i++)
        close_ring(ps, &ps->rings[i]);
    free(ps->record);
    free(ps);
}

void perfstack__set_rate(struct perfstack *ps, uint32_t rate_hz)
{
    uint64_t period = 1000000000u / rate_hz;

    ps->rate_hz = rate_hz; /* for the threads born from now on */
    for (size_t i = 0; i < ps->n_rings; i++)
        ioctl(ps->rings[i].fd, PERF_EVENT_IOC_PERIOD, &period); /* fails only for one gone */
}

size_t perfstack__threads(const struct perfstack *ps)
{
    return ps->n_rings;
}

/* One PERF_RECORD_SAMPLE: ip, pid/tid, time, abi + registers, size + stack + dyn_size. */
static void parse_sample(const uint8_t *p, size_t len, perfstack_fn fn, void *ctx)
{
    const uint8_t *end = p + len;
    struct pyf_stack_copy copy = {0};
    uint64_t v, time_ns, abi, size;

    p += sizeof(struct perf_event_header) + 8; /* the header, then ip (also in the regs) */
    if (end - p < 24)
        return;
    memcpy(&v, p, 8);
    copy.tid = (pid_t)(v >> 32);
    memcpy(&time_ns, p + 8, 8);
    memcpy(&abi, p + 16, 8);
    p += 24;
    if (abi == PERF_SAMPLE_REGS_ABI_NONE)
        return; /* a kernel thread, or no user state */
    if ((size_t)(end - p) < N_REGS * 8 + 8)
        return;
    for (size_t i = 0; i < N_REGS; i++)
        memcpy(&copy.regs[dwarf_of_perf[i]], p + 8 * i, 8);
    p += N_REGS * 8;
    memcpy(&size, p, 8);
    p += 8;
    if (size == 0 || (size_t)(end - p) < size + 8)
        return;
    memcpy(&v, p + size, 8); /* dyn_size: how much of the copy is the stack's */
    copy.stack = p;
    copy.size = v < size ? v : size;
    fn(ctx, &copy, time_ns);
}

static void drain_ring(struct perfstack *ps, struct ring *r, perfstack_fn fn, void *ctx,
                       uint64_t *lost)
{
    const uint8_t *data = (const uint8_t *)r->page + ps->page_size;
    uint64_t size = (uint64_t)ps->ring_pages * ps->page_size;
    uint64_t head = __atomic_load_n(&r->page->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = r->page->data_tail;

    while (tail < head) {
        struct perf_event_header h;
        uint64_t off = tail % size;
        const uint8_t *rec;

        if (size - off >= sizeof(h)) {
            memcpy(&h, data + off, sizeof(h));
        } else {
            memcpy(&h, data + off, size - off);
            memcpy((uint8_t *)&h + (size - off), data, sizeof(h) - (size - off));
        }
        if (h.size == 0 || h.size > ps->record_cap)
            break; /* not a record we can read: skip what is left */
        if (off + h.size <= size) {
            rec = data + off;
        } else { /* wraps past the ring's end: one contiguous copy */
            memcpy(ps->record, data + off, size - off);
            memcpy(ps->record + (size - off), data, h.size - (size - off));
            rec = ps->record;
        }
        if (h.type == PERF_RECORD_SAMPLE)
            parse_sample(rec, h.size, fn, ctx);
        else if (h.type == PERF_RECORD_LOST && h.size >= sizeof(h) + 16) {
            uint64_t n;
            memcpy(&n, rec + sizeof(h) + 8, 8);
            *lost += n;
        }
        tail += h.size;
    }
    __atomic_store_n(&r->page->data_tail, head, __ATOMIC_RELEASE);
}

int perfstack__drain(struct perfstack *ps, perfstack_fn fn, void *ctx, uint64_t *ret_lost)
{
    *ret_lost = 0;
    for (size_t i = 0; i < ps->n_rings && ps->prog_fd < 0; i++)
        drain_ring(ps, &ps->rings[i], fn, ctx, ret_lost);
    return 0;
}
