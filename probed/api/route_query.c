/*
 * route_query.c - /v1/query, /v1/flamegraph, /v1/backtrace and /v1/hang: jobs on the
 * parallel lane (jobs.h) over the store (query.h) and the live processes (dump.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/server.h"
#include "clock.h"
#include "common/dump.h"
#include "common/taskdump.h"
#include "common/units.h"
#include "gpu/ras.h"
#include "query/flame.h"
#include "query/pprof.h"

struct query_job {
    struct job j;
    char *sql;
    pid_t live_pids[TARGETS_MAX]; /* the targets of the scope when the query starts */
    /* flame graphs */
    struct flame_request flame;
    char format[16];
};

static void free_query(struct job *j)
{
    struct query_job *qj = (struct query_job *)j;

    free(qj->sql);
    free((char *)qj->flame.title);
}

/* Runs @sql for the job's scope; status and body are the reply. */
static void run_sql(struct query_job *qj, const char *sql)
{
    struct api *a = job_api(&qj->j);
    struct query_limits lim = {.time_ms = config_num(a->cfg.config, CFG_QUERY_TIMEOUT) / 1000000,
                               .max_rows = a->cfg.query_max_rows};
    struct peer p = {.root = qj->j.scope.root, .uid = qj->j.scope.uid};
    struct targets_filter f = peer_filter(&p);
    struct target_key *keys = malloc(TARGETS_MAX * sizeof(*keys));
    struct errbuf err = {0};
    size_t n = 0;

    /* python.backtrace reads the processes being sampled, of the scope's user */
    f.sampling_only = true;
    if (keys)
        n = targets__keys(a->parts.reg, &f, keys, TARGETS_MAX);
    for (size_t i = 0; i < n && i < TARGETS_MAX; i++)
        qj->live_pids[i] = keys[i].pid;
    free(keys);
    qj->j.scope.live_pids = qj->live_pids;
    qj->j.scope.n_live_pids = n < TARGETS_MAX ? n : TARGETS_MAX;
    qj->j.scope.settings = config_json(a->cfg.config); /* NULL (no memory): none shown */
    int r = query_run(a->cfg.db_path, &qj->j.scope, &lim, sql, &qj->j.body, &err);

    json_decref(qj->j.scope.settings);
    qj->j.scope.settings = NULL;

    if (r < 0) {
        qj->j.status = http_status(r, NULL);
        qj->j.body = error_body(qj->j.status, err.msg);
        a->query_errors++;
        return;
    }
    qj->j.status = 200;
}

static void run_query(struct job *j)
{
    struct query_job *qj = (struct query_job *)j;

    job_api(j)->queries++;
    run_sql(qj, qj->sql);
}

/* POST /v1/query {"sql": "SELECT ...", "pid": optional} */
struct job *query_post(struct api *a, const struct request *rq)
{
    json_t *jsql = json_object_get(rq->body, "sql");
    struct query_job *qj;

    if (!json_is_string(jsql)) {
        reply_error(rq->req, 400, "expected {\"sql\": \"SELECT ...\", \"pid\": optional int}");
        return NULL;
    }
    qj = job_alloc(a, rq, sizeof(*qj), JOB_PARALLEL, run_query, free_query);
    if (!qj)
        return NULL;
    qj->sql = strdup(json_string_value(jsql));
    if (!qj->sql) {
        reply_error(rq->req, 500, "out of memory");
        free(qj);
        return NULL;
    }
    return &qj->j;
}

/* The 404 of a window without samples, saying what would have some. */
static json_t *no_samples_body(const struct query_job *qj)
{
    if (!qj->flame.filter.idle)
        return error_body(404, qj->flame.filter.tid
                                   ? "no samples of that thread running on a CPU in that time"
                                     " range: it may have been idle (idle=1, probectl's --idle,"
                                     " counts those too), or not a thread of that process"
                                   : "no samples of that process running on a CPU in that time"
                                     " range: is it attached? (idle=1, probectl's --idle,"
                                     " counts the idle ones too)");
    return error_body(404, "no samples for that process in that time range (is it attached?)");
}

/* Runs @sql (malloc'd, freed here) into the rows of its result (a reference), or NULL with
 * the job's status and body saying why: a result cut at the row limit is not a timeline. */
static json_t *timeline_rows(struct query_job *qj, char *sql)
{
    json_t *rows;

    if (!sql) {
        qj->j.status = 500;
        qj->j.body = error_body(500, "out of memory");
        return NULL;
    }
    run_sql(qj, sql);
    free(sql);
    if (qj->j.status != 200)
        return NULL;
    if (json_is_true(json_object_get(qj->j.body, "truncated"))) {
        json_decref(qj->j.body);
        qj->j.status = 413;
        qj->j.body = error_body(413, "more samples than the daemon's row limit in that window:"
                                     " narrow it (since, from_ns, to_ns) or pick a thread (tid)");
        return NULL;
    }
    rows = json_incref(json_object_get(qj->j.body, "rows"));
    json_decref(qj->j.body);
    qj->j.body = NULL;
    return rows;
}

/* A timeline format (speedscope, chrometrace): every sample of the window, in time order. */
static void run_timeline(struct query_job *qj)
{
    struct flame_timeline *t = NULL;
    json_t *stacks = NULL, *samples = NULL;
    char cond[48];

    snprintf(cond, sizeof(cond), "t.pid = %d", (int)qj->flame.pid);
    if (!(stacks = timeline_rows(
              qj, flame_timeline_sql(cond, &qj->flame.filter, true, qj->flame.no_lines))) ||
        !(samples = timeline_rows(qj, flame_timeline_sql(cond, &qj->flame.filter, false, false))))
        goto out;
    qj->j.status = 200;
    if (json_array_size(samples) == 0) {
        qj->j.status = 404;
        qj->j.body = no_samples_body(qj);
    } else if (flame_timeline_from_rows(stacks, samples, qj->flame.period_ns, &t) == 0) {
        qj->j.raw = strcmp(qj->format, "speedscope") == 0
                        ? flame_timeline_speedscope(t, qj->flame.title, &qj->j.raw_len)
                        : flame_timeline_chrome(t, &qj->j.raw_len);
        qj->j.raw_type = "application/json";
    }
    if (qj->j.status == 200 && !qj->j.raw) {
        qj->j.status = 500;
        qj->j.body = error_body(500, "out of memory rendering the timeline");
    }
out:
    flame_timeline_free(t);
    json_decref(stacks);
    json_decref(samples);
}

/* @p as pprof, its samples labelled with the process's pid and rank, the program its mapping
 * (the target's latest row: a query, so what the caller may see). */
static char *pprof_with_meta(struct query_job *qj, const struct flame_profile *p)
{
    struct pprof_meta meta = {.pid = qj->flame.pid, .rank = -1};
    json_t *saved = qj->j.body, *row;
    int saved_status = qj->j.status;
    char sql[160], *binary = NULL, *out;

    qj->j.body = NULL;
    snprintf(sql, sizeof(sql),
             "SELECT rank, cmdline FROM targets WHERE pid = %d ORDER BY id DESC LIMIT 1",
             (int)qj->flame.pid);
    run_sql(qj, sql);
    row = qj->j.status == 200 ? json_array_get(json_object_get(qj->j.body, "rows"), 0) : NULL;
    if (json_is_integer(json_array_get(row, 0)))
        meta.rank = json_integer_value(json_array_get(row, 0));
    if (json_is_string(json_array_get(row, 1))) /* the program: the command line's first word */
        binary = strndup(json_string_value(json_array_get(row, 1)),
                         strcspn(json_string_value(json_array_get(row, 1)), " "));
    meta.binary = binary;
    json_decref(qj->j.body);
    qj->j.body = saved;
    qj->j.status = saved_status;
    out = (char *)pprof_of(p, qj->flame.period_ns, real_ns(), &meta, &qj->j.raw_len);
    free(binary);
    return out;
}

static void run_flame(struct job *j)
{
    struct query_job *qj = (struct query_job *)j;
    char *sql;

    if (strcmp(qj->format, "speedscope") == 0 || strcmp(qj->format, "chrometrace") == 0) {
        run_timeline(qj);
        return;
    }
    sql = flame_sql(&qj->flame);
    struct flame_profile *p = NULL;
    json_t *rows;

    if (!sql) {
        j->status = 500;
        j->body = json_pack("{s:s}", "error", "out of memory");
        return;
    }
    run_sql(qj, sql);
    free(sql);
    if (j->status != 200)
        return;
    rows = json_object_get(j->body, "rows");
    if (json_array_size(rows) == 0 && strcmp(qj->format, "json") != 0) {
        json_decref(j->body);
        j->status = 404;
        j->body = no_samples_body(qj);
        return;
    }
    if (flame_profile_from_rows(rows, &p) < 0) {
        ;
    } else if (strcmp(qj->format, "svg") == 0) {
        j->raw = flame_svg(p, qj->flame.title, &j->raw_len);
        j->raw_type = "image/svg+xml";
    } else if (strcmp(qj->format, "pprof") == 0) {
        j->raw = pprof_with_meta(qj, p);
        j->raw_type = "application/octet-stream";
    } else if (strcmp(qj->format, "json") == 0) { /* an empty window is an empty profile */
        j->raw = flame_json(p, qj->flame.title, &j->raw_len);
        j->raw_type = "application/json";
    } else {
        j->raw = flame_folded(p, &j->raw_len);
        j->raw_type = "text/plain; charset=utf-8";
    }
    flame_profile_free(p);
    if (!j->raw) {
        j->status = 500;
        json_decref(j->body);
        j->body = json_pack("{s:s}", "error", "out of memory rendering the flame graph");
    }
}

/* The sampling rate of @pid's (last) attach; the default when not listed. */
static uint32_t rate_of(struct api *a, pid_t pid)
{
    struct target_key k;

    if (targets__find(a->parts.reg, pid, false, &k) == 0 && k.rate_hz)
        return k.rate_hz;
    return (uint32_t)config_num(a->cfg.config, CFG_SAMPLE_RATE) ?: 100;
}

/* GET /v1/flamegraph?pid=&tid=&since=|from_ns=&to_ns=&idle=&gil=&tasks=&threads=&lines=&format= */
struct job *flamegraph_get(struct api *a, const struct request *rq)
{
    const struct evkeyvalq *q = rq->params;
    pid_t pid = rq->pid; /* parsed by routes.c */
    uint64_t tid = 0, idle = 0, gil = 0, tasks = 0, threads = 0, lines = 1, from_ns = 0, to_ns = 0;
    const char *since = evhttp_find_header(q, "since");
    const char *format = evhttp_find_header(q, "format");
    int64_t since_ns = 0;
    struct query_job *qj;
    char title[128];

    if (param_uint(rq->req, q, "tid", API_PID_MAX, &tid) < 0 ||
        param_uint(rq->req, q, "idle", 1, &idle) < 0 ||
        param_uint(rq->req, q, "gil", 1, &gil) < 0 ||
        param_uint(rq->req, q, "tasks", 1, &tasks) < 0 ||
        param_uint(rq->req, q, "threads", 1, &threads) < 0 ||
        param_uint(rq->req, q, "lines", 1, &lines) < 0 ||
        param_uint(rq->req, q, "from_ns", INT64_MAX, &from_ns) < 0 ||
        param_uint(rq->req, q, "to_ns", INT64_MAX, &to_ns) < 0)
        return NULL;
    if (since && (since_ns = units_duration_ns(since)) < 0) {
        reply_error(rq->req, 400, "since must be a duration like 30s, 5m, 2h");
        return NULL;
    }
    if (since && from_ns) {
        reply_error(rq->req, 400, "since (a duration back from now) or from_ns, not both");
        return NULL;
    }
    if (to_ns && to_ns <= from_ns) {
        reply_error(rq->req, 400, "to_ns must be after from_ns");
        return NULL;
    }
    if (format && strcmp(format, "svg") != 0 && strcmp(format, "folded") != 0 &&
        strcmp(format, "speedscope") != 0 && strcmp(format, "pprof") != 0 &&
        strcmp(format, "json") != 0 && strcmp(format, "chrometrace") != 0) {
        reply_error(rq->req, 400,
                    "format must be svg, folded, speedscope, chrometrace, pprof or json");
        return NULL;
    }
    qj = job_alloc(a, rq, sizeof(*qj), JOB_PARALLEL, run_flame, free_query);
    if (!qj)
        return NULL;
    qj->flame = (struct flame_request){
        .pid = pid,
        .filter = {.since_ns = since_ns ? real_ns() - since_ns : (int64_t)from_ns,
                   .until_ns = (int64_t)to_ns,
                   .tid = (int)tid,
                   .idle = idle > 0,
                   .gil = gil > 0},
        .by_task = tasks > 0,
        /* pprof labels each sample with its thread instead (pprof.h) */
        .by_thread = threads > 0 || (format && strcmp(format, "pprof") == 0),
        .no_lines = lines == 0};
    qj->flame.period_ns = 1000000000LL / rate_of(a, pid);
    snprintf(title, sizeof(title), "pid %d%s%s", (int)pid, since ? ", last " : "",
             since ? since : "");
    qj->flame.title = strdup(title);
    if (!qj->flame.title) {
        free(qj);
        reply_error(rq->req, 500, "out of memory");
        return NULL;
    }
    snprintf(qj->format, sizeof(qj->format), "%s", format ? format : "svg");
    return &qj->j;
}

struct backtrace_job {
    struct job j;
    int locals;
    bool native; /* mixed stacks (the threads held by ptrace a moment) */
    bool probed; /* probed's own threads and frames too */
    bool tasks;  /* the asyncio tasks instead of the threads */
};

static void run_backtrace(struct job *j)
{
    struct backtrace_job *bj = (struct backtrace_job *)j;
    struct pyf_err e = {0};
    char why[256];
    int r = procfs_grant_check(&j->grant, why, sizeof(why));

    /* still the process authorised (a queued job may start late), and still after the read:
     * what was read was that process's, or it is not shown */
    if (r == 0) {
        r = bj->tasks ? taskdump_json(j->grant.pid, TASKDUMP_MAX, &j->body, &e)
                      : dump_json(j->grant.pid, bj->locals,
                                  (bj->native ? DUMP_NATIVE : 0) | (bj->probed ? DUMP_PROBED : 0),
                                  &j->body, &e);
        if (r < 0) {
            j->status = http_status(0, &e);
            j->body = error_body(j->status, e.msg);
            return;
        }
    }
    if (r == 0 && (r = procfs_grant_check(&j->grant, why, sizeof(why))) < 0) {
        json_decref(j->body);
        j->body = NULL;
    }
    if (r < 0) {
        j->status = http_status(r, NULL);
        j->body = error_body(j->status, why);
        return;
    }
    j->status = 200;
}

/* GET /v1/backtrace?pid=&locals=&native=&probed=&tasks= */
struct job *backtrace_get(struct api *a, const struct request *rq)
{
    uint64_t locals = 0, native = 0, probed = 0, tasks = 0;
    struct backtrace_job *bj;

    const char *v = evhttp_find_header(rq->params, "native");

    if (param_uint(rq->req, rq->params, "locals", INT32_MAX, &locals) < 0 ||
        param_uint(rq->req, rq->params, "probed", 1, &probed) < 0 ||
        param_uint(rq->req, rq->params, "tasks", 1, &tasks) < 0)
        return NULL;
    if (tasks && (native || locals)) {
        reply_error(rq->req, 400, "backtrace's tasks=1 takes neither native nor locals");
        return NULL;
    }
    if (v && parse_uint(v, 1, &native) < 0) {
        reply_error(rq->req, 400,
                    "backtrace takes &native=1 (mixed stacks) or &native=0, not '%.16s'", v);
        return NULL;
    }
    bj = job_alloc(a, rq, sizeof(*bj), JOB_PARALLEL, run_backtrace, NULL);
    if (!bj)
        return NULL;
    bj->locals = (int)locals;
    bj->native = native == 1;
    bj->probed = probed == 1;
    bj->tasks = tasks == 1;
    return &bj->j;
}

/* The job's NCCL communicators as its RAS tells them (gpu/ras.h), asked of one process the
 * caller may act on: the grant is checked before, and again after, so what is shown was that
 * process's job's. */
static void run_nccl(struct job *j)
{
    struct errbuf e = {{0}};
    int r = procfs_grant_check(&j->grant, e.msg, sizeof(e.msg));

    if (r == 0)
        r = ras_ask(j->grant.pid, j->grant.start_time, &j->body, &e);
    if (r == 0 && (r = procfs_grant_check(&j->grant, e.msg, sizeof(e.msg))) < 0) {
        json_decref(j->body);
        j->body = NULL;
    }
    if (r < 0) {
        j->status = http_status(r, NULL);
        j->body = error_body(j->status, e.msg);
        return;
    }
    j->status = 200;
}

/* GET /v1/nccl?pid= */
struct job *nccl_get(struct api *a, const struct request *rq)
{
    return job_alloc(a, rq, sizeof(struct job), JOB_PARALLEL, run_nccl, NULL);
}

/* The stacks of every target of the caller at one instant agreed across nodes (`probectl
 * hang`): the job sleeps until then, then reads them one after the other, no process stopped
 * (with native, each held by ptrace the milliseconds its stacks take). */
struct hang_job {
    struct job j;
    int64_t at_ns; /* CLOCK_REALTIME */
    bool native;
};

#define HANG_AHEAD_MAX_NS (10 * 1000000000LL) /* the furthest ahead an instant may be asked */

/* One target's part of the reply: who it is, when it was read, and its threads or why not. */
static json_t *hang_target(const struct target_info *t, struct dump *d, int r,
                           const struct pyf_err *e)
{
    json_t *stack = NULL, *o;
    struct pyf_err re = {0};

    o = json_pack("{s:i, s:s, s:I}", "pid", (int)t->pid, "cmdline", t->cmdline, "start_time",
                  (json_int_t)t->start_time);
    if (t->rank >= 0)
        json_object_set_new(o, "rank", json_integer(t->rank));
    if (t->local_rank >= 0)
        json_object_set_new(o, "local_rank", json_integer(t->local_rank));
    if (t->world_size >= 0)
        json_object_set_new(o, "world_size", json_integer(t->world_size));
    if (r == 0) {
        json_object_set_new(o, "read_ns", json_integer((json_int_t)dump_read_ns(d)));
        r = dump_render(d, 0, &stack, &re);
        e = &re;
    }
    if (r < 0)
        json_object_set_new(o, "error", json_string(e->msg));
    else
        json_object_set_new(o, "threads", json_incref(json_object_get(stack, "threads")));
    json_decref(stack);
    return o;
}

static void run_hang(struct job *j)
{
    struct hang_job *hj = (struct hang_job *)j;
    struct peer p = {.root = j->scope.root, .uid = j->scope.uid};
    struct targets_filter f = peer_filter(&p);
    struct target_info *infos = malloc(TARGETS_MAX * sizeof(*infos));
    struct dump **dumps = calloc(TARGETS_MAX, sizeof(*dumps));
    struct pyf_err *errs = calloc(TARGETS_MAX, sizeof(*errs));
    int *rc = calloc(TARGETS_MAX, sizeof(*rc));
    struct timespec at = {.tv_sec = hj->at_ns / 1000000000LL, .tv_nsec = hj->at_ns % 1000000000LL};
    json_t *targets = json_array();
    char host[256] = "";
    int64_t woke_ns;
    size_t n = 0;

    if (!infos || !dumps || !errs || !rc) {
        j->status = 500;
        j->body = error_body(500, "out of memory");
        goto out;
    }
    f.sampling_only = true;
    n = targets__copy(job_api(j)->parts.reg, &f, infos, TARGETS_MAX);
    n = n < TARGETS_MAX ? n : TARGETS_MAX;
    /* the slow part before the instant: each process opened, its runtime and layout found */
    for (size_t i = 0; i < n; i++)
        rc[i] = dump_open(infos[i].pid, hj->native, &dumps[i], &errs[i]);
    while (n > 0 && hj->at_ns > real_ns() && /* nothing to read: no reason to wait */
           clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL) == EINTR)
        ;
    woke_ns = real_ns();
    /* the stacks, one process after the other, nothing else; each read only while its process
     * is still the one attached and still the caller's, before and after (the instant can be
     * 10 s after the request: a pid reused, or a setuid exec, meanwhile) */
    for (size_t i = 0; i < n; i++) {
        struct proc_grant g = {.pid = infos[i].pid,
                               .start_time = infos[i].start_time,
                               .root = j->grant.root,
                               .uid = j->grant.uid,
                               .gid = j->grant.gid};
        if (rc[i] == 0 && procfs_grant_check(&g, errs[i].msg, sizeof(errs[i].msg)) < 0)
            rc[i] = -ESRCH;
        if (rc[i] == 0)
            rc[i] = dump_capture(dumps[i], &errs[i]);
        if (rc[i] == 0 && procfs_grant_check(&g, errs[i].msg, sizeof(errs[i].msg)) < 0)
            rc[i] = -ESRCH;
    }
    for (size_t i = 0; i < n; i++)
        json_array_append_new(targets, hang_target(&infos[i], dumps[i], rc[i], &errs[i]));
    gethostname(host, sizeof(host) - 1);
    j->status = 200;
    j->body = json_pack("{s:s, s:I, s:I, s:I, s:O}", "host", host, "asked_ns",
                        (json_int_t)hj->at_ns, "woke_ns", (json_int_t)woke_ns, "done_ns",
                        (json_int_t)real_ns(), "targets", targets);
out:
    for (size_t i = 0; dumps && i < n; i++)
        dump_free(dumps[i]);
    json_decref(targets);
    free(infos);
    free(dumps);
    free(errs);
    free(rc);
}

/* POST /v1/hang {"at_ns": wall-clock ns (0: now), "native": bool} */
struct job *hang_post(struct api *a, const struct request *rq)
{
    json_t *jnative = json_object_get(rq->body, "native");
    int64_t now = real_ns(), at = 0;
    struct hang_job *hj;

    if (body_int(rq->req, rq->body, "at_ns", 0, INT64_MAX, &at) < 0)
        return NULL;
    if (at > now + HANG_AHEAD_MAX_NS) {
        reply_error(rq->req, 400,
                    "\"at_ns\" must be an instant (wall clock, ns) at most %lld s ahead, or 0",
                    HANG_AHEAD_MAX_NS / 1000000000LL);
        return NULL;
    }
    if (jnative && !json_is_boolean(jnative)) {
        reply_error(rq->req, 400, "\"native\" must be true or false");
        return NULL;
    }
    hj = job_alloc(a, rq, sizeof(*hj), JOB_PARALLEL, run_hang, NULL);
    if (!hj)
        return NULL;
    hj->at_ns = at;
    hj->native = json_is_true(jnative);
    return &hj->j;
}
