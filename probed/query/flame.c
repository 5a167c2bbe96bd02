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
    counts = flame_counts_sql(target_cond, &req->filter, false);
    if (!counts)
        return NULL;
    /* The inner ORDER BY fixes the order json_group_array sees (SQLite keeps a subquery's
     * order). Each frame's fields stay apart: a name holding ';' or " (" is still one frame. */
    /* by task: a stack that ran in a task keeps the frames from its task frame in (the event
     * loop's, below it, are the same for every task), and stacks alike after the cut are one;
     * the task frame's depth is looked for only in stacks stack_tasks lists */
    if (asprintf(&sql,
                 "WITH c AS (%s),"
                 " ct AS (SELECT c.stack_id, c.n, %s AS cut FROM c)"
                 " SELECT frames, sum(n) FROM (SELECT"
                 " (SELECT json_group_array(json_array(kind, func, file, lineno))"
                 " FROM (SELECT kind, func, file, lineno FROM stacks"
                 " WHERE stacks.stack_id = ct.stack_id AND depth <= coalesce(ct.cut, depth)"
                 " ORDER BY depth DESC)) AS frames, n"
                 " FROM ct) GROUP BY frames ORDER BY frames",
                 counts,
                 req->by_task ? "(SELECT min(sf.depth) FROM stack_tasks k"
                                " JOIN stack_frames sf ON sf.stack_id = k.stack_id"
                                " JOIN frames f ON f.id = sf.frame_id"
                                " WHERE k.stack_id = c.stack_id AND f.kind = 3)"
                              : "NULL") < 0)
        sql = NULL;
    free(counts);
    return sql;
}
