/* allocs.c - see allocs.h. */
#define _GNU_SOURCE
#include "allocs.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "log.h"
#include "sampler.h"
#include "store.h"

#define ALLOCS_TIMEOUT_MS 30000 /* a snapshot of a large heap takes a while */

extern const char allocs_py[]; /* allocs.py, embedded at build time */

static json_t *error_body(int status, const char *msg)
{
    return json_pack("{s:s, s:i}", "error", msg, "status", status);
}

/* allocs.py with its two parameters in front. */
static char *script(const struct allocs_request *rq)
{
    static const char *const actions[] = {"on", "snapshot", "off"};
    char *code = NULL;

    if (asprintf(&code, "_PROBED_ACTION = '%s'\n_PROBED_TOP = %d\n%s", actions[rq->action], rq->top,
                 allocs_py) < 0)
        return NULL;
    return code;
}

/* The snapshot's rows into the allocations table, in one transaction. */
static int store_rows(const char *db_path, int64_t target_id, int64_t ts_ns, json_t *rows,
                      char *err, size_t errlen)
{
    static const char sql[] =
        "INSERT OR REPLACE INTO allocations (target_id, ts_ns, function_name, file, line,"
        " allocated_bytes, allocations, live_bytes, live_blocks) VALUES (?,?,?,?,?,?,?,?,?)";
    sqlite3 *db = store_connect(db_path, err, errlen);
    sqlite3_stmt *q = NULL;
    json_t *row;
    size_t i;
    int rc = db ? sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) : SQLITE_ERROR;

    if (!db)
        return -1;
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
    json_array_foreach(rows, i, row)
    {
        if (rc != SQLITE_OK)
            break;
        sqlite3_bind_int64(q, 1, target_id);
        sqlite3_bind_int64(q, 2, ts_ns);
        sqlite3_bind_text(q, 3, json_string_value(json_array_get(row, 0)), -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 4, json_string_value(json_array_get(row, 1)), -1, SQLITE_STATIC);
        for (int k = 2; k < 7; k++)
            sqlite3_bind_int64(q, k + 3, json_integer_value(json_array_get(row, (size_t)k)));
        rc = sqlite3_step(q) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        sqlite3_reset(q);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        snprintf(err, errlen, "storing allocations in %s: %s", db_path, sqlite3_errmsg(db));
    sqlite3_finalize(q);
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : -1;
}

/* Remembers (or forgets) that tracking is on for @target_id, for a daemon that restarts. */
static void remember_tracking(const char *db_path, int64_t target_id, bool on)
{
    char err[600] = "", sql[128];
    sqlite3 *db = store_connect(db_path, err, sizeof(err));

    snprintf(sql, sizeof(sql),
             on ? "INSERT OR IGNORE INTO allocation_tracking(target_id) VALUES (%lld)"
                : "DELETE FROM allocation_tracking WHERE target_id = %lld",
             (long long)target_id);
    if (db && sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        snprintf(err, sizeof(err), "%s", sqlite3_errmsg(db));
    if (err[0])
        log_msg(LOG_WARN, "recording allocation tracking of target %lld: %s", (long long)target_id,
                err);
    sqlite3_close(db);
}

/* Checks the shape allocs.py promises: [[str, str, int, int, int, int, int], ...]. */
static bool rows_ok(json_t *rows)
{
    json_t *row;
    size_t i;

    if (!json_is_array(rows))
        return false;
    json_array_foreach(rows, i, row)
    {
        if (json_array_size(row) != 7 || !json_is_string(json_array_get(row, 0)) ||
            !json_is_string(json_array_get(row, 1)))
            return false;
        for (size_t k = 2; k < 7; k++)
            if (!json_is_integer(json_array_get(row, k)))
                return false;
    }
    return true;
}

/* The JSON line allocs.py printed, checked; else an error status and body. */
/* What allocs.py printed, checked: its rows' shape, and its refusal ("error"). */
static int check_reply(const struct allocs_request *rq, json_t *result, json_t **ret)
{
    char msg[600];
    json_t *rows = json_object_get(result, "rows");

    if (rows && !rows_ok(rows)) {
        snprintf(msg, sizeof(msg), "pid %d: unexpected rows from tracemalloc", (int)rq->pid);
        json_decref(result);
        *ret = error_body(502, msg);
        return 502;
    }
    if (json_is_string(json_object_get(result, "error"))) {
        snprintf(msg, sizeof(msg), "pid %d: %s (probectl memory %d --allocations on)", (int)rq->pid,
                 json_string_value(json_object_get(result, "error")), (int)rq->pid);
        json_decref(result);
        *ret = error_body(409, msg);
        return 409;
    }
    *ret = result;
    return 200;
}

int allocs_run(struct stubctl *sc, const char *db_path, const struct allocs_request *rq,
               json_t **ret_body)
{
    struct eval_request ev = {.pid = rq->pid,
                              .uid = rq->uid,
                              .kind = STUB_RUN,
                              .timeout_ms = ALLOCS_TIMEOUT_MS,
                              .mode = "allocations"};
    json_t *result = NULL;
    int64_t ts_ns = real_ns();
    char *code = script(rq), err[600];
    int status;

    if (!code) {
        *ret_body = error_body(500, "out of memory");
        return 500;
    }
    ev.code = code;
    status = eval_json(sc, db_path, &ev, "tracemalloc", &result);
    free(code);
    if (rq->action == ALLOCS_OFF) /* also when the process is gone */
        remember_tracking(db_path, rq->target_id, false);
    if (status == 200)
        status = check_reply(rq, result, &result);
    if (status != 200) {
        *ret_body = result;
        return status;
    }
    if (json_array_size(json_object_get(result, "rows")) > 0 &&
        store_rows(db_path, rq->target_id, ts_ns, json_object_get(result, "rows"), err,
                   sizeof(err)) < 0) {
        log_msg(LOG_ERR, "pid %d: %s", (int)rq->pid, err);
        json_decref(result);
        *ret_body = error_body(500, err);
        return 500;
    }
    if (rq->action == ALLOCS_ON)
        remember_tracking(db_path, rq->target_id, true);
    json_object_set_new(result, "ts_ns", json_integer(ts_ns));
    *ret_body = result;
    return 200;
}
