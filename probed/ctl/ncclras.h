/*
 * ncclras.h - `probectl nccl PID [--json]`: a job's NCCL communicators as its own RAS service
 * tells them (GET /v1/nccl, the daemon's gpu/ras.h), asked of one of its processes while it
 * runs, on every node the job spans, with no launch option and nothing of probed's in it: each
 * communicator's ranks, their count of each collective, and what is wrong. A rank behind the
 * others on a collective's count is where a hang is (Ray's detector, from NCCL's counts); a
 * rank that did not answer is unresponsive or dead; a rank with an asynchronous error or
 * aborted is named with it. Point-to-point counts (Send, Recv, SendRecv) differ between ranks
 * by design and are not compared.
 *
 * Runs in probectl, single-threaded. ncclras_findings() returns a new array the caller owns;
 * it borrows @status. Failure: a reply the daemon refused is printed on stderr (exit 1).
 */
#ifndef PROBED_CTL_NCCLRAS_H
#define PROBED_CTL_NCCLRAS_H

#include <jansson.h>
#include <stdbool.h>

/* What @status (GET /v1/nccl's reply) says is wrong: [{"communicator", "kind": "behind" | "missing"
 * | "error" | "aborted", "ranks": "2-3", "pids": [...], "hosts": [...], "nodes": [name or null,
 * ...] where a host was named (ncclras_name_hosts), and by kind "op", "count", "most" |
 * "unresponsive", "dead" | "async_error"}]; "behind" names at most 64 counts of an op, the last of
 * them with "more": how many lower counts it left out. */
json_t *ncclras_findings(json_t *status);

/* Adds each address of a daemon's status reply @status (GET /v1/status: "addresses") to
 * @names as {address: @name} (none when @name is NULL); one another node has: null, no name. */
void ncclras_add_names(json_t *names, json_t *status, const char *name);

/* Gives each rank of @status whose host is a key of @names ({address: node name}) a "node":
 * NCCL's RAS names hosts by address, the user knows them by name. */
void ncclras_name_hosts(json_t *status, json_t *names);

/* @status and what is wrong in it as text, on stdout: every communicator (@all), or those with
 * something wrong and a count of the others (`hang`, where a job may have thousands). */
void ncclras_print(json_t *status, bool all);

int nccl_main(int argc, char **argv);

#endif
