/*
 * ras.h - a job's own account of its NCCL communicators, asked of NCCL's RAS service (NCCL
 * 2.24 and later run it by default, a thread in each process): every rank of every
 * communicator the job made, on every node, with its count of each collective, its state
 * (initialised, an asynchronous error, finalised, destroyed, aborted), and the ranks that did
 * not answer (unresponsive, or taken for dead). The job's RAS threads gather this among
 * themselves, so one process asked answers for the whole job. No code of probed's runs in the
 * process and nothing of it is paused: this is Ray's live count of collectives per rank, from
 * NCCL itself, with no launch option.
 *
 * One process is asked (ras_ask): its RAS address is NCCL_RAS_ADDR in its environment, or
 * localhost:28028, in its own network namespace (a container's). The daemon connects only to
 * a listening socket the process itself holds (/proc/PID/net/tcp{,6} against its descriptors),
 * at the address that socket has: a port another process holds is never asked. The end that
 * answers the handshake must be a socket the process holds too (looked up by sock_diag, in the
 * namespace the connection is in), or nothing more is asked on it: two jobs of one user on a node
 * share the port (NCCL sets SO_REUSEPORT, with which the kernel shares a port among one user's
 * sockets only, spreading connections among them), so a connection the other job answered is
 * dropped and another made, up to RAS_DIAL_TRIES. The answer is NCCL's JSON (2.28.7 and later: SET
 * FORMAT json), kept field by field; an older NCCL's text report is passed on as text, for a person
 * to read.
 *
 * Bounds: the whole exchange within RAS_DEADLINE_MS (NCCL's own gathering gives up after
 * 10 s), an answer of at most RAS_REPLY_MAX bytes, and of it only the fields named in ras.c
 * kept, checked for type and size, for at most RAS_COMMS_MAX communicators and RAS_RANKS_MAX
 * ranks in all.
 *
 * Threads: any; it makes a thread of its own for the moment it enters the process's network
 * namespace. Memory: *ret is the caller's (json_decref). Failure: -errno and @err: -ENOENT no
 * RAS listening in the process (NCCL before 2.24, NCCL_RAS_ENABLE=0, no NCCL), -ESRCH gone,
 * -ETIMEDOUT, -EPROTO (not RAS's protocol, an answer past the bounds or not NCCL's JSON).
 */
#ifndef PROBED_GPU_RAS_H
#define PROBED_GPU_RAS_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

#define RAS_DEFAULT_PORT 28028
#define RAS_PROTOCOL 2
#define RAS_DEADLINE_MS 15000    /* NCCL's leg timeout (5 s) + its extra (5 s) + margin */
#define RAS_HANDSHAKE_MS 3000    /* of it, the handshake's: RAS's thread answers it at once */
#define RAS_REPLY_MAX (4u << 20) /* bytes of the answer */
#define RAS_COMMS_MAX 4096       /* communicators kept */
#define RAS_RANKS_MAX 65536      /* ranks kept, in all communicators together */

/* Asks the RAS of process @pid (started at @start_time: /proc/PID/stat's, checked before and
 * after) for its job's communicators. *ret: {"nccl_version", "address", "collection_s",
 * "timeouts", "communicators": [{"hash", "size", "ranks": [{"rank", "host", "pid", "cuda_dev",
 * "init_state", "async_error", "finalized", "destroyed", "aborted", "counts": {op: n}}],
 * "missing": [{"rank", "host", "pid", "cuda_dev", "unresponsive", "dead"}]}]};
 * from an NCCL before 2.28.7, {"address", "text"}: its report as `ncclras` prints it. */
int ras_ask(pid_t pid, int64_t start_time, json_t **ret, struct errbuf *err);

/* The normalising step alone, for the tests: NCCL's document @doc (not taken) as *ret. */
int ras_normalise(json_t *doc, json_t **ret, struct errbuf *err);

#endif
