/* nccl.c - see nccl.h. */
#define _GNU_SOURCE
#include "gpu/nccl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "common/procfs.h"

#ifdef PROBED_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <stdarg.h>

#include "ncclcalls.h"
#include "ncclcalls.skel.h"

#define PROCS_MAX 1024 /* processes watched (the registry's targets are fewer) */

/* Each entry point and its program. A symbol the library lacks (an older NCCL) is skipped; a
 * library with none of the calls' is not NCCL's. */
struct probe {
    const char *func;
    size_t prog; /* offset of the program's pointer in the skeleton's progs */
    bool ret;    /* a uretprobe */
    bool call;   /* a call's (else a communicator's) */
};

#define PROG(name) offsetof(struct ncclcalls_bpf, progs.name)
static const struct probe PROBES[] = {
    {"ncclAllReduce", PROG(all_reduce), false, true},
    {"ncclBroadcast", PROG(broadcast), false, true},
    {"ncclBcast", PROG(bcast), false, true},
    {"ncclReduce", PROG(reduce), false, true},
    {"ncclAllGather", PROG(all_gather), false, true},
    {"ncclReduceScatter", PROG(reduce_scatter), false, true},
    {"ncclSend", PROG(send), false, true},
    {"ncclRecv", PROG(recv), false, true},
    {"ncclCommInitRank", PROG(init_rank), false, false},
    {"ncclCommInitRank", PROG(init_done), true, false},
    {"ncclCommInitRankConfig", PROG(init_rank), false, false},
    {"ncclCommInitRankConfig", PROG(init_done), true, false},
    {"ncclCommSplit", PROG(comm_split), false, false},
    {"ncclCommSplit", PROG(init_done), true, false},
    {"ncclCommDestroy", PROG(comm_end), false, false},
    {"ncclCommAbort", PROG(comm_end), false, false},
};
#define N_PROBES (sizeof(PROBES) / sizeof(PROBES[0]))

static const char *const OPS[NCCL_OP_N] = {"all_reduce",     "broadcast", "reduce", "all_gather",
                                           "reduce_scatter", "send",      "recv"};

/* ncclDataType_t: torch's name and its size in bytes */
static const struct {
    const char *name;
    int size;
} DTYPES[] = {{"int8", 1},    {"uint8", 1},    {"int32", 4},         {"uint32", 4},
              {"int64", 8},   {"uint64", 8},   {"float16", 2},       {"float32", 4},
              {"float64", 8}, {"bfloat16", 2}, {"float8_e4m3fn", 1}, {"float8_e5m2", 1}};
#define N_DTYPES (sizeof(DTYPES) / sizeof(DTYPES[0]))

struct proc {
    struct nccl_target t;
    struct bpf_link *links[N_PROBES];
    size_t n_links;
    char library[256]; /* the mapped file's path, "" none found */
    int64_t next_look_ns;
    bool given; /* in this pass's targets */
};

struct nccl_watch {
    struct ncclcalls_bpf *skel;
    struct ring_buffer *rb;
    struct proc *procs;
    size_t n;
    int64_t real_minus_mono; /* at this drain */
    nccl_call_fn fn;         /* this drain's */
    void *ctx;
    size_t drained;
    uint64_t calls, unknown;
};

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    (void)level, (void)fmt, (void)ap;
    return 0;
}

/* Gives back @n of @uid's share of the communicators table (per_uid), through the program's
 * give_back: atomically against the probes' increments (another process of that user making
 * communicators at that instant). */
static void give_back_share(struct nccl_watch *w, uint32_t uid, uint32_t n)
{
    struct nccl_give_back a = {.uid = uid, .n = n};
    LIBBPF_OPTS(bpf_test_run_opts, run, .ctx_in = &a, .ctx_size_in = sizeof(a));

    if (n && bpf_prog_test_run_opts(bpf_program__fd(w->skel->progs.give_back), &run) < 0)
        log_msg(LOG_WARN, "nccl: giving back %u communicators of uid %u's share: %s", n, uid,
                strerror(errno));
}

/* Deletes @pid's communicators and makings in progress from the program's maps, so those of
 * ended processes never fill them (their keys hold the pid), and gives back their user's
 * share. The keys are gathered first: a hash map's walk restarts when the key it stands on is
 * deleted. */
static void forget_pid(struct nccl_watch *w, pid_t pid)
{
    int comms = bpf_map__fd(w->skel->maps.comms), pending = bpf_map__fd(w->skel->maps.pending);
    struct nccl_comm_key *keys = calloc(NCCL_COMMS_MAX, sizeof(*keys)), k;
    __u64 *tids = calloc(NCCL_PENDING_MAX, sizeof(*tids)), t;
    size_t n = 0, nt = 0;
    uint32_t uid = 0, given = 0;
    void *at = NULL;

    while (keys && n < NCCL_COMMS_MAX && bpf_map_get_next_key(comms, at, &k) == 0) {
        if (k.pid == (__u32)pid)
            keys[n++] = k;
        at = &k;
    }
    for (size_t i = 0; i < n; i++) { /* a process's are all one user's: given back at once */
        struct nccl_comm c;
        if (bpf_map_lookup_elem(comms, &keys[i], &c) == 0 &&
            bpf_map_delete_elem(comms, &keys[i]) == 0) {
            if (given && c.uid != uid) {
                give_back_share(w, uid, given);
                given = 0;
            }
            uid = c.uid;
            given++;
        }
    }
    give_back_share(w, uid, given);
    at = NULL;
    while (tids && nt < NCCL_PENDING_MAX && bpf_map_get_next_key(pending, at, &t) == 0) {
        if ((pid_t)(t >> 32) == pid)
            tids[nt++] = t;
        at = &t;
    }
    for (size_t i = 0; i < nt; i++)
        bpf_map_delete_elem(pending, &tids[i]);
    bpf_map_delete_elem(bpf_map__fd(w->skel->maps.per_pid), &(__u32){(__u32)pid});
    free(keys);
    free(tids);
}

static void unwatch(struct nccl_watch *w, struct proc *p)
{
    for (size_t i = 0; i < p->n_links; i++)
        bpf_link__destroy(p->links[i]);
    if (p->n_links)
        forget_pid(w, p->t.pid);
    p->n_links = 0;
}

/* The first mapping of a libnccl.so* file (offset 0), from /proc/PID/maps: its map_files link
 * into @link. */
static bool find_library(struct proc *p, char *link, size_t size)
{
    char name[32], *line = NULL;
    size_t cap = 0;
    bool found = false;
    FILE *f;

    snprintf(name, sizeof(name), "/proc/%d/maps", (int)p->t.pid);
    if (!(f = fopen(name, "re")))
        return false;
    while (!found && getline(&line, &cap, f) > 0) {
        unsigned long long start, end, offset;
        const char *path, *base;
        int at = 0;

        if (sscanf(line, "%llx-%llx %*4s %llx %*s %*[0-9] %n", &start, &end, &offset, &at) != 3 ||
            at == 0)
            continue;
        path = line + at;
        base = strrchr(path, '/');
        if (offset != 0 || !base || strncmp(base + 1, "libnccl.so", 10) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        snprintf(link, size, "/proc/%d/map_files/%llx-%llx", (int)p->t.pid, start, end);
        snprintf(p->library, sizeof(p->library), "%s", path);
        found = true;
    }
    free(line);
    fclose(f);
    return found;
}

/* Attaches the probes to @p's libnccl, if it maps one and is still the process given. */
static void look(struct nccl_watch *w, struct proc *p)
{
    char link[96];
    int64_t start = 0;
    size_t calls = 0;
    int err = 0;

    p->next_look_ns = mono_ns() + NCCL_RESCAN_NS;
    if (procfs_start_time(p->t.pid, &start) < 0 || start != p->t.start_time ||
        !find_library(p, link, sizeof(link)))
        return;
    for (size_t i = 0; i < N_PROBES; i++) {
        struct bpf_program *prog = *(struct bpf_program **)((char *)w->skel + PROBES[i].prog);
        LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = PROBES[i].func, .retprobe = PROBES[i].ret);
        struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, p->t.pid, link, 0, &opts);
        if (!l) {
            err = err ? err : errno;
            continue; /* a symbol this version lacks */
        }
        p->links[p->n_links++] = l;
        calls += PROBES[i].call;
    }
    /* the pid may have been reused meanwhile: then the probes are another process's */
    if (procfs_start_time(p->t.pid, &start) < 0 || start != p->t.start_time || calls == 0) {
        if (calls == 0)
            log_msg(LOG_WARN, "NCCL calls of pid %d: no probe attached to %s (%s)", (int)p->t.pid,
                    p->library, strerror(err ? err : ENOENT));
        unwatch(w, p);
        return;
    }
    log_msg(LOG_INFO, "NCCL calls of pid %d: %zu probes on %s", (int)p->t.pid, p->n_links,
            p->library);
}

void nccl__watch(struct nccl_watch *w, const struct nccl_target *targets, size_t n)
{
    int64_t now = mono_ns();

    for (size_t k = 0; k < w->n; k++)
        w->procs[k].given = false;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < w->n && !(w->procs[k].t.pid == targets[i].pid &&
                             w->procs[k].t.start_time == targets[i].start_time))
            k++;
        if (k == w->n) {
            if (w->n == PROCS_MAX)
                continue;
            w->procs[w->n++] = (struct proc){.t = targets[i], .next_look_ns = now};
        }
        w->procs[k].t.id = targets[i].id;
        w->procs[k].given = true;
        if (w->procs[k].n_links == 0 && now >= w->procs[k].next_look_ns)
            look(w, &w->procs[k]);
    }
    for (size_t k = 0; k < w->n;) /* the others: detached, or ended */
        if (!w->procs[k].given) {
            unwatch(w, &w->procs[k]);
            w->procs[k] = w->procs[--w->n];
        } else {
            k++;
        }
}

static int on_event(void *ctx, void *data, size_t size)
{
    struct nccl_watch *w = ctx;
    const struct nccl_event *e = data;
    struct nccl_call c = {0};
    size_t k = 0;
    int64_t bytes;

    if (size < sizeof(*e))
        return 0;
    while (k < w->n && w->procs[k].t.pid != (pid_t)e->pid)
        k++;
    if (k == w->n) { /* let go of between the call and this drain */
        w->unknown++;
        return 0;
    }
    c.target_id = w->procs[k].t.id;
    c.ts_ns = (int64_t)e->ts_ns + w->real_minus_mono;
    c.tid = (int32_t)e->tid;
    c.op = e->op < NCCL_OP_N ? OPS[e->op] : "?";
    c.dtype = e->dtype >= 0 && (size_t)e->dtype < N_DTYPES ? DTYPES[e->dtype].name : "?";
    /* the count and ranks are the process's to choose: a product past int64 is said as its max */
    if (e->count > INT64_MAX ||
        __builtin_mul_overflow(
            (int64_t)e->count,
            (int64_t)(e->dtype >= 0 && (size_t)e->dtype < N_DTYPES ? DTYPES[e->dtype].size : 1),
            &bytes) ||
        (e->op == NCCL_OP_REDUCE_SCATTER && e->nranks > 0 && /* its count: each rank's share */
         __builtin_mul_overflow(bytes, (int64_t)e->nranks, &bytes)))
        bytes = INT64_MAX;
    c.bytes = bytes;
    c.group_size = e->nranks;
    c.peer = e->peer;
    c.seq = (int64_t)e->seq;
    c.source = e->from_init && e->op != NCCL_OP_SEND && e->op != NCCL_OP_RECV ? "nccl" : "trace";
    if (e->id)
        snprintf(c.group, sizeof(c.group), "nccl:%016" PRIx64, (uint64_t)e->id);
    else
        snprintf(c.group, sizeof(c.group), "nccl@%" PRIx64, (uint64_t)e->comm);
    w->fn(w->ctx, &c);
    w->calls++;
    w->drained++;
    return 0;
}

size_t nccl__drain(struct nccl_watch *w, nccl_call_fn fn, void *ctx)
{
    w->real_minus_mono = real_ns() - mono_ns();
    w->fn = fn;
    w->ctx = ctx;
    w->drained = 0;
    ring_buffer__consume(w->rb);
    return w->drained;
}

void nccl__stats(struct nccl_watch *w, struct nccl_stats *ret)
{
    int ncpu = libbpf_num_possible_cpus();
    uint64_t lost = 0;

    *ret = (struct nccl_stats){.calls = w->calls, .unknown = w->unknown};
    for (size_t k = 0; k < w->n; k++)
        ret->processes += w->procs[k].n_links > 0;
    if (ncpu > 0) {
        uint64_t *per = calloc((size_t)ncpu, sizeof(*per));
        for (uint32_t key = 0; per && key < 2; key++)
            if (bpf_map_lookup_elem(bpf_map__fd(w->skel->maps.lost), &key, per) == 0)
                for (int c = 0; c < ncpu; c++)
                    lost += per[c];
        free(per);
    }
    ret->lost = lost;
}

const char *nccl__library(struct nccl_watch *w, pid_t pid)
{
    for (size_t k = 0; k < w->n; k++)
        if (w->procs[k].t.pid == pid && w->procs[k].n_links)
            return w->procs[k].library;
    return "";
}

int nccl_open(struct nccl_watch **ret, struct errbuf *err)
{
    struct nccl_watch *w;
    int r;

    if (!procfs_in_initial_pidns())
        return errbuf_set(err, -EOPNOTSUPP,
                          "probed runs outside the initial pid namespace: the probes' pids would"
                          " not be its own");
    w = calloc(1, sizeof(*w));
    if (!w || !(w->procs = calloc(PROCS_MAX, sizeof(*w->procs)))) {
        free(w);
        return errbuf_set(err, -ENOMEM, "out of memory");
    }
    libbpf_set_print(quiet);
    w->skel = ncclcalls_bpf__open_and_load();
    if (!w->skel) {
        r = -errno;
        nccl_free(w);
        return errbuf_set(err, r ? r : -EINVAL,
                          "loading the NCCL uprobes: %s (needs CAP_BPF and CAP_PERFMON, and a"
                          " kernel with BTF)",
                          strerror(r ? -r : EINVAL));
    }
    w->rb = ring_buffer__new(bpf_map__fd(w->skel->maps.events), on_event, w, NULL);
    if (!w->rb) {
        r = -errno;
        nccl_free(w);
        return errbuf_set(err, r ? r : -ENOMEM, "the NCCL uprobes' ring buffer: %s",
                          strerror(r ? -r : ENOMEM));
    }
    *ret = w;
    return 0;
}

void nccl_free(struct nccl_watch *w)
{
    if (!w)
        return;
    for (size_t k = 0; k < w->n; k++)
        unwatch(w, &w->procs[k]);
    ring_buffer__free(w->rb);
    ncclcalls_bpf__destroy(w->skel);
    free(w->procs);
    free(w);
}

#else /* built without eBPF (PROBED_BPF=OFF) */

int nccl_open(struct nccl_watch **ret, struct errbuf *err)
{
    *ret = NULL;
    return errbuf_set(err, -EOPNOTSUPP, "probed was built without eBPF (PROBED_BPF=OFF)");
}

void nccl_free(struct nccl_watch *w)
{
    (void)w;
}

void nccl__watch(struct nccl_watch *w, const struct nccl_target *targets, size_t n)
{
    (void)w, (void)targets, (void)n;
}

size_t nccl__drain(struct nccl_watch *w, nccl_call_fn fn, void *ctx)
{
    (void)w, (void)fn, (void)ctx;
    return 0;
}

void nccl__stats(struct nccl_watch *w, struct nccl_stats *ret)
{
    (void)w;
    *ret = (struct nccl_stats){0};
}

const char *nccl__library(struct nccl_watch *w, pid_t pid)
{
    (void)w, (void)pid;
    return "";
}

#endif
