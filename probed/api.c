/* api.c - see api.h. */
#define _GNU_SOURCE
#include "api.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "allocs.h"
#include "connlimit.h"
#include "dump.h"
#include "errbuf.h"
#include "eval.h"
#include "flame.h"
#include "follow.h"
#include "log.h"
#include "native.h"
#include "metrics.h"
#include "procfs.h"
#include "pprof.h"
#include "query.h"
#include "sqlmem.h"
#include "torchtrace.h"
#include "units.h"

#define WATCHES_MAX 64        /* processes followed for --children that are not Python */
#define BODY_MAX (1 << 20)    /* bytes of a request body */
#define HEADERS_MAX 16384     /* bytes of request headers */
#define IO_TIMEOUT_S 10       /* a client that stalls this long is dropped (slow loris) */
#define REQUEST_S 30          /* a connection's first request must arrive whole within this */
#define API_CONNS_MAX 512     /* connections open; past it 503, at twice it accepting pauses */
#define WORKERS_MAX 8         /* queries, flame graphs and backtraces running at once */
#define USER_JOBS_MAX 3       /* of those, for one user who is not root */
#define EVAL_TIMEOUT_MS 10000 /* default wait for an eval's reply */
#define EVAL_TIMEOUT_MAX_MS 600000
#define TRACKED_MAX 128             /* processes with allocation tracking or the torch trace on */
#define TORCH_DRAIN_NS 1000000000LL /* the torch trace's buffers are drained once a second */

enum job_kind { JOB_QUERY, JOB_FLAME, JOB_BACKTRACE, JOB_EVAL, JOB_ALLOCS, JOB_TORCH };

struct api {
    struct event_base *base;
    struct evhttp *http;
    struct api_config cfg;
    struct sampler *sampler;
    struct writer *writer;
    struct stubctl *stubs;   /* eval and repl: the stubs injected into targets */
    struct metrics *metrics; /* Prometheus /metrics, on config metrics_address */
    struct meter *meter;     /* woken when memory_interval changes */
    uint32_t rate_hz;        /* config sample_rate as last applied to the targets */
    int64_t next_target_id;  /* loop thread only */
    int listen_fd;
    bool serving;              /* evhttp owns listen_fd */
    struct connlimit *clients; /* bounds on the socket's clients */

    /* --children: a timer looks for new descendants of the targets that follow them; a
     * process found not to be Python is not tried again while it runs the same executable
     * (pid + start time + the executable's inode: `sh -c 'exec python ...'` keeps pid and
     * start time); a ring, the oldest forgotten */
    struct event *follow_timer;
    struct not_python {
        pid_t pid;
        int64_t start_time;
        dev_t exe_dev;
        ino_t exe_ino;
    } not_python[FOLLOW_MAX];
    size_t n_not_python, next_not_python;
    /* attach --children of a process that is not Python (a shell, a Slurm batch script, the
     * fork of `probectl run` before it execs): not sampled, only followed; the first of its
     * descendants, or itself after an exec, that is Python is attached like any. Loop thread. */
    struct watch {
        pid_t pid;
        uid_t uid;
        int64_t start_time;
        uint32_t rate;
        bool native, perf_only;
        char cmdline[128];
    } watches[WATCHES_MAX];
    size_t n_watches;

    /* allocation tracking on (allocs.h): snapshots every allocation_interval; the torch trace
     * on (torchtrace.h): drains every second; loop thread */
    struct event *allocs_timer;
    struct tracked {
        enum job_kind kind; /* JOB_ALLOCS or JOB_TORCH */
        pid_t pid;
        int64_t target_id, next_ns; /* CLOCK_MONOTONIC */
        bool busy;                  /* a snapshot is running */
    } tracked[TRACKED_MAX];
    size_t n_tracked;

    pthread_mutex_t lock; /* workers count, for api_free() to wait on */
    pthread_cond_t idle;
    int workers;
    struct user_jobs {
        uid_t uid;
        int n;                /* 0: a free entry */
    } user_jobs[WORKERS_MAX]; /* the workers of users who are not root */
    atomic_uint_fast64_t requests, queries, query_errors;
};

/* Who is asking, from the socket's SO_PEERCRED. */
struct peer {
    bool root;
    uid_t uid;
    pid_t pid;
};

/* ---- replies ---- */

/* Replies return the status sent, so that a handler can `return reply_error(...)`. */
static int reply_json(struct evhttp_request *req, int status, json_t *body)
{
    struct evbuffer *out = evbuffer_new();
    char *text = json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII);

    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    if (out && text)
        evbuffer_add_printf(out, "%s\n", text);
    evhttp_send_reply(req, status, NULL, out);
    if (out)
        evbuffer_free(out);
    free(text);
    json_decref(body);
    return status;
}

static int reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return reply_json(req, status, json_pack("{s:s, s:i}", "error", msg, "status", status));
}

static void reply_raw(struct evhttp_request *req, const char *type, char *data, size_t len)
{
    struct evbuffer *out = evbuffer_new();

    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    if (out)
        evbuffer_add(out, data, len);
    evhttp_send_reply(req, 200, NULL, out);
    if (out)
        evbuffer_free(out);
}

/* ---- request parsing ---- */

static int peer_of(struct evhttp_request *req, struct peer *p)
{
    struct evhttp_connection *con = evhttp_request_get_connection(req);
    struct bufferevent *bev = con ? evhttp_connection_get_bufferevent(con) : NULL;
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (!bev || getsockopt(bufferevent_getfd(bev), SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    *p = (struct peer){.root = cred.uid == 0, .uid = cred.uid, .pid = cred.pid};
    return 0;
}

/* The request body as JSON, or NULL (reply already sent). */
static json_t *body_json(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    json_error_t jerr;
    json_t *j;

    j = json_loadb((const char *)evbuffer_pullup(in, -1), len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        reply_error(req, 400, "malformed JSON body: %s (line %d, column %d)", jerr.text, jerr.line,
                    jerr.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        reply_error(req, 400, "the JSON body must be an object");
        return NULL;
    }
    return j;
}

/* A positive integer parameter; 0 when absent, -1 when malformed. */
static long long param_int(const struct evkeyvalq *q, const char *name)
{
    const char *v = evhttp_find_header(q, name);
    char *end;
    long long n;

    if (!v)
        return 0;
    errno = 0;
    n = strtoll(v, &end, 10);
    return errno || *end || n < 0 ? -1 : n;
}

/* May @p act on @pid? 0, or -errno after replying. */
static int authorise_pid(struct evhttp_request *req, const struct peer *p, pid_t pid)
{
    char path[64];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    if (stat(path, &st) < 0) {
        reply_error(req, 404, "pid %d: no such process", (int)pid);
        return -ESRCH;
    }
    if (!p->root && st.st_uid != p->uid) {
        reply_error(req, 403, "pid %d: permission denied (owned by uid %u, you are uid %u)",
                    (int)pid, (unsigned)st.st_uid, (unsigned)p->uid);
        return -EPERM;
    }
    return 0;
}

/* ---- targets ---- (handlers return the status sent; 0 when a worker replies later) */

static json_t *torch_json(const struct target_torch *tt)
{
    json_t *j =
        json_pack("{s:b, s:I, s:f, s:I}", "tracing", tt->tracing, "steps", (json_int_t)tt->steps,
                  "step_seconds", tt->step_seconds, "dropped", (json_int_t)tt->dropped);

    if (tt->has_memory)
        json_object_set_new(j, "allocated_mb", json_real(tt->allocated_mb));
    if (tt->has_reserved)
        json_object_set_new(j, "reserved_mb", json_real(tt->reserved_mb));
    return j;
}

/* The native sampler's figures (native.h): the merge rate and the lag say how well the
 * kernel's samples and the Python reads line up. */
static json_t *native_json(struct native *nat)
{
    const struct native_stats *n = native__stats(nat);
    json_t *j = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "backend", native__backend(nat),
        "samples", (json_int_t)n->samples, "lost", (json_int_t)n->lost, "merged",
        (json_int_t)n->merged, "mismatched", (json_int_t)n->mismatched, "native_only",
        (json_int_t)n->native_only, "superseded", (json_int_t)n->superseded, "maps_reread",
        (json_int_t)n->maps_reread, "unwind_us",
        n->samples ? (double)n->unwind_ns / 1e3 / (double)n->samples : 0.0, "lag_ms",
        n->merged ? (double)n->lag_ns / 1e6 / (double)n->merged : 0.0, "name_cache_hit_rate",
        n->name_lookups ? (double)n->name_hits / (double)n->name_lookups : 0.0);

    if (native__ebpf_error(nat)[0]) /* why perf: the fallback from the eBPF sampler */
        json_object_set_new(j, "ebpf_error", json_string(native__ebpf_error(nat)));
    else if (strcmp(native__backend(nat), "ebpf") == 0)
        json_object_update_new(j, json_pack("{s:I, s:I, s:I}", "same_instant",
                                            (json_int_t)n->same_instant, "py_uncopied",
                                            (json_int_t)n->py_uncopied, "py_undecoded",
                                            (json_int_t)n->py_undecoded));
    if (n->bpf_runs) /* measured only while kernel.bpf_stats_enabled = 1 */
        json_object_set_new(j, "bpf_run_us",
                            json_real((double)n->bpf_run_ns / 1e3 / (double)n->bpf_runs));
    return j;
}

static json_t *target_json(const struct target *t)
{
    json_t *j = json_pack(
        "{s:I, s:i, s:i, s:I, s:s, s:s, s:i, s:s, s:s, s:I, s:{s:I, s:I, s:I, s:I, s:I, s:I}}",
        "id", (json_int_t)t->id, "pid", (int)t->pid, "uid", (int)t->uid, "start_time",
        (json_int_t)t->start_time, "cmdline", t->cmdline, "python_version", t->py_version,
        "rate_hz", (int)t->rate_hz, "state", target_state_name(t->state), "mode", target_mode(t),
        "attached_ns", (json_int_t)t->attached_ns, "stats", "ticks", (json_int_t)t->stats.ticks,
        "samples", (json_int_t)t->stats.samples, "torn", (json_int_t)t->stats.torn, "errors",
        (json_int_t)t->stats.errors, "late", (json_int_t)t->stats.late, "dropped",
        (json_int_t)t->stats.dropped);

    json_object_set_new(json_object_get(j, "stats"), "threads_cut",
                        json_integer((json_int_t)t->stats.threads_cut));
    json_object_set_new(json_object_get(j, "stats"), "lost",
                        json_integer((json_int_t)t->stats.lost));
    if (t->gap.samples)
        json_object_set_new(j, "gap",
                            json_pack("{s:I, s:I, s:I, s:s}", "from_ns", (json_int_t)t->gap.from_ns,
                                      "to_ns", (json_int_t)t->gap.to_ns, "samples",
                                      (json_int_t)t->gap.samples, "why", t->gap.why));
    json_object_set_new(j, "threads_room", json_integer((json_int_t)t->threads_cap));
    if (t->rank >= 0)
        json_object_set_new(j, "rank", json_integer(t->rank));
    if (t->local_rank >= 0)
        json_object_set_new(j, "local_rank", json_integer(t->local_rank));
    if (t->world_size >= 0)
        json_object_set_new(j, "world_size", json_integer(t->world_size));
    if (t->end_reason[0])
        json_object_set_new(j, "end_reason", json_string(t->end_reason));
    if (t->native)
        json_object_set_new(j, "native", native_json(t->native));
    if (t->native_wanted && t->native_error[0])
        json_object_set_new(j, "native_error", json_string(t->native_error));
    if (t->torch.on) /* the torch trace's totals (torchtrace.h) */
        json_object_set_new(j, "torch", torch_json(&t->torch));
    if (t->usage_ns) /* the meter's latest reading (meter.h) */
        json_object_set_new(
            j, "usage",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:I}", "ts_ns", (json_int_t)t->usage_ns,
                      "rss", (json_int_t)t->usage.rss, "pss", (json_int_t)t->usage.pss, "uss",
                      (json_int_t)t->usage.uss, "swap", (json_int_t)t->usage.swap, "cpu_seconds",
                      (double)t->usage.cpu_ns / 1e9, "threads", (json_int_t)t->usage.threads));
    return j;
}

struct list_ctx {
    const struct peer *peer;
    pid_t pid; /* 0: all */
    json_t *arr;
};

static void list_one(const struct target *t, void *ctx)
{
    struct list_ctx *l = ctx;

    if ((l->peer->root || t->uid == l->peer->uid) && (!l->pid || t->pid == l->pid))
        json_array_append_new(l->arr, target_json(t));
}

/* The processes followed for --children that are not Python, those of @p's user. */
static json_t *watches_json(const struct api *a, const struct peer *p)
{
    json_t *arr = json_array();

    for (size_t i = 0; i < a->n_watches; i++) {
        const struct watch *w = &a->watches[i];

        if (p->root || w->uid == p->uid)
            json_array_append_new(arr, json_pack("{s:i, s:i, s:s, s:i}", "pid", (int)w->pid, "uid",
                                                 (int)w->uid, "cmdline", w->cmdline, "rate_hz",
                                                 (int)w->rate));
    }
    return arr;
}

static int targets_list(struct api *a, struct evhttp_request *req, const struct peer *p, pid_t pid)
{
    struct list_ctx l = {.peer = p, .pid = pid, .arr = json_array()};

    sampler__each(a->sampler, list_one, &l);
    if (pid && json_array_size(l.arr) == 0) {
        json_decref(l.arr);
        reply_error(req, 404, "pid %d is not attached", (int)pid);
        return 0;
    }
    if (pid) {
        reply_json(req, 200, json_incref(json_array_get(l.arr, 0)));
    } else if (!p->root) { /* the shared tables tell of every user's processes: root's only */
        reply_json(req, 200,
                   json_pack("{s:o, s:o}", "targets", l.arr, "following", watches_json(a, p)));
    } else {
        /* the native function tables the targets share (one per library, by build-id) */
        struct pyf_symcache_stats sc;
        pyf_symcache__stats(a->sampler->symbols, &sc);
        reply_json(req, 200,
                   json_pack("{s:o, s:o, s:{s:I, s:I, s:I, s:I}}", "targets", l.arr, "following",
                             watches_json(a, p), "native_symbols", "tables", (json_int_t)sc.tables,
                             "builds", (json_int_t)sc.builds, "hits", (json_int_t)sc.hits, "bytes",
                             (json_int_t)sc.bytes));
    }
    if (pid)
        json_decref(l.arr);
    return 0;
}

static int watch_add(struct api *a, struct evhttp_request *req, const struct peer *p, pid_t pid,
                     uint32_t rate, bool native, bool perf_only, const char *why);

static int targets_attach(struct api *a, struct evhttp_request *req, const struct peer *p)
{
    json_t *body = body_json(req), *jpid, *jrate, *jdur, *jnative;
    bool pid_ok, rate_ok, children, native, native_ok, perf_only;
    int64_t dur_ns = 0;
    struct pyf_err e = {0};
    struct target *t = NULL;
    json_int_t pid, rate;
    int r;

    if (!body)
        return 0;
    jpid = json_object_get(body, "pid");
    jrate = json_object_get(body, "rate");
    jdur = json_object_get(body, "duration");
    children = json_is_true(json_object_get(body, "children"));
    /* "native": true (the eBPF sampler, else perf), "perf" (perf alone), false */
    jnative = json_object_get(body, "native");
    perf_only = json_is_string(jnative) && strcmp(json_string_value(jnative), "perf") == 0;
    native = json_is_true(jnative) || perf_only;
    native_ok = !jnative || json_is_boolean(jnative) || perf_only;
    pid = json_integer_value(jpid);
    rate = jrate ? json_integer_value(jrate) : config_num(a->cfg.config, CFG_SAMPLE_RATE);
    pid_ok = json_is_integer(jpid) && pid > 0 && pid <= 0x7fffffff;
    rate_ok = (!jrate || json_is_integer(jrate)) && rate >= 1 && rate <= a->cfg.max_rate_hz;
    if (jdur)
        dur_ns = json_is_string(jdur)   ? units_duration_ns(json_string_value(jdur))
                 : json_is_number(jdur) ? (int64_t)(json_number_value(jdur) * 1e9)
                                        : -1;
    json_decref(body); /* jpid, jrate, jdur die with it */
    if (!pid_ok)
        return reply_error(req, 400, "\"pid\" must be a positive integer");
    if (!rate_ok)
        return reply_error(req, 400, "\"rate\" must be an integer from 1 to %u Hz",
                           a->cfg.max_rate_hz);
    if (!native_ok)
        return reply_error(req, 400, "\"native\" must be true, false or \"perf\"");
    if (dur_ns < 0)
        return reply_error(req, 400, "\"duration\" must be seconds or a duration like \"30s\"");
    if (authorise_pid(req, p, (pid_t)pid) < 0)
        return 0;
    r = target_new((pid_t)pid, (uint32_t)rate, &t, &e);
    if (r < 0 && children && (e.kind == PYF_NOT_PYTHON || e.kind == PYF_UNSUPPORTED))
        return watch_add(a, req, p, (pid_t)pid, (uint32_t)rate, native, perf_only, e.msg);
    if (r < 0)
        return reply_error(req, errbuf_http_status(&e), "%s", e.msg);
    t->id = a->next_target_id;
    t->follow_children = children;
    t->rate_is_default = !jrate;
    t->native_wanted = native;
    t->native_perf_only = perf_only;
    if (native)
        target__open_native(t, a->sampler->symbols); /* not fatal: Python frames are still there */
    if (dur_ns > 0)
        t->deadline_ns = mono_ns() + dur_ns;
    r = sampler__add(a->sampler, t);
    if (r < 0) {
        target_free(t);
        return reply_error(req, r == -EEXIST ? 409 : 503, "pid %d: %s", (int)pid,
                           r == -EEXIST ? "already attached" : "too many targets");
    }
    a->next_target_id++;
    log_msg(LOG_INFO, "attached pid %d (Python %s) at %d Hz, %s, for uid %u", (int)pid,
            t->py_version, (int)rate, target_mode(t), (unsigned)p->uid);
    targets_list(a, req, p, (pid_t)pid);
    return 0;
}

static int targets_detach(struct api *a, struct evhttp_request *req, const struct peer *p,
                          pid_t pid)
{
    struct list_ctx l = {.peer = p, .pid = pid, .arr = json_array()};
    struct target *t;

    for (size_t i = 0; i < a->n_watches; i++)
        if (a->watches[i].pid == pid && (p->root || a->watches[i].uid == p->uid)) {
            json_decref(l.arr);
            a->watches[i] = a->watches[--a->n_watches];
            log_msg(LOG_INFO, "no longer following pid %d", (int)pid);
            return reply_json(req, 200,
                              json_pack("{s:i, s:b}", "pid", (int)pid, "following", false));
        }
    sampler__each(a->sampler, list_one, &l); /* visible to this peer? */
    if (json_array_size(l.arr) == 0) {
        json_decref(l.arr);
        return reply_error(req, 404, "pid %d is not attached%s", (int)pid,
                           p->root ? "" : " (or not yours)");
    }
    json_decref(l.arr);
    t = sampler__remove(a->sampler, pid);
    if (!t)
        return reply_error(req, 404, "pid %d is not attached", (int)pid);
    log_msg(LOG_INFO, "detached pid %d", (int)pid);
    reply_json(req, 200, target_json(t));
    target_free(t);
    return 0;
}

/* ---- worker jobs: query, flame graph, backtrace ---- */

struct job {
    struct api *a;
    struct evhttp_request *req;
    enum job_kind kind;
    struct query_scope scope;
    char *sql;
    struct flame_request flame;
    char format[16];
    int locals;
    bool native;              /* backtrace: mixed stacks (the threads held by ptrace a moment) */
    struct eval_request eval; /* eval.code and eval.mode are owned */
    struct allocs_request allocs;
    struct torch_request torch; /* torch.exprs is owned */
    struct torch_drained drained;
    /* result */
    int status;
    json_t *body;
    char *raw;
    size_t raw_len;
    const char *raw_type;
};

static void job_free(struct job *j)
{
    free((char *)j->eval.code);
    free((char *)j->eval.mode);
    free((char *)j->torch.exprs);
    free(j->sql);
    free(j->raw);
    json_decref(j->body);
    free((char *)j->flame.title);
    free(j);
}

static struct tracked *tracked_of(struct api *a, pid_t pid, enum job_kind kind)
{
    for (size_t i = 0; i < a->n_tracked; i++)
        if (a->tracked[i].pid == pid && a->tracked[i].kind == kind)
            return &a->tracked[i];
    return NULL;
}

static void untrack(struct api *a, struct tracked *t)
{
    *t = a->tracked[--a->n_tracked];
}

/* Loop thread: what an allocation job means for the list of tracked processes. */
static void allocs_done(struct api *a, const struct job *j)
{
    struct tracked *t = tracked_of(a, j->allocs.pid, JOB_ALLOCS);
    int64_t every = config_num(a->cfg.config, CFG_ALLOCATION_INTERVAL);

    if (t)
        t->busy = false;
    if (j->status == 200 && j->allocs.action == ALLOCS_ON && !t && a->n_tracked < TRACKED_MAX) {
        t = &a->tracked[a->n_tracked++];
        *t = (struct tracked){
            .kind = JOB_ALLOCS, .pid = j->allocs.pid, .target_id = j->allocs.target_id};
    }
    if (t && j->status == 200)
        t->next_ns = mono_ns() + (every ? every : INT64_MAX / 2);
    /* off, or the process gone or no longer tracing: stop taking snapshots */
    if (t && (j->allocs.action == ALLOCS_OFF || (j->status != 200 && j->status != 503))) {
        if (j->status != 200 && !j->req)
            log_msg(LOG_WARN, "pid %d: allocation snapshots stop: %s", (int)t->pid,
                    json_string_value(json_object_get(j->body, "error")));
        untrack(a, t);
    }
}

/* Loop thread: what a torch trace job means for the list of traced processes. */
static void torch_done(struct api *a, const struct job *j)
{
    struct tracked *t = tracked_of(a, j->torch.pid, JOB_TORCH);
    bool tracing = json_is_true(json_object_get(j->body, "tracing"));

    if (t)
        t->busy = false;
    sampler__add_torch(a->sampler, j->torch.target_id, j->status == 200 ? &j->drained : NULL,
                       (uint64_t)json_integer_value(json_object_get(j->body, "dropped")),
                       j->status == 200 && tracing);
    if (j->status == 200 && tracing && !t && a->n_tracked < TRACKED_MAX) {
        t = &a->tracked[a->n_tracked++];
        *t = (struct tracked){
            .kind = JOB_TORCH, .pid = j->torch.pid, .target_id = j->torch.target_id};
    }
    if (t && j->status == 200)
        t->next_ns = mono_ns() + TORCH_DRAIN_NS;
    /* off, or the process gone or no longer tracing: stop draining */
    if (t && (!tracing || (j->status != 200 && j->status != 503))) {
        if (j->status != 200 && !j->req)
            log_msg(LOG_WARN, "pid %d: torch trace drains stop: %s", (int)t->pid,
                    json_string_value(json_object_get(j->body, "error")));
        untrack(a, t);
    }
}

/* With a->lock: a worker for @sc's user, within WORKERS_MAX and USER_JOBS_MAX (a user who is
 * not root may not take every worker: root's requests and other users' still get one).
 * -EBUSY: all workers run; -EUSERS: this user's do. */
static int worker_claim(struct api *a, const struct query_scope *sc)
{
    struct user_jobs *free_entry = NULL, *mine = NULL;

    if (a->workers >= WORKERS_MAX)
        return -EBUSY;
    for (int i = 0; !sc->root && i < WORKERS_MAX; i++) {
        struct user_jobs *u = &a->user_jobs[i];
        if (u->n && u->uid == sc->uid)
            mine = u;
        else if (!u->n && !free_entry)
            free_entry = u;
    }
    if (!sc->root) {
        if (mine && mine->n >= USER_JOBS_MAX)
            return -EUSERS;
        if (!mine)
            *(mine = free_entry) = (struct user_jobs){.uid = sc->uid};
        mine->n++;
    }
    a->workers++;
    return 0;
}

static void worker_release(struct api *a, const struct query_scope *sc)
{
    for (int i = 0; !sc->root && i < WORKERS_MAX; i++)
        if (a->user_jobs[i].n && a->user_jobs[i].uid == sc->uid) {
            a->user_jobs[i].n--;
            break;
        }
    a->workers--;
}

/* Loop thread: the worker is done; reply. */
static void job_done(evutil_socket_t fd, short what, void *arg)
{
    struct job *j = arg;
    struct api *a = j->a;

    (void)fd, (void)what;
    if (j->kind == JOB_ALLOCS)
        allocs_done(a, j);
    if (j->kind == JOB_TORCH)
        torch_done(a, j);
    if (!j->req) /* a snapshot the daemon took on its own */
        ;
    else if (j->raw)
        reply_raw(j->req, j->raw_type, j->raw, j->raw_len);
    else
        reply_json(j->req, j->status, json_incref(j->body));
    pthread_mutex_lock(&a->lock);
    worker_release(a, &j->scope);
    pthread_cond_broadcast(&a->idle);
    pthread_mutex_unlock(&a->lock);
    job_free(j);
}

static void run_query(struct job *j, const char *sql)
{
    struct query_limits lim = {.time_ms = config_num(j->a->cfg.config, CFG_QUERY_TIMEOUT) / 1000000,
                               .max_rows = j->a->cfg.query_max_rows};
    struct query_err err = {0};

    if (query_run(j->a->cfg.db_path, j->a->sampler, &j->scope, &lim, sql, &j->body, &err) < 0) {
        j->status = err.http_status;
        j->body = json_pack("{s:s, s:i}", "error", err.msg, "status", err.http_status);
        j->a->query_errors++;
        return;
    }
    j->status = 200;
}

static void run_flame(struct job *j)
{
    char *sql = flame_sql(&j->flame);
    json_t *rows;

    if (!sql) {
        j->status = 500;
        j->body = json_pack("{s:s}", "error", "out of memory");
        return;
    }
    run_query(j, sql);
    free(sql);
    if (j->status != 200)
        return;
    rows = json_object_get(j->body, "rows");
    if (json_array_size(rows) == 0) {
        json_decref(j->body);
        j->status = 404;
        j->body = json_pack("{s:s, s:i}", "error",
                            "no samples for that process in that time range (is it attached?)",
                            "status", 404);
        return;
    }
    if (strcmp(j->format, "svg") == 0) {
        j->raw = flame_svg(rows, j->flame.title, &j->raw_len);
        j->raw_type = "image/svg+xml";
    } else if (strcmp(j->format, "pprof") == 0) {
        j->raw = (char *)pprof_from_folded(rows, j->flame.period_ns, real_ns(), &j->raw_len);
        j->raw_type = "application/octet-stream";
    } else if (strcmp(j->format, "speedscope") == 0) {
        j->raw = flame_speedscope(rows, j->flame.title, &j->raw_len);
        j->raw_type = "application/json";
    } else {
        j->raw = flame_folded(rows, &j->raw_len);
        j->raw_type = "text/plain; charset=utf-8";
    }
    if (!j->raw) {
        j->status = 500;
        json_decref(j->body);
        j->body = json_pack("{s:s}", "error", "out of memory rendering the flame graph");
    }
}

static void run_backtrace(struct job *j)
{
    struct pyf_err e = {0};

    if (dump_json(j->scope.pid, j->locals, j->native, &j->body, &e) < 0) {
        j->status = errbuf_http_status(&e);
        j->body = json_pack("{s:s, s:i}", "error", e.msg, "status", j->status);
        return;
    }
    j->status = 200;
}

static void *worker_main(void *arg)
{
    struct job *j = arg;

    switch (j->kind) {
    case JOB_QUERY:
        j->a->queries++;
        run_query(j, j->sql);
        break;
    case JOB_FLAME:
        run_flame(j);
        break;
    case JOB_BACKTRACE:
        run_backtrace(j);
        break;
    case JOB_EVAL:
        j->status = eval_run(j->a->stubs, j->a->cfg.db_path, &j->eval, &j->body);
        break;
    case JOB_ALLOCS:
        j->status = allocs_run(j->a->stubs, j->a->cfg.db_path, &j->allocs, &j->body);
        break;
    case JOB_TORCH:
        j->status = torch_run(j->a->stubs, j->a->cfg.db_path, &j->torch, &j->drained, &j->body);
        break;
    }
    if (event_base_once(j->a->base, -1, EV_TIMEOUT, job_done, j, NULL) < 0)
        log_msg(LOG_ERR, "could not hand a reply back to the event loop");
    return NULL;
}

/* A job that never ran: a snapshot of a tracked process may be taken again. */
static void job_dropped(struct api *a, struct job *j)
{
    struct tracked *t = j->kind == JOB_ALLOCS  ? tracked_of(a, j->allocs.pid, JOB_ALLOCS)
                        : j->kind == JOB_TORCH ? tracked_of(a, j->torch.pid, JOB_TORCH)
                                               : NULL;

    if (t)
        t->busy = false;
    job_free(j);
}

/* Takes @j: runs it on a worker thread, or replies 503 when too many run. */
static void start_job(struct api *a, struct job *j)
{
    pthread_attr_t attr;
    pthread_t th;
    int r;

    pthread_mutex_lock(&a->lock);
    r = worker_claim(a, &j->scope);
    pthread_mutex_unlock(&a->lock);
    if (r == -EUSERS && j->req)
        reply_error(j->req, 429,
                    "uid %u has %d queries, flame graphs or evals running already;"
                    " try again when one is done",
                    (unsigned)j->scope.uid, USER_JOBS_MAX);
    else if (r < 0 && j->req)
        reply_error(j->req, 503, "too many queries running (%d); try again", WORKERS_MAX);
    if (r < 0) {
        job_dropped(a, j);
        return;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    r = pthread_create(&th, &attr, worker_main, j);
    pthread_attr_destroy(&attr);
    if (r != 0) {
        pthread_mutex_lock(&a->lock);
        worker_release(a, &j->scope);
        pthread_mutex_unlock(&a->lock);
        if (j->req)
            reply_error(j->req, 503, "could not start a worker: %s", strerror(r));
        else
            log_msg(LOG_WARN, "could not start a worker: %s", strerror(r));
        job_dropped(a, j);
    }
}

static struct job *job_new(struct api *a, struct evhttp_request *req, enum job_kind kind,
                           const struct peer *p)
{
    struct job *j = calloc(1, sizeof(*j));

    if (!j) {
        reply_error(req, 500, "out of memory");
        return NULL;
    }
    *j = (struct job){.a = a, .req = req, .kind = kind, .scope = {.root = p->root, .uid = p->uid}};
    return j;
}

static int query_post(struct api *a, struct evhttp_request *req, const struct peer *p)
{
    json_t *body = body_json(req), *jsql, *jpid;
    struct job *j;

    if (!body)
        return 0;
    jsql = json_object_get(body, "sql");
    jpid = json_object_get(body, "pid");
    if (!json_is_string(jsql) ||
        (jpid && (!json_is_integer(jpid) || json_integer_value(jpid) < 0))) {
        json_decref(body);
        return reply_error(req, 400, "expected {\"sql\": \"SELECT ...\", \"pid\": optional int}");
    }
    j = job_new(a, req, JOB_QUERY, p);
    if (j) {
        j->sql = strdup(json_string_value(jsql));
        j->scope.pid = (pid_t)json_integer_value(jpid);
        if (j->sql) {
            start_job(a, j);
        } else {
            reply_error(req, 500, "out of memory");
            job_free(j);
        }
    }
    json_decref(body);
    return 0;
}

/* Reads the optional fields of an eval request into @rq; false when one is malformed. */
static bool eval_fields(json_t *body, struct eval_request *rq, const char **ret_kind)
{
    json_t *jmain = json_object_get(body, "main_thread"), *jsid = json_object_get(body, "session");
    json_t *jto = json_object_get(body, "timeout_s"), *jkind = json_object_get(body, "kind");
    double to = jto ? json_number_value(jto) : EVAL_TIMEOUT_MS / 1000.0;

    *ret_kind = jkind ? json_string_value(jkind) : "run";
    if ((jmain && !json_is_boolean(jmain)) || (jsid && !json_is_integer(jsid)) ||
        (jto && !json_is_number(jto)) || !*ret_kind || to <= 0 || to * 1000 > EVAL_TIMEOUT_MAX_MS ||
        json_integer_value(jsid) < 0 || json_integer_value(jsid) > UINT32_MAX)
        return false;
    rq->main_thread = json_is_true(jmain);
    rq->session = (uint32_t)json_integer_value(jsid);
    rq->timeout_ms = (int64_t)(to * 1000);
    if (strcmp(*ret_kind, "run") == 0)
        rq->kind = STUB_RUN;
    else if (strcmp(*ret_kind, "complete") == 0)
        rq->kind = STUB_IS_COMPLETE;
    else if (strcmp(*ret_kind, "interrupt") == 0)
        rq->kind = STUB_INTERRUPT;
    else
        return false;
    return true;
}

/* POST /v1/eval {"pid", "code", "main_thread", "timeout_s", "session", "kind", "mode"} */
static int eval_post(struct api *a, struct evhttp_request *req, const struct peer *p)
{
    json_t *body = body_json(req), *jpid, *jcode, *jmode;
    struct eval_request rq = {0};
    const char *kind, *mode;
    struct job *j;
    int status = 0;

    if (!body)
        return 0;
    jpid = json_object_get(body, "pid");
    jcode = json_object_get(body, "code");
    jmode = json_object_get(body, "mode");
    mode = json_is_string(jmode) ? json_string_value(jmode) : "eval";
    if (!json_is_integer(jpid) || json_integer_value(jpid) <= 0 ||
        json_integer_value(jpid) > 0x7fffffff || !json_is_string(jcode) ||
        !eval_fields(body, &rq, &kind)) {
        status = reply_error(req, 400,
                             "expected {\"pid\": int, \"code\": \"...\", optional "
                             "\"main_thread\": bool, \"timeout_s\": 0 < s <= %d, "
                             "\"session\": int, \"kind\": \"run\"|\"complete\"|\"interrupt\"}",
                             EVAL_TIMEOUT_MAX_MS / 1000);
    } else if (authorise_pid(req, p, (pid_t)json_integer_value(jpid)) < 0) {
        status = 0; /* replied */
    } else if ((j = job_new(a, req, JOB_EVAL, p)) != NULL) {
        j->eval = rq;
        j->eval.pid = (pid_t)json_integer_value(jpid);
        j->eval.uid = p->uid;
        j->eval.code = strdup(json_string_value(jcode));
        j->eval.mode = strdup(strcmp(kind, "run") == 0 ? mode : kind);
        if (j->eval.code && j->eval.mode) {
            start_job(a, j);
        } else {
            reply_error(req, 500, "out of memory");
            job_free(j);
        }
    }
    json_decref(body);
    return status;
}

/* ---- allocation tracking and the torch trace ---- */

/* A body's "pid" when it is one, else 0. */
static pid_t pid_of(json_t *jpid)
{
    json_int_t v = json_integer_value(jpid);

    return json_is_integer(jpid) && v > 0 && v <= 0x7fffffff ? (pid_t)v : 0;
}

/* The index of a body's "action" in @actions, or -1. */
static int action_of(json_t *jaction, const char *const *actions, int n)
{
    const char *action = json_string_value(jaction);

    for (int i = 0; action && i < n; i++)
        if (strcmp(action, actions[i]) == 0)
            return i;
    return -1;
}

struct sampling_ctx {
    pid_t pid;
    int64_t target_id; /* 0: not being sampled */
};

static void find_sampling(const struct target *t, void *ctx)
{
    struct sampling_ctx *c = ctx;

    if (t->pid == c->pid && t->state == TARGET_SAMPLING)
        c->target_id = t->id;
}

/* The id of @pid's attach while it is sampled, else 0. */
static int64_t sampling_id(struct api *a, pid_t pid)
{
    struct sampling_ctx c = {.pid = pid};

    sampler__each(a->sampler, find_sampling, &c);
    return c.target_id;
}

/* POST /v1/allocations {"pid", "action": "on"|"snapshot"|"off", "top": 1..1000} */
static int allocs_post(struct api *a, struct evhttp_request *req, const struct peer *p)
{
    static const char *const actions[] = {"on", "snapshot", "off"};
    json_t *body = body_json(req), *jpid, *jtop;
    struct job *j;
    int64_t target_id;
    int k = -1, top;
    pid_t pid;

    if (!body)
        return 0;
    jpid = json_object_get(body, "pid");
    jtop = json_object_get(body, "top");
    k = action_of(json_object_get(body, "action"), actions, 3);
    top = !jtop ? 20 : json_is_integer(jtop) ? (int)json_integer_value(jtop) : -1;
    pid = pid_of(jpid);
    json_decref(body); /* jpid and jtop die with it */
    if (!pid || k < 0 || top < 1 || top > 1000)
        return reply_error(req, 400,
                           "expected {\"pid\": int, \"action\": \"on\"|\"snapshot\"|\"off\","
                           " optional \"top\": 1..1000}");
    if (authorise_pid(req, p, pid) < 0)
        return 0;
    target_id = sampling_id(a, pid);
    if (!target_id)
        return reply_error(req, 404,
                           "pid %d is not attached: allocations are recorded with its attach"
                           " (probectl attach %d)",
                           (int)pid, (int)pid);
    if (tracked_of(a, pid, JOB_ALLOCS) && tracked_of(a, pid, JOB_ALLOCS)->busy)
        return reply_error(req, 409, "pid %d: a snapshot is being taken; try again", (int)pid);
    if (k == ALLOCS_ON && !tracked_of(a, pid, JOB_ALLOCS) && a->n_tracked == TRACKED_MAX)
        return reply_error(req, 503, "allocation tracking is on in %d processes already",
                           TRACKED_MAX);
    j = job_new(a, req, JOB_ALLOCS, p);
    if (!j)
        return 0;
    j->allocs = (struct allocs_request){
        .pid = pid, .uid = p->uid, .target_id = target_id, .action = k, .top = top};
    if (tracked_of(a, pid, JOB_ALLOCS))
        tracked_of(a, pid, JOB_ALLOCS)->busy = true;
    start_job(a, j);
    return 0;
}

/* POST /v1/torch {"pid", "action": "on"|"drain"|"off", "every": 1.., "exprs": "n@f,..."} */
static int torch_post(struct api *a, struct evhttp_request *req, const struct peer *p)
{
    static const char *const actions[] = {"on", "drain", "off"};
    json_t *body = body_json(req), *jpid, *jevery, *jexprs;
    char *exprs = NULL, why[400];
    struct tracked *t;
    struct job *j;
    int64_t target_id, every;
    int k = -1;
    pid_t pid;

    if (!body)
        return 0;
    jpid = json_object_get(body, "pid");
    jevery = json_object_get(body, "every");
    jexprs = json_object_get(body, "exprs");
    k = action_of(json_object_get(body, "action"), actions, 3);
    every = !jevery ? 1 : json_is_integer(jevery) ? json_integer_value(jevery) : -1;
    pid = pid_of(jpid);
    if (json_is_string(jexprs) || !jexprs)
        exprs = strdup(jexprs ? json_string_value(jexprs) : "");
    json_decref(body); /* jpid, jevery and jexprs die with it */
    if (!pid || k < 0 || every < 1 || every > 1000000 || !exprs) {
        free(exprs);
        return reply_error(req, 400,
                           "expected {\"pid\": int, \"action\": \"on\"|\"drain\"|\"off\","
                           " optional \"every\": 1..1000000, \"exprs\": \"name@function,...\"}");
    }
    if (torch_parse_exprs(exprs, why, sizeof(why)) < 0) {
        free(exprs);
        return reply_error(req, 400, "%s", why);
    }
    if (authorise_pid(req, p, pid) < 0) {
        free(exprs);
        return 0;
    }
    target_id = sampling_id(a, pid);
    t = tracked_of(a, pid, JOB_TORCH);
    if (!target_id) {
        free(exprs);
        return reply_error(req, 404,
                           "pid %d is not attached: the torch trace is recorded with its attach"
                           " (probectl attach %d)",
                           (int)pid, (int)pid);
    }
    if (t && t->busy) {
        free(exprs);
        return reply_error(req, 409, "pid %d: the torch trace is being drained; try again",
                           (int)pid);
    }
    if (k == TORCH_ON && !t && a->n_tracked == TRACKED_MAX) {
        free(exprs);
        return reply_error(req, 503, "tracking is on in %d processes already", TRACKED_MAX);
    }
    j = job_new(a, req, JOB_TORCH, p);
    if (!j) {
        free(exprs);
        return 0;
    }
    j->torch = (struct torch_request){.pid = pid,
                                      .uid = p->uid,
                                      .target_id = target_id,
                                      .action = k,
                                      .every = (int)every,
                                      .exprs = exprs};
    if (t)
        t->busy = true;
    start_job(a, j);
    return 0;
}

/* At start: targets resumed with allocation tracking on go on being snapshotted. */
static void track_resumed(const struct target *t, void *ctx)
{
    struct api *a = ctx;

    if (t->allocation_tracking && t->state == TARGET_SAMPLING && a->n_tracked < TRACKED_MAX) {
        a->tracked[a->n_tracked++] = (struct tracked){.kind = JOB_ALLOCS,
                                                      .pid = t->pid,
                                                      .target_id = t->id,
                                                      .next_ns = mono_ns() + 1000000000LL};
        log_msg(LOG_INFO, "pid %d: allocation tracking resumed", (int)t->pid);
    }
    if (t->torch_tracing && t->state == TARGET_SAMPLING && a->n_tracked < TRACKED_MAX) {
        a->tracked[a->n_tracked++] = (struct tracked){
            .kind = JOB_TORCH, .pid = t->pid, .target_id = t->id, .next_ns = mono_ns()};
        log_msg(LOG_INFO, "pid %d: torch trace drains resumed", (int)t->pid);
    }
}

/* A job the daemon runs on its own for @t: a snapshot or a drain when due, or turning
 * tracking off when the process is no longer sampled; NULL when none is due. */
static struct job *due_job(struct api *a, const struct tracked *t, int64_t now)
{
    /* detached or exited: off in the process (if it still runs), then forget it */
    bool ended = sampling_id(a, t->pid) != t->target_id;
    struct job *j;

    if (!ended && now < t->next_ns)
        return NULL;
    if (!ended && t->kind == JOB_ALLOCS && !config_num(a->cfg.config, CFG_ALLOCATION_INTERVAL))
        return NULL;
    j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    *j = (struct job){.a = a, .kind = t->kind, .scope = {.root = true}};
    if (t->kind == JOB_ALLOCS)
        j->allocs = (struct allocs_request){.pid = t->pid,
                                            .uid = 0, /* the daemon itself */
                                            .target_id = t->target_id,
                                            .action = ended ? ALLOCS_OFF : ALLOCS_SNAPSHOT,
                                            .top = 20};
    else
        j->torch = (struct torch_request){.pid = t->pid,
                                          .uid = 0,
                                          .target_id = t->target_id,
                                          .action = ended ? TORCH_OFF : TORCH_DRAIN};
    return j;
}

/* Twice a second: the snapshots and drains that are due (allocs_done and torch_done drop a
 * process whose tracking ended). */
static void on_allocs_timer(evutil_socket_t fd, short what, void *arg)
{
    struct api *a = arg;
    int64_t now = mono_ns();

    (void)fd, (void)what;
    for (size_t i = 0; i < a->n_tracked; i++) {
        struct tracked *t = &a->tracked[i];
        struct job *j = t->busy ? NULL : due_job(a, t, now);

        if (!j)
            continue;
        t->busy = true;
        start_job(a, j);
    }
}

struct rate_ctx {
    pid_t pid;
    uint32_t rate_hz;
};

static void find_rate(const struct target *t, void *ctx)
{
    struct rate_ctx *r = ctx;

    if (t->pid == r->pid)
        r->rate_hz = t->rate_hz;
}

/* The sampling rate of @pid's (last) attach; the default when not in the list. */
static uint32_t rate_of(struct api *a, pid_t pid)
{
    struct rate_ctx r = {.pid = pid,
                         .rate_hz = (uint32_t)config_num(a->cfg.config, CFG_SAMPLE_RATE)};

    sampler__each(a->sampler, find_rate, &r);
    return r.rate_hz ? r.rate_hz : 100;
}

static int flamegraph_get(struct api *a, struct evhttp_request *req, const struct peer *p,
                          const struct evkeyvalq *q)
{
    long long pid = param_int(q, "pid"), tid = param_int(q, "tid"), idle = param_int(q, "idle");
    const char *since = evhttp_find_header(q, "since");
    const char *format = evhttp_find_header(q, "format");
    int64_t since_ns = 0;
    struct job *j;
    char title[128];

    if (pid <= 0)
        return reply_error(req, 400, "flamegraph needs ?pid=N");
    if (tid < 0)
        return reply_error(req, 400, "tid must be a thread id");
    if (since && (since_ns = units_duration_ns(since)) < 0)
        return reply_error(req, 400, "since must be a duration like 30s, 5m, 2h");
    if (format && strcmp(format, "svg") != 0 && strcmp(format, "folded") != 0 &&
        strcmp(format, "speedscope") != 0 && strcmp(format, "pprof") != 0)
        return reply_error(req, 400, "format must be svg, folded, speedscope or pprof");
    j = job_new(a, req, JOB_FLAME, p);
    if (!j)
        return 0;
    j->scope.pid = (pid_t)pid;
    j->flame = (struct flame_request){.pid = (pid_t)pid,
                                      .tid = (pid_t)tid,
                                      .idle = idle > 0,
                                      .since_ns = since_ns ? real_ns() - since_ns : 0};
    j->flame.period_ns = 1000000000LL / rate_of(a, (pid_t)pid);
    snprintf(title, sizeof(title), "pid %lld%s%s", pid, since ? ", last " : "", since ? since : "");
    j->flame.title = strdup(title);
    if (!j->flame.title) {
        job_free(j);
        return reply_error(req, 500, "out of memory");
    }
    snprintf(j->format, sizeof(j->format), "%s", format ? format : "svg");
    start_job(a, j);
    return 0;
}

static int backtrace_get(struct api *a, struct evhttp_request *req, const struct peer *p,
                         const struct evkeyvalq *q)
{
    long long pid = param_int(q, "pid"), locals = param_int(q, "locals");
    long long native = param_int(q, "native");
    struct job *j;

    if (pid <= 0 || locals < 0 || native < 0 || native > 1)
        return reply_error(req, 400,
                           "backtrace needs ?pid=N (and optionally &locals=N, &native=1)");
    if (authorise_pid(req, p, (pid_t)pid) < 0)
        return 0;
    j = job_new(a, req, JOB_BACKTRACE, p);
    if (!j)
        return 0;
    j->scope.pid = (pid_t)pid;
    j->locals = (int)locals;
    j->native = native == 1;
    start_job(a, j);
    return 0;
}

/* ---- --children ---- */

#define FOLLOW_PERIOD_MS 500
#define FOLLOWED_MAX (SAMPLER_TARGETS_MAX + WATCHES_MAX)

/* attach --children of a process that is not Python: followed, not sampled (see struct
 * watch). @why: what target_new() said of it. */
static int watch_add(struct api *a, struct evhttp_request *req, const struct peer *p, pid_t pid,
                     uint32_t rate, bool native, bool perf_only, const char *why)
{
    struct watch w = {.pid = pid, .rate = rate, .native = native, .perf_only = perf_only};
    char path[64];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    if (procfs_start_time(pid, &w.start_time) < 0 || stat(path, &st) < 0)
        return reply_error(req, 404, "pid %d: no such process", (int)pid);
    w.uid = st.st_uid;
    procfs_cmdline(pid, w.cmdline, sizeof(w.cmdline));
    for (size_t i = 0; i < a->n_watches; i++)
        if (a->watches[i].pid == pid) /* asked again (probectl run polls): the same answer */
            return reply_json(req, 200,
                              json_pack("{s:i, s:b, s:b, s:s, s:s}", "pid", (int)pid, "following",
                                        true, "python", false, "cmdline", w.cmdline, "message",
                                        why));
    if (a->n_watches == WATCHES_MAX)
        return reply_error(req, 503, "pid %d: %d processes are followed already", (int)pid,
                           WATCHES_MAX);
    a->watches[a->n_watches++] = w;
    log_msg(LOG_INFO, "following pid %d (not Python) for its Python descendants, for uid %u",
            (int)pid, (unsigned)p->uid);
    return reply_json(req, 200,
                      json_pack("{s:i, s:b, s:b, s:s, s:s}", "pid", (int)pid, "following", true,
                                "python", false, "cmdline", w.cmdline, "message", why));
}

/* Forgets the followed processes that ended, or became a target themselves (an exec into
 * Python: the target follows its descendants from then on). */
static void watches_prune(struct api *a, const pid_t *sampled, size_t n_sampled)
{
    for (size_t i = 0; i < a->n_watches;) {
        const struct watch *w = &a->watches[i];
        int64_t start;
        bool gone = procfs_start_time(w->pid, &start) < 0 || start != w->start_time;

        for (size_t k = 0; k < n_sampled && !gone; k++)
            gone = sampled[k] == w->pid;
        if (gone)
            a->watches[i] = a->watches[--a->n_watches];
        else
            i++;
    }
}

struct followed {
    pid_t pid[FOLLOWED_MAX]; /* targets that follow their children, then the watches */
    uint32_t rate[FOLLOWED_MAX];
    uid_t uid[FOLLOWED_MAX];
    bool native[FOLLOWED_MAX];    /* attached with --native: so are its descendants */
    bool perf_only[FOLLOWED_MAX]; /* and with --native=perf */
    size_t n, n_targets;
    pid_t sampled[SAMPLER_TARGETS_MAX]; /* every pid being sampled */
    size_t n_sampled;
};

static void collect_followed(const struct target *t, void *ctx)
{
    struct followed *f = ctx;

    if (t->state != TARGET_SAMPLING)
        return;
    f->sampled[f->n_sampled++] = t->pid;
    if (t->follow_children) {
        f->pid[f->n] = t->pid;
        f->rate[f->n] = t->rate_hz;
        f->native[f->n] = t->native_wanted;
        f->perf_only[f->n] = t->native_perf_only;
        f->uid[f->n++] = t->uid;
    }
}

/* @pid's identity for the not-Python list; false when it is gone. */
static bool identify(pid_t pid, struct not_python *id)
{
    char path[64];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    if (procfs_start_time(pid, &id->start_time) < 0 || stat(path, &st) < 0)
        return false;
    id->pid = pid;
    id->exe_dev = st.st_dev;
    id->exe_ino = st.st_ino;
    return true;
}

static bool known_not_python(struct api *a, const struct not_python *id)
{
    for (size_t i = 0; i < a->n_not_python; i++) {
        const struct not_python *k = &a->not_python[i];
        if (k->pid == id->pid && k->start_time == id->start_time && k->exe_dev == id->exe_dev &&
            k->exe_ino == id->exe_ino)
            return true;
    }
    return false;
}

/* Attaches @child like its followed ancestor @i, when it is Python and of the same owner. */
static void follow_child(struct api *a, const struct followed *f, size_t i, pid_t child)
{
    struct pyf_err e = {0};
    struct target *t = NULL;
    struct not_python id, after;
    char path[64];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%d", (int)child);
    if (!identify(child, &id) || known_not_python(a, &id) || stat(path, &st) < 0 ||
        st.st_uid != f->uid[i])
        return;
    if (target_new(child, f->rate[i], &t, &e) < 0) {
        /* Remembered only if it did not exec meanwhile: a launcher's fork (Python's exe) that
         * became `sh` under the check would otherwise have Python's identity remembered as not
         * Python, and the rank that `sh` execs next (Python's exe again, same pid and start
         * time) would never be attached. */
        if ((e.kind == PYF_NOT_PYTHON || e.kind == PYF_UNSUPPORTED) && identify(child, &after) &&
            after.exe_dev == id.exe_dev && after.exe_ino == id.exe_ino) {
            a->not_python[a->next_not_python] = id;
            a->next_not_python = (a->next_not_python + 1) % FOLLOW_MAX;
            if (a->n_not_python < FOLLOW_MAX)
                a->n_not_python++;
        }
        return;
    }
    t->id = a->next_target_id;
    t->follow_children = true;
    t->native_wanted = f->native[i];
    t->native_perf_only = f->perf_only[i];
    if (t->native_wanted)
        target__open_native(t, a->sampler->symbols);
    if (sampler__add(a->sampler, t) < 0) {
        target_free(t);
        return;
    }
    a->next_target_id++;
    log_msg(LOG_INFO, "attached pid %d, a descendant of pid %d (rank %d), %s", (int)child,
            (int)f->pid[i], t->rank, target_mode(t));
}

static void on_follow_timer(evutil_socket_t fd, short what, void *arg)
{
    struct api *a = arg;
    struct followed *f = malloc(sizeof(*f));
    pid_t kids[FOLLOW_MAX];

    (void)fd, (void)what;
    if (!f)
        return;
    f->n = f->n_sampled = 0;
    sampler__each(a->sampler, collect_followed, f);
    watches_prune(a, f->sampled, f->n_sampled);
    f->n_targets = f->n;
    for (size_t i = 0; i < a->n_watches; i++) {
        const struct watch *w = &a->watches[i];

        f->pid[f->n] = w->pid;
        f->rate[f->n] = w->rate;
        f->uid[f->n] = w->uid;
        f->native[f->n] = w->native;
        f->perf_only[f->n++] = w->perf_only;
    }
    for (size_t i = 0; i < f->n; i++) {
        size_t n = follow_descendants(f->pid[i], kids, FOLLOW_MAX);

        if (i >= f->n_targets && n < FOLLOW_MAX) /* a watch: itself too, once it execs Python */
            kids[n++] = f->pid[i];
        for (size_t k = 0; k < n; k++) {
            bool sampled = false;
            for (size_t j = 0; j < f->n_sampled && !sampled; j++)
                sampled = f->sampled[j] == kids[k];
            if (!sampled)
                follow_child(a, f, i, kids[k]);
        }
    }
    free(f);
}

/* ---- routing ---- */

static int status_get(struct api *a, struct evhttp_request *req)
{
    struct writer *w = a->writer;
    struct connlimit_stats c;

    connlimit__stats(a->clients, &c);
    reply_json(req, 200,
               json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:i, "
                         "s:I, s:I, s:I}}",
                         "version", PROBED_VERSION, "database", a->cfg.db_path, "requests",
                         (json_int_t)a->requests, "queries", (json_int_t)a->queries, "query_errors",
                         (json_int_t)a->query_errors, "flushes", (json_int_t)w->flushes,
                         "write_errors", (json_int_t)w->write_errors, "samples_written",
                         (json_int_t)w->samples_written, "samples_dropped",
                         (json_int_t)w->samples_dropped, "samples_pending",
                         (json_int_t)w->backlog_samples, "db_bytes", (json_int_t)w->db_bytes,
                         "query_memory_bytes", (json_int_t)sqlmem_queries_bytes(), "connections",
                         "open", c.open, "refused_over", (json_int_t)c.refused_over, "cut_slow",
                         (json_int_t)c.cut_slow, "accept_errors", (json_int_t)c.accept_errors));
    return 0;
}

/* ---- settings ---- */

static int config_get(struct api *a, struct evhttp_request *req)
{
    char path[CONFIG_VALUE_MAX];

    pthread_mutex_lock(&a->cfg.config->lock);
    snprintf(path, sizeof(path), "%s", a->cfg.config->path);
    pthread_mutex_unlock(&a->cfg.config->lock);
    return reply_json(
        req, 200, json_pack("{s:s, s:o}", "file", path, "settings", config_json(a->cfg.config)));
}

/* Makes the running daemon follow the settings that need more than a new number. */
int api__config_changed(struct api *a, char *err, size_t errlen)
{
    char address[CONFIG_VALUE_MAX];
    uint32_t hz = (uint32_t)config_num(a->cfg.config, CFG_SAMPLE_RATE);

    if (hz != a->rate_hz) {
        sampler__default_rate(a->sampler, hz);
        a->rate_hz = hz;
    }
    meter__wake(a->meter);
    config_text(a->cfg.config, CFG_METRICS_ADDRESS, address, sizeof(address));
    return metrics__listen(a->metrics, address, err, errlen);
}

/* {"key": "sample_rate", "value": "200"}: checked, then applied; refused changes nothing. */
static int config_put(struct api *a, struct evhttp_request *req, const struct peer *p)
{
    json_t *body = body_json(req);
    const char *name, *value;
    char err[512], now[CONFIG_VALUE_MAX];
    int64_t num;
    int k;

    if (!body)
        return 0;
    name = json_string_value(json_object_get(body, "key"));
    value = json_string_value(json_object_get(body, "value"));
    k = name ? config_key_of(name) : -1;
    if (!name || !value) {
        json_decref(body);
        return reply_error(req, 400, "expected {\"key\": \"...\", \"value\": \"...\"}");
    }
    if (k < 0) {
        reply_error(req, 400, "unknown setting '%s' (probectl config lists them)", name);
        json_decref(body);
        return 400;
    }
    if (!p->root) {
        json_decref(body);
        return reply_error(req, 403, "only root may change probed's settings");
    }
    /* The metrics address is tried before it is stored: a port in use refuses the change. */
    if (config_check((enum config_key)k, value, &num, err, sizeof(err)) < 0 ||
        (k == CFG_METRICS_ADDRESS && metrics__listen(a->metrics, value, err, sizeof(err)) < 0) ||
        config_set(a->cfg.config, (enum config_key)k, value, true, false, err, sizeof(err)) < 0) {
        json_decref(body);
        return reply_error(req, 400, "%s", err);
    }
    config_text(a->cfg.config, (enum config_key)k, now, sizeof(now));
    json_decref(body);
    api__config_changed(a, err, sizeof(err));
    log_msg(LOG_INFO, "config: %s = %s (uid %u)", config_key_name((enum config_key)k), now,
            (unsigned)p->uid);
    return config_get(a, req);
}

/* "/v1/targets/123" -> 123; 0 when @path is not of that form. */
static pid_t path_pid(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    char *end;
    long v;

    if (strncmp(path, prefix, n) != 0 || !path[n])
        return 0;
    v = strtol(path + n, &end, 10);
    return *end || v <= 0 || v > 0x7fffffff ? -1 : (pid_t)v;
}

/* Every endpoint and the methods it answers: a known path asked with another method is 405. */
static const struct {
    const char *path, *allow;
} endpoints[] = {
    {"/v1/status", "GET"},       {"/v1/targets", "GET, POST"}, {"/v1/query", "POST"},
    {"/v1/flamegraph", "GET"},   {"/v1/backtrace", "GET"},     {"/v1/eval", "POST"},
    {"/v1/allocations", "POST"}, {"/v1/torch", "POST"},        {"/v1/config", "GET, PUT"},
};

/* A request whose length is said twice (two Content-Length, or one beside a Transfer-Encoding)
 * is read differently by different parsers (request smuggling): refused. */
static bool ambiguous_length(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    struct evkeyval *kv;
    int lengths = 0, encodings = 0;

    TAILQ_FOREACH(kv, h, next)
    {
        lengths += strcasecmp(kv->key, "Content-Length") == 0;
        encodings += strcasecmp(kv->key, "Transfer-Encoding") == 0;
    }
    return lengths > 1 || (lengths && encodings);
}

static int route(struct api *a, struct evhttp_request *req, const struct peer *p, const char *path,
                 const struct evkeyvalq *q)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    pid_t pid;

    if (strcmp(path, "/v1/status") == 0 && m == EVHTTP_REQ_GET)
        return status_get(a, req);
    if (strcmp(path, "/v1/targets") == 0 && m == EVHTTP_REQ_GET)
        return targets_list(a, req, p, 0);
    if (strcmp(path, "/v1/targets") == 0 && m == EVHTTP_REQ_POST)
        return targets_attach(a, req, p);
    if ((pid = path_pid(path, "/v1/targets/")) != 0) {
        if (pid < 0)
            return reply_error(req, 400, "expected /v1/targets/<pid>");
        if (m == EVHTTP_REQ_DELETE)
            return targets_detach(a, req, p, pid);
        if (m == EVHTTP_REQ_GET)
            return targets_list(a, req, p, pid);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, DELETE");
        return reply_error(req, 405, "use GET or DELETE on /v1/targets/<pid>");
    }
    if (strcmp(path, "/v1/query") == 0 && m == EVHTTP_REQ_POST)
        return query_post(a, req, p);
    if (strcmp(path, "/v1/flamegraph") == 0 && m == EVHTTP_REQ_GET)
        return flamegraph_get(a, req, p, q);
    if (strcmp(path, "/v1/backtrace") == 0 && m == EVHTTP_REQ_GET)
        return backtrace_get(a, req, p, q);
    if (strcmp(path, "/v1/eval") == 0 && m == EVHTTP_REQ_POST)
        return eval_post(a, req, p);
    if (strcmp(path, "/v1/allocations") == 0 && m == EVHTTP_REQ_POST)
        return allocs_post(a, req, p);
    if (strcmp(path, "/v1/torch") == 0 && m == EVHTTP_REQ_POST)
        return torch_post(a, req, p);
    if (strcmp(path, "/v1/config") == 0 && m == EVHTTP_REQ_GET)
        return config_get(a, req);
    if (strcmp(path, "/v1/config") == 0 && m == EVHTTP_REQ_PUT)
        return config_put(a, req, p);
    for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++)
        if (strcmp(path, endpoints[i].path) == 0) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", endpoints[i].allow);
            return reply_error(req, 405, "%s answers %s only", path, endpoints[i].allow);
        }
    reply_error(req, 404, "no such endpoint: %s (see docs/api.md)", path);
    return 0;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct api *a = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    struct evkeyvalq params;
    struct peer p;

    a->requests++;
    if (!connlimit__request(a->clients, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        reply_error(req, 503, "too many connections (over %d); try again", API_CONNS_MAX);
        return;
    }
    if (peer_of(req, &p) < 0) {
        reply_error(req, 403, "cannot tell who is asking (SO_PEERCRED failed)");
        return;
    }
    if (!path) {
        reply_error(req, 400, "malformed request URI");
        return;
    }
    if (ambiguous_length(req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        reply_error(req, 400,
                    "the body's length is given twice (Content-Length, "
                    "Transfer-Encoding): refused");
        return;
    }
    TAILQ_INIT(&params);
    if (query && evhttp_parse_query_str(query, &params) < 0) {
        reply_error(req, 400, "malformed query string");
        return;
    }
    route(a, req, &p, path, &params);
    evhttp_clear_headers(&params);
}

/* ---- the socket ---- */

/* A socket file left by a daemon that died is removed; one that answers is in use. */
static int clear_stale_socket(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd, r;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    if (r == 0)
        return -EADDRINUSE;
    return unlink(path) < 0 ? -errno : 0;
}

static int listen_unix(const char *path, int gid, int *ret_fd)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd, r;

    if (strlen(path) >= sizeof(sa.sun_path))
        return log_errno(LOG_ERR, -ENAMETOOLONG, "socket path %s", path);
    r = clear_stale_socket(path);
    if (r < 0)
        return log_errno(LOG_ERR, r, "socket %s (another probed running, or not a socket?)", path);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return log_errno(LOG_ERR, -errno, "socket()");
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0660) < 0 ||
        (gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) < 0) || listen(fd, 64) < 0) {
        r = log_errno(LOG_ERR, -errno, "listening on %s", path);
        close(fd);
        return r;
    }
    *ret_fd = fd;
    return 0;
}

int api_new(struct event_base *base, const struct api_config *cfg, int gid, struct sampler *s,
            struct writer *w, struct meter *m, int64_t next_target_id, struct api **ret)
{
    struct api *a = calloc(1, sizeof(*a));
    char err[512];
    int r;

    if (!a)
        return -ENOMEM;
    *a = (struct api){.base = base,
                      .cfg = *cfg,
                      .sampler = s,
                      .writer = w,
                      .meter = m,
                      .next_target_id = next_target_id,
                      .rate_hz = (uint32_t)config_num(cfg->config, CFG_SAMPLE_RATE),
                      .listen_fd = -1};
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->idle, NULL);
    r = stubctl_new(cfg->stub_path, &a->stubs);
    if (r == 0)
        r = metrics_new(base,
                        &(struct metrics_sources){.sampler = s,
                                                  .writer = w,
                                                  .meter = m,
                                                  .db_path = cfg->db_path,
                                                  .requests = &a->requests,
                                                  .queries = &a->queries,
                                                  .query_errors = &a->query_errors,
                                                  .config = cfg->config},
                        &a->metrics);
    if (r == 0 && (r = api__config_changed(a, err, sizeof(err))) < 0)
        log_msg(LOG_ERR, "%s", err);
    if (r < 0) {
        api_free(a);
        return r;
    }
    a->http = evhttp_new(base);
    if (!a->http) {
        api_free(a);
        return -ENOMEM;
    }
    evhttp_set_max_body_size(a->http, BODY_MAX);
    evhttp_set_max_headers_size(a->http, HEADERS_MAX);
    evhttp_set_timeout(a->http, IO_TIMEOUT_S);
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_PUT);
    evhttp_set_gencb(a->http, on_request, a);
    a->follow_timer = event_new(base, -1, EV_PERSIST, on_follow_timer, a);
    if (!a->follow_timer ||
        event_add(a->follow_timer,
                  &(struct timeval){.tv_sec = 0, .tv_usec = FOLLOW_PERIOD_MS * 1000}) < 0) {
        api_free(a);
        return -ENOMEM;
    }
    sampler__each(s, track_resumed, a);
    a->allocs_timer = event_new(base, -1, EV_PERSIST, on_allocs_timer, a);
    if (!a->allocs_timer ||
        event_add(a->allocs_timer, &(struct timeval){.tv_sec = 0, .tv_usec = 500000}) < 0) {
        api_free(a);
        return -ENOMEM;
    }
    r = listen_unix(cfg->socket_path, gid, &a->listen_fd);
    if (r == 0) {
        a->serving = true; /* served or closed, the fd is evhttp's now */
        r = connlimit_serve(base, a->http, a->listen_fd,
                            &(struct connlimit_config){.what = cfg->socket_path,
                                                       .max_conns = API_CONNS_MAX,
                                                       .request_s = REQUEST_S},
                            &a->clients);
        if (r < 0)
            log_errno(LOG_ERR, r, "serving on %s", cfg->socket_path);
    }
    if (r < 0) {
        api_free(a);
        return r;
    }
    *ret = a;
    return 0;
}

void api_free(struct api *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    while (a->workers > 0) { /* their replies need the loop: run it until they are done */
        pthread_mutex_unlock(&a->lock);
        event_base_loop(a->base, EVLOOP_ONCE);
        pthread_mutex_lock(&a->lock);
    }
    pthread_mutex_unlock(&a->lock);
    if (a->follow_timer)
        event_free(a->follow_timer);
    if (a->allocs_timer)
        event_free(a->allocs_timer);
    if (a->http)
        evhttp_free(a->http); /* closes the listening socket it serves */
    connlimit_free(a->clients);
    if (a->listen_fd >= 0 && !a->serving)
        close(a->listen_fd);
    if (a->listen_fd >= 0) /* ours: bound by listen_unix() */
        unlink(a->cfg.socket_path);
    stubctl_free(a->stubs);
    metrics_free(a->metrics);
    pthread_cond_destroy(&a->idle);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
