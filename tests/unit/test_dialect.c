/* Unit tests: dialect.c, the seeds' SQL (now() - interval '5 min', hour(t)) on SQLite. */
#include <sqlite3.h>
#include <stdlib.h>

#include "query/dialect.h"
#include "unit.h"

int test_dialect_rewrite(void);
int test_dialect_functions(void);

/* @sql rewritten, or "(unchanged)". */
static const char *rewrite(const char *sql)
{
    static char buf[1024];
    char *out = NULL;
    int r = dialect_rewrite(sql, &out, NULL);

    snprintf(buf, sizeof(buf), "%s", r == 1 ? out : r == 0 ? "(unchanged)" : "(error)");
    free(out);
    return buf;
}

int test_dialect_rewrite(void)
{
    double s;

    CHECK_STR(rewrite("SELECT * FROM memory_usage WHERE timestamp > now() - interval '5 min'"),
              "SELECT * FROM memory_usage WHERE timestamp > now_offset(-300)");
    CHECK_STR(rewrite("SELECT avg(gpu_util) FROM gpu_metrics WHERE timestamp > now() - 60"),
              "SELECT avg(gpu_util) FROM gpu_metrics WHERE timestamp > now_offset(-60)");
    CHECK_STR(rewrite("select 1 where x > NOW ( ) - INTERVAL '1 hour 30 minutes' + 1.5"),
              "select 1 where x > now_offset(-5398.5)");
    CHECK_STR(rewrite("SELECT interval '5' MINUTE, interval '2d'"), "SELECT (300), (172800)");
    /* nanoseconds beside an _ns column, either side */
    CHECK_STR(rewrite("SELECT count(*) FROM samples WHERE ts_ns >= now() - interval '1 s'"),
              "SELECT count(*) FROM samples WHERE ts_ns >= (now_ns() + -1000000000)");
    CHECK_STR(rewrite("SELECT 1 WHERE now() - 2 < s.\"first_ns\""),
              "SELECT 1 WHERE (now_ns() + -2000000000) < s.\"first_ns\"");
    CHECK_STR(rewrite("SELECT 1 WHERE ts_ns > now()"), "SELECT 1 WHERE ts_ns > (now_ns() + 0)");
    /* now() alone is the function; a product is not an offset */
    CHECK_STR(rewrite("SELECT now()"), "(unchanged)");
    CHECK_STR(rewrite("SELECT now() - 60 * 5"), "(unchanged)");
    /* inside literals, quoted names and comments: never */
    CHECK_STR(rewrite("SELECT 'now() - interval ''5 min''', \"interval\" -- now() - 1\n"
                      "/* interval '5 min' */ FROM t"),
              "(unchanged)");
    CHECK_STR(rewrite("SELECT x'00', [now] FROM t"), "(unchanged)");
    /* not a duration: left for SQLite to refuse, in the user's words */
    CHECK_STR(rewrite("SELECT interval '5 fortnights'"), "(unchanged)");
    CHECK_STR(rewrite("SELECT EXTRACT(hour FROM timestamp) FROM memory_usage"),
              "SELECT date_part('hour', timestamp) FROM memory_usage");
    /* unterminated: copied as is */
    CHECK_STR(rewrite("SELECT 'unterminated now() - 1"), "(unchanged)");
    CHECK_STR(rewrite("SELECT now() - interval '"), "(unchanged)");

    {
        struct dialect_swaps swaps = {0};
        char *out = NULL, *name;
        CHECK(dialect_rewrite("SELECT now() - interval '5 min', EXTRACT(hour FROM t) FROM x", &out,
                              &swaps) == 1);
        CHECK(swaps.n == 2);
        name = dialect_column_name(&swaps, "now_offset(-300)");
        CHECK_STR(name, "now() - interval '5 min'");
        free(name);
        name = dialect_column_name(&swaps, "date_part('hour', t)");
        CHECK_STR(name, "EXTRACT(hour FROM t)");
        free(name);
        CHECK(dialect_column_name(&swaps, "count(*)") == NULL);
        dialect_swaps_free(&swaps);
        free(out);
    }
    CHECK(dialect_interval_seconds("1 hour 30 minutes", 17, &s) == 0 && s == 5400);
    CHECK(dialect_interval_seconds("250ms", 5, &s) == 0 && s == 0.25);
    CHECK(dialect_interval_seconds("", 0, &s) < 0);
    CHECK(dialect_interval_seconds("5", 1, &s) < 0);
    CHECK(dialect_interval_seconds("5 min extra", 11, &s) < 0);
    return 0;
}

/* The one value @sql selects, as text. */
static const char *value(sqlite3 *db, const char *sql)
{
    static char buf[256];
    sqlite3_stmt *q = NULL;

    snprintf(buf, sizeof(buf), "(error)");
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        snprintf(buf, sizeof(buf), "%s",
                 sqlite3_column_type(q, 0) == SQLITE_NULL
                     ? "NULL"
                     : (const char *)sqlite3_column_text(q, 0));
    else
        snprintf(buf, sizeof(buf), "(error: %s)", sqlite3_errmsg(db));
    sqlite3_finalize(q);
    return buf;
}

int test_dialect_functions(void)
{
    sqlite3 *db = NULL;

    CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK);
    CHECK(dialect_register(db) == SQLITE_OK);
    /* 2026-11-28 13:45:30.250 UTC, as text, nanoseconds and seconds */
    CHECK_STR(value(db, "SELECT hour('2026-11-28 13:45:30.250')"), "13");
    CHECK_STR(value(db, "SELECT minute(1795873530250000000)"), "45");
    CHECK_STR(value(db, "SELECT second(1795873530.25)"), "30");
    CHECK_STR(value(db, "SELECT year('2026-11-28T13:45:30Z') || month('2026-11-28') ||"
                        " day('2026-11-28 13:45')"),
              "20261128");
    CHECK_STR(value(db, "SELECT hour('2026-11-28T13:45:30+02:00')"), "11");
    CHECK_STR(value(db, "SELECT date_part('dow', '2026-11-28')"), "6");
    CHECK_STR(value(db, "SELECT date_part('epoch', '1970-01-01 00:01:00.5')"), "60.5");
    CHECK_STR(value(db, "SELECT date_trunc('hour', '2026-11-28 13:45:30.250')"),
              "2026-11-28 13:00:00.000");
    CHECK_STR(value(db, "SELECT date_trunc('minute', 1795873530250000000)"), "1795873500000000000");
    CHECK_STR(value(db, "SELECT date_trunc('week', '2026-11-28 13:45')"),
              "2026-11-23 00:00:00.000");
    CHECK_STR(value(db, "SELECT date_trunc('month', '2026-11-28')"), "2026-11-01 00:00:00.000");
    CHECK_STR(value(db, "SELECT to_timestamp(0)"), "1970-01-01 00:00:00.000");
    CHECK_STR(value(db, "SELECT to_timestamp(1795873530250000000)"), "2026-11-28 13:45:30.250");
    CHECK_STR(value(db, "SELECT to_timestamp(-1.5)"), "1969-12-31 23:59:58.500");
    CHECK_STR(value(db, "SELECT hour(NULL) IS NULL AND hour('yesterday') IS NULL"), "1");
    CHECK_STR(value(db, "SELECT date_part('fortnight', 0)"),
              "(error: date_part(): the first argument is one of 'year', 'month', 'day', 'hour',"
              " 'minute', 'second', 'dow', 'doy', 'week', 'epoch')");
    /* now(): the views' format, and now_offset() seconds from it */
    CHECK_STR(value(db, "SELECT length(now()) = 23 AND now() LIKE '____-__-__ __:__:__.___'"), "1");
    CHECK_STR(value(db, "SELECT now_offset(-3600) < now() AND now_offset(60) > now()"), "1");
    sqlite3_close(db);
    return 0;
}
