/*
 * route_targets.c - /v1/targets: list (loop thread), attach and detach (jobs on the serial
 * lane, jobs.h), and the JSON of a target (docs/api.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/server.h"
#include "clock.h"
#include "common/pattern.h"
#include "common/procfs.h"
#include "common/units.h"
#include "log.h"
#include "sample/findproc.h"

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
static json_t *native_json(const struct target_info *t)
{
    const struct native_stats *n = &t->native_stats;
    json_t *j = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "backend", t->native_backend,
        "samples", (json_int_t)n->samples, "lost", (json_int_t)n->lost, "merged",
        (json_int_t)n->merged, "mismatched", (json_int_t)n->mismatched, "native_only",
        (json_int_t)n->native_only, "superseded", (json_int_t)n->superseded, "maps_reread",
        (json_int_t)n->maps_reread, "unwind_us",
        n->samples ? (double)n->unwind_ns / 1e3 / (double)n->samples : 0.0, "lag_ms",
        n->merged ? (double)n->lag_ns / 1e6 / (double)n->merged : 0.0, "name_cache_hit_rate",
        n->name_lookups ? (double)n->name_hits / (double)n->name_lookups : 0.0);

    json_object_update_new(j, json_pack("{s:I, s:I, s:I}", "waiting", (json_int_t)n->waiting,
                                        "waiting_reads", (json_int_t)n->waiting_reads,
                                        "waiting_unread", (json_int_t)n->waiting_unread));
    if (t->native_ebpf_error[0]) /* why perf: the fallback from the eBPF sampler */
        json_object_set_new(j, "ebpf_error", json_string(t->native_ebpf_error));
    else if (strcmp(t->native_backend, "ebpf") == 0)
        json_object_update_new(j, json_pack("{s:I, s:I, s:I}", "same_instant",
                                            (json_int_t)n->same_instant, "py_uncopied",
                                            (json_int_t)n->py_uncopied, "py_undecoded",
                                            (json_int_t)n->py_undecoded));
    if (n->bpf_runs) /* measured only while kernel.bpf_stats_enabled = 1 */
        json_object_set_new(j, "bpf_run_us",
                            json_real((double)n->bpf_run_ns / 1e3 / (double)n->bpf_runs));
    return j;
}

static json_t *target_json(const struct target_info *t)
{
    json_t *j = json_pack(
        "{s:I, s:i, s:i, s:I, s:s, s:s, s:i, s:s, s:s, s:I, s:{s:I, s:I, s:I, s:I, s:I, s:I}}",
        "id", (json_int_t)t->id, "pid", (int)t->pid, "uid", (int)t->uid, "start_time",
        (json_int_t)t->start_time, "cmdline", t->cmdline, "python_version", t->py_version,
        "rate_hz", (int)t->rate_hz, "state", target_state_name(t->state), "mode", t->mode,
        "attached_ns", (json_int_t)t->attached_ns, "stats", "ticks", (json_int_t)t->stats.ticks,
        "samples", (json_int_t)t->stats.samples, "torn", (json_int_t)t->stats.torn, "errors",
        (json_int_t)t->stats.errors, "late", (json_int_t)t->stats.late, "dropped",
        (json_int_t)t->stats.dropped);

    json_object_set_new(json_object_get(j, "stats"), "threads_cut",
                        json_integer((json_int_t)t->stats.threads_cut));
    json_object_set_new(json_object_get(j, "stats"), "own_skipped",
                        json_integer((json_int_t)t->stats.own_skipped));
    json_object_set_new(json_object_get(j, "stats"), "unchanged",
                        json_integer((json_int_t)t->stats.unchanged));
    json_object_set_new(json_object_get(j, "stats"), "lost",
                        json_integer((json_int_t)t->stats.lost));
    if (t->task_stats.reads) /* asyncio's running tasks were read: coroutines ran */
        json_object_set_new(j, "tasks",
                            json_pack("{s:I, s:I, s:I, s:I}", "tagged",
                                      (json_int_t)t->task_stats.tagged, "unproven",
                                      (json_int_t)t->task_stats.unproven, "reads",
                                      (json_int_t)t->task_stats.reads, "reads_failed",
                                      (json_int_t)t->task_stats.reads_failed));
    if (t->gap.samples)
        json_object_set_new(j, "gap",
                            json_pack("{s:I, s:I, s:I, s:s}", "from_ns", (json_int_t)t->gap.from_ns,
                                      "to_ns", (json_int_t)t->gap.to_ns, "samples",
                                      (json_int_t)t->gap.samples, "why", t->gap.why));
    json_object_set_new(j, "threads_room", json_integer((json_int_t)t->threads_room));
    if (t->rank >= 0)
        json_object_set_new(j, "rank", json_integer(t->rank));
    if (t->local_rank >= 0)
        json_object_set_new(j, "local_rank", json_integer(t->local_rank));
    if (t->world_size >= 0)
        json_object_set_new(j, "world_size", json_integer(t->world_size));
    if (t->end_reason[0])
        json_object_set_new(j, "end_reason", json_string(t->end_reason));
    if (t->ended_ns)
        json_object_set_new(j, "ended_ns", json_integer((json_int_t)t->ended_ns));
    if (t->has_native)
        json_object_set_new(j, "native", native_json(t));
    if (t->native_wanted && t->native_error[0])
        json_object_set_new(j, "native_error", json_string(t->native_error));
    if (t->nccl_wanted)
        json_object_set_new(j, "nccl", json_true());
    if (t->torch.on) /* the torch trace's totals (torchtrace.h) */
        json_object_set_new(j, "torch", torch_json(&t->torch));
    if (t->gpu_bytes >= 0) /* on every GPU at the meter's latest reading (NVML) */
        json_object_set_new(j, "gpu_memory", json_integer((json_int_t)t->gpu_bytes));
    if (t->usage_ns) /* the meter's latest reading (meter.h) */
        json_object_set_new(
            j, "usage",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:I}", "ts_ns", (json_int_t)t->usage_ns,
                      "rss", (json_int_t)t->usage.rss, "pss", (json_int_t)t->usage.pss, "uss",
                      (json_int_t)t->usage.uss, "swap", (json_int_t)t->usage.swap, "cpu_seconds",
                      (double)t->usage.cpu_ns / 1e9, "threads", (json_int_t)t->usage.threads));
    return j;
}

/* The targets @f selects, as a JSON array (NULL: out of memory). */
static json_t *targets_json(struct targets *reg, const struct targets_filter *f)
{
    size_t cap = 16, n;
    struct target_info *infos = NULL;
    json_t *arr;

    for (;;) { /* the count may grow between two copies */
        struct target_info *more = realloc(infos, cap * sizeof(*infos));
        if (!more) {
            free(infos);
            return NULL;
        }
        infos = more;
        n = targets__copy(reg, f, infos, cap);
        if (n <= cap)
            break;
        cap = n + 16;
    }
    arr = json_array();
    for (size_t i = 0; arr && i < n; i++)
        json_array_append_new(arr, target_json(&infos[i]));
    free(infos);
    return arr;
}

/* The processes followed for --children that are not Python, those @p sees. */
static json_t *watches_json(struct api *a, const struct peer *p)
{
    struct targets_filter f = peer_filter(p);
    struct follow_watch w[FOLLOW_WATCHES_MAX];
    size_t n = follower__watches(a->parts.follower, &f, w, FOLLOW_WATCHES_MAX);
    json_t *arr = json_array();

    for (size_t i = 0; i < n && i < FOLLOW_WATCHES_MAX; i++)
        json_array_append_new(arr, json_pack("{s:i, s:i, s:s, s:i}", "pid", (int)w[i].pid, "uid",
                                             (int)w[i].uid, "cmdline", w[i].cmdline, "rate_hz",
                                             (int)w[i].opts.rate_hz));
    return arr;
}

int targets_list(struct api *a, const struct request *rq)
{
    struct targets_filter f = peer_filter(rq->peer);
    json_t *arr = targets_json(a->parts.reg, &f);
    struct pyf_symcache_stats sc;

    if (!arr)
        return reply_error(rq->req, 500, "out of memory");
    if (!rq->peer->root) /* the shared tables tell of every user's processes: root's only */
        return reply_json(
            rq->req, 200,
            json_pack("{s:o, s:o}", "targets", arr, "following", watches_json(a, rq->peer)));
    /* the native function tables the targets share (one per library, by build-id) */
    pyf_symcache__stats(a->parts.reg->symbols, &sc);
    return reply_json(
        rq->req, 200,
        json_pack("{s:o, s:o, s:{s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}}}", "targets", arr,
                  "following", watches_json(a, rq->peer), "native_symbols", "tables",
                  (json_int_t)sc.tables, "builds", (json_int_t)sc.builds, "hits",
                  (json_int_t)sc.hits, "bytes", (json_int_t)sc.bytes, "debuginfod", "requested",
                  (json_int_t)sc.debuginfod_requested, "fetched", (json_int_t)sc.debuginfod_fetched,
                  "failed", (json_int_t)sc.debuginfod_failed, "dropped",
                  (json_int_t)sc.debuginfod_dropped));
}

int targets_get(struct api *a, const struct request *rq)
{
    struct targets_filter f = peer_filter(rq->peer);
    json_t *arr;

    f.pid = rq->pid;
    arr = targets_json(a->parts.reg, &f);
    if (!arr)
        return reply_error(rq->req, 500, "out of memory");
    if (json_array_size(arr) == 0) {
        json_decref(arr);
        return reply_error(rq->req, 404, "pid %d is not attached", (int)rq->pid);
    }
    reply_json(rq->req, 200, json_incref(json_array_get(arr, 0)));
    json_decref(arr);
    return 200;
}

struct attach_job {
    struct job j;
    pid_t pid;
    struct attach_opts opts;
    bool children_of_any; /* --children: a process that is not Python is followed */
    bool switch_mode;     /* "switch": one attached already takes this request's modes: */
    bool switch_native;   /* its native mode ("native" given, or neither it nor "nccl") */
    bool switch_nccl;     /* whether its NCCL calls are recorded ("nccl" given) */
    struct target_info info;
};

static void fail(struct job *j, int status, const char *msg)
{
    j->status = status;
    j->body = error_body(status, msg);
}

/* attach --children of a process that is not Python: followed, not sampled (follow.h). @why:
 * why it is not sampled. */
static void watch(struct attach_job *aj, const char *why)
{
    struct follow_watch w;
    struct pyf_err e = {0};
    int r = follower__watch(job_api(&aj->j)->parts.follower, aj->pid, &aj->opts, &w, &e);

    if (r < 0) {
        fail(&aj->j, r == -ESRCH ? 404 : 503, e.msg);
        return;
    }
    if (r == 0)
        log_msg(LOG_INFO, "following pid %d (not Python) for its Python descendants, for uid %u",
                (int)aj->pid, (unsigned)aj->j.scope.uid);
    aj->j.status = 200;
    aj->j.body = json_pack("{s:i, s:b, s:b, s:s, s:s}", "pid", (int)aj->pid, "following", true,
                           "python", false, "cmdline", w.cmdline, "message", why);
}

/* attach --native (or --python), --nccl or --no-nccl of a process attached already: its mode
 * changes in place, its timeline goes on (targets__set_native, targets__set_nccl). */
static void switch_mode(struct attach_job *aj)
{
    struct targets *reg = job_api(&aj->j)->parts.reg;
    struct pyf_err e = {0};
    int r = aj->switch_native ? targets__set_native(reg, aj->pid, &aj->opts, &aj->info, &e) : 1;
    int r_nccl = 1;
    char msg[256];

    if (r >= 0 && aj->switch_nccl &&
        (r_nccl = targets__set_nccl(reg, aj->pid, aj->opts.nccl, &aj->info)) == -ENOENT) {
        r = -ENOENT;
        snprintf(e.msg, sizeof(e.msg), "pid %d is not attached", (int)aj->pid);
    }
    if (r == 1 && r_nccl == 1) {
        snprintf(msg, sizeof(msg), "pid %d is attached already, and its stacks are %s%s already",
                 (int)aj->pid, aj->info.mode,
                 !aj->switch_nccl       ? ""
                 : aj->info.nccl_wanted ? ", its NCCL calls recorded,"
                                        : ", its NCCL calls not recorded,");
        fail(&aj->j, 409, msg);
        return;
    }
    if (r < 0) {
        fail(&aj->j, r == -ENOENT ? 404 : 400, e.msg);
        return;
    }
    if (r_nccl == 0) /* its probes now, where memory_interval 0 lets the meter sleep */
        meter__wake(job_api(&aj->j)->parts.meter);
    log_msg(LOG_INFO, "pid %d: now %s%s, for uid %u", (int)aj->pid, aj->info.mode,
            aj->info.nccl_wanted ? ", its NCCL calls" : "", (unsigned)aj->j.scope.uid);
    aj->j.status = 200;
    aj->j.body = target_json(&aj->info);
    json_object_set_new(aj->j.body, "switched", json_true());
}

static void run_attach(struct job *j)
{
    struct attach_job *aj = (struct attach_job *)j;
    struct pyf_err e = {0};
    int r = procfs_grant_check(&j->grant, e.msg, sizeof(e.msg));

    if (r < 0) { /* no longer the process the request named (the serial lane may be long) */
        fail(j, http_status(r, NULL), e.msg);
        return;
    }
    r = targets__attach(job_api(&aj->j)->parts.reg, aj->pid, &aj->opts, &aj->info, &e);
    if (r == 0 && procfs_grant_check(&j->grant, e.msg, sizeof(e.msg)) < 0) {
        struct target_info gone;
        targets__detach(job_api(j)->parts.reg, aj->pid, &(struct targets_filter){.all_users = true},
                        &gone);
        fail(j, 404, e.msg);
        return;
    }

    if (r == -EEXIST && aj->switch_mode) {
        switch_mode(aj);
        return;
    }
    if (r < 0 && aj->children_of_any && (e.kind == PYF_NOT_PYTHON || e.kind == PYF_UNSUPPORTED)) {
        watch(aj, e.msg);
        return;
    }
    if (r < 0) {
        /* the registry's own refusals; else what opening the process said */
        fail(j, e.sys == EEXIST ? 409 : e.sys == ENOSPC ? 503 : http_status(0, &e), e.msg);
        return;
    }
    log_msg(LOG_INFO, "attached pid %d (Python %s) at %d Hz, %s%s, for uid %u", (int)aj->pid,
            aj->info.py_version, (int)aj->info.rate_hz, aj->info.mode,
            aj->opts.nccl ? ", its NCCL calls" : "", (unsigned)j->scope.uid);
    if (aj->opts.nccl) /* its probes now, where memory_interval 0 lets the meter sleep */
        meter__wake(job_api(j)->parts.meter);
    j->status = 200;
    j->body = target_json(&aj->info);
}

/* Attach every process of a job: those of the caller a pattern or a job name picks. */
struct match_job {
    struct job j;
    struct attach_opts opts;
    regex_t re;
    bool wants_re, has_re; /* a pattern was given; it is compiled (the job's, on its worker) */
    char job_name[128];
    char pattern[PATTERN_BYTES_MAX];
    pid_t asker;
};

static void free_match(struct job *j)
{
    struct match_job *mj = (struct match_job *)j;

    if (mj->has_re)
        regfree(&mj->re);
}

/* The request's "match" (a POSIX extended regex over the command line) or "job" into @mj;
 * false after replying 400. The pattern is measured here (pattern.h: linear in its length),
 * and compiled by the job, off the loop (match_compile). */
static bool parse_match(const struct request *rq, const char *match, const char *jobname,
                        struct match_job *mj)
{
    char why[256];

    if ((!match && !jobname) || (match && jobname) ||
        (jobname && (!*jobname || strlen(jobname) >= sizeof(mj->job_name)))) {
        reply_error(rq->req, 400,
                    "give one of \"match\" (a pattern of the command line, under %d bytes) or"
                    " \"job\" (a Slurm job id or name, or a torchrun run id)",
                    PATTERN_BYTES_MAX);
        return false;
    }
    if (jobname) {
        snprintf(mj->job_name, sizeof(mj->job_name), "%s", jobname);
        return true;
    }
    if (pattern_check(match, why, sizeof(why)) < 0) {
        reply_error(rq->req, 400, "\"match\": %s", why);
        return false;
    }
    snprintf(mj->pattern, sizeof(mj->pattern), "%s", match);
    mj->wants_re = true;
    return true;
}

/* On the worker: the pattern compiled (bounded by pattern_check); false after failing @j. */
static bool match_compile(struct match_job *mj)
{
    char why[256], msg[300];

    if (!mj->wants_re)
        return true;
    if (pattern_compile(&mj->re, mj->pattern, why, sizeof(why)) < 0) {
        snprintf(msg, sizeof(msg), "\"match\": %s", why);
        fail(&mj->j, 400, msg);
        return false;
    }
    mj->has_re = true;
    return true;
}

#define MATCH_SCAN_MS 2000 /* the serial lane is everyone's: a scan of /proc stops there */

static size_t find_matches(struct match_job *mj, pid_t *pids, size_t cap, bool *cut)
{
    struct proc_query q = {.cmdline = mj->has_re ? &mj->re : NULL,
                           .job = mj->has_re ? NULL : mj->job_name,
                           .all_users = mj->j.scope.root,
                           .uid = mj->j.scope.uid,
                           .asker = mj->asker,
                           .until_ns = mono_ns() + MATCH_SCAN_MS * 1000000LL};
    size_t n = findproc(&q, pids, cap);

    *cut = q.cut;
    return n;
}

static void run_match_attach(struct job *j)
{
    struct match_job *mj = (struct match_job *)j;
    static _Thread_local pid_t pids[FINDPROC_MAX];
    bool cut = false;
    size_t n;
    json_t *attached = json_array(), *already = json_array(), *skipped = json_array();
    json_t *following = json_array();

    if (!match_compile(mj)) {
        json_decref(attached), json_decref(already), json_decref(skipped), json_decref(following);
        return;
    }
    n = find_matches(mj, pids, FINDPROC_MAX, &cut);
    for (size_t i = 0; i < n && i < FINDPROC_MAX; i++) {
        struct target_info info;
        struct follow_watch w;
        struct pyf_err e = {0};
        int r = targets__attach(job_api(j)->parts.reg, pids[i], &mj->opts, &info, &e);

        /* a launcher that is not Python (a shell script, srun): followed for the Python
         * processes it starts, as attach --children does */
        if (r < 0 && (e.kind == PYF_NOT_PYTHON || e.kind == PYF_UNSUPPORTED) &&
            follower__watch(job_api(j)->parts.follower, pids[i], &mj->opts, &w, &e) >= 0) {
            json_array_append_new(
                following, json_pack("{s:i, s:s}", "pid", (int)pids[i], "cmdline", w.cmdline));
            continue;
        }
        if (r == 0) {
            log_msg(LOG_INFO, "attached pid %d (Python %s, matched '%s'), for uid %u", (int)pids[i],
                    info.py_version, mj->has_re ? mj->pattern : mj->job_name,
                    (unsigned)j->scope.uid);
            json_array_append_new(attached, target_json(&info));
        } else if (e.sys == EEXIST) {
            json_array_append_new(already, json_integer(pids[i]));
        } else {
            char cmd[128];
            procfs_cmdline(pids[i], cmd, sizeof(cmd));
            json_array_append_new(skipped, json_pack("{s:i, s:s, s:s}", "pid", (int)pids[i],
                                                     "cmdline", cmd, "why", e.msg));
        }
    }
    j->status = 200;
    j->body = json_pack("{s:o, s:o, s:o, s:o, s:I, s:b}", "attached", attached, "already", already,
                        "following", following, "skipped", skipped, "matched", (json_int_t)n,
                        "truncated", n > FINDPROC_MAX || cut);
}

/* POST /v1/targets {"match" | "job", "rate", "duration", "native", "nccl"}: every process of the
 * caller's that the pattern or the job picks, attached --children. */
static struct job *targets_attach_matching(struct api *a, const struct request *rq,
                                           const struct attach_opts *o)
{
    struct match_job *mj = job_alloc(a, rq, sizeof(*mj), JOB_SERIAL, run_match_attach, free_match);

    if (!mj)
        return NULL;
    mj->opts = *o;
    mj->opts.follow_children = true; /* ranks, and their DataLoader workers as they come */
    mj->asker = rq->peer->pid;
    if (!parse_match(rq, json_string_value(json_object_get(rq->body, "match")),
                     json_string_value(json_object_get(rq->body, "job")), mj)) {
        free_match(&mj->j);
        free(mj);
        return NULL;
    }
    return &mj->j;
}

/* POST /v1/targets {"pid", "rate", "duration", "children", "native": true|false|"perf",
 * "nccl", "switch"}, or {"match": PATTERN} / {"job": NAME} instead of "pid". "switch": true changes
 * the native mode of a pid attached already, in place (its rate and timeline stay). */
struct job *targets_attach(struct api *a, const struct request *rq)
{
    json_t *jpid = json_object_get(rq->body, "pid"), *jrate = json_object_get(rq->body, "rate");
    json_t *jdur = json_object_get(rq->body, "duration");
    /* "native": true (the eBPF sampler, else perf), "perf" (perf alone), false */
    json_t *jnative = json_object_get(rq->body, "native");
    /* "nccl": true, the process's NCCL calls recorded whatever nccl_calls says (gpu/nccl.h) */
    json_t *jnccl = json_object_get(rq->body, "nccl");
    bool perf_only = json_is_string(jnative) && strcmp(json_string_value(jnative), "perf") == 0;
    bool native = json_is_true(jnative) || perf_only;
    bool native_ok = !jnative || json_is_boolean(jnative) || perf_only;
    pid_t pid = rq->pid; /* parsed and authorised by routes.c */
    json_int_t rate =
        jrate ? json_integer_value(jrate) : config_num(a->cfg.config, CFG_SAMPLE_RATE);
    bool pid_ok = pid > 0;
    bool rate_ok = (!jrate || json_is_integer(jrate)) && rate >= 1 && rate <= a->cfg.max_rate_hz;
    int64_t dur_ns = 0;
    struct attach_job *aj;

    if (jdur)
        dur_ns = json_is_string(jdur) ? units_duration_ns(json_string_value(jdur))
                 : json_is_number(jdur) && json_number_value(jdur) >= 0 &&
                         json_number_value(jdur) <= 1e9 /* 31 years: within int64 ns */
                     ? (int64_t)(json_number_value(jdur) * 1e9)
                     : -1;
    bool matching = json_object_get(rq->body, "match") || json_object_get(rq->body, "job");

    if (!pid_ok && !matching) {
        reply_error(rq->req, 400, "\"pid\" must be a positive integer");
        return NULL;
    }
    if (matching && jpid) {
        reply_error(rq->req, 400, "give \"pid\", or \"match\" or \"job\": not both");
        return NULL;
    }
    if (!rate_ok) {
        reply_error(rq->req, 400, "\"rate\" must be an integer from 1 to %u Hz",
                    a->cfg.max_rate_hz);
        return NULL;
    }
    if (!native_ok) {
        reply_error(rq->req, 400, "\"native\" must be true, false or \"perf\"");
        return NULL;
    }
    if (jnccl && !json_is_boolean(jnccl)) {
        reply_error(rq->req, 400, "\"nccl\" must be true or false");
        return NULL;
    }
    if (native && rate > CONFIG_NATIVE_RATE_MAX_HZ) {
        reply_error(rq->req, 400,
                    "with native stacks the rate is at most %d Hz: the kernel copies a stack at "
                    "each sample, in the target's own time",
                    CONFIG_NATIVE_RATE_MAX_HZ);
        return NULL;
    }
    if (dur_ns < 0) {
        reply_error(rq->req, 400, "\"duration\" must be seconds or a duration like \"30s\"");
        return NULL;
    }
    struct attach_opts o = {.rate_hz = (uint32_t)rate,
                            .rate_is_default = !jrate,
                            .follow_children = json_is_true(json_object_get(rq->body, "children")),
                            .native = native,
                            .native_perf_only = perf_only,
                            .nccl = json_is_true(jnccl),
                            .duration_ns = dur_ns};
    if (matching)
        return targets_attach_matching(a, rq, &o);
    aj = job_alloc(a, rq, sizeof(*aj), JOB_SERIAL, run_attach, NULL);
    if (!aj)
        return NULL;
    aj->pid = pid;
    aj->children_of_any = o.follow_children;
    aj->switch_mode = json_is_true(json_object_get(rq->body, "switch"));
    aj->switch_native = jnative || !jnccl;
    aj->switch_nccl = jnccl != NULL;
    aj->opts = o;
    return &aj->j;
}

struct detach_job {
    struct job j;
    pid_t pid;
    struct target_info info;
};

static void run_detach(struct job *j)
{
    struct detach_job *dj = (struct detach_job *)j;
    struct peer p = {.root = j->scope.root, .uid = j->scope.uid};
    struct targets_filter f = peer_filter(&p);
    char msg[128];

    if (follower__unwatch(job_api(j)->parts.follower, dj->pid, &f) == 0) {
        log_msg(LOG_INFO, "no longer following pid %d", (int)dj->pid);
        j->status = 200;
        j->body = json_pack("{s:i, s:b}", "pid", (int)dj->pid, "following", false);
        return;
    }
    if (targets__detach(job_api(j)->parts.reg, dj->pid, &f, &dj->info) < 0) {
        snprintf(msg, sizeof(msg), "pid %d is not attached%s", (int)dj->pid,
                 p.root ? "" : " (or not yours)");
        fail(j, 404, msg);
        return;
    }
    log_msg(LOG_INFO, "detached pid %d", (int)dj->pid);
    j->status = 200;
    j->body = target_json(&dj->info);
}

/* DELETE /v1/targets/<pid> */
struct job *targets_detach(struct api *a, const struct request *rq)
{
    struct detach_job *dj = job_alloc(a, rq, sizeof(*dj), JOB_SERIAL, run_detach, NULL);

    if (!dj)
        return NULL;
    dj->pid = rq->pid;
    return &dj->j;
}

static bool listed(json_t *pids, pid_t pid)
{
    json_t *v;
    size_t i;

    json_array_foreach(pids, i, v)
    {
        if (json_integer_value(v) == pid)
            return true;
    }
    return false;
}

static void run_match_detach(struct job *j)
{
    struct match_job *mj = (struct match_job *)j;
    struct peer p = {.root = j->scope.root, .uid = j->scope.uid};
    struct targets_filter f = peer_filter(&p);
    struct target_info *infos = NULL, *more;
    struct follow_watch w[FOLLOW_WATCHES_MAX];
    size_t cap = 16, n, nw;
    json_t *detached;

    if (!match_compile(mj))
        return;
    detached = json_array();
    for (;;) { /* the count may grow between two copies */
        if (!(more = realloc(infos, cap * sizeof(*infos)))) {
            free(infos);
            json_decref(detached);
            fail(j, 500, "out of memory");
            return;
        }
        infos = more;
        n = targets__copy(job_api(j)->parts.reg, &f, infos, cap);
        if (n <= cap)
            break;
        cap = n + 16;
    }
    for (size_t i = 0; i < n; i++) {
        struct target_info info;
        if (infos[i].state != TARGET_SAMPLING)
            continue;
        if (mj->has_re && regexec(&mj->re, infos[i].cmdline, 0, NULL, 0) != 0)
            continue;
        if (targets__detach(job_api(j)->parts.reg, infos[i].pid, &f, &info) == 0)
            json_array_append_new(detached, json_integer(infos[i].pid));
    }
    free(infos);
    nw = follower__watches(job_api(j)->parts.follower, &f, w, FOLLOW_WATCHES_MAX);
    for (size_t i = 0; i < nw && i < FOLLOW_WATCHES_MAX; i++)
        if ((!mj->has_re || regexec(&mj->re, w[i].cmdline, 0, NULL, 0) == 0) &&
            follower__unwatch(job_api(j)->parts.follower, w[i].pid, &f) == 0 &&
            !listed(detached, w[i].pid)) /* a launcher that exec'd Python: one process */
            json_array_append_new(detached, json_integer(w[i].pid));
    log_msg(LOG_INFO, "detached %zu processes%s%s, for uid %u", json_array_size(detached),
            mj->has_re ? " matching " : "", mj->has_re ? mj->pattern : "", (unsigned)j->scope.uid);
    j->status = 200;
    j->body = json_pack("{s:o}", "detached", detached);
}

/* DELETE /v1/targets?match=PATTERN (those whose command line matches) or ?all=1: the caller's
 * targets (every user's, for root) and --children watches. */
struct job *targets_detach_matching(struct api *a, const struct request *rq)
{
    const char *match = evhttp_find_header(rq->params, "match");
    const char *all = evhttp_find_header(rq->params, "all");
    struct match_job *mj;

    if (!match && !(all && strcmp(all, "1") == 0)) {
        reply_error(rq->req, 400,
                    "detach of several processes needs ?match=PATTERN or ?all=1 (one process:"
                    " DELETE /v1/targets/PID)");
        return NULL;
    }
    mj = job_alloc(a, rq, sizeof(*mj), JOB_SERIAL, run_match_detach, free_match);
    if (!mj)
        return NULL;
    if (match && !parse_match(rq, match, NULL, mj)) {
        free_match(&mj->j);
        free(mj);
        return NULL;
    }
    return &mj->j;
}
