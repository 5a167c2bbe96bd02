/*
 * desync.h - the first collective at which a job's ranks disagree (`probectl hang`).
 *
 * c10d numbers each process group's collectives from a value every rank shares, so the calls
 * that took one number are one collective: the same op, dtype and size (all_to_all's excepted:
 * their splits may differ) and the same root on every rank. The first number where they are
 * not is where the job went wrong: a rank skipped or added a collective (its numbers shifted
 * by one against the others') or called it with another size, dtype or root. NCCL then hangs
 * or corrupts the result without a word; gloo hangs or aborts. PyTorch's Flight Recorder
 * analyzer finds the same in dumps written after the fact; this reads the collectives the
 * torch trace recorded (`probectl torch PID on --comm`) of a running job.
 *
 * Each rank's latest DESYNC_WINDOW collectives are compared (DESYNC_SQL's rows, one query per
 * node): a desync found is one that is still within that window on every rank, as in a hung
 * job. Runs in probectl, single-threaded. desync_find() returns a new JSON array the caller
 * owns and borrows the rows; out of memory, it returns what it found so far (or NULL).
 */
#ifndef PROBED_CTL_DESYNC_H
#define PROBED_CTL_DESYNC_H

#include <jansson.h>
#include <stddef.h>

#define DESYNC_WINDOW 64

/* Each attached process's latest DESYNC_WINDOW numbered collectives (c10d's, and NCCL's calls
 * on communicators whose creation the probes saw: gpu/nccl.h), as rows
 * [pid, group, seq, op, bytes, dtype, root]. */
extern const char DESYNC_SQL[];

/* One rank and its rows of DESYNC_SQL (borrowed). */
struct desync_rank {
    int rank; /* -1: none in its environment (then its pid stands for it) */
    long long pid;
    json_t *calls; /* array of DESYNC_SQL rows, or NULL */
};

/* For each process group whose ranks disagree, the first collective where they do:
 * [{"group", "seq", "calls": [{"ranks": "0-1,3", "op", "bytes", "dtype", "root"}, ...] (the
 * most ranks first), "not_reached": "5" (ranks of the group whose latest collective came
 * before it; "" if none)}, ...]. */
json_t *desync_find(const struct desync_rank *ranks, size_t n);

/* For each NCCL communicator (group "nccl:...", numbered by the probes from its creation: one
 * collective has one number on every rank) whose ranks' latest numbers differ: who issued the
 * furthest and who is behind, as Ray's NCCL hang detector compares collective counts, with no
 * stub in the job: [{"group", "seq", "op", "ahead": "0-1,3", "behind": [{"rank", "pid", "seq",
 * "op"}]}]. New JSON, the caller's. */
json_t *desync_counts(const struct desync_rank *ranks, size_t n);

/* "on nccl:..., ranks 0-1,3 issued collective #N (all_reduce); rank 2's last was #N-1
 * (all_gather)" for each of @counts. */
void desync_counts_print(json_t *counts);

/* One line per desync of @desyncs: "desync in group 0 at #N: ranks 0-1,3 called all_reduce
 * (4096 B float32), rank 2 broadcast (4096 B float32, root 0)". */
void desync_print(json_t *desyncs);

#endif
