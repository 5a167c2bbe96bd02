/* reach.c - see reach.h. */
#define _GNU_SOURCE
#include "ctl/reach.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common/units.h"

/* Takes an option of struct reach; false when @c is not one. -1 in *bad after saying why. */
bool reach_option(struct reach *r, int c, const char *cmd, int *bad)
{
    int64_t ns;

    switch (c) {
    case OPT_HOSTS:
        r->hosts = optarg;
        return true;
    case OPT_HOSTFILE:
        r->hostfile = optarg;
        return true;
    case OPT_TRANSPORT:
        r->transport = optarg;
        return true;
    case OPT_JSON:
        r->json = true;
        return true;
    case OPT_TIMEOUT:
        ns = units_duration_ns(optarg);
        if (ns <= 0) {
            fprintf(stderr, "probectl %s: --timeout must be a duration like 30s\n", cmd);
            *bad = -1;
        }
        r->timeout_ms = ns > 0 ? (long)(ns / 1000000) : 0;
        return true;
    default:
        return false;
    }
}

/* The nodes and a fan-out over them; 2 (a usage error, said) on failure. */
int reach_nodes(const struct reach *r, const char *cmd, struct nodes *nodes, struct fanout *fo)
{
    const char *template = transport_template(r->transport);
    char err[512];

    if (transport_template_check(template, err, sizeof(err)) < 0 ||
        nodes_resolve(r->hosts, r->hostfile, nodes, err, sizeof(err)) < 0) {
        fprintf(stderr, "probectl %s: %s\n", cmd, err);
        return 2;
    }
    if (fanout_init(fo, nodes->names, nodes->n, template,
                    r->timeout_ms ? r->timeout_ms : CLUSTER_TIMEOUT_MS) < 0) {
        fprintf(stderr, "probectl %s: out of memory\n", cmd);
        nodes_free(nodes);
        return 2;
    }
    return 0;
}

bool node_ok(const struct fan_node *node)
{
    return node->asked && node->rc == 0 && node->status >= 200 && node->status <= 299 &&
           node->reply;
}

/* Names every node that failed on stderr, with a count; returns how many. */
int say_failures(const struct fanout *fo, const char *cmd)
{
    int failed = 0;
    char buf[768];

    for (size_t i = 0; i < fo->n; i++)
        if (fo->nodes[i].asked && !node_ok(&fo->nodes[i])) {
            fprintf(stderr, "probectl %s: %s\n", cmd,
                    fanout_error(&fo->nodes[i], buf, sizeof(buf)));
            failed++;
        }
    if (failed)
        fprintf(stderr, "probectl %s: %d of %zu node%s failed\n", cmd, failed, fo->n,
                fo->n == 1 ? "" : "s");
    return failed;
}

/* {"host", "error"} of each failed node, for --json. */
json_t *failures_json(const struct fanout *fo)
{
    json_t *arr = json_array();
    char buf[768];

    for (size_t i = 0; i < fo->n; i++)
        if (fo->nodes[i].asked && !node_ok(&fo->nodes[i]))
            json_array_append_new(arr, json_pack("{s:s, s:s}", "host", fo->nodes[i].host, "error",
                                                 fanout_error(&fo->nodes[i], buf, sizeof(buf))));
    return arr;
}

void print_json(json_t *doc)
{
    json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    printf("\n");
    json_decref(doc);
}
