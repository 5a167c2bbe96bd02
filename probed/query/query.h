/*
 * query.h - read-only SQL over the store and the live stacks (probectl query, /v1/query).
 *
 * A query connection opens the database read-only, attaches an in-memory schema `python`
 * holding the live-stack virtual table python.backtrace (livetab.h), creates the documented
 * views (schema/views.sql) and then installs an authorizer that refuses anything but
 * reading: writes, ATTACH, DDL and state-changing PRAGMAs are refused with the reason. A
 * progress handler interrupts a query that runs past its time limit. A scoped user (not
 * root, or --pid) sees targets, threads and samples through temp views filtered to its
 * processes and cannot read the raw tables directly. Every query is bounded (QUERY_* below):
 * past a bound it fails with the bound named, or its reply is cut ("truncated").
 * Threads: a connection belongs to the thread that opened it (a query worker).
 * Memory: SQLite's, counted per query and for all queries (sqlmem.h); the reply is the
 * caller's.
 * Failure: -EINVAL refused or invalid (the limit named), -ETIMEDOUT interrupted by the time
 * limit, -EAGAIN too many queries hold memory now, -EIO ours; the message for the user in @err.
 */
#ifndef PROBED_QUERY_H
#define PROBED_QUERY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

/* Who asks, and about what. */
struct query_scope {
    bool root; /* false: only processes owned by uid */
    uid_t uid;
    pid_t pid; /* 0: every target in scope */
    /* the processes being sampled, of that user (or all, for root), when the query started:
     * what python.backtrace reads when no pid is asked for (borrowed) */
    const pid_t *live_pids;
    size_t n_live_pids;
    /* the daemon's settings (config_json: key, value, default, live, doc), borrowed: what
     * information_schema.df_settings and settings show; NULL: none */
    json_t *settings;
};

struct query_limits {
    int64_t time_ms; /* interrupted after this long */
    int64_t max_rows;
};

/* What one query may consume besides time and rows: SQLite's memory (sqlmem.h: per query, and
 * all queries together), the longest value (a string or blob; also caps what one function call
 * can build, which no progress handler interrupts), the SQL text, and the reply. */
#define QUERY_MEMORY_BYTES (64LL << 20)
#define QUERY_ALL_MEMORY_BYTES (256LL << 20)
#define QUERY_VALUE_BYTES (8 << 20)
#define QUERY_SQL_BYTES (1 << 20)
#define QUERY_REPLY_BYTES (32LL << 20)

/* Runs @sql and returns {"columns": [...], "rows": [[...], ...], "truncated": bool} (caller
 * owns it: json_decref). */
int query_run(const char *db_path, const struct query_scope *scope, const struct query_limits *lim,
              const char *sql, json_t **ret, struct errbuf *err);

#endif
