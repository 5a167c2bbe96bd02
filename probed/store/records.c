/* records.c - see records.h. */
#define _GNU_SOURCE
#include "store/records.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store/store.h"

/* -EIO with SQLite's reason for @what. */
static int failed(sqlite3 *db, const char *db_path, const char *what, struct errbuf *err)
{
    return errbuf_set(err, -EIO, "%s in %s: %s", what, db_path,
                      db ? sqlite3_errmsg(db) : "no memory");
}

/* Ends a call: @q finalised, @db closed; @r, with the reason when it failed. */
static int finish(sqlite3 *db, sqlite3_stmt *q, int r, const char *db_path, const char *what,
                  struct errbuf *err)
{
    if (r < 0)
        failed(db, db_path, what, err);
    sqlite3_finalize(q);
    sqlite3_close(db); /* an open transaction is rolled back */
    return r;
}

int records_eval(const char *db_path, const struct eval_audit *a, struct errbuf *err)
{
    static const char sql[] =
        "INSERT INTO evals (ts_ns, uid, pid, start_time, target_uid, mode, code, status,"
        " output_bytes, elapsed_ms, injected) VALUES (?,?,?,?,?,?,?,?,?,?,?)";
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, a->ts_ns);
        sqlite3_bind_int64(q, 2, (int64_t)a->uid);
        sqlite3_bind_int64(q, 3, a->pid);
        sqlite3_bind_int64(q, 4, a->start_time);
        sqlite3_bind_int64(q, 5, (int64_t)a->target_uid);
        sqlite3_bind_text(q, 6, a->mode, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 7, a->code, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 8, a->status, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 9, (int64_t)a->output_bytes);
        sqlite3_bind_double(q, 10, a->elapsed_ms);
        sqlite3_bind_int(q, 11, a->injected);
        r = sqlite3_step(q) == SQLITE_DONE ? 0 : -EIO;
    } else {
        r = -EIO;
    }
    return finish(db, q, r, db_path, "recording an eval", err);
}

int records_allocations(const char *db_path, int64_t target_id, int64_t ts_ns, json_t *rows,
                        struct errbuf *err)
{
    static const char sql[] =
        "INSERT OR REPLACE INTO allocations (target_id, ts_ns, function_name, file, line,"
        " allocated_bytes, allocations, live_bytes, live_blocks) VALUES (?,?,?,?,?,?,?,?,?)";
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    json_t *row;
    size_t i;
    int rc, r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
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
    return finish(db, q, rc == SQLITE_OK ? 0 : -EIO, db_path, "storing allocations", err);
}

int records_allocation_tracking(const char *db_path, int64_t target_id, bool on, struct errbuf *err)
{
    sqlite3 *db = NULL;
    char sql[128];
    int r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    snprintf(sql, sizeof(sql),
             on ? "INSERT OR IGNORE INTO allocation_tracking(target_id) VALUES (%lld)"
                : "DELETE FROM allocation_tracking WHERE target_id = %lld",
             (long long)target_id);
    r = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
    return finish(db, NULL, r, db_path, "recording allocation tracking", err);
}

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

int records_torch_drain(const char *db_path, int64_t target_id, json_t *drain, int64_t *ret_stored,
                        struct errbuf *err)
{
    sqlite3 *db = NULL;
    json_t *jsession = json_object_get(drain, "session");
    long long session = json_is_integer(jsession) ? json_integer_value(jsession) : 0;
    char records_sql[256];
    int rc, r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    /* a drain's records are all of one trace session (an `off` drains before the next `on`) */
    snprintf(records_sql, sizeof(records_sql),
             "INSERT INTO torch_records (target_id, step, module, stage, ts_ns, duration_ns,"
             " allocated_mb, reserved_mb, device_ns, session) VALUES (?,?,?,?,?,?,? / 1024.0,"
             " ? / 1024.0, ?, NULLIF(%lld, 0))",
             session);
    rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = insert_rows(db, records_sql, target_id, json_object_get(drain, "records"), "issiinnn",
                         ret_stored);
    if (rc == SQLITE_OK)
        rc = insert_rows(db,
                         "INSERT INTO torch_values (target_id, step, ts_ns, function, name,"
                         " value) VALUES (?,?,?,?,?,?)",
                         target_id, json_object_get(drain, "variables"), "iissv", ret_stored);
    if (rc == SQLITE_OK)
        rc = insert_rows(db,
                         "INSERT OR REPLACE INTO torch_steps (target_id, step, ts_ns,"
                         " duration_ns) VALUES (?,?,?,?)",
                         target_id, json_object_get(drain, "steps"), "iii", ret_stored);
    if (rc == SQLITE_OK) /* a call in flight comes again once complete: it replaces its row */
        rc = insert_rows(db,
                         "INSERT OR REPLACE INTO comm_calls (target_id, call_id, op, group_name,"
                         " group_size, seq, seq_source, rank, peer, bytes, dtype, async, ts_ns,"
                         " duration_ns, state) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         target_id, json_object_get(drain, "comm"), "issinsinivvinv", ret_stored);
    if (rc == SQLITE_OK)
        rc = insert_rows(db,
                         "INSERT OR REPLACE INTO ddp_steps (target_id, module, group_name,"
                         " iteration, ts_ns, forward_ns, backward_ns, comm_ns, overlap_ns,"
                         " buckets, bytes, call_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                         target_id, json_object_get(drain, "ddp_steps"), "ssinnnnniin", ret_stored);
    if (rc == SQLITE_OK) /* a profile's row comes with each drain: the last is its state */
        rc = insert_rows(db,
                         "INSERT OR REPLACE INTO torch_profiles (target_id, profile, ts_ns,"
                         " duration_ns, steps, events, dropped, activities, profiler, state,"
                         " error) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                         target_id, json_object_get(drain, "profiles"), "iiiiiisssv", ret_stored);
    if (rc == SQLITE_OK)
        rc = insert_rows(db,
                         "INSERT OR REPLACE INTO torch_profile_events (target_id, profile, seq,"
                         " kind, name, module, stage, step, ts_ns, duration_ns, tid, device,"
                         " stream) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         target_id, json_object_get(drain, "profile_events"), "iissvvviivvv",
                         ret_stored);
    if (rc == SQLITE_OK) /* once, with the first drain after the profile stopped */
        rc = insert_rows(db,
                         "INSERT INTO torch_profile_steps (target_id, profile, step, ts_ns,"
                         " duration_ns, device, busy_ns, kernels) VALUES (?,?,?,?,?,?,?,?)",
                         target_id, json_object_get(drain, "profile_steps"), "iiiivvi", ret_stored);
    if (rc == SQLITE_OK)
        rc = insert_rows(db,
                         "INSERT INTO gpu_memory (target_id, snapshot, ts_ns, device, frames,"
                         " bytes, blocks) VALUES (?,?,?,?,?,?,?)",
                         target_id, json_object_get(drain, "gpu_memory"), "iivsii", ret_stored);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    return finish(db, NULL, rc == SQLITE_OK ? 0 : -EIO, db_path, "storing the torch trace", err);
}

int records_torch_next(const char *db_path, int64_t target_id, bool snapshot, int64_t *ret,
                       struct errbuf *err)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    if (sqlite3_prepare_v2(db,
                           snapshot ? "SELECT coalesce(max(snapshot), 0) + 1 FROM gpu_memory"
                                      " WHERE target_id = ?"
                                    : "SELECT coalesce(max(profile), 0) + 1 FROM torch_profiles"
                                      " WHERE target_id = ?",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, target_id);
        if (sqlite3_step(q) == SQLITE_ROW)
            *ret = sqlite3_column_int64(q, 0);
        else
            r = -EIO;
    } else {
        r = -EIO;
    }
    return finish(db, q, r, db_path, "numbering a profile", err);
}

int records_torch_tracing(const char *db_path, int64_t target_id, bool on, int every,
                          const char *exprs, struct errbuf *err)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    if (sqlite3_prepare_v2(db,
                           on ? "INSERT OR REPLACE INTO torch_tracing (target_id, every,"
                                " exprs) VALUES (?,?,?)"
                              : "DELETE FROM torch_tracing WHERE target_id = ?",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, target_id);
        if (on) {
            sqlite3_bind_int(q, 2, every);
            sqlite3_bind_text(q, 3, exprs ? exprs : "", -1, SQLITE_STATIC);
        }
        if (sqlite3_step(q) != SQLITE_DONE)
            r = -EIO;
    } else {
        r = -EIO;
    }
    return finish(db, q, r, db_path, "recording the torch trace", err);
}

int records_crash(const char *db_path, const struct crash_record *c, int64_t *ret_id,
                  struct errbuf *err)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO crashes (target_id, pid, ts_ns, kind, exit_code, signal,"
                           " core_dumped, message, detail, tid) VALUES (?,?,?,?,NULL,?,0,?,?,?)",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, c->target_id);
        sqlite3_bind_int64(q, 2, c->pid);
        sqlite3_bind_int64(q, 3, c->ts_ns);
        sqlite3_bind_text(q, 4, c->kind, -1, SQLITE_STATIC);
        if (c->signal > 0)
            sqlite3_bind_int(q, 5, c->signal);
        sqlite3_bind_text(q, 6, c->message, -1, SQLITE_STATIC);
        if (c->detail)
            sqlite3_bind_text(q, 7, c->detail, -1, SQLITE_STATIC);
        if (c->tid > 0)
            sqlite3_bind_int64(q, 8, c->tid);
        if (sqlite3_step(q) != SQLITE_DONE)
            r = -EIO;
        else if (ret_id)
            *ret_id = sqlite3_last_insert_rowid(db);
    } else {
        r = -EIO;
    }
    return finish(db, q, r, db_path, "recording a crash", err);
}

int records_crash_core(const char *db_path, int64_t crash_id, const char *core_path,
                       struct errbuf *err)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    if (sqlite3_prepare_v2(db, "UPDATE crashes SET core_path = ? WHERE id = ?", -1, &q, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_text(q, 1, core_path, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 2, crash_id);
        if (sqlite3_step(q) != SQLITE_DONE)
            r = -EIO;
    } else {
        r = -EIO;
    }
    return finish(db, q, r, db_path, "naming a crash's core file", err);
}

int records_catching(const char *db_path, int64_t target_id, bool on, bool signals,
                     struct errbuf *err)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int r = store_connect(db_path, &db, err);

    if (r < 0)
        return r;
    if (sqlite3_prepare_v2(db,
                           on ? "INSERT OR REPLACE INTO catching (target_id, signals) VALUES (?,?)"
                              : "DELETE FROM catching WHERE target_id = ?",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, target_id);
        if (on)
            sqlite3_bind_int(q, 2, signals);
        if (sqlite3_step(q) != SQLITE_DONE)
            r = -EIO;
    } else {
        r = -EIO;
    }
    return finish(db, q, r, db_path, "recording the catch", err);
}
