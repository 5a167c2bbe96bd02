/* flame.c - see flame.h: the query of a target's flame graph. */
#define _GNU_SOURCE
#include "query/flame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *flame_sql(const struct flame_request *req)
{
    char target_cond[96];
    char *counts, *sql = NULL;

    snprintf(target_cond, sizeof(target_cond),
             "target_id IN (SELECT id FROM targets WHERE pid = %d)", (int)req->pid);
    counts = flame_counts_sql(target_cond, req->since_ns, (int)req->tid, req->idle, false);
    if (!counts)
        return NULL;
    /* The inner ORDER BY fixes the order json_group_array sees (SQLite keeps a subquery's
     * order). Each frame's fields stay apart: a name holding ';' or " (" is still one frame. */
    if (asprintf(&sql,
                 "WITH c AS (%s)"
                 " SELECT (SELECT json_group_array(json_array(kind, func, file, lineno))"
                 " FROM (SELECT kind, func, file, lineno FROM stacks"
                 " WHERE stacks.stack_id = c.stack_id ORDER BY depth DESC)) AS frames, n"
                 " FROM c ORDER BY frames",
                 counts) < 0)
        sql = NULL;
    free(counts);
    return sql;
}
