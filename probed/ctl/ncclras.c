/*
 * ncclras.c - `probectl nccl PID`: NCCL's RAS account of a job, and what in it is wrong
 * (ncclras.h).
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/client.h"
#include "ctl/ncclras.h"
#include "ctl/nodes.h"
#include "ctl/output.h"

#define RANKS_TEXT 256 /* "0-6,8-15" */
#define BEHIND_MAX 64  /* counts below the highest named, an op */

static long long num(json_t *o, const char *key, long long dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : dflt;
}

/* Point-to-point calls: each rank's count is its own (a pipeline's first stage only sends). */
static bool compared(const char *op)
{
    return strcmp(op, "Send") != 0 && strcmp(op, "Recv") != 0 && strcmp(op, "SendRecv") != 0;
}

/* NCCL's ncclResult_t, as its RAS reports it. */
static const char *nccl_result(long long r)
{
    static const char *const names[] = {"success",        "unhandled CUDA error", "system error",
                                        "internal error", "invalid argument",     "invalid usage",
                                        "remote error",   "in progress"};
    return r >= 0 && r < (long long)(sizeof(names) / sizeof(names[0])) ? names[r] : "unknown error";
}

/* One finding of @kind on communicator @hash about the ranks @idx (@n of them) of @list, with
 * their pids and hosts. NULL when @n is 0. */
static json_t *finding_of(const char *hash, const char *kind, json_t *list, const size_t *idx,
                          size_t n)
{
    int *ranks = malloc((n ? n : 1) * sizeof(*ranks));
    json_t *pids = json_array(), *hosts = json_array(), *nodes = json_array(), *out = NULL;
    char text[RANKS_TEXT];
    bool named = false;

    for (size_t k = 0; ranks && k < n; k++) {
        json_t *r = json_array_get(list, idx[k]), *host = json_object_get(r, "host");
        json_t *node = json_object_get(r, "node");
        ranks[k] = (int)num(r, "rank", -1);
        json_array_append_new(pids, json_integer(num(r, "pid", -1)));
        json_array_append_new(hosts, json_is_string(host) ? json_incref(host) : json_string("?"));
        json_array_append_new(nodes, json_is_string(node) ? json_incref(node) : json_null());
        named |= json_is_string(node);
    }
    if (ranks && n) {
        ranks_format(ranks, n, text, sizeof(text));
        out = json_pack("{s:s, s:s, s:s, s:O, s:O}", "communicator", hash ? hash : "?", "kind",
                        kind, "ranks", text, "pids", pids, "hosts", hosts);
        if (out && named) /* the nodes' names where an address is one of theirs */
            json_object_set(out, "nodes", nodes);
    }
    json_decref(pids);
    json_decref(hosts);
    json_decref(nodes);
    free(ranks);
    return out;
}

/* The same about the ranks of @list for which @pick(rank, @arg) holds. */
static json_t *finding(const char *hash, const char *kind, json_t *list,
                       bool (*pick)(json_t *rank, const void *arg), const void *arg)
{
    size_t i, n = 0, *idx = malloc((json_array_size(list) + 1) * sizeof(*idx));
    json_t *r, *out;

    if (!idx)
        return NULL;
    json_array_foreach(list, i, r)
    {
        if (pick(r, arg))
            idx[n++] = i;
    }
    out = finding_of(hash, kind, list, idx, n);
    free(idx);
    return out;
}

static bool has_error(json_t *rank, const void *arg)
{
    return num(rank, "async_error", 0) == *(const long long *)arg;
}

static bool is_aborted(json_t *rank, const void *arg)
{
    (void)arg;
    return json_is_true(json_object_get(rank, "aborted"));
}

static bool is_missing_as(json_t *rank, const void *arg)
{
    const bool *as = arg; /* unresponsive, dead */
    return json_is_true(json_object_get(rank, "unresponsive")) == as[0] &&
           json_is_true(json_object_get(rank, "dead")) == as[1];
}

/* A rank's count of one op: its index in the communicator's ranks, to sort by the count. */
struct op_count {
    long long count;
    size_t idx;
};

static int by_count_down(const void *a, const void *b)
{
    const struct op_count *x = a, *y = b;
    return x->count < y->count   ? 1
           : x->count > y->count ? -1
                                 : (x->idx > y->idx) - (x->idx < y->idx);
}

/* The ranks behind on each compared op of one communicator: a finding per count below the
 * highest, highest first (at most BEHIND_MAX of them an op; "more" says how many counts
 * were left out). Sorted once an op: a job of 65,536 ranks takes milliseconds. */
static void behind(json_t *out, const char *hash, json_t *ranks)
{
    size_t n_ranks = json_array_size(ranks), *idx = malloc((n_ranks + 1) * sizeof(*idx));
    struct op_count *c = malloc((n_ranks + 1) * sizeof(*c));
    json_t *ops = json_object(), *r, *v;
    const char *op;
    size_t i;

    json_array_foreach(ranks, i, r)
    { /* the ops any rank counts */
        json_object_foreach(json_object_get(r, "counts"), op, v)
        {
            if (compared(op))
                json_object_set(ops, op, json_true());
        }
    }
    json_object_foreach(ops, op, v)
    {
        size_t n = 0, groups = 0, more = 0;
        json_t *last = NULL;

        if (!idx || !c)
            break;
        json_array_foreach(ranks, i, r)
        {
            long long k = num(json_object_get(r, "counts"), op, -1);
            if (k >= 0)
                c[n++] = (struct op_count){k, i};
        }
        qsort(c, n, sizeof(*c), by_count_down);
        for (size_t a = 0; a < n;) { /* c[0].count is the most any rank issued */
            size_t b = a;
            while (b < n && c[b].count == c[a].count)
                idx[b - a] = c[b].idx, b++;
            if (a > 0 && groups < BEHIND_MAX) {
                json_t *f = finding_of(hash, "behind", ranks, idx, b - a);
                if (f) {
                    json_object_set_new(f, "op", json_string(op));
                    json_object_set_new(f, "count", json_integer(c[a].count));
                    json_object_set_new(f, "most", json_integer(c[0].count));
                    json_array_append_new(out, f);
                    last = f;
                }
                groups++;
            } else if (a > 0) {
                more++;
            }
            a = b;
        }
        if (last && more)
            json_object_set_new(last, "more", json_integer((json_int_t)more));
    }
    json_decref(ops);
    free(idx);
    free(c);
}

#define ERRORS_MAX 16 /* distinct asynchronous errors named a communicator (NCCL has 8) */

/* What is wrong in one communicator @c, appended to @out. */
static void comm_findings(json_t *out, json_t *c)
{
    const char *hash = json_string_value(json_object_get(c, "hash"));
    json_t *ranks = json_object_get(c, "ranks"), *missing = json_object_get(c, "missing"), *f, *r;
    long long errors[ERRORS_MAX];
    size_t k, n_errors = 0;

    behind(out, hash, ranks);
    for (int u = 1; u >= 0; u--) /* unresponsive first, then those that answered nothing */
        for (int d = 1; d >= 0; d--) {
            bool as[2] = {u, d};
            if ((f = finding(hash, "missing", missing, is_missing_as, as))) {
                json_object_set_new(f, "unresponsive", json_boolean(u));
                json_object_set_new(f, "dead", json_boolean(d));
                json_array_append_new(out, f);
            }
        }
    json_array_foreach(ranks, k, r)
    { /* the distinct asynchronous errors, in the order first seen */
        long long e = num(r, "async_error", 0);
        bool seen = e == 0 || e == 7; /* ncclInProgress: a non-blocking call under way */

        for (size_t m = 0; m < n_errors && !seen; m++)
            seen = errors[m] == e;
        if (!seen && n_errors < ERRORS_MAX)
            errors[n_errors++] = e;
    }
    for (size_t m = 0; m < n_errors; m++)
        if ((f = finding(hash, "error", ranks, has_error, &errors[m]))) {
            json_object_set_new(f, "async_error", json_integer(errors[m]));
            json_object_set_new(f, "error", json_string(nccl_result(errors[m])));
            json_array_append_new(out, f);
        }
    if ((f = finding(hash, "aborted", ranks, is_aborted, NULL)))
        json_array_append_new(out, f);
}

json_t *ncclras_findings(json_t *status)
{
    json_t *out = json_array(), *c;
    size_t i;

    json_array_foreach(json_object_get(status, "communicators"), i, c)
    {
        comm_findings(out, c);
    }
    return out;
}

static const char *plural(const char *ranks)
{
    return strpbrk(ranks, ",-") ? "s" : "";
}

/* "ranks 2-3 (10.0.0.2 pid 5151, gpu-7 (10.0.0.3) pid 5252)" */
static void say_ranks(json_t *f)
{
    const char *ranks = json_string_value(json_object_get(f, "ranks"));
    json_t *p, *hosts = json_object_get(f, "hosts"), *nodes = json_object_get(f, "nodes");
    size_t i;

    printf("rank%s %s (", plural(ranks), ranks);
    json_array_foreach(json_object_get(f, "pids"), i, p)
    {
        const char *node = json_string_value(json_array_get(nodes, i));
        if (i == 8) {
            printf(", ...");
            break;
        }
        if (node)
            printf("%s%s (%s) pid %lld", i ? ", " : "", node,
                   json_string_value(json_array_get(hosts, i)), (long long)json_integer_value(p));
        else
            printf("%s%s pid %lld", i ? ", " : "", json_string_value(json_array_get(hosts, i)),
                   (long long)json_integer_value(p));
    }
    printf(")");
}

void ncclras_add_names(json_t *names, json_t *status, const char *name)
{
    json_t *a;
    size_t i;

    json_array_foreach(json_object_get(status, "addresses"), i, a)
    {
        json_t *had = json_is_string(a) ? json_object_get(names, json_string_value(a)) : NULL;
        if (!json_is_string(a) || !name)
            continue;
        /* an address two nodes claim (nodes in one network namespace) names neither */
        json_object_set_new(names, json_string_value(a),
                            had && (!json_is_string(had) || strcmp(json_string_value(had), name))
                                ? json_null()
                                : json_string(name));
    }
}

void ncclras_name_hosts(json_t *status, json_t *names)
{
    json_t *c, *r;
    size_t i, k;

    json_array_foreach(json_object_get(status, "communicators"), i, c)
    {
        for (int list = 0; list < 2; list++)
            json_array_foreach(json_object_get(c, list ? "missing" : "ranks"), k, r)
            {
                json_t *name =
                    json_object_get(names, json_string_value(json_object_get(r, "host")) ?: "");
                if (json_is_string(name))
                    json_object_set(r, "node", name);
            }
    }
}

void ncclras_print(json_t *status, bool all)
{
    json_t *comms = json_object_get(status, "communicators"), *c, *f;
    size_t in_step = 0;
    const char *version = json_string_value(json_object_get(status, "nccl_version"));
    json_t *secs = json_object_get(status, "collection_s");
    long long timeouts = num(status, "timeouts", 0);
    size_t i, k;

    printf("NCCL %s, RAS at %s: %zu communicator%s", version ? version : "?",
           json_string_value(json_object_get(status, "address")), json_array_size(comms),
           json_array_size(comms) == 1 ? "" : "s");
    if (json_is_number(secs))
        printf(", gathered in %.3f s", json_number_value(secs));
    if (timeouts)
        printf(" (%lld RAS timeout%s: some ranks' data may be missing)", timeouts,
               timeouts == 1 ? "" : "s");
    printf("\n");
    json_array_foreach(comms, i, c)
    {
        const char *hash = json_string_value(json_object_get(c, "hash"));
        json_t *first = json_array_get(json_object_get(c, "ranks"), 0), *v;
        json_t *findings = json_array();
        const char *op;
        bool lead = true;

        comm_findings(findings, c);
        if (!all && json_array_size(findings) == 0) {
            in_step++;
            json_decref(findings);
            continue;
        }
        printf("communicator %s: %lld ranks, %zu answered", hash ? hash : "?", num(c, "size", -1),
               json_array_size(json_object_get(c, "ranks")));
        json_object_foreach(json_object_get(first, "counts"), op, v)
        {
            if (json_integer_value(v) > 0 && compared(op)) {
                if (lead)
                    printf("; rank %lld's counts:", num(first, "rank", -1));
                printf("%s %s %lld", lead ? "" : ",", op, (long long)json_integer_value(v));
                lead = false;
            }
        }
        printf("\n");
        json_array_foreach(findings, k, f)
        {
            const char *kind = json_string_value(json_object_get(f, "kind"));
            const char *ranks = json_string_value(json_object_get(f, "ranks"));

            printf("  ");
            say_ranks(f);
            if (strcmp(kind, "behind") == 0) {
                printf(" behind on %s: issued %lld, the most any rank issued %lld: %s #%lld "
                       "waits for %s\n",
                       json_string_value(json_object_get(f, "op")), num(f, "count", 0),
                       num(f, "most", 0), json_string_value(json_object_get(f, "op")),
                       num(f, "count", 0) + 1, strpbrk(ranks, ",-") ? "them" : "it");
                if (num(f, "more", 0))
                    printf("  and %lld lower counts of %s on other ranks (--json: every "
                           "rank's)\n",
                           num(f, "more", 0), json_string_value(json_object_get(f, "op")));
            } else if (strcmp(kind, "missing") == 0)
                printf(" did not answer: %s\n",
                       json_is_true(json_object_get(f, "dead"))           ? "taken for dead"
                       : json_is_true(json_object_get(f, "unresponsive")) ? "unresponsive"
                                                                          : "no data");
            else if (strcmp(kind, "error") == 0)
                printf(" asynchronous error %lld (%s)\n", num(f, "async_error", 0),
                       json_string_value(json_object_get(f, "error")));
            else
                printf(" aborted\n");
        }
        if (json_array_size(findings) == 0)
            printf("  every rank answered, in step, no error\n");
        json_decref(findings);
    }
    if (in_step)
        printf("%zu other communicator%s: every rank answered, in step, no error\n", in_step,
               in_step == 1 ? "" : "s");
}

int nccl_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *socket = NULL;
    char path[64];
    json_t *status;
    int c, pid, as_json = 0;

    while ((c = getopt_long(argc, argv, "jh", longopts, NULL)) != -1) {
        if (c == 'j') {
            as_json = 1;
        } else if (c == 'S') {
            socket = optarg;
        } else if (c == 'h') {
            printf("usage: probectl nccl PID [--json]\n"
                   "  The job's NCCL communicators as NCCL's own RAS tells them (NCCL 2.24+;\n"
                   "  JSON from 2.28.7), asked of process PID: every rank on every node, its\n"
                   "  count of each collective, and who is behind, unresponsive, dead, in\n"
                   "  error or aborted. Nothing is loaded into the job.\n");
            return 0;
        } else {
            return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "probectl nccl: expected PID\n");
        return 2;
    }
    if ((pid = client_parse_pid(argv[optind], "nccl")) < 0)
        return 2;
    snprintf(path, sizeof(path), "/v1/nccl?pid=%d", pid);
    if (!(status = client_request(socket, "GET", path, NULL)))
        return 1;
    if (json_is_string(json_object_get(status, "text"))) { /* an NCCL without JSON */
        if (as_json)
            output_json(status);
        else
            printf("%s", json_string_value(json_object_get(status, "text")));
    } else {
        json_t *findings, *here = client_request(socket, "GET", "/v1/status", NULL);
        json_t *names = json_object();

        /* the hosts that are this node's addresses, by its name */
        ncclras_add_names(names, here, json_string_value(json_object_get(here, "host")));
        json_decref(here);
        ncclras_name_hosts(status, names);
        json_decref(names);
        findings = ncclras_findings(status);
        if (as_json) {
            json_object_set(status, "findings", findings);
            output_json(status);
        } else {
            ncclras_print(status, true);
        }
        json_decref(findings);
    }
    json_decref(status);
    return 0;
}
