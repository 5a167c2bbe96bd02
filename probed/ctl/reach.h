/*
 * reach.h - what `probectl cluster` and `probectl hang` share: the options that say where the
 * nodes are and how to reach them, the fan-out over them (fanout.h), and how a node that
 * failed is named (on stderr, or in --json's "failed"; never left out).
 */
#ifndef PROBECTL_REACH_H
#define PROBECTL_REACH_H

#include <jansson.h>
#include <stdbool.h>

#include "ctl/fanout.h"
#include "ctl/nodes.h"

#define CLUSTER_TIMEOUT_MS 30000L /* per node and request, unless --timeout */

/* Where the nodes are, how to reach them. */
struct reach {
    const char *hosts, *hostfile, *transport;
    long timeout_ms;
    bool json;
};

enum { OPT_HOSTS = 1000, OPT_HOSTFILE, OPT_TRANSPORT, OPT_TIMEOUT, OPT_JSON };
#define REACH_LONGOPTS                                                                             \
    {"hosts", required_argument, NULL, OPT_HOSTS},                                                 \
        {"hostfile", required_argument, NULL, OPT_HOSTFILE},                                       \
        {"transport", required_argument, NULL, OPT_TRANSPORT},                                     \
        {"timeout", required_argument, NULL, OPT_TIMEOUT}, {"json", no_argument, NULL, OPT_JSON},  \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }

#define REACH_HELP                                                                                 \
    "  --hosts a,node[01-16]   the nodes (Slurm's ranges), else --hostfile FILE, else\n"           \
    "                          $SLURM_JOB_NODELIST\n"                                              \
    "  --transport TEMPLATE    how to reach a node's daemon, {host} standing for the node\n"       \
    "                          (default $PROBED_TRANSPORT, else ssh -T {host} probectl proxy)\n"   \
    "  --timeout DURATION      per node (default 30s)\n"                                           \
    "  --json                  the answers as JSON\n"

/* Takes an option of struct reach; false when @c is not one. -1 in *bad after saying why. */
bool reach_option(struct reach *r, int c, const char *cmd, int *bad);
/* The nodes and a fan-out over them; 2 (a usage error, said) on failure. */
int reach_nodes(const struct reach *r, const char *cmd, struct nodes *nodes, struct fanout *fo);
/* Whether @node answered its request with 2xx and JSON. */
bool node_ok(const struct fan_node *node);
/* Names every node that failed on stderr, with a count; returns how many. */
int say_failures(const struct fanout *fo, const char *cmd);
/* {"host", "error"} of each failed node, for --json. */
json_t *failures_json(const struct fanout *fo);
/* @doc (taken) indented on stdout. */
void print_json(json_t *doc);

#endif
