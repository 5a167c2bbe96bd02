/* torchtrace.c - see torchtrace.h. */
#define _GNU_SOURCE
#include "intarget/torchtrace.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intarget/eval.h"
#include "log.h"
#include "store/records.h"

#define TORCH_TIMEOUT_MS 10000

const char *const torch_backward_names[3] = {"auto", "all", "none"};
#define EXPRS_MAX 16

extern const char torchtrace_py[]; /* torchtrace.py, embedded at build time */

static bool identifier(const char *s, size_t n)
{
    if (n == 0 || n > 128 || isdigit((unsigned char)s[0]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_')
            return false;
    return true;
}

/* Calls @fn for each "name@function" of @exprs; stops at the first that is not one. */
static int each_expr(const char *exprs,
                     int (*fn)(const char *name, size_t name_len, const char *func, size_t func_len,
                               void *ctx),
                     void *ctx)
{
    const char *p = exprs;
    int n = 0;

    while (*p) {
        const char *end = strchrnul(p, ','), *at = memchr(p, '@', (size_t)(end - p));
        if (!at || !identifier(p, (size_t)(at - p)) ||
            !identifier(at + 1, (size_t)(end - at - 1)) || ++n > EXPRS_MAX)
            return -1;
        if (fn && fn(p, (size_t)(at - p), at + 1, (size_t)(end - at - 1), ctx) < 0)
            return -1;
        p = *end ? end + 1 : end;
    }
    return 0;
}

int torch_parse_exprs(const char *exprs, struct errbuf *err)
{
    if (each_expr(exprs, NULL, NULL) == 0)
        return 0;
    return errbuf_set(err, -EINVAL,
                      "bad --exprs '%.200s': expected name@function[,name@function...] (Python"
                      " identifiers, at most %d)",
                      exprs, EXPRS_MAX);
}

static int add_expr(const char *name, size_t name_len, const char *func, size_t func_len, void *ctx)
{
    return json_array_append_new(ctx, json_pack("[s%s%]", name, name_len, func, func_len));
}

/* The Python run in the target: loads torchtrace.py as the module _probed_torch when "on"
 * finds it missing (or off: a newer daemon's copy replaces an old one), then prints what
 * its command() returns. The module is sent only then, not with every drain. */
static char *script(const struct torch_request *rq)
{
    static const char *const actions[] = {"on", "drain", "off", "profile", "memory"};
    json_t *args =
        json_pack("{s:s, s:i, s:[], s:b, s:b, s:s, s:i, s:i, s:b}", "action", actions[rq->action],
                  "every", rq->every > 0 ? rq->every : 1, "exprs", "comm", rq->comm, "modules",
                  !rq->no_modules, "backward", torch_backward_names[rq->backward], "steps",
                  rq->steps, "duration_ms", rq->duration_ms, "cancel", rq->cancel);
    char *args_text = NULL, *args_hex = NULL, *src_hex = NULL, *code = NULL;

    if (args && rq->action == TORCH_ON && rq->device_time)
        json_object_set_new(args, "device_time", json_true());
    if (args && (rq->action == TORCH_PROFILE || rq->action == TORCH_MEMORY))
        json_object_set_new(args, "number", json_integer(rq->profile));
    if (args && rq->action == TORCH_MEMORY)
        json_object_set_new(args, "record_ms", json_integer(rq->record_ms));
    if (args && rq->exprs && each_expr(rq->exprs, add_expr, json_object_get(args, "exprs")) < 0)
        goto out;
    args_text = args ? json_dumps(args, JSON_COMPACT) : NULL;
    args_hex = args_text ? eval_hex(args_text) : NULL;
    src_hex = rq->action == TORCH_ON || rq->action == TORCH_PROFILE || rq->action == TORCH_MEMORY
                  ? eval_hex(torchtrace_py)
                  : strdup("");
    if (!args_hex || !src_hex)
        goto out;
    if (asprintf(&code,
                 "import sys as _sys, json as _json\n"
                 "_args = _json.loads(bytes.fromhex('%s').decode())\n"
                 "_mod = _sys.modules.get('_probed_torch')\n"
                 "if _args['action'] in ('on', 'profile', 'memory') and 'torch' not in"
                 " _sys.modules:\n"
                 "    print(_json.dumps({'error': 'torch is not loaded in this process (no"
                 " torch in sys.modules): nothing to trace', 'no_torch': True}))\n"
                 "else:\n"
                 "    if _args['action'] in ('on', 'profile', 'memory') and (_mod is None or not"
                 " _mod.tracing()):\n"
                 "        import types as _types\n"
                 "        _mod = _types.ModuleType('_probed_torch')\n"
                 "        exec(compile(bytes.fromhex('%s').decode(), '<probed torch>', 'exec'),"
                 " _mod.__dict__)\n"
                 "        _sys.modules['_probed_torch'] = _mod\n"
                 "    print(_mod.command(_args) if _mod is not None else _json.dumps({'error':"
                 " 'the torch trace is off in this process'}))\n",
                 args_hex, src_hex) < 0)
        code = NULL;
out:
    json_decref(args);
    free(args_text);
    free(args_hex);
    free(src_hex);
    return code;
}

/* What the audit row says was run. */
static char *audit_text(const struct torch_request *rq)
{
    char *text = NULL;

    if (rq->action == TORCH_ON)
        return asprintf(&text, "torch on --every %d --backward %s --exprs '%s'%s%s", rq->every,
                        torch_backward_names[rq->backward], rq->exprs ? rq->exprs : "",
                        rq->no_modules ? " --comm-only"
                        : rq->comm     ? " --comm"
                                       : "",
                        rq->device_time ? " --device-time" : "") < 0
                   ? NULL
                   : text;
    if (rq->action == TORCH_MEMORY)
        return asprintf(&text, "torch memory --record %dms", rq->record_ms) < 0 ? NULL : text;
    if (rq->action == TORCH_PROFILE && rq->cancel)
        return strdup("torch profile --cancel");
    if (rq->action == TORCH_PROFILE)
        return (rq->steps ? asprintf(&text, "torch profile --steps %d", rq->steps)
                          : asprintf(&text, "torch profile --duration %dms", rq->duration_ms)) < 0
                   ? NULL
                   : text;
    return strdup(rq->action == TORCH_OFF ? "torch off" : "torch drain");
}

/* Remembers (or forgets) that the trace is on for the attach, for a daemon that restarts. */
static void remember_tracing(const char *db_path, const struct torch_request *rq, bool on)
{
    struct errbuf err;

    if (records_torch_tracing(db_path, rq->target_id, on, rq->every, rq->exprs, &err) < 0)
        log_msg(LOG_WARN, "recording the torch trace of target %lld: %s", (long long)rq->target_id,
                err.msg);
}

/* ---- running ---- */

/* torchtrace.py's refusal ("error"): torch not loaded (-ENOPKG), or the trace off
 * (-EALREADY). */
static int check_reply(const struct torch_request *rq, json_t *result, struct errbuf *err)
{
    json_t *error = json_object_get(result, "error");

    if (!json_is_string(error))
        return 0;
    return errbuf_set(err,
                      json_is_true(json_object_get(result, "no_torch")) ||
                              json_is_true(json_object_get(result, "no_cuda"))
                          ? -ENOPKG
                          : -EALREADY,
                      "pid %d: %s", (int)rq->pid, json_string_value(error));
}

/* Adds what the daemon's counters need (Prometheus) from a drain's steps and records. */
static void summarise(json_t *result, struct torch_drained *sum)
{
    json_t *row, *records = json_object_get(result, "records");
    size_t i, n = json_array_size(records);

    json_array_foreach(json_object_get(result, "steps"), i, row)
    {
        sum->steps++;
        sum->step_seconds += (double)json_integer_value(json_array_get(row, 2)) / 1e9;
    }
    json_array_foreach(json_object_get(result, "ddp_steps"), i, row)
    {
        /* [module, group, iteration, ts, forward, backward, comm, overlap, buckets, ...] */
        json_t *fwd = json_array_get(row, 4), *bwd = json_array_get(row, 5),
               *comm = json_array_get(row, 6), *overlap = json_array_get(row, 7);
        double wait;
        if (!json_is_integer(fwd) || !json_is_integer(bwd) || !json_is_integer(comm))
            continue;
        wait = (double)(json_integer_value(comm) - json_integer_value(overlap));
        sum->ddp_steps++;
        sum->ddp_compute_seconds +=
            (double)(json_integer_value(fwd) + json_integer_value(bwd)) / 1e9;
        sum->ddp_wait_seconds += (wait > 0 ? wait : 0) / 1e9;
    }
    if (json_is_object(json_object_get(result, "comm_state"))) {
        sum->comm = true;
        sum->comm_in_flight_since_ns = 0; /* each page of a drain sends the calls in flight */
    }
    json_array_foreach(json_object_get(result, "comm"), i, row)
    {
        /* [call_id, op, group, size, seq, source, rank, peer, bytes, dtype, async, ts,
         *  duration, state] */
        const char *group = json_string_value(json_array_get(row, 2));
        const char *source = json_string_value(json_array_get(row, 5));
        const char *state = json_string_value(json_array_get(row, 13));
        json_t *seq = json_array_get(row, 4), *duration = json_array_get(row, 12);
        int64_t ts = (int64_t)json_integer_value(json_array_get(row, 11));
        bool ddp = source && strcmp(source, "ddp") == 0;

        if (json_is_integer(duration) && !ddp) { /* completed: sent once */
            sum->comm_calls++;
            sum->comm_bytes += (uint64_t)json_integer_value(json_array_get(row, 8));
            sum->comm_seconds += (double)json_integer_value(duration) / 1e9;
        }
        if (group && strcmp(group, "0") == 0 && json_is_integer(seq) &&
            (ddp || (source && strcmp(source, "c10d") == 0)) &&
            !(state && strcmp(state, "untraced") == 0) &&
            (!sum->has_comm_seq || json_integer_value(seq) > sum->comm_seq)) {
            sum->has_comm_seq = true;
            sum->comm_seq = (int64_t)json_integer_value(seq);
        }
        if (!json_is_integer(duration) && ts > 0 &&
            !(state && (strcmp(state, "completed") == 0 || strcmp(state, "untraced") == 0)) &&
            (!sum->comm_in_flight_since_ns || ts < sum->comm_in_flight_since_ns))
            sum->comm_in_flight_since_ns = ts;
    }
    if (n > 0) {
        row = json_array_get(records, n - 1);
        sum->has_memory = json_is_number(json_array_get(row, 5));
        sum->allocated_mb = json_number_value(json_array_get(row, 5)) / 1024; /* KB */
        sum->has_reserved = json_is_number(json_array_get(row, 6));
        sum->reserved_mb = json_number_value(json_array_get(row, 6)) / 1024;
    }
}

/* One request to the target, its rows stored; *ret is its reply (state and "more"). */
static int run_once(struct stubctl *sc, const char *db_path, const struct torch_request *rq,
                    int64_t *stored, struct torch_drained *sum, json_t **ret, struct errbuf *err)
{
    struct eval_request ev = {.pid = rq->pid,
                              .grant = rq->grant,
                              .uid = rq->uid,
                              .kind = STUB_RUN,
                              .timeout_ms = TORCH_TIMEOUT_MS +
                                            (rq->action == TORCH_MEMORY ? rq->record_ms : 0),
                              .mode = "torch",
                              .unaudited = rq->action == TORCH_DRAIN};
    json_t *result = NULL;
    char *code = script(rq), *audit = audit_text(rq);
    int r;

    if (!code || !audit) {
        free(code);
        free(audit);
        return errbuf_set(err, -ENOMEM, "out of memory");
    }
    ev.code = code;
    ev.audit_code = audit;
    r = eval_json(sc, db_path, &ev, "the torch trace", &result, err);
    free(code);
    free(audit);
    if (r == 0)
        r = check_reply(rq, result, err);
    if (r == 0 && (r = records_torch_drain(db_path, rq->target_id, result, stored, err)) < 0)
        log_msg(LOG_ERR, "pid %d: %s", (int)rq->pid, err->msg);
    if (r < 0) {
        json_decref(result);
        return r;
    }
    summarise(result, sum);
    json_object_del(result, "records");
    json_object_del(result, "variables");
    json_object_del(result, "steps");
    json_object_del(result, "comm");
    json_object_del(result, "profiles");
    json_object_del(result, "profile_events");
    json_object_del(result, "profile_steps");
    json_object_del(result, "gpu_memory");
    *ret = result;
    return 0;
}

int torch_run(struct stubctl *sc, const char *db_path, const struct torch_request *rq,
              struct torch_drained *ret_sum, json_t **ret_body, struct errbuf *err)
{
    struct torch_request drain = *rq, profile = *rq;
    int64_t stored = 0;
    json_t *body = NULL;
    int r = 0;

    /* a profile's number is the attach's next: a process's profiles do not replace those of
     * an earlier trace module (torchtrace.py is loaded afresh when nothing runs) */
    if ((rq->action == TORCH_PROFILE && !rq->cancel) || rq->action == TORCH_MEMORY) {
        r = records_torch_next(db_path, rq->target_id, rq->action == TORCH_MEMORY, &profile.profile,
                               err);
        rq = &profile;
    }
    if (r == 0)
        r = run_once(sc, db_path, rq, &stored, ret_sum, &body, err);

    /* a drain takes at most MAX_DRAIN records of each kind: the rest come with more drains
     * (after "off" too: the tracer goes once it is empty) */
    drain.action = TORCH_DRAIN;
    for (int round = 0; r == 0 && round < 50; round++) {
        json_t *more = NULL;

        if (!json_is_true(json_object_get(body, "more")))
            break;
        r = run_once(sc, db_path, &drain, &stored, ret_sum, &more, err);
        if (r == 0) {
            json_decref(body);
            body = more;
        }
    }
    if (rq->action == TORCH_OFF || (rq->action == TORCH_ON && r == 0))
        remember_tracing(db_path, rq, rq->action == TORCH_ON);
    if (r < 0) {
        json_decref(body);
        return r;
    }
    json_object_set_new(body, "stored", json_integer(stored));
    json_object_set_new(body, "target_id", json_integer(rq->target_id));
    *ret_body = body;
    return 0;
}
