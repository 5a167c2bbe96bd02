/* eval.c - code run inside targets, and its audit trail; see eval.h. */
#define _GNU_SOURCE
#include "eval.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "procfs.h"
#include "pyframes.h"
#include "sampler.h"
#include "units.h"
#include "errbuf.h"

static json_t *error_body(int status, const char *msg)
{
    return json_pack("{s:s, s:i}", "error", msg, "status", status);
}

/* Before the stub goes into a process: it must be a CPython we read (not 2.7, not bash). */
static int check_python(pid_t pid, json_t **ret_body)
{
    struct pyf_target *t;
    struct pyf_err e = {0};
    int status;

    if (pyf_target_open(pid, &t, &e) == 0) {
        pyf_target_free(t);
        return 0;
    }
    status = errbuf_http_status(&e);
    *ret_body = error_body(status, e.msg);
    return status;
}

static const char *status_name(const struct stub_result *res)
{
    static const char *const names[] = {"ok", "exception", "incomplete", "error"};

    if (res->timed_out)
        return "timeout";
    return res->status <= STUB_ERROR ? names[res->status] : "error";
}

/* One row in evals; a failure is logged, never hidden from the operator. */
static void audit(const char *db_path, const struct eval_request *rq, int64_t ts_ns,
                  const char *status, size_t output_bytes, double elapsed_ms, bool injected)
{
    static const char sql[] =
        "INSERT INTO evals (ts_ns, uid, pid, start_time, target_uid, mode, code, status,"
        " output_bytes, elapsed_ms, injected) VALUES (?,?,?,?,?,?,?,?,?,?,?)";
    char proc[32];
    struct stat st;
    int64_t start = 0;
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int rc;

    if (rq->unaudited)
        return;
    snprintf(proc, sizeof(proc), "/proc/%d", (int)rq->pid);
    procfs_start_time(rq->pid, &start);
    if (stat(proc, &st) < 0)
        st.st_uid = (uid_t)-1;
    rc = sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
    }
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, ts_ns);
        sqlite3_bind_int64(q, 2, (int64_t)rq->uid);
        sqlite3_bind_int64(q, 3, rq->pid);
        sqlite3_bind_int64(q, 4, start);
        sqlite3_bind_int64(q, 5, (int64_t)st.st_uid);
        sqlite3_bind_text(q, 6, rq->mode, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 7, rq->audit_code ? rq->audit_code : rq->code, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 8, status, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 9, (int64_t)output_bytes);
        sqlite3_bind_double(q, 10, elapsed_ms);
        sqlite3_bind_int(q, 11, injected);
        rc = sqlite3_step(q) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    }
    if (rc != SQLITE_OK)
        log_msg(LOG_ERR, "pid %d: could not record an eval by uid %u in %s: %s", (int)rq->pid,
                (unsigned)rq->uid, db_path, db ? sqlite3_errmsg(db) : "no memory");
    sqlite3_finalize(q);
    sqlite3_close(db);
}

/* The call, loading the stub first (after the Python check) when the target has none. */
static int call_stub(struct stubctl *sc, const struct eval_request *rq, struct stub_result *res,
                     json_t **ret_body)
{
    struct stub_call call = {.kind = rq->kind,
                             .flags = rq->main_thread ? STUB_MAIN_THREAD : 0,
                             .session = rq->session,
                             .code = rq->code,
                             .timeout_ms = rq->timeout_ms};
    char err[512] = "";
    int r = stubctl__call(sc, rq->pid, &call, res, err, sizeof(err));

    if (r == -ENOENT) { /* no stub there yet */
        int status = check_python(rq->pid, ret_body);
        if (status)
            return status;
        call.may_inject = true;
        r = stubctl__call(sc, rq->pid, &call, res, err, sizeof(err));
    }
    if (r < 0) {
        int status = r == -ESRCH                   ? 404
                     : r == -EPERM || r == -EACCES ? 403
                     : r == -E2BIG                 ? 413
                                                   : 502;
        log_msg(LOG_WARN, "eval in pid %d: %s", (int)rq->pid, err);
        *ret_body = error_body(status, err);
        return status;
    }
    return 0;
}

int eval_run(struct stubctl *sc, const char *db_path, const struct eval_request *rq,
             json_t **ret_body)
{
    struct stub_result res = {0};
    int64_t ts_ns = real_ns();
    double t0 = mono_ms(), elapsed;
    int status = call_stub(sc, rq, &res, ret_body);
    const char *name;
    size_t out_len;

    elapsed = mono_ms() - t0;
    if (status) {
        json_t *msg = json_object_get(*ret_body, "error");
        char what[300];
        snprintf(what, sizeof(what), "error: %s",
                 json_string_value(msg) ? json_string_value(msg) : "");
        audit(db_path, rq, ts_ns, what, 0, elapsed, res.injected);
        return status;
    }
    name = status_name(&res);
    out_len = res.text ? strlen(res.text) : 0;
    audit(db_path, rq, ts_ns, name, out_len, elapsed, res.injected);
    *ret_body =
        json_pack("{s:s, s:s?, s:b, s:f, s:f}", "status", name, "output", res.text, "injected",
                  res.injected, "inject_ms", res.inject_ms, "elapsed_ms", elapsed);
    if (res.timed_out)
        json_object_set_new(*ret_body, "message",
                            json_sprintf("no reply within %lld ms; the code may still be running "
                                         "in pid %d",
                                         (long long)rq->timeout_ms, (int)rq->pid));
    free(res.text);
    return *ret_body ? 200 : 500;
}

int eval_json(struct stubctl *sc, const char *db_path, const struct eval_request *rq,
              const char *what, json_t **ret_body)
{
    json_t *eval_body = NULL, *result;
    const char *status, *output;
    char msg[700];
    int code = eval_run(sc, db_path, rq, &eval_body);

    if (code != 200) {
        *ret_body = eval_body;
        return code;
    }
    status = json_string_value(json_object_get(eval_body, "status"));
    output = json_string_value(json_object_get(eval_body, "output"));
    result = status && strcmp(status, "ok") == 0 && output ? json_loads(output, 0, NULL) : NULL;
    if (!json_is_object(result)) {
        if (!status || strcmp(status, "ok") != 0)
            snprintf(msg, sizeof(msg), "pid %d: %s failed (%s): %.500s", (int)rq->pid, what,
                     status ? status : "?", output ? output : "");
        else
            snprintf(msg, sizeof(msg), "pid %d: unexpected reply from %s: %.500s", (int)rq->pid,
                     what, output ? output : "");
        json_decref(result);
        result = error_body(502, msg);
        code = 502;
    }
    json_decref(eval_body);
    *ret_body = result;
    return code;
}
