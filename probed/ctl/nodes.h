/*
 * nodes.h - which nodes `probectl cluster` and `probectl hang` ask, and how ranks are said.
 *
 * Nodes come from --hosts (a list), --hostfile (one node per line; '#' starts a comment; words
 * after the first, such as MPI's "slots=8", are ignored), or Slurm's SLURM_JOB_NODELIST, in
 * that order of preference. Each list may use Slurm's ranges: "node[01-16,20],gpu7" is
 * node01 ... node16, node20, gpu7 (a range keeps its zero padding; several brackets in one
 * name multiply). Duplicates are dropped, the first kept.
 * Threads: any. Memory: a struct nodes owns its names; nodes_free() releases them.
 * Failure: -EINVAL (a malformed list), -E2BIG (over NODES_MAX), -ENOENT (no source of nodes),
 * -errno of reading the hostfile, each with the reason in @err.
 */
#ifndef PROBECTL_NODES_H
#define PROBECTL_NODES_H

#include <stdbool.h>
#include <stddef.h>

#define NODES_MAX 16384

struct nodes {
    char **names;
    size_t n;
    const char *source; /* "--hosts", "--hostfile", "SLURM_JOB_NODELIST" */
};

/* Whether @name is a host name a transport may be given: letters, digits and . - _ : @ (user@,
 * IPv6), not starting with '-' (it would be an option of ssh: -oProxyCommand=... runs a
 * command), at most 255 bytes. */
bool nodes_host_name_ok(const char *name);

/* Appends the nodes of @list (Slurm syntax) to @out. */
int nodes_expand(const char *list, struct nodes *out, char *err, size_t err_len);
/* The nodes from @hosts, else @hostfile, else $SLURM_JOB_NODELIST. */
int nodes_resolve(const char *hosts, const char *hostfile, struct nodes *out, char *err,
                  size_t err_len);
void nodes_free(struct nodes *nodes);

/* @ranks (any order, duplicates allowed) as "0-6,8-15" into @buf (sorted in place); "..." at
 * the end when it does not fit. */
void ranks_format(int *ranks, size_t n, char *buf, size_t size);

#endif
