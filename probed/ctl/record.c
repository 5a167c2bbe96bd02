/* record.c - see record.h. */
#define _GNU_SOURCE
#include "ctl/record.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/flame.h"
#include "ctl/client.h"
#include "ctl/flameout.h"

#define RECORD_PIDS 256             /* processes in one recording */
#define RUN_ATTACH_TRIES 500        /* x 20 ms: a command's interpreter has 10 s to come up */
#define POLL_US 250000              /* how often the recording looks at its processes */
#define DRAIN_QUIET_NS 1200000000LL /* longer than the daemon's writes apart (1 s) */
#define DRAIN_MAX_NS 8000000000LL

struct recording {
    const char *socket;
    long rate;
    bool native, children;
    pid_t pids[RECORD_PIDS];
    bool ours[RECORD_PIDS];      /* attached by this recording: detached at its end */
    json_t *before[RECORD_PIDS]; /* the stats of one attached before (their counts go on) */
    size_t n;
    int64_t from_ns, to_ns;
    /* what is written */
    const char *out, *format, *by;
    struct flame_filter filter;
    bool no_lines;
};

static volatile sig_atomic_t stop_asked;

static void on_stop(int sig)
{
    (void)sig;
    stop_asked = 1;
}

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static bool recorded(const struct recording *rec, pid_t pid)
{
    for (size_t i = 0; i < rec->n; i++)
        if (rec->pids[i] == pid)
            return true;
    return false;
}

/* GET /v1/targets/PID's stats, or NULL. */
static json_t *stats_of(const struct recording *rec, pid_t pid)
{
    char path[48], err[256];
    json_t *reply = NULL, *stats;
    long status = 0;

    snprintf(path, sizeof(path), "/v1/targets/%d", (int)pid);
    if (client_call(client_socket_path(rec->socket), "GET", path, NULL, &status, &reply, NULL, NULL,
                    err, sizeof(err)) < 0 ||
        status != 200) {
        json_decref(reply);
        return NULL;
    }
    stats = json_incref(json_object_get(reply, "stats"));
    json_decref(reply);
    return stats;
}

/* The body of POST /v1/targets for @pid with the recording's options. */
static json_t *attach_body(const struct recording *rec, pid_t pid)
{
    json_t *body = json_pack("{s:i}", "pid", (int)pid);

    if (rec->rate)
        json_object_set_new(body, "rate", json_integer(rec->rate));
    if (rec->native)
        json_object_set_new(body, "native", json_true());
    /* with children the daemon follows the process whatever it is now (it may still be us,
     * before the exec, or a shell), and attaches it once it runs Python, and every Python
     * process it starts */
    if (rec->children)
        json_object_set_new(body, "children", json_true());
    return body;
}

/* Attaches @pid (one already attached is kept as it is); -1 after saying why. */
static int attach_pid(struct recording *rec, pid_t pid)
{
    json_t *body = attach_body(rec, pid), *reply = NULL;
    char err[512];
    long status = 0;
    int r = client_call(client_socket_path(rec->socket), "POST", "/v1/targets", body, &status,
                        &reply, NULL, NULL, err, sizeof(err));

    json_decref(body);
    if (r < 0) {
        fprintf(stderr, "probectl record: %s\n", err);
        return -1;
    }
    if (status != 200 && status != 409) {
        fprintf(stderr, "probectl record: %s\n", client_error_text(reply));
        json_decref(reply);
        return -1;
    }
    json_decref(reply);
    rec->pids[rec->n] = pid;
    rec->ours[rec->n] = status == 200;
    if (status == 409) { /* attached before: its samples go on, and so does its attach */
        fprintf(stderr, "probectl record: pid %d was attached already; it stays attached\n",
                (int)pid);
        rec->before[rec->n] = stats_of(rec, pid);
    }
    rec->n++;
    return 0;
}

/* Attaches the command's process @pid once its interpreter is up; false when it never was
 * (not Python, or it ended first: then *@child_done holds its wait status). */
static bool attach_when_ready(struct recording *rec, pid_t pid, int *child_done)
{
    bool following = false;
    char err[512];

    for (int i = 0; i < RUN_ATTACH_TRIES; i++) {
        json_t *body = attach_body(rec, pid), *reply = NULL;
        long status = 0;
        int r, wstatus;

        r = client_call(client_socket_path(rec->socket), "POST", "/v1/targets", body, &status,
                        &reply, NULL, NULL, err, sizeof(err));
        json_decref(body);
        if (r < 0) {
            fprintf(stderr, "probectl run: %s; running unobserved\n", err);
            return false;
        }
        if (status == 200 && !json_is_true(json_object_get(reply, "following"))) {
            json_decref(reply);
            return true;
        }
        if (status == 200) { /* followed, not Python yet: its exec is attached on the next try */
            following = true;
            status = 422;
        } else if (status == 409 && following) { /* the daemon's follower was first */
            json_decref(reply);
            return true;
        }
        /* 422: not (yet) a Python process; 404, 500: caught while it execs (its /proc
         * entry or files changing under the read): retry while the child lives */
        if (status != 422 && status != 404 && status != 500) {
            fprintf(stderr, "probectl run: %s; running unobserved\n", client_error_text(reply));
            json_decref(reply);
            return false;
        }
        json_decref(reply);
        if (waitpid(pid, &wstatus, WNOHANG) == pid) {
            *child_done = wstatus;
            return false;
        }
        usleep(20000);
    }
    if (following) /* a shell or launcher: its Python descendants are attached as they start */
        return true;
    fprintf(stderr,
            "probectl run: pid %d did not start a Python interpreter in 10 s;"
            " running unobserved\n",
            (int)pid);
    return false;
}

/* The parent of @pid from /proc, 0 when unknown. */
static pid_t parent_of(pid_t pid)
{
    char path[40], buf[512], *close_paren;
    FILE *f;
    int ppid = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "re")))
        return 0;
    /* "pid (comm) state ppid": comm may hold spaces and parentheses, so after the last ')' */
    if (fgets(buf, sizeof(buf), f) && (close_paren = strrchr(buf, ')')))
        sscanf(close_paren + 1, " %*c %d", &ppid);
    fclose(f);
    return ppid;
}

/* With children: every attached process of the daemon's list below one recorded joins the
 * recording (the daemon attached it, following its parent). @targets: GET /v1/targets. */
static void add_descendants(struct recording *rec, json_t *targets)
{
    json_t *t;
    size_t i;

    json_array_foreach(json_object_get(targets, "targets"), i, t)
    {
        pid_t pid = (pid_t)json_integer_value(json_object_get(t, "pid")), up = pid;

        if (rec->n >= RECORD_PIDS || recorded(rec, pid))
            continue;
        for (int depth = 0; depth < 64 && up > 1; depth++) {
            up = parent_of(up);
            if (recorded(rec, up)) {
                rec->pids[rec->n] = pid;
                rec->ours[rec->n++] = true;
                break;
            }
        }
    }
}

/* Sums the recording's processes' samples (as sampled so far) and how many still run. */
static void look(struct recording *rec, long long *samples, size_t *running)
{
    json_t *list = client_request(rec->socket, "GET", "/v1/targets", NULL), *t;
    size_t i;

    *samples = 0;
    *running = 0;
    if (!list)
        return;
    if (rec->children)
        add_descendants(rec, list);
    json_array_foreach(json_object_get(list, "targets"), i, t)
    {
        pid_t pid = (pid_t)json_integer_value(json_object_get(t, "pid"));

        if (!recorded(rec, pid))
            continue;
        *samples += json_integer_value(json_object_get(json_object_get(t, "stats"), "samples"));
        *running += strcmp(json_string_value(json_object_get(t, "state")) ?: "", "sampling") == 0;
    }
    json_decref(list);
}

/* Waits for the end of the recording: @duration_ns (0: none), Ctrl-C, the command @child
 * ending (its wait status then in *@child_status), or (no command) every process ending. */
static void wait_for_end(struct recording *rec, int64_t duration_ns, pid_t child, int *child_status)
{
    bool progress = isatty(STDERR_FILENO);
    int64_t next_look = 0;
    long long samples = 0;
    size_t running = rec->n;

    while (!stop_asked && (!duration_ns || now_ns() - rec->from_ns < duration_ns)) {
        if (child > 0 && waitpid(child, child_status, WNOHANG) == child)
            break;
        if (now_ns() >= next_look) {
            look(rec, &samples, &running);
            next_look = now_ns() + 1000000000LL;
            if (child <= 0 && running == 0)
                break;
            if (progress)
                fprintf(stderr, "\rrecording %zu process%s: %lld samples, %.0f s%s  ", rec->n,
                        rec->n == 1 ? "" : "es", samples, (now_ns() - rec->from_ns) / 1e9,
                        child > 0 ? "" : " (Ctrl-C stops)");
        }
        usleep(POLL_US);
    }
    if (progress)
        fprintf(stderr, "\r\033[K");
}

/* The SQL condition on targets t of the recorded processes: "t.pid IN (7, 9)". */
static char *pids_cond(const struct recording *rec)
{
    size_t cap = 16 + rec->n * 12, at;
    char *s = malloc(cap);

    if (!s)
        return NULL;
    at = (size_t)snprintf(s, cap, "t.pid IN (");
    for (size_t i = 0; i < rec->n; i++)
        at += (size_t)snprintf(s + at, cap - at, "%s%d", i ? ", " : "", (int)rec->pids[i]);
    snprintf(s + at, cap - at, ")");
    return s;
}

/* The rows of @sql (malloc'd, freed here) over every process of the user; NULL after saying
 * why. *@keep holds the reply. */
static json_t *rows_of(const struct recording *rec, char *sql, json_t **keep)
{
    json_t *body = sql ? json_pack("{s:s}", "sql", sql) : NULL, *rows;

    free(sql);
    *keep = NULL;
    if (!body)
        return NULL;
    *keep = client_request(rec->socket, "POST", "/v1/query", body);
    json_decref(body);
    rows = *keep ? json_object_get(*keep, "rows") : NULL;
    if (rows && json_is_true(json_object_get(*keep, "truncated"))) {
        fprintf(stderr,
                "probectl record: more samples than the daemon's row limit (query_max_rows):"
                " record fewer processes or for less long, or write svg or folded\n");
        return NULL;
    }
    return rows;
}

/* [samples, threads] stored in the window that the file holds: the count once no more come. */
static json_t *window_counts(const struct recording *rec, const char *cond, json_t **keep)
{
    char *samples = flame_timeline_sql(cond, &rec->filter, false, false), *sql = NULL;

    if (samples &&
        asprintf(&sql, "SELECT count(*), count(DISTINCT pid || ':' || tid) FROM (%s)", samples) < 0)
        sql = NULL;
    free(samples);
    return json_array_get(rows_of(rec, sql, keep), 0);
}

/* Waits until the daemon has stored the window's samples: their count holds still for longer
 * than its writer's interval. The [samples, threads] row (*@keep holds it). */
static json_t *drain(const struct recording *rec, const char *cond, json_t **keep)
{
    int64_t start = now_ns(), quiet_since = now_ns();
    long long last = -1;
    json_t *row;

    for (;;) {
        row = window_counts(rec, cond, keep);
        if (!row)
            return NULL;
        if (client_int(row, 0) != last) {
            last = client_int(row, 0);
            quiet_since = now_ns();
        } else if (now_ns() - quiet_since > DRAIN_QUIET_NS || now_ns() - start > DRAIN_MAX_NS) {
            return row;
        }
        json_decref(*keep);
        usleep(200000);
    }
}

/* The window's stacks as rows [stack_id, frames as JSON text] (root first; a Python frame's
 * line 0 with --function), as the timeline takes them. *@keep holds them. */
static json_t *stack_rows(const struct recording *rec, const char *cond, json_t **keep)
{
    return rows_of(rec, flame_timeline_sql(cond, &rec->filter, true, rec->no_lines), keep);
}

/* The same as id -> frames, as flame_sums_add() takes them. */
static json_t *stacks_by_id(json_t *rows)
{
    json_t *by_id = json_object(), *row;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        json_t *frames = json_loads(json_string_value(json_array_get(row, 1)) ?: "", 0, NULL);
        char id[24];

        if (!frames)
            continue;
        snprintf(id, sizeof(id), "%lld", client_int(row, 0));
        json_object_set_new(by_id, id, frames);
    }
    return by_id;
}

/* Several processes (or rooted by process): the stacks and samples read here and drawn. */
static int write_merged(const struct recording *rec, const char *cond, const char *title)
{
    json_t *stacks = NULL, *stacks_keep = NULL, *keep = NULL, *rows = NULL, *srows;
    json_t *names = NULL, *names_keep = NULL, *row;
    char *samples = NULL, *sql = NULL;
    bool timeline =
        strcmp(rec->format, "speedscope") == 0 || strcmp(rec->format, "chrometrace") == 0;
    size_t i;
    int r = -1;

    if (strcmp(rec->format, "pprof") == 0) {
        fprintf(stderr, "probectl record: pprof of one process at a time (give one pid, or write"
                        " svg, folded, speedscope or chrometrace)\n");
        return -1;
    }
    if (!(srows = stack_rows(rec, cond, &stacks_keep)) ||
        !(samples = flame_timeline_sql(cond, &rec->filter, false, false)))
        goto out;
    if (timeline) { /* every sample, in time order */
        struct flame_timeline *t = NULL;
        size_t len = 0;
        char *text = NULL;
        FILE *f;

        rows = rows_of(rec, samples, &keep);
        samples = NULL; /* rows_of() took it */
        if (!rows)
            goto out;
        if (flame_timeline_from_rows(srows, rows, 1000000000LL / (rec->rate ?: 100), &t) == 0)
            text = strcmp(rec->format, "speedscope") == 0
                       ? flame_timeline_speedscope(t, title, &len)
                       : flame_timeline_chrome(t, &len);
        flame_timeline_free(t);
        if (!text) {
            fprintf(stderr, "probectl record: out of memory drawing the profile\n");
            goto out;
        }
        if (!(f = fopen(rec->out, "we")) || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "probectl record: writing %s: %s\n", rec->out, strerror(errno));
            free(text);
            goto out;
        }
        free(text);
        r = 0;
        goto out;
    }
    /* counts per process, thread and stack, each under its root (--by) */
    stacks = stacks_by_id(srows);
    if (asprintf(&sql, "SELECT pid, tid, name, stack_id, count(*) FROM (%s) GROUP BY 1, 2, 3, 4",
                 samples) < 0)
        sql = NULL;
    if (!(rows = rows_of(rec, sql, &keep)))
        goto out;
    if (asprintf(&sql, "SELECT pid, cmdline, max(rank) FROM targets t WHERE %s GROUP BY pid",
                 cond) < 0)
        sql = NULL;
    names = json_incref(rows_of(rec, sql, &names_keep));
    struct flame_sums sums;

    flame_sums_init(&sums);
    json_array_foreach(rows, i, row)
    {
        char id[24], root[320] = "";
        json_t *frames;

        snprintf(id, sizeof(id), "%lld", client_int(row, 3));
        if (!(frames = json_object_get(stacks, id)))
            continue;
        if (strcmp(rec->by, "thread") == 0) {
            const char *name = json_string_value(json_array_get(row, 2));

            snprintf(root, sizeof(root), "%s (pid %lld, tid %lld)", name && *name ? name : "thread",
                     client_int(row, 0), client_int(row, 1));
        } else if (strcmp(rec->by, "pid") == 0 || strcmp(rec->by, "rank") == 0) {
            const char *cmdline = "";
            json_t *t, *rank = NULL;
            size_t k;

            json_array_foreach(names, k, t)
            {
                if (client_int(t, 0) == client_int(row, 0)) {
                    cmdline = json_string_value(json_array_get(t, 1)) ?: "";
                    rank = json_array_get(t, 2);
                }
            }
            /* by rank: a rank's processes (its dataloader workers inherit RANK) under one
             * root; a process without a rank under its own */
            if (strcmp(rec->by, "rank") == 0 && json_is_integer(rank))
                snprintf(root, sizeof(root), "rank %lld", (long long)json_integer_value(rank));
            else
                snprintf(root, sizeof(root), "pid %lld%s%.200s%s", client_int(row, 0),
                         *cmdline ? " (" : "", cmdline, *cmdline ? ")" : "");
        }
        flame_sums_add(&sums, frames, *root ? root : NULL, client_int(row, 4));
    }
    r = flame_sums_write(&sums, rec->format, title, rec->out, "record") < 0 ? -1 : 0;
    flame_sums_free(&sums);
out:
    json_decref(names);
    json_decref(names_keep);
    json_decref(keep);
    json_decref(stacks);
    json_decref(stacks_keep);
    free(samples);
    return r;
}

/* One process: the daemon draws it (/v1/flamegraph), every format. */
static int write_one(const struct recording *rec)
{
    char path[384], err[512], *raw = NULL;
    json_t *reply = NULL;
    size_t raw_len = 0;
    long status = 0;
    FILE *f;
    int r = -1;

    snprintf(path, sizeof(path), "/v1/flamegraph?pid=%d&format=%s&from_ns=%lld&to_ns=%lld%s%s%s%s",
             (int)rec->pids[0], rec->format, (long long)rec->from_ns, (long long)rec->to_ns,
             rec->filter.idle ? "&idle=1" : "", rec->filter.gil ? "&gil=1" : "",
             rec->no_lines ? "&lines=0" : "", strcmp(rec->by, "thread") == 0 ? "&threads=1" : "");
    if (client_call(client_socket_path(rec->socket), "GET", path, NULL, &status, &reply, &raw,
                    &raw_len, err, sizeof(err)) < 0) {
        fprintf(stderr, "probectl record: %s\n", err);
        return -1;
    }
    if (status != 200 || !raw)
        fprintf(stderr, "probectl record: %s\n", client_error_text(reply));
    else if (!(f = fopen(rec->out, "we")) || fwrite(raw, 1, raw_len, f) != raw_len ||
             fclose(f) != 0)
        fprintf(stderr, "probectl record: writing %s: %s\n", rec->out, strerror(errno));
    else
        r = 0;
    json_decref(reply);
    free(raw);
    return r;
}

/* The stats field @key summed over the recording, less what those attached before had. */
static long long stat_delta(const struct recording *rec, json_t *const *after, const char *key)
{
    long long sum = 0;

    for (size_t i = 0; i < rec->n; i++)
        sum += json_integer_value(json_object_get(after[i], key)) -
               json_integer_value(json_object_get(rec->before[i], key));
    return sum;
}

static const char *extension_of(const char *format)
{
    return strcmp(format, "folded") == 0        ? "folded"
           : strcmp(format, "speedscope") == 0  ? "speedscope.json"
           : strcmp(format, "chrometrace") == 0 ? "trace.json"
           : strcmp(format, "pprof") == 0       ? "pb.gz"
                                                : "svg";
}

/* Detaches the processes the recording attached (those that still run). */
static void detach_ours(const struct recording *rec)
{
    for (size_t i = 0; i < rec->n; i++) {
        char path[48], err[256];
        json_t *reply = NULL;
        long status = 0;

        if (!rec->ours[i])
            continue;
        snprintf(path, sizeof(path), "/v1/targets/%d", (int)rec->pids[i]);
        client_call(client_socket_path(rec->socket), "DELETE", path, NULL, &status, &reply, NULL,
                    NULL, err, sizeof(err));
        json_decref(reply);
    }
}

/* Ends the recording: detach what it attached, wait for the samples stored, write them,
 * say what was written. 0, or -1 after saying why. */
static int finish(struct recording *rec, const char *title)
{
    json_t **after = calloc(rec->n ? rec->n : 1, sizeof(*after)), *keep = NULL, *counts;
    char *cond = pids_cond(rec);
    int r = -1;

    rec->to_ns = now_ns();
    rec->filter.since_ns = rec->from_ns;
    rec->filter.until_ns = rec->to_ns;
    for (size_t i = 0; after && i < rec->n; i++)
        after[i] = stats_of(rec, rec->pids[i]);
    detach_ours(rec);
    if (!after || !cond || !(counts = drain(rec, cond, &keep)))
        goto out;
    if (client_int(counts, 0) == 0) {
        fprintf(stderr, "probectl record: no samples%s in %.1f s: %s\n",
                rec->filter.idle ? "" : " of a thread running", (rec->to_ns - rec->from_ns) / 1e9,
                rec->filter.idle ? "did it run Python?"
                                 : "were its threads idle? (--idle counts those too)");
        goto out;
    }
    if ((rec->n == 1 && strcmp(rec->by, "pid") != 0 && strcmp(rec->by, "rank") != 0
             ? write_one(rec)
             : write_merged(rec, cond, title)) < 0)
        goto out;
    fprintf(stderr,
            "wrote %s (%s): %lld samples of %lld thread%s in %zu process%s over %.1f s;"
            " %lld torn, %lld errors\n",
            rec->out, rec->format, client_int(counts, 0), client_int(counts, 1),
            client_int(counts, 1) == 1 ? "" : "s", rec->n, rec->n == 1 ? "" : "es",
            (rec->to_ns - rec->from_ns) / 1e9, stat_delta(rec, after, "torn"),
            stat_delta(rec, after, "errors"));
    r = 0;
out:
    for (size_t i = 0; after && i < rec->n; i++)
        json_decref(after[i]);
    free(after);
    free(cond);
    json_decref(keep);
    return r;
}

static void usage(bool run)
{
    if (run)
        printf("usage: probectl run [-o FILE] [options] -- <command> [args...]\n"
               "  Runs the command attached from its start (once its interpreter is up), keeps\n"
               "  its samples, and exits with its exit status; with -o also writes its profile,\n"
               "  as probectl record does.\n");
    else
        printf("usage: probectl record [-o FILE] [options] (<pid>... | -- <command> [args...])\n"
               "  Samples the processes (or the command, from its start) until --duration,\n"
               "  Ctrl-C or their end, then writes their profile and says what it holds.\n"
               "  Those it attached are detached; their samples stay in the database.\n"
               "  A command that outlives --duration runs on, no longer recorded: record\n"
               "  waits for it and exits with its status (1 when no profile was written).\n");
    printf("  -o FILE         the profile (record's default: probed-PID-TIME.svg); its name\n"
           "                  picks the format: .svg, .folded, .json (speedscope),\n"
           "                  .trace.json (Chrome trace, Perfetto), .pb.gz (pprof)\n"
           "  --format F      svg, folded, speedscope, chrometrace or pprof\n"
           "  -d, --duration D  stop after D (30s, 5m; default: until Ctrl-C or the end)\n"
           "  -r, --rate HZ   samples a second\n"
           "  --native        with native (C/C++/CUDA) frames\n"
           "  --children      also every Python process they start (workers, launchers)\n"
           "  --by pid|rank|thread|none  what the flame graph's roots are (several pids: pid;\n"
           "                  rank: a rank's processes, workers too, under one root)\n"
           "  --idle          include threads that were not running;  --gil: only those"
           " holding the GIL\n"
           "  --function      one box per function, not per line (--nolineno)\n");
}

static int record_or_run(int argc, char **argv, bool run)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"format", required_argument, NULL, 'f'},
                                             {"duration", required_argument, NULL, 'd'},
                                             {"rate", required_argument, NULL, 'r'},
                                             {"native", no_argument, NULL, 'n'},
                                             {"children", no_argument, NULL, 'c'},
                                             {"by", required_argument, NULL, 'b'},
                                             {"idle", no_argument, NULL, 'i'},
                                             {"gil", no_argument, NULL, 'g'},
                                             {"function", no_argument, NULL, 'F'},
                                             {"nolineno", no_argument, NULL, 'F'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *cmd = run ? "run" : "record", *duration = NULL;
    struct recording rec = {.by = NULL};
    char out_name[128], title[160];
    int64_t duration_ns = 0;
    pid_t child = -1;
    int c, child_status = -1, rc = 0;
    bool command;

    while ((c = getopt_long(argc, argv, "+o:f:d:r:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            rec.out = optarg;
            break;
        case 'f':
            rec.format = optarg;
            break;
        case 'd':
            duration = optarg;
            break;
        case 'r': {
            char *end;

            rec.rate = strtol(optarg, &end, 10);
            if (*end || rec.rate < 1 || rec.rate > 10000) {
                fprintf(stderr, "probectl %s: --rate takes 1 to 10000 samples a second, not '%s'\n",
                        cmd, optarg);
                return 2;
            }
            break;
        }
        case 'n':
            rec.native = true;
            break;
        case 'c':
            rec.children = true;
            break;
        case 'b':
            rec.by = optarg;
            break;
        case 'i':
            rec.filter.idle = true;
            break;
        case 'g':
            rec.filter.gil = true;
            break;
        case 'F':
            rec.no_lines = true;
            break;
        case 'S':
            rec.socket = optarg;
            break;
        case 'h':
            usage(run);
            return 0;
        default:
            return 2;
        }
    }
    command = run || (optind > 1 && strcmp(argv[optind - 1], "--") == 0);
    if (optind >= argc) {
        fprintf(stderr, "probectl %s: expected %s-- COMMAND [args]\n", cmd,
                run ? "" : "PID... or ");
        return 2;
    }
    if (client_remote_host() && (command || rec.children)) {
        fprintf(stderr, "probectl %s: %s runs on this node only (-H %s: give pids of that node)\n",
                cmd, command ? "a command" : "--children", client_remote_host());
        return 2;
    }
    if (rec.by && strcmp(rec.by, "pid") != 0 && strcmp(rec.by, "rank") != 0 &&
        strcmp(rec.by, "thread") != 0 && strcmp(rec.by, "none") != 0) {
        fprintf(stderr, "probectl %s: --by takes pid, rank, thread or none, not '%s'\n", cmd,
                rec.by);
        return 2;
    }
    if (!rec.format)
        rec.format = flame_format_of(rec.out);
    if (strcmp(rec.format, "svg") != 0 && strcmp(rec.format, "folded") != 0 &&
        strcmp(rec.format, "speedscope") != 0 && strcmp(rec.format, "chrometrace") != 0 &&
        strcmp(rec.format, "pprof") != 0) {
        fprintf(stderr,
                "probectl %s: --format takes svg, folded, speedscope, chrometrace or pprof, not"
                " '%s'\n",
                cmd, rec.format);
        return 2;
    }
    if (duration &&
        client_parse_duration(duration, cmd, "--duration", 0.1, 3650 * 86400.0, &duration_ns) < 0)
        return 2;
    if (!command) {
        for (int i = optind; i < argc; i++) {
            int pid = client_parse_pid(argv[i], cmd);

            if (pid < 0) {
                fprintf(stderr, "probectl %s: a command goes after --: probectl %s -- %s ...\n",
                        cmd, cmd, argv[i]);
                return 2;
            }
            if (argc - optind > RECORD_PIDS) {
                fprintf(stderr, "probectl %s: %d processes at most\n", cmd, RECORD_PIDS);
                return 2;
            }
            if (recorded(&rec, pid))
                continue;
            rec.pids[rec.n++] = pid; /* attached below */
        }
    }
    if (!rec.by)
        rec.by = rec.n > 1 || rec.children ? "pid" : "none";

    rec.from_ns = now_ns();
    if (command) {
        child = fork();
        if (child < 0) {
            fprintf(stderr, "probectl %s: fork: %s\n", cmd, strerror(errno));
            return 1;
        }
        if (child == 0) {
            execvp(argv[optind], argv + optind);
            fprintf(stderr, "probectl %s: %s: %s\n", cmd, argv[optind], strerror(errno));
            _exit(127);
        }
        /* The terminal's Ctrl-C reaches the job (same process group); we outlive it. */
        signal(SIGINT, SIG_IGN);
        signal(SIGQUIT, SIG_IGN);
        if (attach_when_ready(&rec, child, &child_status) && child_status == -1) {
            rec.pids[0] = child;
            rec.ours[0] = true;
            rec.n = 1;
        } else if (rec.out || !run) { /* running unobserved: no profile */
            fprintf(stderr, "probectl %s: %s %s: no profile written\n", cmd, argv[optind],
                    child_status == -1 ? "runs unobserved" : "ended before it ran Python");
            rc = 1;
        }
    } else {
        size_t n = rec.n;

        /* Ctrl-C from now on ends the recording, which is still written and detached */
        signal(SIGINT, on_stop);
        signal(SIGTERM, on_stop);
        rec.n = 0;
        for (size_t i = 0; i < n; i++)
            if (attach_pid(&rec, rec.pids[i]) < 0) {
                rc = 1;
                break;
            }
        if (rc) {
            detach_ours(&rec);
            for (size_t i = 0; i < rec.n; i++)
                json_decref(rec.before[i]);
            return 1;
        }
    }
    if (!run && !rec.out && rec.n) { /* the default name: what and when */
        char when[32];
        time_t t = time(NULL);

        strftime(when, sizeof(when), "%Y%m%d-%H%M%S", localtime(&t));
        snprintf(out_name, sizeof(out_name), "probed-%d-%s.%s", (int)rec.pids[0], when,
                 extension_of(rec.format));
        rec.out = out_name;
    }
    if (rec.n > 1)
        snprintf(title, sizeof(title), "%zu processes", rec.n);
    else
        snprintf(title, sizeof(title), "%s%s", command ? "" : "pid ", argv[optind]);
    if (rec.n && rec.out) { /* run without -o just waits for the command */
        wait_for_end(&rec, duration_ns, child, &child_status);
        if (finish(&rec, title) < 0)
            rc = 1;
    }
    for (size_t i = 0; i < rec.n; i++)
        json_decref(rec.before[i]);
    if (child > 0) {
        if (child_status == -1)
            while (waitpid(child, &child_status, 0) < 0 && errno == EINTR)
                ;
        if (rc)
            return 1;
        return WIFSIGNALED(child_status) ? 128 + WTERMSIG(child_status) : WEXITSTATUS(child_status);
    }
    return rc;
}

int record_main(int argc, char **argv)
{
    return record_or_run(argc, argv, false);
}

int run_main(int argc, char **argv)
{
    return record_or_run(argc, argv, true);
}
