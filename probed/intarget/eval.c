/* eval.c - code run inside targets, and its audit trail; see eval.h. */
#define _GNU_SOURCE
#include "intarget/eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "common/procfs.h"
#include "pyframes.h"
#include "clock.h"
#include "common/units.h"
#include "errbuf.h"
#include "store/records.h"

/* Before the stub goes into a process: it must be a CPython we read (not 2.7, not bash). */
static int check_python(pid_t pid, struct errbuf *err)
{
    struct pyf_target *t;
    struct pyf_err e = {0};

    if (pyf_target_open(pid, &t, &e) == 0) {
        pyf_target_free(t);
        return 0;
    }
    return errbuf_from_pyf(err, &e);
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
    struct eval_audit row = {.ts_ns = ts_ns,
                             .uid = rq->uid,
                             .pid = rq->pid,
                             .mode = rq->mode,
                             .code = rq->audit_code ? rq->audit_code : rq->code,
                             .status = status,
                             .output_bytes = output_bytes,
                             .elapsed_ms = elapsed_ms,
                             .injected = injected};
    struct errbuf err;
    char proc[32];
    struct stat st;

    if (rq->unaudited)
        return;
    snprintf(proc, sizeof(proc), "/proc/%d", (int)rq->pid);
    procfs_start_time(rq->pid, &row.start_time);
    row.target_uid = stat(proc, &st) < 0 ? (uid_t)-1 : st.st_uid;
    if (records_eval(db_path, &row, &err) < 0)
        log_msg(LOG_ERR, "pid %d: could not record an eval by uid %u: %s", (int)rq->pid,
                (unsigned)rq->uid, err.msg);
}

/* The call, loading the stub first (after the Python check) when the target has none. */
static int call_stub(struct stubctl *sc, const struct eval_request *rq, struct stub_result *res,
                     struct errbuf *err)
{
    struct stub_call call = {.kind = rq->kind,
                             .flags = rq->main_thread ? STUB_MAIN_THREAD : 0,
                             .session = rq->session,
                             .code = rq->code,
                             .timeout_ms = rq->timeout_ms,
                             .exclusive = rq->exclusive};
    int r = stubctl__call(sc, &rq->grant, &call, res, err);

    if (r == -ENOENT) { /* no stub there yet */
        r = check_python(rq->pid, err);
        if (r < 0)
            return r;
        call.may_inject = true;
        r = stubctl__call(sc, &rq->grant, &call, res, err);
    }
    if (r < 0) {
        log_msg(LOG_WARN, "eval in pid %d: %s", (int)rq->pid, err->msg);
        /* gone, not theirs, too big; anything else went wrong in talking to the stub */
        return r == -ESRCH || r == -EPERM || r == -EACCES || r == -E2BIG || r == -EBUSY ? r
                                                                                        : -EPROTO;
    }
    return 0;
}

int eval_run(struct stubctl *sc, const char *db_path, const struct eval_request *rq,
             json_t **ret_body, struct errbuf *err)
{
    struct stub_result res = {0};
    int64_t ts_ns = real_ns();
    double t0 = mono_ms(), elapsed;
    int r = call_stub(sc, rq, &res, err);
    const char *name;
    size_t out_len;

    elapsed = mono_ms() - t0;
    if (r < 0) {
        char what[300];
        snprintf(what, sizeof(what), "error: %.280s", err->msg);
        audit(db_path, rq, ts_ns, what, 0, elapsed, res.injected);
        return r;
    }
    name = status_name(&res);
    out_len = res.text ? strlen(res.text) : 0;
    audit(db_path, rq, ts_ns, name, out_len, elapsed, res.injected);
    *ret_body = json_pack("{s:s, s:s?, s:b, s:s?, s:f, s:f}", "status", name, "output", res.text,
                          "injected", res.injected, "entry", res.entry, "inject_ms", res.inject_ms,
                          "elapsed_ms", elapsed);
    if (res.timed_out && *ret_body)
        json_object_set_new(*ret_body, "message",
                            json_sprintf("no reply within %lld ms; the code may still be running "
                                         "in pid %d",
                                         (long long)rq->timeout_ms, (int)rq->pid));
    free(res.text);
    return *ret_body ? 0 : errbuf_set(err, -ENOMEM, "out of memory");
}

int eval_json(struct stubctl *sc, const char *db_path, const struct eval_request *rq,
              const char *what, json_t **ret_body, struct errbuf *err)
{
    json_t *eval_body = NULL, *result;
    const char *status, *output;
    int r = eval_run(sc, db_path, rq, &eval_body, err);

    if (r < 0)
        return r;
    status = json_string_value(json_object_get(eval_body, "status"));
    output = json_string_value(json_object_get(eval_body, "output"));
    result = status && strcmp(status, "ok") == 0 && output ? json_loads(output, 0, NULL) : NULL;
    if (!json_is_object(result)) {
        if (!status || strcmp(status, "ok") != 0)
            r = errbuf_set(err, -EPROTO, "pid %d: %s failed (%s): %.400s", (int)rq->pid, what,
                           status ? status : "?", output ? output : "");
        else
            r = errbuf_set(err, -EPROTO, "pid %d: unexpected reply from %s: %.400s", (int)rq->pid,
                           what, output ? output : "");
        json_decref(result);
        result = NULL;
    }
    json_decref(eval_body);
    if (r == 0)
        *ret_body = result;
    return r;
}

char *eval_hex(const char *text)
{
    size_t n = strlen(text);
    char *hex = malloc(2 * n + 1);

    for (size_t i = 0; hex && i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)text[i]);
    if (hex)
        hex[2 * n] = '\0';
    return hex;
}
