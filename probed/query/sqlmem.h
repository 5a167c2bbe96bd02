/*
 * sqlmem.h - SQLite's memory, counted per query: a user's query may use at most its own
 * budget, and all queries together at most the daemon's, so no SELECT can take the daemon's
 * memory (printf('%.*c', 900000000, 'x') four at once took 10 GB before).
 *
 * sqlmem_install() hands SQLite an allocator (SQLITE_CONFIG_MALLOC) that wraps the C library's
 * malloc with a 16-byte header naming the budget an allocation was charged to. The thread
 * that runs a query sets that query's budget as its own (sqlmem_enter/leave) around opening,
 * running and closing the connection; an allocation past the budget, or past the total of all
 * queries, fails, and SQLite reports SQLITE_NOMEM (the query's error names the limit). The
 * writer and every other connection run with no budget: never limited, only counted.
 * Threads: any; budgets are per thread, their counters atomic. Memory: the header only.
 * Failure: sqlmem_install() -EBUSY when SQLite was already initialised.
 */
#ifndef PROBED_SQLMEM_H
#define PROBED_SQLMEM_H

#include <stdbool.h>
#include <stdint.h>

/* Before any other SQLite call; @all_queries_bytes: what every query together may hold. */
int sqlmem_install(int64_t all_queries_bytes);

struct sqlmem_budget {
    int64_t limit_bytes;
    int64_t used_bytes; /* now (atomic) */
    int64_t peak_bytes; /* the most it held */
    bool refused;       /* an allocation was refused: over this budget, or over all */
    bool over_all;      /* the refusal was the daemon's total, not this budget */
    bool in_use;        /* claimed by a query (atomic) */
};

/* Charges this thread's SQLite allocations to a budget of @limit_bytes until sqlmem_leave().
 * Budgets come from a static pool and are never freed (SQLite may free a query's allocation
 * later on another thread: a shared file's lock state); NULL when all SQLMEM_BUDGETS are in
 * use or still hold such memory. */
#define SQLMEM_BUDGETS 64
struct sqlmem_budget *sqlmem_enter(int64_t limit_bytes);
void sqlmem_leave(struct sqlmem_budget *b); /* NULL is a no-op */

/* Bytes held by all queries now (GET /v1/status, tests). */
int64_t sqlmem_queries_bytes(void);

#endif
