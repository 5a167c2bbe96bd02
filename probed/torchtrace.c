/* torchtrace.c - see torchtrace.h. */
#define _GNU_SOURCE
#include "torchtrace.h"

#include <ctype.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "log.h"
#include "sampler.h"
#include "store.h"

#define TORCH_TIMEOUT_MS 10000
#define EXPRS_MAX 16

extern const char torchtrace_py[]; /* torchtrace.py, embedded at build time */

static json_t *error_body(int status, const char *msg)
{
    return json_pack("{s:s, s:i}", "error", msg, "status", status);
}

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

int torch_parse_exprs(const char *exprs, char *err, size_t errlen)
{
    if (each_expr(exprs, NULL, NULL) == 0)
        return 0;
    snprintf(err, errlen,
             "bad --exprs '%.200s': expected name@function[,name@function...] (Python"
             " identifiers, at most %d)",
             exprs, EXPRS_MAX);
    return -1;
}

static int add_expr(const char *name, size_t name_len, const char *func, size_t func_len, void *ctx)
{
    return json_array_append_new(ctx, json_pack("[s%s%]", name, name_len, func, func_len));
}

/* The request's arguments as hex (a safe Python literal: bytes.fromhex('...')). */
static char *hex_of(const char *text)
{
    size_t n = strlen(text);
    char *hex = malloc(2 * n + 1);

    for (size_t i = 0; hex && i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)text[i]);
    if (hex)
        hex[2 * n] = '\0';
    return hex;
}

/* The Python run in the target: loads torchtrace.py as the module _probed_torch when "on"
 * finds it missing (or off: a newer daemon's copy replaces an old one), then prints what
 * its command() returns. The module is sent only then, not with every drain. */
static char *script(const struct torch_request *rq)
{
    static const char *const actions[] = {"on", "drain", "off"};
    json_t *args = json_pack("{s:s, s:i, s:[]}", "action", actions[rq->action], "every",
                             rq->every > 0 ? rq->every : 1, "exprs");
    char *args_text = NULL, *args_hex = NULL, *src_hex = NULL, *code = NULL;

    if (args && rq->exprs && each_expr(rq->exprs, add_expr, json_object_get(args, "exprs")) < 0)
        goto out;
    args_text = args ? json_dumps(args, JSON_COMPACT) : NULL;
    args_hex = args_text ? hex_of(args_text) : NULL;
    src_hex = rq->action == TORCH_ON ? hex_of(torchtrace_py) : strdup("");
    if (!args_hex || !src_hex)
        goto out;
    if (asprintf(&code,
                 "import sys as _sys, json as _json\n"
                 "_args = _json.loads(bytes.fromhex('%s').decode())\n"
                 "_mod = _sys.modules.get('_probed_torch')\n"
                 "if _args['action'] == 'on' and 'torch' not in _sys.modules:\n"
                 "    print(_json.dumps({'error': 'torch is not loaded in this process (no"
                 " torch in sys.modules): nothing to trace', 'no_torch': True}))\n"
                 "else:\n"
                 "    if _args['action'] == 'on' and (_mod is None or not _mod.tracing()):\n"
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
        return asprintf(&text, "torch on --every %d --exprs '%s'", rq->every,
                        rq->exprs ? rq->exprs : "") < 0
                   ? NULL
                   : text;
    return strdup(rq->action == TORCH_OFF ? "torch off" : "torch drain");
}

/* ---- storing ---- */

/* Binds a JSON scalar (number, string, null) to parameter @i. */
static void bind_json(sqlite3_stmt *q, int i, json_t *v)
{
    if (json_is_integer(v))
        sqlite3_bind_int64(q, i, json_integer_value(v));
    else if (json_is_real(v))
        sqlite3_bind_double(q, i, json_real_value(v));
    else if (json_is_string(v))
        sqlite3_bind_text(q, i, json_string_value(v), -1, SQLITE_TRANSIENT);
    else if (json_is_boolean(v))
        sqlite3_bind_int(q, i, json_is_true(v));
    else
        sqlite3_bind_null(q, i);
}

/* Rows of @rows into @sql (target_id, then the row's fields, in order); @types says what each
 * field must be: 'i' integer, 's' string, 'n' number or null, 'v' any scalar. */
static int insert_rows(sqlite3 *db, const char *sql, int64_t target_id, json_t *rows,
                       const char *types, int64_t *stored)
{
    sqlite3_stmt *q = NULL;
    size_t i, nf = strlen(types);
    json_t *row;
    int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);

    json_array_foreach(rows, i, row)
    {
        bool ok = json_is_array(row) && json_array_size(row) == nf;
        if (rc != SQLITE_OK)
            break;
        for (size_t k = 0; ok && k < nf; k++) {
            json_t *v = json_array_get(row, k);
            ok = types[k] == 'i'   ? json_is_integer(v)
                 : types[k] == 's' ? json_is_string(v)
                 : types[k] == 'n' ? json_is_number(v) || json_is_null(v)
                                   : !json_is_array(v) && !json_is_object(v);
        }
        if (!ok)
            continue; /* never from our torchtrace.py; a row we cannot read is skipped */
        sqlite3_bind_int64(q, 1, target_id);
        for (size_t k = 0; k < nf; k++)
            bind_json(q, (int)k + 2, json_array_get(row, k));
        rc = sqlite3_step(q) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        sqlite3_reset(q);
        (*stored)++;
    }
    sqlite3_finalize(q);
    return rc;
}

/* The drained records, variables and steps, in one transaction; -1 with @err on failure. */
static int store_drain(const char *db_path, int64_t target_id, json_t *result, int64_t *stored,
                       char *err, size_t errlen)
{
    sqlite3 *db = store_connect(db_path, err, errlen);
    int rc = db ? sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) : SQLITE_ERROR;

    if (!db)
        return -1;
    if (rc == SQLITE_OK)
        rc = insert_rows(db,
                         "INSERT INTO torch_records (target_id, step, module, stage, ts_ns,"
                         " duration_ns, allocated_mb, reserved_mb) VALUES (?,?,?,?,?,?,? / 1024.0,"
                         " ? / 1024.0)",
                         target_id, json_object_get(result, "records"), "issiinn", stored);
    if (rc == SQLITE_OK)
        rc = insert_rows(db,
                         "INSERT INTO torch_values (target_id, step, ts_ns, function, name,"
                         " value) VALUES (?,?,?,?,?,?)",
                         target_id, json_object_get(result, "variables"), "iissv", stored);
    if (rc == SQLITE_OK)
        rc = insert_rows(db,
                         "INSERT OR REPLACE INTO torch_steps (target_id, step, ts_ns,"
                         " duration_ns) VALUES (?,?,?,?)",
                         target_id, json_object_get(result, "steps"), "iii", stored);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        snprintf(err, errlen, "storing the torch trace in %s: %s", db_path, sqlite3_errmsg(db));
    sqlite3_close(db); /* an open transaction is rolled back */
    return rc == SQLITE_OK ? 0 : -1;
}

/* Remembers (or forgets) that the trace is on for the attach, for a daemon that restarts. */
static void remember_tracing(const char *db_path, const struct torch_request *rq, bool on)
{
    char err[600] = "";
    sqlite3 *db = store_connect(db_path, err, sizeof(err));
    sqlite3_stmt *q = NULL;

    if (db && sqlite3_prepare_v2(db,
                                 on ? "INSERT OR REPLACE INTO torch_tracing (target_id, every,"
                                      " exprs) VALUES (?,?,?)"
                                    : "DELETE FROM torch_tracing WHERE target_id = ?",
                                 -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, rq->target_id);
        if (on) {
            sqlite3_bind_int(q, 2, rq->every);
            sqlite3_bind_text(q, 3, rq->exprs ? rq->exprs : "", -1, SQLITE_STATIC);
        }
        if (sqlite3_step(q) != SQLITE_DONE)
            snprintf(err, sizeof(err), "%s", sqlite3_errmsg(db));
    } else if (db) {
        snprintf(err, sizeof(err), "%s", sqlite3_errmsg(db));
    }
    if (err[0])
        log_msg(LOG_WARN, "recording the torch trace of target %lld: %s", (long long)rq->target_id,
                err);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

/* ---- running ---- */

/* torchtrace.py's refusal ("error"): torch not loaded (422), or the trace off (409). */
static int check_reply(const struct torch_request *rq, json_t *result, json_t **ret)
{
    json_t *error = json_object_get(result, "error");
    char msg[700];
    int code;

    if (!json_is_string(error)) {
        *ret = result;
        return 200;
    }
    code = json_is_true(json_object_get(result, "no_torch")) ? 422 : 409;
    snprintf(msg, sizeof(msg), "pid %d: %s", (int)rq->pid, json_string_value(error));
    json_decref(result);
    *ret = error_body(code, msg);
    return code;
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
    if (n > 0) {
        row = json_array_get(records, n - 1);
        sum->has_memory = json_is_number(json_array_get(row, 5));
        sum->allocated_mb = json_number_value(json_array_get(row, 5)) / 1024; /* KB */
        sum->has_reserved = json_is_number(json_array_get(row, 6));
        sum->reserved_mb = json_number_value(json_array_get(row, 6)) / 1024;
    }
}

/* One request to the target, its rows stored; *ret_result is its reply (state and "more"). */
static int run_once(struct stubctl *sc, const char *db_path, const struct torch_request *rq,
                    int64_t *stored, struct torch_drained *sum, json_t **ret)
{
    struct eval_request ev = {.pid = rq->pid,
                              .uid = rq->uid,
                              .kind = STUB_RUN,
                              .timeout_ms = TORCH_TIMEOUT_MS,
                              .mode = "torch",
                              .unaudited = rq->action == TORCH_DRAIN};
    json_t *result = NULL;
    char *code = script(rq), *audit = audit_text(rq), err[600];
    int status;

    if (!code || !audit) {
        free(code);
        free(audit);
        *ret = error_body(500, "out of memory");
        return 500;
    }
    ev.code = code;
    ev.audit_code = audit;
    status = eval_json(sc, db_path, &ev, "the torch trace", &result);
    free(code);
    free(audit);
    if (status == 200)
        status = check_reply(rq, result, &result);
    if (status != 200) {
        *ret = result;
        return status;
    }
    if (store_drain(db_path, rq->target_id, result, stored, err, sizeof(err)) < 0) {
        log_msg(LOG_ERR, "pid %d: %s", (int)rq->pid, err);
        json_decref(result);
        *ret = error_body(500, err);
        return 500;
    }
    summarise(result, sum);
    json_object_del(result, "records");
    json_object_del(result, "variables");
    json_object_del(result, "steps");
    *ret = result;
    return 200;
}

int torch_run(struct stubctl *sc, const char *db_path, const struct torch_request *rq,
              struct torch_drained *ret_sum, json_t **ret_body)
{
    struct torch_request drain = *rq;
    int64_t stored = 0;
    int status = run_once(sc, db_path, rq, &stored, ret_sum, ret_body);

    /* a drain takes at most MAX_DRAIN records of each kind: the rest come with more drains
     * (after "off" too: the tracer goes once it is empty) */
    drain.action = TORCH_DRAIN;
    for (int round = 0; status == 200 && round < 50; round++) {
        if (!json_is_true(json_object_get(*ret_body, "more")))
            break;
        json_decref(*ret_body);
        status = run_once(sc, db_path, &drain, &stored, ret_sum, ret_body);
    }
    if (rq->action == TORCH_OFF || (rq->action == TORCH_ON && status == 200))
        remember_tracing(db_path, rq, rq->action == TORCH_ON);
    if (status == 200)
        json_object_set_new(*ret_body, "stored", json_integer(stored));
    return status;
}
