/*
 * ncclcalls.h - what the NCCL uprobes (ncclcalls.bpf.c) tell the daemon (probed/gpu/nccl.c): one
 * event per collective or point-to-point call a watched process makes into libnccl, and the
 * communicators the program has seen made.
 */
#ifndef PROBED_BPF_NCCLCALLS_H
#define PROBED_BPF_NCCLCALLS_H

#define NCCL_RING_BYTES (4 << 20) /* the events' ring buffer: ~65,000 calls (a drain's) */
#define NCCL_COMMS_MAX 65536      /* communicators followed, of all watched processes */
#define NCCL_PENDING_MAX 4096     /* communicators being made, a thread each */
#define NCCL_COMMS_PER_PROC 1024  /* of them, one process's: a process cannot fill the table */
#define NCCL_COMMS_PER_USER 16384 /* and one user's: a user's many processes cannot either */
#define NCCL_PROCS_MAX 4096       /* processes counted */
#define NCCL_USERS_MAX 4096       /* users counted */

#define NCCL_SHRINK_RANKS_MAX 64 /* of ncclCommShrink's excluded ranks, those its id is made of */
#define NCCL_INIT_ALL_MAX 16 /* of ncclCommInitAll's communicators (one a GPU), those followed */

/* The kinds of call recorded (an event's op). */
enum nccl_op {
    NCCL_OP_ALL_REDUCE,
    NCCL_OP_BROADCAST,
    NCCL_OP_REDUCE,
    NCCL_OP_ALL_GATHER,
    NCCL_OP_REDUCE_SCATTER,
    NCCL_OP_SEND,
    NCCL_OP_RECV,
    NCCL_OP_ALL_TO_ALL,
    NCCL_OP_GATHER,
    NCCL_OP_SCATTER,
    NCCL_OP_N
};

/* The entry points watched: the cookie each probe is attached with (nccl.c's table), which
 * tells the one program all entries share which function it stands in and so where its
 * arguments are. */
enum nccl_fn {
    NCCL_FN_ALL_REDUCE,                /* ncclAllReduce */
    NCCL_FN_BROADCAST,                 /* ncclBroadcast (and ncclBcast, which calls it) */
    NCCL_FN_REDUCE,                    /* ncclReduce */
    NCCL_FN_ALL_GATHER,                /* ncclAllGather */
    NCCL_FN_REDUCE_SCATTER,            /* ncclReduceScatter */
    NCCL_FN_SEND,                      /* ncclSend */
    NCCL_FN_RECV,                      /* ncclRecv */
    NCCL_FN_ALL_TO_ALL,                /* ncclAlltoAll (2.28) */
    NCCL_FN_GATHER,                    /* ncclGather (2.28) */
    NCCL_FN_SCATTER,                   /* ncclScatter (2.28) */
    NCCL_FN_CALLS,                     /* the calls' end: the others make or end communicators */
    NCCL_FN_INIT_RANK = NCCL_FN_CALLS, /* ncclCommInitRank, ncclCommInitRankConfig */
    NCCL_FN_INIT_SCALABLE,             /* ncclCommInitRankScalable (2.23) */
    NCCL_FN_SPLIT,                     /* ncclCommSplit */
    NCCL_FN_SHRINK,                    /* ncclCommShrink (2.27) */
    NCCL_FN_INIT_ALL,                  /* ncclCommInitAll: one a GPU of the process, at once */
    NCCL_FN_COMM_END,                  /* ncclCommDestroy, ncclCommAbort */
};

/* A communicator as the program knows it, per process (struct nccl_comm_key). */
struct nccl_comm {
    __u64 id;        /* a hash of the ncclUniqueId it was made from: the same on every rank */
    __u64 seq;       /* collectives issued on it so far (point-to-point calls not counted) */
    __u64 p2p;       /* its sends and receives */
    __s32 nranks;    /* -1: unknown (made by ncclCommSplit, or from one made before the watch) */
    __s32 rank;      /* its rank in it; -1: unknown */
    __u32 from_init; /* 1: counted from its creation (else from the first call seen) */
    __u32 uid;       /* its process's (real) user, whose share of the table it takes */
};

/* What the daemon gives back of a user's share as it forgets a process (give_back). */
struct nccl_give_back {
    __u32 uid;
    __u32 n;
};

struct nccl_comm_key {
    __u64 comm; /* the ncclComm_t */
    __u32 pid;
    __u32 pad;
};

/* One call. */
struct nccl_event {
    __u64 ts_ns; /* bpf_ktime_get_ns() at its entry: CLOCK_MONOTONIC */
    __u64 comm;
    __u64 count; /* NCCL's count argument: elements */
    __u64 id;    /* as struct nccl_comm's; 0: a communicator made before the watch */
    __u64 seq;   /* the call's number on its communicator (sends and receives: their own) */
    __u32 pid, tid;
    __s32 dtype;  /* ncclDataType_t */
    __s32 peer;   /* send/recv: the peer; broadcast, reduce, gather, scatter: the root; -1 */
    __s32 nranks; /* -1: unknown */
    __s32 rank;   /* -1: unknown */
    __u32 op;     /* enum nccl_op */
    __u32 from_init;
};

#endif
