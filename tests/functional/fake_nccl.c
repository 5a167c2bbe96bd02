/*
 * fake_nccl.c - a stand-in libnccl.so.2 for test_nccl.py: NCCL's C API with its real
 * signatures (nccl.h, 2.28), whose calls do nothing on a GPU. The daemon's uprobes attach to
 * its exported symbols as they would to NVIDIA's library, and read the arguments the System V
 * ABI places where NCCL's callers place them (the ncclUniqueId by value on the stack,
 * ncclReduce's comm and stream past the sixth argument). Each call bumps a counter so it
 * stays a call.
 */
#include <stdlib.h>
#include <string.h>

typedef struct {
    char internal[128];
} ncclUniqueId;

struct ncclComm {
    int nranks, rank;
    ncclUniqueId id;
};
typedef struct ncclComm *ncclComm_t;
typedef int ncclResult_t;
typedef void *cudaStream_t;

volatile unsigned long fake_nccl_calls;

/* As nccl.h's NCCL_API declares each entry point: the name a weak symbol, its "p" twin (the
 * profiling interface) a global alias of the same address. The probes must resolve the weak
 * name. */
#define NCCL_API(ret, func, ...)                                                                   \
    __attribute__((alias(#func))) ret p##func(__VA_ARGS__);                                        \
    __attribute__((weak)) ret func(__VA_ARGS__)

#define CALL(x) (fake_nccl_calls++, (void)(x), 0)

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *id);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof(*id));
    return CALL(0);
}

/* Each way of making a communicator ends here, as NCCL's end in ncclCommInitRankDev: none
 * calls another entry point, whose probe would see the making twice. */
static ncclResult_t make_comm(ncclComm_t *comm, int nranks, const ncclUniqueId *commId, int rank)
{
    struct ncclComm *c = calloc(1, sizeof(*c));

    if (!c)
        return 1;
    c->nranks = nranks;
    c->rank = rank;
    c->id = *commId;
    *comm = c;
    return CALL(0);
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return make_comm(comm, nranks, &commId, rank);
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         void *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *config)
{
    struct ncclComm *c = calloc(1, sizeof(*c));

    if (!c)
        return 1;
    c->nranks = comm->nranks / 2;
    c->rank = key;
    *newcomm = c;
    return CALL(color + (config != NULL));
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    free(comm);
    return CALL(0);
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         int datatype, int op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
                           ncclComm_t comm, cudaStream_t stream)
{
    return CALL(sendbuff != recvbuff && count + datatype + op && comm && stream);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         int datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, int datatype,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    return CALL(sendbuff != recvbuff && count + datatype + root && comm && stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count, int datatype,
         int op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
                        int root, ncclComm_t comm, cudaStream_t stream)
{
    return CALL(sendbuff != recvbuff && count + datatype + op + root && comm && stream);
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         int datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    return CALL(sendbuff != recvbuff && sendcount + datatype && comm && stream);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         int datatype, int op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, int datatype,
                               int op, ncclComm_t comm, cudaStream_t stream)
{
    return CALL(sendbuff != recvbuff && recvcount + datatype + op && comm && stream);
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, int datatype, int peer,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, int datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return CALL(sendbuff && count + datatype + peer && comm && stream);
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, int datatype, int peer,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, int datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return CALL(recvbuff && count + datatype + peer && comm && stream);
}

NCCL_API(ncclResult_t, ncclGroupStart, void);
ncclResult_t ncclGroupStart(void)
{
    return CALL(0);
}

NCCL_API(ncclResult_t, ncclGroupEnd, void);
ncclResult_t ncclGroupEnd(void)
{
    return CALL(0);
}

/* NCCL's own ncclBcast calls ncclBroadcast (collectives.cc): so does this one, through the
 * exported symbol, so that a probe on both would count it twice. */
NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, int datatype, int root, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, int datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

/* ncclConfig_t's head (nccl.h): NCCL_CONFIG_INITIALIZER's magic, and blocking = 0 for a
 * nonblocking communicator, whose making returns ncclInProgress with its handle written */
struct config_head {
    size_t size;
    unsigned magic, version;
    int blocking;
};

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank, void *config);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    void *config)
{
    const struct config_head *h = config;

    if (!config)
        return 4; /* ncclInvalidArgument */
    if (make_comm(comm, nranks, &commId, rank))
        return 1;
    return h->magic == 0xcafebeef && h->blocking == 0 ? 7 /* ncclInProgress */ : 0;
}

/* A communicator of this process's ndev GPUs, rank i on devlist[i], from an id of its own
 * (NCCL makes one inside, and makes them through no entry point that the probes watch). */
NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist);
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    ncclUniqueId id;

    if (ndev < 1)
        return 4;
    (void)devlist; /* no GPU here: device i is rank i's */
    memset(&id, 0, sizeof(id));
    for (int i = 0; i < ndev; i++)
        if (make_comm(&comms[i], ndev, &id, i))
            return 1;
    return 0;
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
         int nId, ncclUniqueId *commIds, void *config);
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, void *config)
{
    if (nId < 1)
        return 4; /* ncclInvalidArgument */
    return make_comm(newcomm, nranks, &commIds[nId - 1], myrank) + (config != NULL);
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
         int excludeRanksCount, ncclComm_t *newcomm, void *config, int shrinkFlags);
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, void *config, int shrinkFlags)
{
    struct ncclComm *c = calloc(1, sizeof(*c));

    if (!c)
        return 1;
    c->nranks = comm->nranks - excludeRanksCount;
    c->rank = comm->rank;
    *newcomm = c;
    return CALL(excludeRanksList[0] + (config != NULL) + shrinkFlags);
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    free(comm);
    return CALL(0);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         int datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, int datatype,
                          ncclComm_t comm, cudaStream_t stream)
{
    return CALL(sendbuff != recvbuff && count + datatype && comm && stream);
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count, int datatype,
         int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root,
                        ncclComm_t comm, cudaStream_t stream)
{
    return CALL(sendbuff != recvbuff && count + datatype + root && comm && stream);
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
         int datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root,
                         ncclComm_t comm, cudaStream_t stream)
{
    return CALL(sendbuff != recvbuff && count + datatype + root && comm && stream);
}

/* The per-call config variant of NCCLs after 2.28 (the others alike): the plain call's arguments,
 * then a ncclCollConfig_t; NCCL's and this one's share no entry point with the plain call. */
NCCL_API(ncclResult_t, ncclAllReduceConfig, const void *sendbuff, void *recvbuff, size_t count,
         int datatype, int op, ncclComm_t comm, cudaStream_t stream, const void *config);
ncclResult_t ncclAllReduceConfig(const void *sendbuff, void *recvbuff, size_t count, int datatype,
                                 int op, ncclComm_t comm, cudaStream_t stream, const void *config)
{
    return CALL(sendbuff != recvbuff && count + datatype + op && comm && stream && !config);
}
