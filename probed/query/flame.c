/* flame.c - see flame.h: the query of a target's flame graph. */
#define _GNU_SOURCE
#include "query/flame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *flame_sql(const struct flame_request *req)
{
    char tid_cond[64] = "";
    char *sql = NULL;

    if (req->tid)
        snprintf(tid_cond, sizeof(tid_cond), " AND tid = %d", (int)req->tid);
    /* The inner ORDER BY fixes the order json_group_array sees (SQLite keeps a subquery's
     * order). Each frame's fields stay apart: a name holding ';' or " (" is still one frame. */
    if (asprintf(&sql,
                 "WITH c AS (SELECT stack_id, count(*) AS n FROM samples"
                 " WHERE stack_id <> 0 AND ts_ns >= %lld%s%s"
                 " AND target_id IN (SELECT id FROM targets WHERE pid = %d)"
                 " GROUP BY stack_id)"
                 " SELECT (SELECT json_group_array(json_array(kind, func, file, lineno))"
                 " FROM (SELECT kind, func, file, lineno FROM stacks"
                 " WHERE stacks.stack_id = c.stack_id ORDER BY depth DESC)) AS frames, n"
                 " FROM c ORDER BY frames",
                 (long long)req->since_ns, tid_cond, req->idle ? "" : " AND (state & 1) = 1",
                 (int)req->pid) < 0)
        return NULL;
    return sql;
}
