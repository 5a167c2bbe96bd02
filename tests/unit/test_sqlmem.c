/* Unit tests: sqlmem.c, SQLite's memory counted per query. */
#include <sqlite3.h>

#include "query/sqlmem.h"
#include "unit.h"

int test_sqlmem_budgets(void);

/* The error of @sql on @db, or "" when it ran. */
static const char *run(sqlite3 *db, const char *sql)
{
    static char msg[256];
    char *e = NULL;

    msg[0] = '\0';
    if (sqlite3_exec(db, sql, NULL, NULL, &e) != SQLITE_OK)
        snprintf(msg, sizeof(msg), "%s", e ? e : sqlite3_errmsg(db));
    sqlite3_free(e);
    return msg;
}

int test_sqlmem_budgets(void)
{
    struct sqlmem_budget *b, *others[SQLMEM_BUDGETS];
    sqlite3 *db = NULL, *free_db = NULL;

    CHECK(sqlmem_install(4 << 20) == 0);
    CHECK(sqlite3_open(":memory:", &free_db) == SQLITE_OK); /* no budget: never limited */
    CHECK_STR(run(free_db, "SELECT length(randomblob(5000000))"), "");
    CHECK(sqlmem_queries_bytes() == 0);

    /* A query's own budget: 2 MiB. A 1 MB value fits, a 2.5 MB one does not. */
    b = sqlmem_enter(2 << 20);
    CHECK(b);
    CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK);
    CHECK(sqlmem_queries_bytes() > 0 && sqlmem_queries_bytes() == b->used_bytes);
    CHECK_STR(run(db, "SELECT length(randomblob(1000000))"), "");
    CHECK(!b->refused && b->peak_bytes > 1000000);
    CHECK_STR(run(db, "SELECT length(randomblob(2500000))"), "out of memory");
    CHECK(b->refused && !b->over_all);
    sqlite3_close(db);
    CHECK(b->used_bytes == 0 && sqlmem_queries_bytes() == 0); /* all given back */
    sqlmem_leave(b);

    /* All queries together: 4 MiB. Two budgets of 4 MiB, the first holding over 1 MB. */
    b = sqlmem_enter(4 << 20);
    CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK);
    CHECK_STR(run(db, "CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(1000000));"), "");
    CHECK(b->used_bytes > 1000000);
    sqlmem_leave(b); /* its memory stays charged: the budget is not reused until it is freed */
    others[0] = sqlmem_enter(4 << 20);
    CHECK(others[0] && others[0] != b);
    {
        sqlite3 *db2 = NULL;
        CHECK(sqlite3_open(":memory:", &db2) == SQLITE_OK);
        CHECK_STR(run(db2, "SELECT length(randomblob(3500000))"), "out of memory");
        CHECK(others[0]->refused && others[0]->over_all);
        sqlite3_close(db2);
    }
    sqlmem_leave(others[0]);
    sqlite3_close(db); /* freed on another budget's watch: charged back to its own */
    CHECK(b->used_bytes == 0 && sqlmem_queries_bytes() == 0);

    /* The pool: every budget claimed, then one more is refused. */
    for (int i = 0; i < SQLMEM_BUDGETS; i++) {
        others[i] = sqlmem_enter(1 << 20);
        CHECK(others[i]);
    }
    CHECK(sqlmem_enter(1 << 20) == NULL);
    for (int i = 0; i < SQLMEM_BUDGETS; i++)
        sqlmem_leave(others[i]);
    sqlmem_leave(NULL);
    CHECK_STR(run(free_db, "SELECT length(randomblob(5000000))"), "");
    sqlite3_close(free_db);
    return 0;
}
