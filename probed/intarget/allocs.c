/* allocs.c - see allocs.h. */
#define _GNU_SOURCE
#include "intarget/allocs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intarget/eval.h"
#include "log.h"
#include "clock.h"
#include "store/records.h"

#define ALLOCS_TIMEOUT_MS 30000 /* a snapshot of a large heap takes a while */

extern const char allocs_py[]; /* allocs.py, embedded at build time */

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

/* Remembers (or forgets) that tracking is on for @target_id, for a daemon that restarts. */
static void remember_tracking(const char *db_path, int64_t target_id, bool on)
{
    struct errbuf err;

    if (records_allocation_tracking(db_path, target_id, on, &err) < 0)
        log_msg(LOG_WARN, "recording allocation tracking of target %lld: %s", (long long)target_id,
                err.msg);
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

/* What allocs.py printed, checked: its rows' shape (-EPROTO), and its refusal, "error"
 * (-EALREADY: tracking is off). */
static int check_reply(const struct allocs_request *rq, json_t *result, struct errbuf *err)
{
    json_t *rows = json_object_get(result, "rows");

    if (rows && !rows_ok(rows))
        return errbuf_set(err, -EPROTO, "pid %d: unexpected rows from tracemalloc", (int)rq->pid);
    if (json_is_string(json_object_get(result, "error")))
        return errbuf_set(err, -EALREADY, "pid %d: %s (probectl memory %d --allocations on)",
                          (int)rq->pid, json_string_value(json_object_get(result, "error")),
                          (int)rq->pid);
    return 0;
}

int allocs_run(struct stubctl *sc, const char *db_path, const struct allocs_request *rq,
               json_t **ret_body, struct errbuf *err)
{
    struct eval_request ev = {.pid = rq->pid,
                              .grant = rq->grant,
                              .uid = rq->uid,
                              .kind = STUB_RUN,
                              .timeout_ms = ALLOCS_TIMEOUT_MS,
                              .mode = "allocations",
                              /* tracemalloc's start and stop: nothing of ours beside them */
                              .exclusive = rq->action != ALLOCS_SNAPSHOT};
    json_t *result = NULL, *rows;
    int64_t ts_ns = real_ns();
    char *code = script(rq);
    int r;

    if (!code)
        return errbuf_set(err, -ENOMEM, "out of memory");
    ev.code = code;
    r = eval_json(sc, db_path, &ev, "tracemalloc", &result, err);
    free(code);
    if (rq->action == ALLOCS_OFF) /* also when the process is gone */
        remember_tracking(db_path, rq->target_id, false);
    if (r == 0)
        r = check_reply(rq, result, err);
    rows = json_object_get(result, "rows");
    if (r == 0 && json_array_size(rows) > 0 &&
        (r = records_allocations(db_path, rq->target_id, ts_ns, rows, err)) < 0)
        log_msg(LOG_ERR, "pid %d: %s", (int)rq->pid, err->msg);
    if (r < 0) {
        json_decref(result);
        return r;
    }
    if (rq->action == ALLOCS_ON)
        remember_tracking(db_path, rq->target_id, true);
    json_object_set_new(result, "ts_ns", json_integer(ts_ns));
    *ret_body = result;
    return 0;
}
