/*
 * hang.c - `probectl hang`: which rank holds everyone up, and where.
 *
 * Every node's daemon reads all the caller's targets at one instant (POST /v1/hang). The
 * instant is agreed across nodes: two rounds of GET /v1/status first open the transports and
 * then measure each node's clock against ours (its now_ns against the middle of the round
 * trip), so each node is asked for the same moment on its own clock; the spread of the reads
 * is then reported on our clock. Ranks are grouped by their main thread's Python stack (the
 * innermost --depth frames; --no-lines: by function), smallest group first: the odd rank out
 * is what a user reads first. --repeat tells stuck ranks (the same stack every time) from
 * slow ones. With the collectives traced, each group's collective is named, the ranks that
 * never reached it, and the first collective the ranks disagree on (desync.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/units.h"
#include "ctl/client.h"
#include "ctl/cluster.h"
#include "ctl/desync.h"
#include "ctl/flameout.h"
#include "ctl/ncclras.h"
#include "ctl/reach.h"

#define HANG_LEAD_MIN_NS (300 * 1000000LL)  /* the instant is at least this far ahead */
#define HANG_LEAD_MAX_NS (9000 * 1000000LL) /* and at most (the daemon takes up to 10 s) */
#define HANG_ROUNDS_MAX 100

/* Each target's latest traced collective (probectl torch PID on --comm): pid, op, group, seq,
 * in flight, start, source ('c10d', or 'ddp': DDP's gradient buckets of a step). Only
 * collectives numbered by c10d: their numbers are the same on every rank (a send's or a
 * receive's are not: they are counted by each end); not those the trace went off during
 * (state 'untraced': whether they completed was not seen). */
static const char COMM_SQL[] =
    "SELECT t.pid, c.op, c.group_name, c.seq,"
    " coalesce(c.state = 'issued', c.duration_ns IS NULL), c.ts_ns, c.seq_source"
    " FROM comm_calls c JOIN targets t ON t.id = c.target_id"
    " WHERE c.call_id = (SELECT max(call_id) FROM comm_calls c2 WHERE c2.target_id ="
    " c.target_id AND c2.seq_source IN ('c10d', 'ddp') AND coalesce(c2.state, '') <> 'untraced')";

struct hang_opts {
    bool native, no_lines, json;
    int depth; /* innermost frames compared; 0: all */
    int repeat;
    int64_t interval_ns;
    const char *folded_path, *svg_path;
};

/* One rank (or process without RANK) as read in one round. */
struct rank_read {
    const char *host;
    json_t *target; /* borrowed from the round's replies */
    int rank;       /* -1: none in its environment */
    long long pid;
    char *key; /* its main thread's stack, as compared */
    const char *error;
    json_t *last_comm; /* its latest traced collective (COMM_SQL's row), or NULL */
    json_t *recent;    /* its latest collectives (DESYNC_SQL's rows), or NULL */
};

struct round {
    json_t *replies; /* the nodes' replies, kept alive for the reads (and the comm rows) */
    struct rank_read *reads;
    size_t n;
    int64_t first_ns, last_ns; /* the reads, on our clock */
    double clock_error_ms;     /* half the longest round trip of the clock measurement */
    int failed;
};

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The main thread of @target (tid == pid), else its first thread. */
static json_t *main_thread(json_t *target)
{
    json_t *threads = json_object_get(target, "threads"), *t;
    json_int_t pid = json_integer_value(json_object_get(target, "pid"));
    size_t i;

    json_array_foreach(threads, i, t)
    {
        if (json_integer_value(json_object_get(t, "tid")) == pid)
            return t;
    }
    return json_array_get(threads, 0);
}

/* The main thread's Python frames, innermost first, at most @o->depth, one per line. */
static char *stack_key(json_t *target, const struct hang_opts *o)
{
    json_t *frames = json_object_get(main_thread(target), "frames"), *f;
    char *key = NULL;
    size_t len = 0, i;
    int taken = 0;
    FILE *m = open_memstream(&key, &len);

    if (!m)
        return NULL;
    json_array_foreach(frames, i, f)
    {
        const char *kind = json_string_value(json_object_get(f, "kind"));
        if (kind && strcmp(kind, "python") != 0)
            continue;
        if (o->depth && taken == o->depth)
            break;
        if (o->no_lines)
            fprintf(m, "%s (%s)\n", json_string_value(json_object_get(f, "function")),
                    json_string_value(json_object_get(f, "file")));
        else
            fprintf(m, "%s (%s:%lld)\n", json_string_value(json_object_get(f, "function")),
                    json_string_value(json_object_get(f, "file")),
                    (long long)json_integer_value(json_object_get(f, "line")));
        taken++;
    }
    fclose(m);
    return key;
}

static void round_free(struct round *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->reads[i].key);
        json_decref(r->reads[i].recent);
    }
    free(r->reads);
    json_decref(r->replies);
    *r = (struct round){0};
}

/* The reads of one node's reply, appended to @r; @offset_ns: its clock minus ours. */
static void add_reads(struct round *r, const char *host, json_t *reply, int64_t offset_ns,
                      const struct hang_opts *o)
{
    json_t *targets = json_object_get(reply, "targets"), *t;
    size_t i;
    struct rank_read *grown =
        realloc(r->reads, (r->n + json_array_size(targets) + 1) * sizeof(*grown));

    if (!grown)
        return;
    r->reads = grown;
    json_array_foreach(targets, i, t)
    {
        struct rank_read *rd = &r->reads[r->n++];
        json_t *rank = json_object_get(t, "rank");
        int64_t at = json_integer_value(json_object_get(t, "read_ns")) - offset_ns;

        *rd = (struct rank_read){.host = host,
                                 .target = t,
                                 .rank = rank ? (int)json_integer_value(rank) : -1,
                                 .pid = (long long)json_integer_value(json_object_get(t, "pid")),
                                 .error = json_string_value(json_object_get(t, "error"))};
        if (!rd->error)
            rd->key = stack_key(t, o);
        if (!json_object_get(t, "read_ns"))
            continue; /* not read: no part of the spread */
        if (!r->first_ns || at < r->first_ns)
            r->first_ns = at;
        if (at > r->last_ns)
            r->last_ns = at;
    }
}

/* One round on this node's daemon alone. */
static int read_local(struct round *r, const struct hang_opts *o)
{
    json_t *body = json_pack("{s:I, s:b}", "at_ns", (json_int_t)0, "native", o->native);
    json_t *reply = client_request(NULL, "POST", "/v1/hang", body);

    json_decref(body);
    if (!reply)
        return -1;
    r->replies = json_array();
    json_array_append_new(r->replies, reply);
    add_reads(r, json_string_value(json_object_get(reply, "host")), reply, 0, o);
    return 0;
}

/* One round over @fo: the clocks measured, one instant asked of all. */
static int read_nodes(struct fanout *fo, struct round *r, const struct hang_opts *o)
{
    int64_t *offset = calloc(fo->n, sizeof(*offset)), t0, lead = HANG_LEAD_MIN_NS, at;
    double worst_rtt = 0;
    json_t **bodies = calloc(fo->n, sizeof(*bodies));

    if (!offset || !bodies) {
        free(offset);
        free(bodies);
        return -1;
    }
    /* the first round opens the transports (ssh's handshake); the second times the clocks */
    for (int pass = 0; pass < 2; pass++) {
        fanout_set_all(fo, "GET", "/v1/status", NULL);
        t0 = now_ns();
        if (fanout_run(fo) < 0)
            goto fail;
    }
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        if (!node_ok(node))
            continue; /* failed: named at the end, not asked again this round */
        offset[i] = json_integer_value(json_object_get(node->reply, "now_ns")) -
                    (t0 + (int64_t)(node->seconds * 1e9 / 2));
        if (node->seconds > worst_rtt)
            worst_rtt = node->seconds;
    }
    if ((int64_t)(worst_rtt * 3e9) + 100000000LL > lead)
        lead = (int64_t)(worst_rtt * 3e9) + 100000000LL;
    if (lead > HANG_LEAD_MAX_NS) /* a node that slow reads late; the spread says so */
        lead = HANG_LEAD_MAX_NS;
    at = now_ns() + lead;
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        if (!node_ok(node))
            continue;
        bodies[i] =
            json_pack("{s:I, s:b}", "at_ns", (json_int_t)(at + offset[i]), "native", o->native);
        node->method = "POST";
        snprintf(node->path, sizeof(node->path), "/v1/hang");
        node->body = bodies[i];
    }
    if (fanout_run(fo) < 0)
        goto fail;
    r->replies = json_array();
    r->clock_error_ms = worst_rtt * 1e3 / 2;
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        json_decref(bodies[i]);
        if (!node_ok(node))
            continue;
        json_array_append(r->replies, node->reply);
        add_reads(r, node->host, node->reply, offset[i], o);
    }
    free(offset);
    free(bodies);
    return 0;
fail:
    for (size_t i = 0; i < fo->n; i++)
        json_decref(bodies[i]);
    free(offset);
    free(bodies);
    return -1;
}

/* The read of @host whose pid is @row's first column, or NULL. */
static struct rank_read *read_of(struct round *r, const char *host, json_t *row)
{
    for (size_t k = 0; k < r->n; k++)
        if (strcmp(r->reads[k].host, host) == 0 &&
            r->reads[k].pid == (long long)json_integer_value(json_array_get(row, 0)))
            return &r->reads[k];
    return NULL;
}

/* Gives each read of @host its latest collective from @rows (COMM_SQL's), the newest when a
 * pid was attached more than once. */
static void add_comm(struct round *r, const char *host, json_t *rows)
{
    struct rank_read *rd;
    json_t *row;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        if ((rd = read_of(r, host, row)) &&
            (!rd->last_comm || json_integer_value(json_array_get(row, 5)) >
                                   json_integer_value(json_array_get(rd->last_comm, 5))))
            rd->last_comm = row;
    }
}

/* Gives each read of @host its rows of @rows (DESYNC_SQL's). */
static void add_recent(struct round *r, const char *host, json_t *rows)
{
    struct rank_read *rd;
    json_t *row;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        if (!(rd = read_of(r, host, row)))
            continue;
        if (!rd->recent)
            rd->recent = json_array();
        json_array_append(rd->recent, row);
    }
}

/* @sql on this node's daemon, or every node's that answered the stacks' round, each reply's
 * rows given to @add; the replies kept in @r. */
static void query_nodes(struct round *r, struct fanout *fo, const char *sql,
                        void (*add)(struct round *, const char *, json_t *))
{
    json_t *body = json_pack("{s:s}", "sql", sql);

    if (!fo) {
        char err[512];
        json_t *reply = NULL;
        long status = 0;

        if (client_call(client_socket_path(NULL), "POST", "/v1/query", body, &status, &reply, NULL,
                        NULL, err, sizeof(err)) == 0 &&
            status == 200 && reply && r->n) {
            json_array_append(r->replies, reply);
            add(r, r->reads[0].host, json_object_get(reply, "rows"));
        }
        json_decref(reply);
    } else {
        for (size_t i = 0; i < fo->n; i++)
            if (node_ok(&fo->nodes[i])) { /* those that answered the stacks' round */
                fo->nodes[i].method = "POST";
                snprintf(fo->nodes[i].path, sizeof(fo->nodes[i].path), "/v1/query");
                fo->nodes[i].body = body;
            }
        if (fanout_run(fo) >= 0)
            for (size_t i = 0; i < fo->n; i++)
                if (node_ok(&fo->nodes[i])) {
                    json_array_append(r->replies, fo->nodes[i].reply);
                    add(r, fo->nodes[i].host, json_object_get(fo->nodes[i].reply, "rows"));
                }
    }
    json_decref(body);
}

/* The collectives each read was last in, and its latest ones: from this node's daemon, or
 * every node's. */
static void read_comm(struct round *r, struct fanout *fo)
{
    query_nodes(r, fo, COMM_SQL, add_comm);
    query_nodes(r, fo, DESYNC_SQL, add_recent);
}

#define RAS_TRIES 4 /* processes asked for NCCL's RAS before giving up */

/* GET @path of the daemon of @host: this node's (@fo NULL), or that node's through @fo; the
 * reply when it is 200, else NULL with *ret_status. */
static json_t *get_of(struct fanout *fo, const char *host, const char *path, long *ret_status)
{
    json_t *reply = NULL;

    *ret_status = 0;
    if (!fo) {
        char err[512];
        if (client_call(client_socket_path(NULL), "GET", path, NULL, ret_status, &reply, NULL, NULL,
                        err, sizeof(err)) == 0 &&
            *ret_status == 200)
            return reply;
        json_decref(reply);
        return NULL;
    }
    for (size_t k = 0; k < fo->n; k++)
        fo->nodes[k].method = NULL;
    for (size_t k = 0; k < fo->n; k++)
        if (node_ok(&fo->nodes[k]) && strcmp(fo->nodes[k].host, host) == 0) {
            fo->nodes[k].method = "GET";
            fo->nodes[k].body = NULL;
            snprintf(fo->nodes[k].path, sizeof(fo->nodes[k].path), "%s", path);
            fanout_run(fo);
            if (fo->nodes[k].rc == 0 && (*ret_status = fo->nodes[k].status) == 200)
                return json_incref(fo->nodes[k].reply);
            /* an extra question: its refusal (no RAS in that process) is no failure of the
             * node, which answered the round (say_failures() reads the last outcome) */
            fo->nodes[k].rc = 0;
            fo->nodes[k].status = 200;
            fo->nodes[k].err[0] = '\0';
            break;
        }
    return NULL;
}

/* Each node's addresses ({address: its name here}, from GET /v1/status), for NCCL's RAS, which
 * names a rank's host by address: one question of every node that answered the round, at
 * once (this node's daemon's, named as it names itself, when @fo is NULL). A node that does
 * not answer it is no failure of the node's (say_failures() reads the last outcome). */
static json_t *node_names(struct fanout *fo)
{
    json_t *names = json_object(), *reply;
    long status;

    if (!fo) {
        if ((reply = get_of(NULL, NULL, "/v1/status", &status))) {
            ncclras_add_names(names, reply, json_string_value(json_object_get(reply, "host")));
            json_decref(reply);
        }
        return names;
    }
    bool *asked = calloc(fo->n ? fo->n : 1, sizeof(*asked));

    for (size_t k = 0; asked && k < fo->n; k++) {
        struct fan_node *node = &fo->nodes[k];
        asked[k] = node_ok(node);
        node->method = asked[k] ? "GET" : NULL;
        node->body = NULL;
        snprintf(node->path, sizeof(node->path), "/v1/status");
    }
    if (asked)
        fanout_run(fo);
    for (size_t k = 0; asked && k < fo->n; k++) {
        struct fan_node *node = &fo->nodes[k];
        if (!asked[k]) /* (fanout_run() clears the methods) */
            continue;
        if (node->rc == 0 && node->status == 200) {
            ncclras_add_names(names, node->reply, node->host);
        } else {
            node->rc = 0;
            node->status = 200;
            node->err[0] = '\0';
        }
    }
    free(asked);
    return names;
}

/* NCCL's own account of the job (GET /v1/nccl: NCCL's RAS, gpu/ras.h), asked of the first
 * process read that has one: one answers for the whole job. A process without it answers 404
 * at once; any other failure (a RAS that does not answer) ends the asking. NULL: none. */
static json_t *ask_ras(const struct round *r, struct fanout *fo)
{
    int tries = 0;

    for (size_t i = 0; i < r->n && tries < RAS_TRIES; i++) {
        char path[64];
        long status;
        json_t *reply;

        if (!r->reads[i].key)
            continue;
        tries++;
        snprintf(path, sizeof(path), "/v1/nccl?pid=%lld", r->reads[i].pid);
        if ((reply = get_of(fo, r->reads[i].host, path, &status))) {
            if (json_is_string(json_object_get(reply, "text"))) {
                json_object_set_new(reply, "text",
                                    json_string("(NCCL before 2.28.7: its text "
                                                "report, by probectl nccl PID)"));
            } else { /* its hosts by the names of the nodes, where they are theirs */
                json_t *names = node_names(fo);
                ncclras_name_hosts(reply, names);
                json_decref(names);
                json_object_set_new(reply, "findings", ncclras_findings(reply));
            }
            json_object_set_new(reply, "pid", json_integer(r->reads[i].pid));
            json_object_set_new(reply, "host", json_string(r->reads[i].host));
            return reply;
        }
        if (status != 404)
            break;
    }
    return NULL;
}

/* The first collective each process group's ranks disagree on, or (@counts) the NCCL
 * communicators whose ranks' latest numbers differ (desync.h). */
static json_t *find_desyncs(const struct round *r, bool counts)
{
    struct desync_rank *ranks = calloc(r->n + 1, sizeof(*ranks));
    json_t *out;

    if (!ranks)
        return json_array();
    for (size_t i = 0; i < r->n; i++)
        ranks[i] = (struct desync_rank){
            .rank = r->reads[i].rank, .pid = r->reads[i].pid, .calls = r->reads[i].recent};
    out = counts ? desync_counts(ranks, r->n) : desync_find(ranks, r->n);
    free(ranks);
    return out ? out : json_array();
}

/* "all_reduce #12 of group 0", "DDP's gradient all_reduce #12 of group 0" */
static void comm_text(json_t *c, char *buf, size_t size)
{
    const char *source = json_string_value(json_array_get(c, 6));

    snprintf(buf, size, "%s%s #%lld of group %s",
             source && strcmp(source, "ddp") == 0 ? "DDP's gradient " : "",
             json_string_value(json_array_get(c, 1)),
             (long long)json_integer_value(json_array_get(c, 3)),
             json_string_value(json_array_get(c, 2)));
}

/* "; rank 2 waits in broadcast #12 of group 0 instead" (@waiting) or "; rank 2's last was
 * all_reduce #11 of group 0", for each of @list (say_collectives' differ or behind). */
static void say_others(json_t *list, const char *group, bool waiting)
{
    json_t *b;
    size_t k;

    json_array_foreach(list, k, b)
    {
        json_t *row = json_pack("[I, s, s, I, b, I, s?]", (json_int_t)0,
                                json_string_value(json_object_get(b, "op")), group,
                                json_integer_value(json_object_get(b, "seq")), waiting,
                                (json_int_t)0, json_string_value(json_object_get(b, "source")));
        char what[256], who[300];

        comm_text(row, what, sizeof(what));
        json_decref(row);
        if (json_integer_value(json_object_get(b, "rank")) >= 0)
            snprintf(who, sizeof(who), "rank %lld",
                     (long long)json_integer_value(json_object_get(b, "rank")));
        else
            snprintf(who, sizeof(who), "%s pid %lld", json_string_value(json_object_get(b, "host")),
                     (long long)json_integer_value(json_object_get(b, "pid")));
        if (waiting)
            printf("; %s waits in %s instead", who, what);
        else
            printf("; %s's last was %s", who, what);
    }
}

/* Whether two COMM_SQL rows are in flight in the same collective: group, number, op. */
static bool same_flight(json_t *a, json_t *b)
{
    return json_integer_value(json_array_get(a, 4)) == 1 &&
           json_integer_value(json_array_get(b, 4)) == 1 &&
           json_equal(json_array_get(a, 2), json_array_get(b, 2)) &&
           json_equal(json_array_get(a, 3), json_array_get(b, 3)) &&
           json_equal(json_array_get(a, 1), json_array_get(b, 1));
}

/* Of the reads in flight at number @top of @group, the row of the op most of them are in. */
static json_t *most_waited(const struct round *r, const char *group, long long top)
{
    json_t *best = NULL;
    size_t best_n = 0;

    for (size_t k = 0; k < r->n; k++) {
        json_t *o = r->reads[k].last_comm;
        size_t same = 0;
        if (!o || json_integer_value(json_array_get(o, 4)) != 1 ||
            json_integer_value(json_array_get(o, 3)) != top ||
            strcmp(json_string_value(json_array_get(o, 2)), group) != 0)
            continue;
        for (size_t j = 0; j < r->n; j++)
            same += r->reads[j].last_comm && same_flight(r->reads[j].last_comm, o);
        if (same > best_n) {
            best = o;
            best_n = same;
        }
    }
    return best;
}

/* For each process group where some ranks are in flight in a collective, which ranks wait
 * in it, which never reached it (their last call in that group came before) and which wait
 * in another op of the same number (a desync): the sentence a user acts on. Printed, or
 * (@json) returned as an array. */
static json_t *say_collectives(const struct round *r, bool json)
{
    json_t *out = json_array();

    for (size_t i = 0; i < r->n; i++) {
        json_t *c = r->reads[i].last_comm, *waiting_c = NULL, *behind = json_array();
        json_t *differ = json_array();
        const char *group;
        long long top = 0;
        int *ranks;
        size_t nw = 0;
        bool seen = false;
        char what[256], ranks_s[256];

        if (!c || json_integer_value(json_array_get(c, 4)) != 1)
            goto next;
        group = json_string_value(json_array_get(c, 2));
        for (size_t k = 0; k < i; k++) { /* one sentence per group: said at its first */
            json_t *o = r->reads[k].last_comm;
            seen |= o && json_integer_value(json_array_get(o, 4)) == 1 &&
                    strcmp(json_string_value(json_array_get(o, 2)), group) == 0;
        }
        if (seen)
            goto next;
        /* the furthest collective ranks wait in, in this group */
        for (size_t k = 0; k < r->n; k++) {
            json_t *o = r->reads[k].last_comm;
            if (o && json_integer_value(json_array_get(o, 4)) == 1 &&
                strcmp(json_string_value(json_array_get(o, 2)), group) == 0 &&
                (!waiting_c || json_integer_value(json_array_get(o, 3)) > top)) {
                waiting_c = o;
                top = json_integer_value(json_array_get(o, 3));
            }
        }
        waiting_c = most_waited(r, group, top);
        ranks = calloc(r->n + 1, sizeof(int));
        if (!ranks)
            goto next;
        for (size_t k = 0; k < r->n; k++) {
            const struct rank_read *rd = &r->reads[k];
            json_t *o = rd->last_comm;
            if (!o || strcmp(json_string_value(json_array_get(o, 2)), group) != 0)
                continue;
            if (same_flight(o, waiting_c))
                ranks[nw++] = rd->rank >= 0 ? rd->rank : (int)rd->pid;
            else if (json_integer_value(json_array_get(o, 3)) == top &&
                     json_integer_value(json_array_get(o, 4)) == 1)
                json_array_append_new(differ,
                                      json_pack("{s:i, s:I, s:s, s:s, s:I, s:s?}", "rank", rd->rank,
                                                "pid", (json_int_t)rd->pid, "host", rd->host, "op",
                                                json_string_value(json_array_get(o, 1)), "seq",
                                                json_integer_value(json_array_get(o, 3)), "source",
                                                json_string_value(json_array_get(o, 6))));
            else if (json_integer_value(json_array_get(o, 3)) < top)
                json_array_append_new(
                    behind, json_pack("{s:i, s:I, s:s, s:s, s:I, s:b, s:s?}", "rank", rd->rank,
                                      "pid", (json_int_t)rd->pid, "host", rd->host, "op",
                                      json_string_value(json_array_get(o, 1)), "seq",
                                      json_integer_value(json_array_get(o, 3)), "in_flight",
                                      json_integer_value(json_array_get(o, 4)) == 1, "source",
                                      json_string_value(json_array_get(o, 6))));
        }
        ranks_format(ranks, nw, ranks_s, sizeof(ranks_s));
        free(ranks);
        comm_text(waiting_c, what, sizeof(what));
        if (json) {
            json_array_append_new(out, json_pack("{s:s, s:I, s:s, s:s, s:O, s:O, s:s?}", "group",
                                                 group, "seq", (json_int_t)top, "op",
                                                 json_string_value(json_array_get(waiting_c, 1)),
                                                 "waiting", ranks_s, "behind", behind, "differ",
                                                 differ, "source",
                                                 json_string_value(json_array_get(waiting_c, 6))));
        } else {
            printf("rank%s %s wait%s in %s", nw == 1 ? "" : "s", ranks_s, nw == 1 ? "s" : "", what);
            say_others(differ, group, true);
            say_others(behind, group, false);
            printf("\n");
        }
    next:
        json_decref(behind);
        json_decref(differ);
    }
    return out;
}

/* A group: the reads of the last round that share a key. */
struct group {
    const char *key;
    size_t *members; /* indexes into the round's reads */
    size_t n;
    size_t stuck; /* members whose key was the same in every round */
};

static int cmp_group(const void *a, const void *b)
{
    const struct group *x = a, *y = b;

    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Whether the read @i of the last round had the same key in every round. */
static bool same_every_round(const struct round *rounds, int n_rounds, const struct rank_read *rd)
{
    for (int k = 0; k < n_rounds; k++) {
        bool found = false;
        for (size_t i = 0; i < rounds[k].n; i++) {
            const struct rank_read *o = &rounds[k].reads[i];
            if (o->pid == rd->pid && strcmp(o->host, rd->host) == 0) {
                found = o->key && rd->key && strcmp(o->key, rd->key) == 0;
                break;
            }
        }
        if (!found)
            return false;
    }
    return true;
}

/* A process without a rank among ranked ones is the launcher (torchrun, a script), waiting for
 * them: it is listed apart, never grouped as the odd one out. */
static bool is_launcher(const struct round *r, const struct rank_read *rd)
{
    if (rd->rank >= 0)
        return false;
    for (size_t i = 0; i < r->n; i++)
        if (r->reads[i].rank >= 0 && r->reads[i].key)
            return true;
    return false;
}

static size_t make_groups(const struct round *last, const struct round *rounds, int n_rounds,
                          struct group *groups)
{
    size_t n = 0;

    for (size_t i = 0; i < last->n; i++) {
        const struct rank_read *rd = &last->reads[i];
        size_t g = 0;

        if (!rd->key || is_launcher(last, rd))
            continue;
        while (g < n && strcmp(groups[g].key, rd->key) != 0)
            g++;
        if (g == n) {
            groups[n] = (struct group){.key = rd->key, .members = calloc(last->n, sizeof(size_t))};
            if (!groups[n].members)
                continue;
            n++;
        }
        groups[g].members[groups[g].n++] = i;
        groups[g].stuck += same_every_round(rounds, n_rounds, rd);
    }
    qsort(groups, n, sizeof(*groups), cmp_group);
    return n;
}

/* "ranks 0-6,8-15" and the hosts; processes without a rank as host:pid. */
static void group_who(const struct round *r, const struct group *g, char *ranks_s, size_t rsize,
                      char *hosts_s, size_t hsize, char *pids_s, size_t psize)
{
    int *ranks = calloc(g->n + 1, sizeof(int));
    size_t nr = 0, hl = 0, pl = 0;

    hosts_s[0] = pids_s[0] = ranks_s[0] = '\0';
    for (size_t k = 0; k < g->n; k++) {
        const struct rank_read *rd = &r->reads[g->members[k]];
        bool seen = false;
        char one[300];

        if (rd->rank >= 0 && ranks) {
            ranks[nr++] = rd->rank;
        } else {
            snprintf(one, sizeof(one), "%s%s:%lld", pl ? "," : "", rd->host, rd->pid);
            if (pl + strlen(one) + 1 < psize) {
                memcpy(pids_s + pl, one, strlen(one) + 1);
                pl += strlen(one);
            }
        }
        for (size_t j = 0; j < k; j++)
            seen |= strcmp(r->reads[g->members[j]].host, rd->host) == 0;
        snprintf(one, sizeof(one), "%s%s", hl ? "," : "", rd->host);
        if (!seen && hl + strlen(one) + 1 < hsize) {
            memcpy(hosts_s + hl, one, strlen(one) + 1);
            hl += strlen(one);
        }
    }
    if (ranks)
        ranks_format(ranks, nr, ranks_s, rsize);
    free(ranks);
}

/* The collectives the members of @g were last in, one line per distinct one. */
static void group_collectives(const struct round *r, const struct group *g)
{
    for (size_t k = 0; k < g->n; k++) {
        json_t *c = r->reads[g->members[k]].last_comm;
        int *ranks;
        size_t nr = 0;
        bool said = false;
        char what[256], ranks_s[256];

        for (size_t j = 0; c && j < k; j++)
            said |= json_equal(r->reads[g->members[j]].last_comm, c) ||
                    (r->reads[g->members[j]].last_comm &&
                     json_equal(json_array_get(r->reads[g->members[j]].last_comm, 3),
                                json_array_get(c, 3)) &&
                     json_equal(json_array_get(r->reads[g->members[j]].last_comm, 2),
                                json_array_get(c, 2)) &&
                     json_equal(json_array_get(r->reads[g->members[j]].last_comm, 4),
                                json_array_get(c, 4)));
        if (!c || said || !(ranks = calloc(g->n, sizeof(int))))
            continue;
        for (size_t j = k; j < g->n; j++) {
            json_t *o = r->reads[g->members[j]].last_comm;
            if (o && json_equal(json_array_get(o, 3), json_array_get(c, 3)) &&
                json_equal(json_array_get(o, 2), json_array_get(c, 2)) &&
                json_equal(json_array_get(o, 4), json_array_get(c, 4)))
                ranks[nr++] = r->reads[g->members[j]].rank;
        }
        ranks_format(ranks, nr, ranks_s, sizeof(ranks_s));
        free(ranks);
        comm_text(c, what, sizeof(what));
        if (json_integer_value(json_array_get(c, 4)) == 1)
            printf("    [rank%s %s: in %s for %.1f s]\n", nr == 1 ? "" : "s", ranks_s, what,
                   (double)(now_ns() - json_integer_value(json_array_get(c, 5))) / 1e9);
        else
            printf("    [rank%s %s: last collective %s, completed]\n", nr == 1 ? "" : "s", ranks_s,
                   what);
    }
}

static void print_groups(const struct round *r, struct group *groups, size_t n, int n_rounds,
                         const struct hang_opts *o, int n_nodes, json_t *ras)
{
    size_t unread = 0;
    json_t *desyncs;

    printf("%zu process%s on %d node%s read at one instant (spread %.1f ms", r->n,
           r->n == 1 ? "" : "es", n_nodes, n_nodes == 1 ? "" : "s",
           (double)(r->last_ns - r->first_ns) / 1e6);
    if (n_nodes > 1)
        printf(", clocks known to %.1f ms", r->clock_error_ms);
    printf(")%s\n\n", n_rounds > 1 ? ", last of the rounds" : "");
    desyncs = find_desyncs(r, false);
    desync_print(desyncs);
    json_decref(desyncs);
    desyncs = find_desyncs(r, true);
    desync_counts_print(desyncs);
    json_decref(desyncs);
    if (ras && json_is_string(json_object_get(ras, "text"))) {
        printf("NCCL's RAS (pid %lld on %s) answers text only: probectl nccl %lld\n",
               (long long)json_integer_value(json_object_get(ras, "pid")),
               json_string_value(json_object_get(ras, "host")),
               (long long)json_integer_value(json_object_get(ras, "pid")));
    } else if (ras) {
        printf("NCCL's RAS, asked of pid %lld on %s:\n",
               (long long)json_integer_value(json_object_get(ras, "pid")),
               json_string_value(json_object_get(ras, "host")));
        ncclras_print(ras, false);
    }
    json_decref(say_collectives(r, false));
    for (size_t i = 0; i < r->n; i++)
        if (r->reads[i].last_comm) {
            printf("\n");
            break;
        }
    for (size_t g = 0; g < n; g++) {
        char ranks_s[256], hosts_s[512], pids_s[512];
        const char *frames = groups[g].key;

        group_who(r, &groups[g], ranks_s, sizeof(ranks_s), hosts_s, sizeof(hosts_s), pids_s,
                  sizeof(pids_s));
        printf("group %zu of %zu: %zu process%s", g + 1, n, groups[g].n,
               groups[g].n == 1 ? "" : "es");
        if (*ranks_s)
            printf(", rank%s %s", strchr(ranks_s, ',') || strchr(ranks_s, '-') ? "s" : "", ranks_s);
        if (*pids_s)
            printf(", %s", pids_s);
        printf(" (host%s %s)", strchr(hosts_s, ',') ? "s" : "", hosts_s);
        if (n_rounds > 1 && groups[g].stuck == groups[g].n)
            printf(": stuck, the same stack all %d times", n_rounds);
        else if (n_rounds > 1 && groups[g].stuck)
            printf(": %zu of them stuck, the others moving", groups[g].stuck);
        else if (n_rounds > 1)
            printf(": moving");
        printf("\n");
        if (!*frames)
            printf("    (no Python frame)\n");
        for (const char *p = frames; *p;) {
            const char *nl = strchr(p, '\n');
            printf("    %.*s\n", (int)(nl ? nl - p : (long)strlen(p)), p);
            p = nl ? nl + 1 : p + strlen(p);
        }
        group_collectives(r, &groups[g]);
        printf("\n");
    }
    for (size_t i = 0, apart = 0; i < r->n; i++) {
        const struct rank_read *rd = &r->reads[i];
        json_t *top = json_array_get(json_object_get(main_thread(rd->target), "frames"), 0);
        if (!rd->key || !is_launcher(r, rd))
            continue;
        if (!apart++)
            printf("apart: no rank among ranked processes (the launcher, waiting for them):\n");
        printf("    %s pid %lld: in %s\n", rd->host, rd->pid,
               json_string_value(json_object_get(top, "function")) ?: "(no Python frame)");
    }
    for (size_t i = 0; i < r->n; i++)
        if (!r->reads[i].key) {
            if (!unread++)
                printf("not read:\n");
            printf("    %s pid %lld: %s\n", r->reads[i].host, r->reads[i].pid,
                   r->reads[i].error ? r->reads[i].error : "out of memory");
        }
    (void)o;
}

static json_t *groups_json(const struct round *r, struct group *groups, size_t n, int n_rounds)
{
    json_t *arr = json_array();

    for (size_t g = 0; g < n; g++) {
        char ranks_s[256], hosts_s[512], pids_s[512];
        json_t *members = json_array(), *stack = json_array();

        group_who(r, &groups[g], ranks_s, sizeof(ranks_s), hosts_s, sizeof(hosts_s), pids_s,
                  sizeof(pids_s));
        for (size_t k = 0; k < groups[g].n; k++) {
            const struct rank_read *rd = &r->reads[groups[g].members[k]];
            json_t *m = json_pack("{s:s, s:I}", "host", rd->host, "pid", (json_int_t)rd->pid);
            if (rd->rank >= 0)
                json_object_set_new(m, "rank", json_integer(rd->rank));
            if (rd->last_comm)
                json_object_set_new(
                    m, "last_comm",
                    json_pack("{s:O, s:O, s:O, s:b, s:O}", "op", json_array_get(rd->last_comm, 1),
                              "group", json_array_get(rd->last_comm, 2), "seq",
                              json_array_get(rd->last_comm, 3), "in_flight",
                              json_integer_value(json_array_get(rd->last_comm, 4)) == 1, "ts_ns",
                              json_array_get(rd->last_comm, 5)));
            json_array_append_new(members, m);
        }
        json_array_extend(
            stack, json_object_get(main_thread(r->reads[groups[g].members[0]].target), "frames"));
        json_array_append_new(
            arr, json_pack("{s:I, s:s, s:s, s:o, s:I, s:b, s:o}", "count", (json_int_t)groups[g].n,
                           "ranks", ranks_s, "hosts", hosts_s, "members", members, "stuck",
                           (json_int_t)groups[g].stuck, "all_stuck",
                           n_rounds > 1 && groups[g].stuck == groups[g].n, "stack", stack));
    }
    return arr;
}

/* Every process's main-thread stack, counted by processes, as a flame graph (@format). */
static int write_flame(const struct round *r, const char *path, const char *format)
{
    struct flame_sums sums;
    char title[96];
    int rc;

    flame_sums_init(&sums);
    for (size_t i = 0; i < r->n; i++) {
        json_t *frames = json_object_get(main_thread(r->reads[i].target), "frames");
        json_t *rows = json_array();

        if (r->reads[i].error)
            continue;
        for (size_t k = json_array_size(frames); k-- > 0;) { /* root first */
            json_t *f = json_array_get(frames, k);
            const char *kind = json_string_value(json_object_get(f, "kind"));
            const char *func = json_string_value(json_object_get(f, "function"));
            if (kind && strcmp(kind, "python") != 0)
                json_array_append_new(
                    rows, json_pack("[s, s, s, i]", "native", func ? func : "??",
                                    json_string_value(json_object_get(f, "object")) ?: "?", 0));
            else
                json_array_append_new(
                    rows, json_pack("[s, s, s, I]", "python", func ? func : "?",
                                    json_string_value(json_object_get(f, "file")) ?: "?",
                                    json_integer_value(json_object_get(f, "line"))));
        }
        flame_sums_add(&sums, rows, NULL, 1);
        json_decref(rows);
    }
    snprintf(title, sizeof(title), "main threads of %zu process%s at one instant", r->n,
             r->n == 1 ? "" : "es");
    rc = flame_sums_write(&sums, format, title, path, "hang");
    flame_sums_free(&sums);
    return rc;
}

static void hang_usage(FILE *out)
{
    fprintf(out,
            "usage: probectl hang [--hosts LIST | --hostfile FILE] [options]\n"
            "Reads every rank's stacks at one instant (no process stopped) and groups the\n"
            "ranks by their main thread's Python stack, the smallest group first.\n"
            "  --native              with the C/C++ frames (threads held for milliseconds)\n"
            "  --depth N             compare the innermost N Python frames only\n"
            "  --no-lines            compare functions, not lines\n"
            "  --repeat N            N rounds (--interval apart, default 1s): stuck or moving\n"
            "  --interval DURATION\n"
            "  --flamegraph FILE     every rank's main-thread stack, counted by ranks (SVG)\n"
            "  --folded FILE         the same as folded text\n"
            "Without --hosts, --hostfile or $SLURM_JOB_NODELIST: this node's daemon.\n" REACH_HELP);
}

int hang_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"native", no_argument, NULL, 'n'},
                                             {"depth", required_argument, NULL, 'd'},
                                             {"no-lines", no_argument, NULL, 'l'},
                                             {"repeat", required_argument, NULL, 'r'},
                                             {"interval", required_argument, NULL, 'i'},
                                             {"folded", required_argument, NULL, 'F'},
                                             {"flamegraph", required_argument, NULL, 'G'},
                                             REACH_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    struct hang_opts o = {.repeat = 1, .interval_ns = 1000000000LL};
    struct reach reach = {0};
    struct round rounds[HANG_ROUNDS_MAX];
    struct group *groups = NULL;
    json_t *ras = NULL;
    struct nodes nodes = {0};
    struct fanout fo = {0};
    bool remote;
    int c, bad = 0, n_rounds = 0, rc = 0, n_nodes = 1;
    size_t n_groups = 0;

    while ((c = getopt_long(argc, argv, "nd:lr:i:F:G:h", longopts, NULL)) != -1) {
        if (reach_option(&reach, c, "hang", &bad))
            continue;
        switch (c) {
        case 'n':
            o.native = true;
            break;
        case 'd':
            o.depth = atoi(optarg);
            bad |= o.depth <= 0 ? -1 : 0;
            break;
        case 'l':
            o.no_lines = true;
            break;
        case 'r':
            o.repeat = atoi(optarg);
            bad |= o.repeat < 1 || o.repeat > HANG_ROUNDS_MAX ? -1 : 0;
            break;
        case 'i':
            o.interval_ns = units_duration_ns(optarg);
            bad |= o.interval_ns <= 0 ? -1 : 0;
            break;
        case 'F':
            o.folded_path = optarg;
            break;
        case 'G':
            o.svg_path = optarg;
            break;
        case 'h':
            hang_usage(stdout);
            return 0;
        default:
            return 2;
        }
    }
    if (bad || optind != argc) {
        fprintf(stderr,
                "probectl hang: --depth and --repeat take a count (--repeat at most %d),"
                " --interval a duration; nothing else is taken\n",
                HANG_ROUNDS_MAX);
        return 2;
    }
    o.json = reach.json;
    remote = reach.hosts || reach.hostfile || getenv("SLURM_JOB_NODELIST");
    if (remote) {
        if ((rc = reach_nodes(&reach, "hang", &nodes, &fo)) != 0)
            return rc;
        n_nodes = (int)nodes.n;
    } else if (client_remote_host()) {
        n_nodes = 1;
    }
    for (int k = 0; k < o.repeat; k++) {
        if (k)
            usleep((useconds_t)(o.interval_ns / 1000));
        rounds[k] = (struct round){0};
        if ((remote ? read_nodes(&fo, &rounds[k], &o) : read_local(&rounds[k], &o)) < 0) {
            rc = 1;
            break;
        }
        n_rounds++;
    }
    if (n_rounds == o.repeat) {
        struct round *last = &rounds[n_rounds - 1];
        read_comm(last, remote ? &fo : NULL);
        ras = ask_ras(last, remote ? &fo : NULL);
        groups = calloc(last->n + 1, sizeof(*groups));
        n_groups = groups ? make_groups(last, rounds, n_rounds, groups) : 0;
        if (o.json) {
            json_t *unread = json_array(), *apart = json_array();
            for (size_t i = 0; i < last->n; i++)
                if (last->reads[i].key && is_launcher(last, &last->reads[i]))
                    json_array_append_new(
                        apart,
                        json_pack("{s:s, s:I, s:O?}", "host", last->reads[i].host, "pid",
                                  (json_int_t)last->reads[i].pid, "stack",
                                  json_object_get(main_thread(last->reads[i].target), "frames")));
            for (size_t i = 0; i < last->n; i++)
                if (!last->reads[i].key)
                    json_array_append_new(
                        unread, json_pack("{s:s, s:I, s:s}", "host", last->reads[i].host, "pid",
                                          (json_int_t)last->reads[i].pid, "error",
                                          last->reads[i].error ? last->reads[i].error : "?"));
            print_json(json_pack(
                "{s:I, s:f, s:f, s:i, s:o, s:o, s:o, s:o, s:O?, s:o, s:o, s:o}", "processes",
                (json_int_t)last->n, "spread_ms", (double)(last->last_ns - last->first_ns) / 1e6,
                "clock_error_ms", last->clock_error_ms, "rounds", n_rounds, "groups",
                groups_json(last, groups, n_groups, n_rounds), "collectives",
                say_collectives(last, true), "desyncs", find_desyncs(last, false), "nccl_counts",
                find_desyncs(last, true), "nccl_ras", ras, "unread", unread, "apart", apart,
                "failed", remote ? failures_json(&fo) : json_array()));
        } else if (last->n == 0) {
            if (json_array_size(last->replies) > 0) /* else no node answered: said below */
                printf("no attached process of yours to read%s (attach the job first: probectl"
                       " %sattach)\n",
                       remote ? " on any node" : "", remote ? "cluster " : "");
        } else {
            print_groups(last, groups, n_groups, n_rounds, &o, n_nodes, ras);
        }
        if (o.folded_path && write_flame(last, o.folded_path, "folded") < 0)
            rc = 1;
        if (o.svg_path && write_flame(last, o.svg_path, "svg") < 0)
            rc = 1;
    }
    for (size_t g = 0; g < n_groups; g++)
        free(groups[g].members);
    free(groups);
    json_decref(ras);
    for (int k = 0; k < n_rounds; k++)
        round_free(&rounds[k]);
    if (remote) {
        if (say_failures(&fo, "hang"))
            rc = 1;
        fanout_free(&fo);
        nodes_free(&nodes);
    }
    return rc;
}
