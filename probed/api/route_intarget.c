/*
 * route_intarget.c - /v1/eval, /v1/allocations, /v1/torch and /v1/catch: jobs on the parallel
 * lane that
 * talk to the stub injected into a target (intarget/), and the timer that takes allocation
 * snapshots and drains the torch trace of the targets that have them on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/server.h"
#include "clock.h"
#include "intarget/allocs.h"
#include "intarget/catch.h"
#include "intarget/debug.h"
#include "intarget/eval.h"
#include "intarget/torchtrace.h"
#include "log.h"

#define EVAL_TIMEOUT_MS 10000 /* default wait for an eval's reply */
#define EVAL_TIMEOUT_MAX_MS 600000
#define TORCH_DRAIN_NS 1000000000LL /* the torch trace's buffers are drained once a second */

struct stub_job {
    struct job j;
    enum tracked_kind tracked; /* allocations and torch: the kind of tracking */
    struct eval_request eval;  /* eval.code and eval.mode are owned */
    struct allocs_request allocs;
    struct torch_request torch; /* torch.exprs is owned */
    struct torch_drained drained;
    struct catch_request catch_rq;
    struct debug_request debug; /* debug.listen and debug.input are owned */
};

static void free_stub_job(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;

    free((char *)sj->eval.code);
    free((char *)sj->eval.mode);
    free((char *)sj->torch.exprs);
    free((char *)sj->debug.listen);
    free((char *)sj->debug.input);
}

/* A job's reply from what its call returned: 200 and the body it made, or the status of
 * error @r with its message. */
static void job_result(struct job *j, int r, const struct errbuf *err)
{
    if (r < 0) {
        j->status = http_status(r, NULL);
        j->body = error_body(j->status, err->msg);
    } else {
        j->status = 200;
    }
}

/* ---- eval ---- */

static void run_eval(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;
    struct errbuf err;

    job_result(j, eval_run(job_api(j)->stubs, job_api(j)->cfg.db_path, &sj->eval, &j->body, &err),
               &err);
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
struct job *eval_post(struct api *a, const struct request *rq)
{
    json_t *jcode = json_object_get(rq->body, "code");
    json_t *jmode = json_object_get(rq->body, "mode");
    const char *mode = json_is_string(jmode) ? json_string_value(jmode) : "eval", *kind;
    struct eval_request erq = {0};
    struct stub_job *sj;

    if (!json_is_string(jcode) || !eval_fields(rq->body, &erq, &kind)) {
        reply_error(rq->req, 400,
                    "expected {\"pid\": int, \"code\": \"...\", optional "
                    "\"main_thread\": bool, \"timeout_s\": 0 < s <= %d, "
                    "\"session\": int, \"kind\": \"run\"|\"complete\"|\"interrupt\"}",
                    EVAL_TIMEOUT_MAX_MS / 1000);
        return NULL;
    }
    sj = job_alloc(a, rq, sizeof(*sj), JOB_PARALLEL, run_eval, free_stub_job);
    if (!sj)
        return NULL;
    sj->eval = erq;
    sj->eval.pid = rq->pid; /* parsed and authorised by routes.c */
    sj->eval.grant = rq->grant;
    sj->eval.uid = rq->peer->uid;
    sj->eval.code = strdup(json_string_value(jcode));
    sj->eval.mode = strdup(strcmp(kind, "run") == 0 ? mode : kind);
    if (!sj->eval.code || !sj->eval.mode) {
        reply_error(rq->req, 500, "out of memory");
        free_stub_job(&sj->j);
        free(sj);
        return NULL;
    }
    return &sj->j;
}

/* ---- allocation tracking and the torch trace ---- */

static struct tracked *tracked_of(struct api *a, pid_t pid, enum tracked_kind kind)
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

static void run_allocs(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;
    struct errbuf err;

    job_result(j,
               allocs_run(job_api(j)->stubs, job_api(j)->cfg.db_path, &sj->allocs, &j->body, &err),
               &err);
}

static void run_torch(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;
    struct errbuf err;

    job_result(j,
               torch_run(job_api(j)->stubs, job_api(j)->cfg.db_path, &sj->torch, &sj->drained,
                         &j->body, &err),
               &err);
}

/* Loop thread: what an allocation job means for the list of tracked processes. */
static void allocs_done(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;
    struct api *a = job_api(j);
    struct tracked *t = tracked_of(a, sj->allocs.pid, TRACK_ALLOCS);
    int64_t every = config_num(a->cfg.config, CFG_ALLOCATION_INTERVAL);

    if (t)
        t->busy = false;
    if (j->status == 200 && sj->allocs.action == ALLOCS_ON && !t && a->n_tracked < TRACKED_MAX) {
        t = &a->tracked[a->n_tracked++];
        *t = (struct tracked){.kind = TRACK_ALLOCS,
                              .pid = sj->allocs.pid,
                              .target_id = sj->allocs.target_id,
                              .start_time = sj->allocs.grant.start_time};
    }
    if (t && j->status == 200)
        t->next_ns = mono_ns() + (every ? every : INT64_MAX / 2);
    /* off, or the process gone or no longer tracing: stop taking snapshots */
    if (t && (sj->allocs.action == ALLOCS_OFF || (j->status != 200 && j->status != 503))) {
        if (j->status != 200 && !j->req)
            log_msg(LOG_WARN, "pid %d: allocation snapshots stop: %s", (int)t->pid,
                    json_string_value(json_object_get(j->body, "error")));
        untrack(a, t);
    }
}

/* Loop thread: what a torch trace job means for the list of traced processes. */
static void torch_done(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;
    struct api *a = job_api(j);
    struct tracked *t = tracked_of(a, sj->torch.pid, TRACK_TORCH);
    bool tracing = json_is_true(json_object_get(j->body, "tracing"));
    bool profiling = json_is_true(json_object_get(j->body, "profiling"));
    const struct torch_drained *d = &sj->drained;
    struct torch_totals add = {.steps = d->steps,
                               .step_seconds = d->step_seconds,
                               .ddp_steps = d->ddp_steps,
                               .ddp_compute_seconds = d->ddp_compute_seconds,
                               .ddp_wait_seconds = d->ddp_wait_seconds,
                               .has_memory = d->has_memory,
                               .has_reserved = d->has_reserved,
                               .allocated_mb = d->allocated_mb,
                               .reserved_mb = d->reserved_mb,
                               .comm = d->comm,
                               .comm_calls = d->comm_calls,
                               .comm_bytes = d->comm_bytes,
                               .comm_seconds = d->comm_seconds,
                               .has_comm_seq = d->has_comm_seq,
                               .comm_seq = d->comm_seq,
                               .comm_in_flight_since_ns = d->comm_in_flight_since_ns};

    if (t)
        t->busy = false;
    targets__add_torch(a->parts.reg, sj->torch.target_id, j->status == 200 ? &add : NULL,
                       (uint64_t)json_integer_value(json_object_get(j->body, "dropped")),
                       j->status == 200 && tracing);
    if (j->status == 200 && (tracing || profiling) && !t && a->n_tracked < TRACKED_MAX) {
        t = &a->tracked[a->n_tracked++];
        *t = (struct tracked){.kind = TRACK_TORCH,
                              .pid = sj->torch.pid,
                              .target_id = sj->torch.target_id,
                              .start_time = sj->torch.grant.start_time};
    }
    if (t && j->status == 200)
        t->next_ns = mono_ns() + TORCH_DRAIN_NS;
    /* off, or the process gone or no longer tracing: stop draining */
    if (t && (!(tracing || profiling) || (j->status != 200 && j->status != 503))) {
        if (j->status != 200 && !j->req)
            log_msg(LOG_WARN, "pid %d: torch trace drains stop: %s", (int)t->pid,
                    json_string_value(json_object_get(j->body, "error")));
        untrack(a, t);
    }
}

/* A job that never ran: a snapshot of a tracked process may be taken again. */
static void stub_job_dropped(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;
    struct tracked *t = tracked_of(
        job_api(j), sj->tracked == TRACK_ALLOCS ? sj->allocs.pid : sj->torch.pid, sj->tracked);

    if (t)
        t->busy = false;
}

/* A job for allocation tracking or the torch trace, of @kind. */
static struct stub_job *tracking_job(struct api *a, const struct request *rq,
                                     enum tracked_kind kind)
{
    struct stub_job *sj = job_alloc(a, rq, sizeof(*sj), JOB_PARALLEL,
                                    kind == TRACK_ALLOCS ? run_allocs : run_torch, free_stub_job);

    if (!sj)
        return NULL;
    sj->tracked = kind;
    sj->j.done = kind == TRACK_ALLOCS ? allocs_done : torch_done;
    sj->j.dropped = stub_job_dropped;
    return sj;
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

/* The id of @pid's attach while it is sampled, else 0. */
static int64_t sampling_id(struct api *a, pid_t pid)
{
    struct target_key k;

    return targets__find(a->parts.reg, pid, true, &k) == 0 ? k.id : 0;
}

/* POST /v1/allocations {"pid", "action": "on"|"snapshot"|"off", "top": 1..1000} */
struct job *allocs_post(struct api *a, const struct request *rq)
{
    static const char *const actions[] = {"on", "snapshot", "off"};
    json_t *jtop = json_object_get(rq->body, "top");
    int k = action_of(json_object_get(rq->body, "action"), actions, 3);
    int top = !jtop ? 20 : json_is_integer(jtop) ? (int)json_integer_value(jtop) : -1;
    pid_t pid = rq->pid; /* parsed and authorised by routes.c */
    struct tracked *t = tracked_of(a, pid, TRACK_ALLOCS);
    struct stub_job *sj;
    int64_t target_id;

    if (!pid || k < 0 || top < 1 || top > 1000) {
        reply_error(rq->req, 400,
                    "expected {\"pid\": int, \"action\": \"on\"|\"snapshot\"|\"off\","
                    " optional \"top\": 1..1000}");
        return NULL;
    }
    target_id = sampling_id(a, pid);
    if (!target_id) {
        reply_error(rq->req, 404,
                    "pid %d is not attached: allocations are recorded with its attach"
                    " (probectl attach %d)",
                    (int)pid, (int)pid);
        return NULL;
    }
    if (t && t->busy) {
        reply_error(rq->req, 409, "pid %d: a snapshot is being taken; try again", (int)pid);
        return NULL;
    }
    if (k == ALLOCS_ON && !t && a->n_tracked == TRACKED_MAX) {
        reply_error(rq->req, 503, "allocation tracking is on in %d processes already", TRACKED_MAX);
        return NULL;
    }
    sj = tracking_job(a, rq, TRACK_ALLOCS);
    if (!sj)
        return NULL;
    sj->allocs = (struct allocs_request){.pid = pid,
                                         .grant = rq->grant,
                                         .uid = rq->peer->uid,
                                         .target_id = target_id,
                                         .action = k,
                                         .top = top};
    if (t)
        t->busy = true;
    return &sj->j;
}

/* POST /v1/torch {"pid", "action": "on"|"drain"|"off"|"profile"|"memory", "every": 1..,
 * "exprs": "n@f,...", "comm": bool, "modules": bool, "backward": "auto"|"all"|"none",
 * "device_time": bool,
 * "steps": 1..1000, "duration_ms": 1..600000, "cancel": bool, "record_ms": 1..30000} */
struct job *torch_post(struct api *a, const struct request *rq)
{
    static const char *const actions[] = {"on", "drain", "off", "profile", "memory"};
    json_t *jevery = json_object_get(rq->body, "every"),
           *jexprs = json_object_get(rq->body, "exprs");
    json_t *jcomm = json_object_get(rq->body, "comm"),
           *jmodules = json_object_get(rq->body, "modules");
    int k = action_of(json_object_get(rq->body, "action"), actions, 5);
    json_t *jrecord = json_object_get(rq->body, "record_ms");
    int64_t record = !jrecord ? 5000 : json_is_integer(jrecord) ? json_integer_value(jrecord) : -1;
    json_t *jsteps = json_object_get(rq->body, "steps"),
           *jduration = json_object_get(rq->body, "duration_ms"),
           *jcancel = json_object_get(rq->body, "cancel");
    int64_t steps = jsteps ? json_is_integer(jsteps) ? json_integer_value(jsteps) : -1 : 0;
    int64_t duration = !jduration                   ? 0
                       : json_is_integer(jduration) ? json_integer_value(jduration)
                                                    : -1;
    json_t *jbackward = json_object_get(rq->body, "backward"),
           *jdevice = json_object_get(rq->body, "device_time");
    int backward = jbackward ? action_of(jbackward, torch_backward_names, 3) : TORCH_BACKWARD_AUTO;
    int64_t every = !jevery ? 1 : json_is_integer(jevery) ? json_integer_value(jevery) : -1;
    pid_t pid = rq->pid; /* parsed and authorised by routes.c */
    struct tracked *t = tracked_of(a, pid, TRACK_TORCH);
    struct errbuf why;
    struct stub_job *sj;
    int64_t target_id;

    if (!pid || k < 0 || every < 1 || every > 1000000 || (jexprs && !json_is_string(jexprs)) ||
        (jcomm && !json_is_boolean(jcomm)) || (jmodules && !json_is_boolean(jmodules)) ||
        (json_is_false(jmodules) && !json_is_true(jcomm)) || backward < 0 || steps < 0 ||
        steps > 1000 || duration < 0 || duration > 600000 ||
        (jcancel && !json_is_boolean(jcancel)) || (jdevice && !json_is_boolean(jdevice)) ||
        (k == TORCH_PROFILE && !json_is_true(jcancel) && !steps == !duration) || record < 1 ||
        record > 30000) {
        reply_error(rq->req, 400,
                    "expected {\"pid\": int, \"action\": \"on\"|\"drain\"|\"off\","
                    " optional \"every\": 1..1000000, \"exprs\": \"name@function,...\","
                    " \"comm\": bool, \"modules\": bool (false only with comm),"
                    " \"backward\": \"auto\"|\"all\"|\"none\", \"device_time\": bool; for"
                    " \"profile\": \"steps\":"
                    " 1..1000 or \"duration_ms\": 1..600000, or \"cancel\": true; for"
                    " \"memory\": \"record_ms\": 1..30000}");
        return NULL;
    }
    if (torch_parse_exprs(jexprs ? json_string_value(jexprs) : "", &why) < 0) {
        reply_error(rq->req, 400, "%s", why.msg);
        return NULL;
    }
    target_id = sampling_id(a, pid);
    if (!target_id) {
        reply_error(rq->req, 404,
                    "pid %d is not attached: the torch trace is recorded with its attach"
                    " (probectl attach %d)",
                    (int)pid, (int)pid);
        return NULL;
    }
    if (t && t->busy) {
        reply_error(rq->req, 409, "pid %d: the torch trace is being drained; try again", (int)pid);
        return NULL;
    }
    if ((k == TORCH_ON || k == TORCH_PROFILE) && !t && a->n_tracked == TRACKED_MAX) {
        reply_error(rq->req, 503, "tracking is on in %d processes already", TRACKED_MAX);
        return NULL;
    }
    sj = tracking_job(a, rq, TRACK_TORCH);
    if (!sj)
        return NULL;
    sj->torch = (struct torch_request){.pid = pid,
                                       .grant = rq->grant,
                                       .uid = rq->peer->uid,
                                       .target_id = target_id,
                                       .action = k,
                                       .every = (int)every,
                                       .comm = json_is_true(jcomm),
                                       .no_modules = json_is_false(jmodules),
                                       .backward = backward,
                                       .device_time = json_is_true(jdevice),
                                       .steps = (int)steps,
                                       .duration_ms = (int)duration,
                                       .cancel = json_is_true(jcancel),
                                       .record_ms = (int)record,
                                       .exprs = strdup(jexprs ? json_string_value(jexprs) : "")};
    if (!sj->torch.exprs) {
        reply_error(rq->req, 500, "out of memory");
        free(sj);
        return NULL;
    }
    if (t)
        t->busy = true;
    return &sj->j;
}

/* ---- catch ---- */

static void run_catch(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;
    struct api *a = job_api(j);
    struct errbuf err;
    int r = catch_run(a->stubs, a->catcher, a->cfg.db_path, &sj->catch_rq, &j->body, &err);

    if (r < 0 && sj->catch_rq.resume)
        log_msg(LOG_WARN, "pid %d: the catch was not resumed: %s", (int)sj->catch_rq.pid, err.msg);
    else if (r == 0 && sj->catch_rq.resume)
        log_msg(LOG_INFO, "pid %d: catch resumed", (int)sj->catch_rq.pid);
    job_result(j, r, &err);
}

/* POST /v1/catch {"pid", "action": "on"|"off", "signals": bool} */
struct job *catch_post(struct api *a, const struct request *rq)
{
    static const char *const actions[] = {"on", "off"};
    json_t *jsignals = json_object_get(rq->body, "signals");
    json_t *jpost = json_object_get(rq->body, "postmortem");
    int k = action_of(json_object_get(rq->body, "action"), actions, 2);
    pid_t pid = rq->pid; /* parsed and authorised by routes.c */
    struct stub_job *sj;
    int64_t target_id;

    if (!pid || k < 0 || (jsignals && !json_is_boolean(jsignals)) ||
        (jpost && !json_is_boolean(jpost))) {
        reply_error(rq->req, 400,
                    "expected {\"pid\": int, \"action\": \"on\"|\"off\", optional"
                    " \"signals\": bool, \"postmortem\": bool}");
        return NULL;
    }
    target_id = sampling_id(a, pid);
    if (!target_id) {
        reply_error(rq->req, 404,
                    "pid %d is not attached: what catch sees is recorded with its attach"
                    " (probectl attach %d)",
                    (int)pid, (int)pid);
        return NULL;
    }
    sj = job_alloc(a, rq, sizeof(*sj), JOB_PARALLEL, run_catch, free_stub_job);
    if (!sj)
        return NULL;
    sj->catch_rq = (struct catch_request){.pid = pid,
                                          .grant = rq->grant,
                                          .uid = rq->peer->uid,
                                          .target_id = target_id,
                                          .on = k == 0,
                                          .signals = !json_is_false(jsignals),
                                          .postmortem = json_is_true(jpost)};
    return &sj->j;
}

/* ---- pause, debug ---- */

static void run_debug(struct job *j)
{
    struct stub_job *sj = (struct stub_job *)j;
    struct errbuf err;

    job_result(j, debug_run(job_api(j)->stubs, job_api(j)->cfg.db_path, &sj->debug, &j->body, &err),
               &err);
}

/* POST /v1/debug {"pid", "action": "pause"|"io"|"interrupt"|"detach"|"keepalive", "thread": tid,
 * "listen": "host:port", "dap": bool, "input": "line", "wait_ms": 0..10000} */
struct job *debug_post(struct api *a, const struct request *rq)
{
    static const char *const actions[] = {"pause", "io", "interrupt", "detach", "keepalive"};
    json_t *jthread = json_object_get(rq->body, "thread"),
           *jlisten = json_object_get(rq->body, "listen");
    json_t *jdap = json_object_get(rq->body, "dap"), *jinput = json_object_get(rq->body, "input");
    json_t *jwait = json_object_get(rq->body, "wait_ms");
    json_t *jinsecure = json_object_get(rq->body, "insecure_listen");
    int k = action_of(json_object_get(rq->body, "action"), actions, 5);
    pid_t pid = rq->pid; /* parsed and authorised by routes.c */
    json_int_t wait = jwait ? json_integer_value(jwait) : 5000;
    struct errbuf why;
    struct stub_job *sj;

    if (!pid || k < 0 ||
        (jthread && (!json_is_integer(jthread) || json_integer_value(jthread) < 0 ||
                     json_integer_value(jthread) > 0x7fffffff)) ||
        (jlisten && !json_is_string(jlisten)) || (jdap && !json_is_boolean(jdap)) ||
        (jinput && !json_is_string(jinput) && !json_is_null(jinput)) ||
        (jwait && !json_is_integer(jwait)) || wait < 0 || wait > DEBUG_WAIT_MAX_MS ||
        (json_is_string(jinput) &&
         (strlen(json_string_value(jinput)) > 65536 || strchr(json_string_value(jinput), '\n')))) {
        reply_error(rq->req, 400,
                    "expected {\"pid\": int, \"action\": \"pause\"|\"io\"|\"interrupt\"|"
                    "\"detach\"|\"keepalive\", optional \"thread\": tid, \"listen\": "
                    "\"host:port\", \"dap\":"
                    " bool, \"input\": one line (no newline, <= 64 KiB), \"wait_ms\": 0..%d}",
                    DEBUG_WAIT_MAX_MS);
        return NULL;
    }
    if (jinsecure && !json_is_boolean(jinsecure)) {
        reply_error(rq->req, 400, "\"insecure_listen\" must be true or false");
        return NULL;
    }
    if (jlisten &&
        debug_parse_listen(json_string_value(jlisten), json_is_true(jinsecure), &why) < 0) {
        reply_error(rq->req, 400, "%s", why.msg);
        return NULL;
    }
    sj = job_alloc(a, rq, sizeof(*sj), JOB_PARALLEL, run_debug, free_stub_job);
    if (!sj)
        return NULL;
    sj->debug = (struct debug_request){
        .pid = pid,
        .grant = rq->grant,
        .uid = rq->peer->uid,
        .action = (enum debug_action)k,
        .thread = (pid_t)json_integer_value(jthread),
        .dap = json_is_true(jdap),
        .wait_ms = (int)wait,
        .listen = jlisten ? strdup(json_string_value(jlisten)) : NULL,
        .input = json_is_string(jinput) ? strdup(json_string_value(jinput)) : NULL};
    if ((jlisten && !sj->debug.listen) || (json_is_string(jinput) && !sj->debug.input)) {
        reply_error(rq->req, 500, "out of memory");
        free_stub_job(&sj->j);
        free(sj);
        return NULL;
    }
    return &sj->j;
}

/* At start: targets resumed with allocation tracking or the torch trace on go on. */
void tracked_resume(struct api *a)
{
    struct target_info *infos = calloc(TARGETS_MAX, sizeof(*infos));
    size_t n =
        infos ? targets__copy(a->parts.reg,
                              &(struct targets_filter){.all_users = true, .sampling_only = true},
                              infos, TARGETS_MAX)
              : 0;

    for (size_t i = 0; i < n && i < TARGETS_MAX; i++) {
        const struct target_info *t = &infos[i];

        if (t->allocation_tracking && a->n_tracked < TRACKED_MAX) {
            a->tracked[a->n_tracked++] = (struct tracked){.kind = TRACK_ALLOCS,
                                                          .pid = t->pid,
                                                          .target_id = t->id,
                                                          .start_time = t->start_time,
                                                          .next_ns = mono_ns() + 1000000000LL};
            log_msg(LOG_INFO, "pid %d: allocation tracking resumed", (int)t->pid);
        }
        if (t->catching) {
            struct request daemon = {.peer = &(struct peer){.root = true}};
            struct stub_job *sj =
                job_alloc(a, &daemon, sizeof(*sj), JOB_PARALLEL, run_catch, free_stub_job);
            if (sj) {
                sj->catch_rq = (struct catch_request){
                    .pid = t->pid,
                    .grant = {.pid = t->pid, .start_time = t->start_time, .root = true},
                    .target_id = t->id,
                    .on = true,
                    .resume = true};
                jobs__start(a->jobs, &sj->j);
            }
        }
        if (t->torch_tracing && a->n_tracked < TRACKED_MAX) {
            a->tracked[a->n_tracked++] = (struct tracked){.kind = TRACK_TORCH,
                                                          .pid = t->pid,
                                                          .target_id = t->id,
                                                          .start_time = t->start_time,
                                                          .next_ns = mono_ns()};
            log_msg(LOG_INFO, "pid %d: torch trace drains resumed", (int)t->pid);
        }
    }
    free(infos);
}

/* A job the daemon runs on its own for @t: a snapshot or a drain when due, or turning
 * tracking off when the process is no longer sampled; NULL when none is due. */
static struct stub_job *due_job(struct api *a, const struct tracked *t, int64_t now)
{
    /* detached or exited: off in the process (if it still runs), then forget it */
    bool ended = sampling_id(a, t->pid) != t->target_id;
    struct request daemon = {.peer = &(struct peer){.root = true}};
    struct stub_job *sj;

    if (!ended && now < t->next_ns)
        return NULL;
    if (!ended && t->kind == TRACK_ALLOCS && !config_num(a->cfg.config, CFG_ALLOCATION_INTERVAL))
        return NULL;
    sj = tracking_job(a, &daemon, t->kind);
    if (!sj)
        return NULL;
    struct proc_grant daemon_grant = {.pid = t->pid, .start_time = t->start_time, .root = true};

    if (t->kind == TRACK_ALLOCS)
        sj->allocs = (struct allocs_request){.pid = t->pid,
                                             .grant = daemon_grant,
                                             .uid = 0, /* the daemon itself */
                                             .target_id = t->target_id,
                                             .action = ended ? ALLOCS_OFF : ALLOCS_SNAPSHOT,
                                             .top = 20};
    else
        sj->torch = (struct torch_request){.pid = t->pid,
                                           .grant = daemon_grant,
                                           .uid = 0,
                                           .target_id = t->target_id,
                                           .action = ended ? TORCH_OFF : TORCH_DRAIN};
    return sj;
}

/* Twice a second: the snapshots and drains that are due (allocs_done and torch_done drop a
 * process whose tracking ended). */
void on_tracked_timer(evutil_socket_t fd, short what, void *arg)
{
    struct api *a = arg;
    int64_t now = mono_ns();

    (void)fd, (void)what;
    for (size_t i = 0; i < a->n_tracked; i++) {
        struct tracked *t = &a->tracked[i];
        struct stub_job *sj = t->busy ? NULL : due_job(a, t, now);

        if (!sj)
            continue;
        t->busy = true;
        jobs__start(a->jobs, &sj->j);
    }
}
