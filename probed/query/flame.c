/* flame.c - see flame.h: the query of a target's flame graph. */
#define _GNU_SOURCE
#include "query/flame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *flame_sql(const struct flame_request *req)
{
    char target_cond[96], thread_label[400] = "";
    char *counts, *sql = NULL;

    snprintf(target_cond, sizeof(target_cond),
             "target_id IN (SELECT id FROM targets WHERE pid = %d)", (int)req->pid);
    counts = flame_counts_sql(target_cond, &req->filter, req->by_thread ? FLAME_BY_THREAD : 0);
    if (!counts)
        return NULL;
    /* by thread: each stack under a "label" frame naming its thread ("NAME (tid T)"; its file
     * the name and its line the tid, for pprof's labels), deeper than any frame so it sorts
     * first (the root) */
    if (req->by_thread)
        snprintf(thread_label, sizeof(thread_label),
                 " UNION ALL SELECT 'label', n.name || ' (tid ' || ct.tid || ')', n.name, ct.tid,"
                 " 0, 1000000000 FROM (SELECT coalesce((SELECT coalesce(nullif(h.name, ''),"
                 " h.os_name) FROM threads h WHERE h.tid = ct.tid AND h.%s LIMIT 1), 'thread')"
                 " AS name) n",
                 target_cond);
    /* The inner ORDER BY fixes the order json_group_array sees (SQLite keeps a subquery's
     * order). Each frame's fields stay apart: a name holding ';' or " (" is still one frame. */
    /* by task: a stack that ran in a task keeps the frames from its task frame in (the event
     * loop's, below it, are the same for every task), and stacks alike after the cut are one;
     * the task frame's depth is looked for only in stacks stack_tasks lists */
    /* without lines (py-spy's --nolineno): a Python frame's line is 0, so the frames of one
     * function are one, and the stacks alike after that one row */
    if (asprintf(&sql,
                 "WITH c AS (%s),"
                 " ct AS (SELECT c.*, %s AS cut FROM c)"
                 " SELECT frames, sum(n) FROM (SELECT"
                 " (SELECT json_group_array(json_array(kind, func, file, lineno, first_line))"
                 " FROM (SELECT kind, func, file, %s AS lineno, coalesce(first_line, 0)"
                 " AS first_line, depth FROM stacks"
                 " WHERE stacks.stack_id = ct.stack_id AND depth <= coalesce(ct.cut, depth)"
                 "%s ORDER BY 6 DESC)) AS frames, n"
                 " FROM ct) GROUP BY frames ORDER BY frames",
                 counts,
                 req->by_task ? "(SELECT min(sf.depth) FROM stack_tasks k"
                                " JOIN stack_frames sf ON sf.stack_id = k.stack_id"
                                " JOIN frames f ON f.id = sf.frame_id"
                                " WHERE k.stack_id = c.stack_id AND f.kind = 3)"
                              : "NULL",
                 req->no_lines ? "CASE kind WHEN 'python' THEN 0 ELSE lineno END" : "lineno",
                 thread_label) < 0)
        sql = NULL;
    free(counts);
    return sql;
}
