// SPDX-License-Identifier: GPL-2.0
/*
 * ncclcalls.bpf.c - uprobes on libnccl's exported C API in the processes the daemon watches
 * (probed/gpu/nccl.c attaches them to one process's libnccl): every collective and
 * point-to-point call, whoever issues it (torch.distributed from Python, DDP's Reducer, FSDP,
 * DeepSpeed, a compiled graph: they all end in these functions), with its arguments, into a
 * ring buffer the daemon drains once a second. The call itself only queues work on a CUDA
 * stream: its completion is not seen here. One program serves every entry point: the cookie
 * its probe was attached with names the function (enum nccl_fn), and so where its arguments
 * are.
 *
 * Communicators are followed from their creation where it is seen (ncclCommInitRank,
 * ...InitRankConfig, ...InitRankScalable, ncclCommSplit, ncclCommShrink; ncclCommDestroy and
 * ncclCommAbort forget them): the ncclUniqueId all ranks were given makes the communicator's
 * id, the same on every rank, and its collectives are numbered from its first, so one
 * collective has one number on every rank. A communicator made before the watch began gets id
 * 0 and numbers from the watch's first call: those are the process's own count.
 *
 * x86-64 System V calls: integer arguments in rdi, rsi, rdx, rcx, r8, r9, the 7th and later on
 * the stack above the return address; a struct of more than 16 bytes (ncclUniqueId, 128) is
 * passed in memory, on the stack, and takes no register.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "ncclcalls.h"

char LICENSE[] SEC("license") = "GPL";

#define UNIQUE_ID_BYTES 128

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, NCCL_RING_BYTES);
} events SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, NCCL_COMMS_MAX);
    __type(key, struct nccl_comm_key);
    __type(value, struct nccl_comm);
} comms SEC(".maps");

/* Each process's communicators in comms: at most NCCL_COMMS_PER_PROC. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, NCCL_PROCS_MAX);
    __type(key, __u32); /* pid */
    __type(value, __u32);
} per_pid SEC(".maps");

/* Each user's communicators in comms: at most NCCL_COMMS_PER_USER. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, NCCL_USERS_MAX);
    __type(key, __u32); /* uid */
    __type(value, __u32);
} per_uid SEC(".maps");

/* A communicator being made, from the entry of its making to its return, per thread. */
struct pending {
    __u64 out; /* where the new ncclComm_t will be written (ncclCommInitAll: an array of them) */
    __u64 id;
    __s32 nranks, rank;
    __u32 from_init;
    __u32 all; /* ncclCommInitAll: its communicators' count (rank i's at out[i]); else 0 */
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, NCCL_PENDING_MAX);
    __type(key, __u64); /* pid_tgid */
    __type(value, struct pending);
} pending SEC(".maps");

/* Calls not recorded: [0] the ring buffer full, [1] the comms map full. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} lost SEC(".maps");

static void count_lost(__u32 why)
{
    __u64 *n = bpf_map_lookup_elem(&lost, &why);

    if (n)
        *n += 1;
}

/* @key's counter in @map (per_pid, per_uid), made at 0 if it is not there; NULL: no room. */
static __u32 *counter(void *map, __u32 *key)
{
    __u32 zero = 0, *n = bpf_map_lookup_elem(map, key);

    if (!n) {
        bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
        n = bpf_map_lookup_elem(map, key);
    }
    return n;
}

/* Adds @c as @k's communicator, within its process's and its user's shares of the table; 0,
 * or -1 (counted lost unless it is there already). */
static int add_comm(struct nccl_comm_key *k, struct nccl_comm *c)
{
    __u32 *n, *u;

    c->uid = (__u32)bpf_get_current_uid_gid();
    n = counter(&per_pid, &k->pid);
    u = counter(&per_uid, &c->uid);
    if (!n || !u || *n >= NCCL_COMMS_PER_PROC || *u >= NCCL_COMMS_PER_USER ||
        bpf_map_update_elem(&comms, k, c, BPF_NOEXIST) < 0) {
        if (!bpf_map_lookup_elem(&comms, k))
            count_lost(1);
        return -1;
    }
    __sync_fetch_and_add(n, 1);
    __sync_fetch_and_add(u, 1);
    return 0;
}

#define FNV_OFFSET 14695981039346656037ULL
#define FNV_PRIME 1099511628211ULL

/* FNV-1a over the ncclUniqueId at @at (the caller's stack, or an array it passed); 0: not
 * readable. */
static __u64 unique_id_hash(__u64 at)
{
    __u8 id[UNIQUE_ID_BYTES];
    __u64 h = FNV_OFFSET;

    if (bpf_probe_read_user(id, sizeof(id), (void *)at) < 0)
        return 0;
    for (int i = 0; i < UNIQUE_ID_BYTES; i++) {
        h ^= id[i];
        h *= FNV_PRIME;
    }
    return h ? h : 1;
}

/* A communicator's making begins on this thread: the new one's id (0: not comparable across
 * ranks, numbered from the watch), size and rank, and where its handle will be written. */
static int begin_init(__u64 out, __s32 nranks, __s32 rank, __u64 id)
{
    __u64 key = bpf_get_current_pid_tgid();
    struct pending p = {.out = out, .id = id, .nranks = nranks, .rank = rank, .from_init = id != 0};

    bpf_map_update_elem(&pending, &key, &p, BPF_ANY);
    return 0;
}

/* The parent's entry, where it was followed from its creation (its id is comparable); NULL. */
static struct nccl_comm *known_parent(__u64 comm)
{
    struct nccl_comm_key k = {.comm = comm, .pid = bpf_get_current_pid_tgid() >> 32};
    struct nccl_comm *parent = bpf_map_lookup_elem(&comms, &k);

    return parent && parent->from_init ? parent : NULL;
}

/* ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, config): the new
 * communicator's id is its parent's and its color, alike on the ranks that share it. */
static int comm_split(struct pt_regs *ctx)
{
    struct nccl_comm *parent = known_parent(ctx->di);
    __u64 id = parent ? (parent->id ^ ((__u64)(__u32)ctx->si << 32)) * FNV_PRIME : 0;

    return begin_init(ctx->cx, -1, -1, id);
}

/* ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
 * ncclComm_t *newcomm, config, flags): the new communicator's id is its parent's and the ranks
 * left out (every remaining rank passes them; summed, so their order does not matter), its size
 * the parent's less them. */
static int comm_shrink(struct pt_regs *ctx)
{
    struct nccl_comm *parent = known_parent(ctx->di);
    __s32 n = (__s32)ctx->dx, ex[NCCL_SHRINK_RANKS_MAX];
    __u64 id = 0, sum = 0;

    if (parent && n >= 0) {
        __u32 take = n < NCCL_SHRINK_RANKS_MAX ? (__u32)n : NCCL_SHRINK_RANKS_MAX;
        if (take && bpf_probe_read_user(ex, take * sizeof(ex[0]), (void *)ctx->si) < 0)
            return begin_init(ctx->cx, -1, -1, 0);
        for (__u32 i = 0; i < NCCL_SHRINK_RANKS_MAX && i < take; i++)
            sum += ((__u64)(__u32)ex[i] ^ FNV_OFFSET) * FNV_PRIME;
        id = ((parent->id ^ sum ^ (__u64)(__u32)n) * FNV_PRIME) | 1;
    }
    return begin_init(ctx->cx, parent && parent->nranks > n && n >= 0 ? parent->nranks - n : -1, -1,
                      id);
}

/* ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist): one process's
 * communicator of ndev ranks, rank i on a GPU each, made at once from an id NCCL makes inside
 * (no other process shares it): its id is this making's, the same for its ranks. */
static int init_all(struct pt_regs *ctx)
{
    __u64 key = bpf_get_current_pid_tgid();
    __s32 ndev = (__s32)ctx->si;
    struct pending p = {.out = ctx->di, .nranks = ndev, .from_init = 1};

    if (ndev < 1)
        return 0;
    p.all = ndev < NCCL_INIT_ALL_MAX ? (__u32)ndev : NCCL_INIT_ALL_MAX;
    p.id = (((key >> 32) ^ FNV_OFFSET) * FNV_PRIME ^ bpf_ktime_get_ns()) * FNV_PRIME | 1;
    bpf_map_update_elem(&pending, &key, &p, BPF_ANY);
    return 0;
}

/* The communicator whose handle is at @out, made as @p says, rank @rank of it. */
static void made_one(struct pending *p, __u64 out, __s32 rank)
{
    struct nccl_comm_key k = {.pid = bpf_get_current_pid_tgid() >> 32};
    struct nccl_comm c = {
        .id = p->id, .nranks = p->nranks, .rank = rank, .from_init = p->from_init};
    struct nccl_comm *old;

    if (bpf_probe_read_user(&k.comm, sizeof(k.comm), (void *)out) < 0 || !k.comm)
        return;
    old = bpf_map_lookup_elem(&comms, &k);
    if (old) /* an address seen before its making: another's, ended unseen */
        *old = c;
    else
        add_comm(&k, &c);
}

/* The return of a communicator's making: the new ncclComm_t written, and ncclSuccess (0), or
 * ncclInProgress (7): a nonblocking communicator (ncclConfig_t's blocking = 0) returns as its
 * making goes on in the background, its handle already the one its calls will name. */
static int made(struct pt_regs *ctx)
{
    __u64 key = bpf_get_current_pid_tgid();
    struct pending *p = bpf_map_lookup_elem(&pending, &key);

    if (!p)
        return 0;
    if (ctx->ax == 0 || ctx->ax == 7) {
        if (!p->all)
            made_one(p, p->out, p->rank);
        for (__u32 i = 0; i < NCCL_INIT_ALL_MAX && i < p->all; i++)
            made_one(p, p->out + i * sizeof(__u64), (__s32)i);
    }
    bpf_map_delete_elem(&pending, &key);
    return 0;
}

/* Run by the daemon (BPF_PROG_RUN) as it forgets a process: gives back @a->n of user @a->uid's
 * share, atomically against the probes' increments, as a read and a write from user space
 * would not be (a communicator made between them would leave the count one short). */
SEC("syscall")
int give_back(struct nccl_give_back *a)
{
    __u32 uid = a->uid, *held = bpf_map_lookup_elem(&per_uid, &uid);

    if (held)
        __sync_fetch_and_add(held, -(__s32)a->n);
    return 0;
}

/* ncclCommDestroy(comm), ncclCommAbort(comm): its address may be another's next. */
static int comm_end(struct pt_regs *ctx)
{
    struct nccl_comm_key k = {.comm = ctx->di, .pid = bpf_get_current_pid_tgid() >> 32};
    struct nccl_comm *c = bpf_map_lookup_elem(&comms, &k);
    __u32 uid, *n;

    if (!c)
        return 0;
    uid = c->uid;
    if (bpf_map_delete_elem(&comms, &k) < 0)
        return 0;
    if ((n = bpf_map_lookup_elem(&per_pid, &k.pid)) && *n > 0)
        __sync_fetch_and_add(n, -1);
    if ((n = bpf_map_lookup_elem(&per_uid, &uid)) && *n > 0)
        __sync_fetch_and_add(n, -1);
    return 0;
}

static int record(__u32 op, __u64 comm, __u64 count, __s32 dtype, __s32 peer)
{
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    struct nccl_comm_key k = {.comm = comm, .pid = pid_tgid >> 32};
    struct nccl_comm *c = bpf_map_lookup_elem(&comms, &k);
    bool p2p = op == NCCL_OP_SEND || op == NCCL_OP_RECV;
    struct nccl_event *e;
    __u64 seq;

    if (!c) { /* made before the watch: numbered from here, the process's own count */
        struct nccl_comm fresh = {.nranks = -1, .rank = -1};
        add_comm(&k, &fresh);
        c = bpf_map_lookup_elem(&comms, &k);
        if (!c)
            return 0;
    }
    /* one thread issues a communicator's calls (NCCL requires it), so no other races this */
    seq = p2p ? ++c->p2p : ++c->seq;
    e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
    if (!e) {
        count_lost(0);
        return 0;
    }
    e->ts_ns = bpf_ktime_get_ns();
    e->comm = comm;
    e->count = count;
    e->id = c->id;
    e->seq = seq;
    e->pid = pid_tgid >> 32;
    e->tid = (__u32)pid_tgid;
    e->dtype = dtype;
    e->peer = peer;
    e->nranks = c->nranks;
    e->rank = c->rank;
    e->op = op;
    e->from_init = c->from_init;
    /* no wakeup: the daemon drains on its own clock; a wakeup per call costs the caller */
    bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    return 0;
}

static __u64 stack_arg(struct pt_regs *ctx, int n) /* the n-th argument, n >= 7 */
{
    __u64 v = 0;

    bpf_probe_read_user(&v, sizeof(v), (void *)(ctx->sp + 8 * (n - 6)));
    return v;
}

/* An entry point's arguments, by the function its cookie names. */
static __always_inline int on_entry(struct pt_regs *ctx)
{
    switch (bpf_get_attach_cookie(ctx)) {
    /* ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream) */
    case NCCL_FN_ALL_REDUCE:
        return record(NCCL_OP_ALL_REDUCE, ctx->r9, ctx->dx, (__s32)ctx->cx, -1);
    /* ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream) */
    case NCCL_FN_BROADCAST:
        return record(NCCL_OP_BROADCAST, ctx->r9, ctx->dx, (__s32)ctx->cx, (__s32)ctx->r8);
    /* ncclReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream) */
    case NCCL_FN_REDUCE:
        return record(NCCL_OP_REDUCE, stack_arg(ctx, 7), ctx->dx, (__s32)ctx->cx, (__s32)ctx->r9);
    /* ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream) */
    case NCCL_FN_ALL_GATHER:
        return record(NCCL_OP_ALL_GATHER, ctx->r8, ctx->dx, (__s32)ctx->cx, -1);
    /* ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream) */
    case NCCL_FN_REDUCE_SCATTER:
        return record(NCCL_OP_REDUCE_SCATTER, ctx->r9, ctx->dx, (__s32)ctx->cx, -1);
    /* ncclSend(sendbuff, count, datatype, peer, comm, stream), ncclRecv(recvbuff, ...) */
    case NCCL_FN_SEND:
        return record(NCCL_OP_SEND, ctx->r8, ctx->si, (__s32)ctx->dx, (__s32)ctx->cx);
    case NCCL_FN_RECV:
        return record(NCCL_OP_RECV, ctx->r8, ctx->si, (__s32)ctx->dx, (__s32)ctx->cx);
    /* ncclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream): count to each rank */
    case NCCL_FN_ALL_TO_ALL:
        return record(NCCL_OP_ALL_TO_ALL, ctx->r8, ctx->dx, (__s32)ctx->cx, -1);
    /* ncclGather(sendbuff, recvbuff, count, datatype, root, comm, stream), ncclScatter(...) */
    case NCCL_FN_GATHER:
        return record(NCCL_OP_GATHER, ctx->r9, ctx->dx, (__s32)ctx->cx, (__s32)ctx->r8);
    case NCCL_FN_SCATTER:
        return record(NCCL_OP_SCATTER, ctx->r9, ctx->dx, (__s32)ctx->cx, (__s32)ctx->r8);
    /* ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank), and
     * ncclCommInitRankConfig(..., config): the id by value, on the stack above the return
     * address; rank in the third register */
    case NCCL_FN_INIT_RANK:
        return begin_init(ctx->di, (__s32)ctx->si, (__s32)ctx->dx, unique_id_hash(ctx->sp + 8));
    /* ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
     * ncclUniqueId *commIds, config): the ids alike on every rank, in one order */
    case NCCL_FN_INIT_SCALABLE:
        return begin_init(ctx->di, (__s32)ctx->si, (__s32)ctx->dx,
                          (__s32)ctx->cx > 0 ? unique_id_hash(ctx->r8) : 0);
    case NCCL_FN_SPLIT:
        return comm_split(ctx);
    case NCCL_FN_SHRINK:
        return comm_shrink(ctx);
    case NCCL_FN_INIT_ALL:
        return init_all(ctx);
    case NCCL_FN_COMM_END:
        return comm_end(ctx);
    }
    return 0;
}

/* Each program twice: nccl.c attaches the _multi ones where the kernel has uprobe_multi links
 * (6.6+: a process's probes one link each way, removed at once), else the others, a perf event
 * per probe (each removed in a grace period of its own: ~0.1 s). */
SEC("uprobe")
int entry(struct pt_regs *ctx)
{
    return on_entry(ctx);
}

SEC("uprobe")
int entry_multi(struct pt_regs *ctx)
{
    return on_entry(ctx);
}

SEC("uretprobe")
int made_return(struct pt_regs *ctx)
{
    return made(ctx);
}

SEC("uretprobe")
int made_return_multi(struct pt_regs *ctx)
{
    return made(ctx);
}
