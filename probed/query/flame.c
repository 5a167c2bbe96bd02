/* flame.c - see flame.h: the query of a target's flame graph. */
#define _GNU_SOURCE
#include "query/flame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MINUTE_NS 60000000000LL

char *flame_sql(const struct flame_request *req)
{
    char tid_cond[40] = "", filter[128];
    char *sql = NULL;
    /* The window [since, now) in the counts of schema/0012_stack_counts.sql: whole hours from
     * @hour on, the whole minutes before that hour from @minute on, and the samples themselves
     * only before @minute (at most a minute's). The time it takes grows with the hours. */
    long long since = req->since_ns > 0 ? req->since_ns : 0;
    long long minute = (since + MINUTE_NS - 1) / MINUTE_NS, hour = (minute + 59) / 60;

    if (req->tid)
        snprintf(tid_cond, sizeof(tid_cond), " AND tid = %d", (int)req->tid);
    snprintf(filter, sizeof(filter), " AND stack_id <> 0%s%s", tid_cond,
             req->idle ? "" : " AND (state & 1) = 1");
    /* The inner ORDER BY fixes the order json_group_array sees (SQLite keeps a subquery's
     * order). Each frame's fields stay apart: a name holding ';' or " (" is still one frame. */
    if (asprintf(&sql,
                 "WITH t AS (SELECT id FROM targets WHERE pid = %d),"
                 " parts AS (SELECT stack_id, n FROM stack_counts WHERE target_id IN t"
                 " AND span_s = 3600 AND bucket >= %lld%s"
                 " UNION ALL SELECT stack_id, n FROM stack_counts WHERE target_id IN t"
                 " AND span_s = 60 AND bucket >= %lld AND bucket < %lld%s"
                 " UNION ALL SELECT stack_id, 1 FROM samples WHERE target_id IN t"
                 " AND ts_ns >= %lld AND ts_ns < %lld%s),"
                 " c AS (SELECT stack_id, sum(n) AS n FROM parts GROUP BY stack_id)"
                 " SELECT (SELECT json_group_array(json_array(kind, func, file, lineno))"
                 " FROM (SELECT kind, func, file, lineno FROM stacks"
                 " WHERE stacks.stack_id = c.stack_id ORDER BY depth DESC)) AS frames, n"
                 " FROM c ORDER BY frames",
                 (int)req->pid, hour, filter, minute, hour * 60, filter, since, minute * MINUTE_NS,
                 filter) < 0)
        return NULL;
    return sql;
}
