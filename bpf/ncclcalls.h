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

/* The entry points watched, in the order of their programs (nccl.c's table). */
enum nccl_op {
    NCCL_OP_ALL_REDUCE,
    NCCL_OP_BROADCAST,
    NCCL_OP_REDUCE,
    NCCL_OP_ALL_GATHER,
    NCCL_OP_REDUCE_SCATTER,
    NCCL_OP_SEND,
    NCCL_OP_RECV,
    NCCL_OP_N
};

/* A communicator as the program knows it, per process (struct nccl_comm_key). */
struct nccl_comm {
    __u64 id;        /* a hash of the ncclUniqueId it was made from: the same on every rank */
    __u64 seq;       /* collectives issued on it so far (point-to-point calls not counted) */
    __u64 p2p;       /* its sends and receives */
    __s32 nranks;    /* -1: unknown (made by ncclCommSplit) */
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
    __s32 peer;   /* send/recv: the peer; broadcast/reduce: the root (ranks of the comm); -1 */
    __s32 nranks; /* -1: unknown */
    __s32 rank;   /* -1: unknown */
    __u32 op;     /* enum nccl_op */
    __u32 from_init;
};

#endif
