/* bpfstack.c - see bpfstack.h. */
#define _GNU_SOURCE
#include "native/bpfstack.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/procfs.h"
#include "errbuf.h"
#include "oncpu.h"
#include "oncpu.skel.h"
#include "native/perfstack.h"

#define TRACKED_MAX 1024 /* Python threads whose thread state the program is told */
/* Room for 100 samples of 38 KiB: 10 ms of 100 threads at 1000 Hz, emptied every 10 ms */
#define RING_BYTES (4u << 20)

struct bpfstack {
    pid_t pid;
    struct oncpu_bpf *skel;
    struct ring_buffer *rb;
    struct perfstack *ps;     /* the events the program runs at */
    struct bpfstack_stats py; /* the py_* counters, counted in userspace */
    /* what the tstates map holds */
    pid_t tracked_tid[TRACKED_MAX];
    uint64_t tracked_ts[TRACKED_MAX];
    size_t n_tracked;
    /* during a drain */
    bpfstack_fn fn;
    void *fn_ctx;
};

/* libbpf's own messages go nowhere: every failure is reported by the caller, with its errno. */
static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    (void)level;
    (void)fmt;
    (void)ap;
    return 0;
}

static int on_event(void *ctx, void *data, size_t size)
{
    struct bpfstack *bs = ctx;
    const struct oncpu_event *e = data;
    struct pyf_stack_copy copy = {.tid = (pid_t)e->tid};
    struct pyf_frames_copy py = {.raddrs = e->frame_raddr,
                                 .bytes = &e->frames[0][0],
                                 .stride = ONCPU_FRAME_BYTES,
                                 .n = e->n_frames};
    uint64_t sp_off;

    if (size < sizeof(*e))
        return 0;
    memcpy(copy.regs, e->regs, sizeof(copy.regs));
    sp_off = copy.regs[PYF_DWARF_SP] - e->stack_base;
    if (sp_off < e->stack_bytes) {
        copy.stack = e->stack + sp_off;
        copy.size = e->stack_bytes - sp_off;
    }
    bs->py.py_copied += e->py == ONCPU_PY_OK;
    bs->py.py_none += e->py == ONCPU_PY_NONE;
    bs->py.py_truncated += e->py == ONCPU_PY_TRUNCATED;
    bs->py.py_fault += e->py == ONCPU_PY_FAULT;
    bs->fn(bs->fn_ctx, &copy, e->time_ns, e->py == ONCPU_PY_OK ? &py : NULL);
    return 0;
}

static int load(struct bpfstack *bs, const struct pyf_chain *chain, struct errbuf *err)
{
    struct stat ns, target_ns;
    char path[64];
    bool global_ids;
    int r;

    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)bs->pid);
    if (stat("/proc/self/ns/pid", &ns) < 0 || stat(path, &target_ns) < 0)
        return errbuf_set(err, -errno, "pid %d: the pid namespaces: %s", (int)bs->pid,
                          strerror(errno));
    /* A target in a container of its own (another pid namespace) is seen by its global ids,
     * which are ours only where we run in the initial namespace. */
    global_ids = ns.st_ino != target_ns.st_ino || ns.st_dev != target_ns.st_dev;
    if (global_ids && !procfs_in_initial_pidns())
        return errbuf_set(err, -EXDEV,
                          "pid %d is in a pid namespace below the daemon's, which is not the "
                          "initial one: the eBPF sampler cannot name its threads",
                          (int)bs->pid);
    libbpf_set_print(quiet);
    bs->skel = oncpu_bpf__open();
    if (!bs->skel)
        return errbuf_set(err, -errno, "pid %d: opening the eBPF sampler: %s", (int)bs->pid,
                          strerror(errno));
    bs->skel->rodata->target_tgid = (uint32_t)bs->pid;
    bs->skel->rodata->pidns_dev = (uint64_t)ns.st_dev;
    bs->skel->rodata->pidns_ino = (uint64_t)ns.st_ino;
    bs->skel->rodata->global_ids = global_ids;
    bs->skel->rodata->chain = (struct oncpu_chain){.ts_frame = chain->ts_frame,
                                                   .cframe_frame = chain->cframe_frame,
                                                   .fr_back = chain->fr_back,
                                                   .fr_bytes = chain->fr_bytes};
    bpf_map__set_max_entries(bs->skel->maps.events, RING_BYTES);
    r = oncpu_bpf__load(bs->skel);
    if (r < 0)
        return errbuf_set(
            err, r,
            "pid %d: loading the eBPF sampler: %s (CAP_BPF and CAP_PERFMON needed, and "
            "a kernel with BTF)",
            (int)bs->pid, strerror(-r));
    bs->rb = ring_buffer__new(bpf_map__fd(bs->skel->maps.events), on_event, bs, NULL);
    if (!bs->rb)
        return errbuf_set(err, -errno, "pid %d: mapping the eBPF sampler's ring: %s", (int)bs->pid,
                          strerror(errno));
    return 0;
}

int bpfstack_open(pid_t pid, uint32_t rate_hz, const struct pyf_chain *chain, struct bpfstack **ret,
                  struct errbuf *err)
{
    struct bpfstack *bs;
    int r;

    if (chain->fr_bytes > ONCPU_FRAME_BYTES)
        return errbuf_set(err, -EINVAL,
                          "pid %d: this Python's frames need %u bytes copied, the eBPF sampler "
                          "copies %d",
                          (int)pid, chain->fr_bytes, ONCPU_FRAME_BYTES);
    bs = calloc(1, sizeof(*bs));
    if (!bs)
        return errbuf_set(err, -ENOMEM, "pid %d: out of memory", (int)pid);
    bs->pid = pid;
    r = load(bs, chain, err);
    if (r == 0)
        r = perfstack_open_bpf(pid, rate_hz, bpf_program__fd(bs->skel->progs.oncpu_sample), &bs->ps,
                               err);
    if (r < 0) {
        bpfstack_free(bs);
        return r;
    }
    *ret = bs;
    return 0;
}

void bpfstack_free(struct bpfstack *bs)
{
    if (!bs)
        return;
    perfstack_free(bs->ps); /* the events first: the program stops running */
    ring_buffer__free(bs->rb);
    oncpu_bpf__destroy(bs->skel);
    free(bs);
}

int bpfstack__refresh(struct bpfstack *bs, struct errbuf *err)
{
    return perfstack__refresh(bs->ps, err);
}

static bool tracked(const struct bpfstack *bs, pid_t tid, uint64_t tstate)
{
    for (size_t i = 0; i < bs->n_tracked; i++)
        if (bs->tracked_tid[i] == tid)
            return bs->tracked_ts[i] == tstate;
    return false;
}

static bool listed(const struct pyf_thread *threads, size_t n, pid_t tid)
{
    for (size_t i = 0; i < n; i++)
        if (threads[i].tid == tid)
            return true;
    return false;
}

void bpfstack__track(struct bpfstack *bs, const struct pyf_thread *threads, size_t n)
{
    int fd = bpf_map__fd(bs->skel->maps.tstates);
    size_t with_tid = 0, same = 0, kept = 0;

    for (size_t i = 0; i < n; i++) { /* the usual tick: the same threads as last time */
        with_tid += threads[i].tid > 0;
        same += threads[i].tid > 0 && tracked(bs, threads[i].tid, threads[i].tstate_raddr);
    }
    if (same == with_tid && same == bs->n_tracked)
        return;
    for (size_t i = 0; i < bs->n_tracked; i++) { /* threads gone */
        uint32_t tid = (uint32_t)bs->tracked_tid[i];
        if (listed(threads, n, bs->tracked_tid[i]))
            continue;
        bpf_map_delete_elem(fd, &tid);
    }
    for (size_t i = 0; i < n && kept < TRACKED_MAX; i++) {
        uint32_t tid = (uint32_t)threads[i].tid;
        uint64_t ts = threads[i].tstate_raddr;
        if (threads[i].tid <= 0)
            continue; /* no OS thread (yet), or a version that does not say which */
        if (!tracked(bs, threads[i].tid, ts))
            bpf_map_update_elem(fd, &tid, &ts, BPF_ANY);
        bs->tracked_tid[kept] = threads[i].tid;
        bs->tracked_ts[kept++] = ts;
    }
    bs->n_tracked = kept;
}

void bpfstack__drain(struct bpfstack *bs, bpfstack_fn fn, void *ctx)
{
    bs->fn = fn;
    bs->fn_ctx = ctx;
    ring_buffer__consume(bs->rb);
}

void bpfstack__set_rate(struct bpfstack *bs, uint32_t rate_hz)
{
    perfstack__set_rate(bs->ps, rate_hz);
}

void bpfstack__stats(struct bpfstack *bs, struct bpfstack_stats *ret)
{
    int ncpu = libbpf_num_possible_cpus();
    struct oncpu_counts per_cpu[ncpu > 0 ? ncpu : 1];
    struct bpf_prog_info info = {0};
    uint32_t zero = 0, len = sizeof(info);

    *ret = bs->py;
    ret->samples = ret->lost = 0;
    if (ncpu <= 0 || bpf_map_lookup_elem(bpf_map__fd(bs->skel->maps.counts), &zero, per_cpu) < 0)
        return;
    for (int i = 0; i < ncpu; i++) {
        ret->samples += per_cpu[i].samples;
        ret->lost += per_cpu[i].lost;
    }
    if (bpf_obj_get_info_by_fd(bpf_program__fd(bs->skel->progs.oncpu_sample), &info, &len) == 0) {
        ret->run_ns = info.run_time_ns;
        ret->run_cnt = info.run_cnt;
    }
}

_Static_assert(ONCPU_DWARF_REGS == PYF_DWARF_REGS, "oncpu.h and pyframes_native.h: the registers");
