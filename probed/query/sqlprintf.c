/* sqlprintf.c - see sqlprintf.h. */
#define _GNU_SOURCE
#include "query/sqlprintf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARGS_MAX 128 /* SQLITE_MAX_FUNCTION_ARG's default; query.c sets 64 */

struct sqlprintf {
    sqlite3 *plain;               /* :memory:, SQLite's printf as it is */
    sqlite3_stmt *call[ARGS_MAX]; /* "SELECT printf(?1, ..., ?n)", by n - 1 */
    int max_width;
};

static void sqlprintf_free(void *arg)
{
    struct sqlprintf *sp = arg;

    for (int i = 0; i < ARGS_MAX; i++)
        sqlite3_finalize(sp->call[i]);
    sqlite3_close(sp->plain);
    free(sp);
}

/* The number at *@p (digits), or the '*' argument's, at most @max; -1 past @max. */
static long long width_of(const char **p, sqlite3_value **argv, int argc, int *next)
{
    long long v = 0;

    if (**p == '*') {
        (*p)++;
        v = *next < argc ? sqlite3_value_int64(argv[(*next)++]) : 0;
        return v < 0 ? (v == INT64_MIN ? INT64_MAX : -v) : v; /* negative: left-justified */
    }
    for (; **p >= '0' && **p <= '9'; (*p)++)
        v = v > 100000000000LL ? v : v * 10 + (**p - '0');
    return v;
}

/* Whether each width and precision of @fmt (with @argv for '*') is within @max. */
static int check_format(const char *fmt, sqlite3_value **argv, int argc, long long max, char *why,
                        size_t why_size)
{
    int next = 0; /* the next argument a conversion takes */

    for (const char *p = fmt; p && *p; p++) {
        long long w, prec = 0;
        if (*p != '%')
            continue;
        p++;
        while (*p && strchr("-+ 0#,!", *p))
            p++;
        w = width_of(&p, argv, argc, &next);
        if (*p == '.') {
            p++;
            prec = width_of(&p, argv, argc, &next);
        }
        while (*p == 'l')
            p++;
        if (w > max || prec > max) {
            snprintf(why, why_size,
                     "printf(): a width or precision of %lld is over %lld (the query value limit)",
                     w > prec ? w : prec, max);
            return -1;
        }
        if (!*p)
            break;
        if (*p != '%')
            next++; /* the conversion's own value */
    }
    return 0;
}

static void fn_printf(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct sqlprintf *sp = sqlite3_user_data(ctx);
    const char *fmt;
    sqlite3_stmt *q;
    char why[160];

    if (argc < 1 || argc > ARGS_MAX)
        return;
    fmt = (const char *)sqlite3_value_text(argv[0]);
    if (check_format(fmt, argv + 1, argc - 1, sp->max_width, why, sizeof(why)) < 0) {
        sqlite3_result_error(ctx, why, -1);
        return;
    }
    if (!sp->plain && (sqlite3_open(":memory:", &sp->plain) != SQLITE_OK ||
                       (sqlite3_limit(sp->plain, SQLITE_LIMIT_LENGTH, sp->max_width), 0))) {
        sqlite3_close(sp->plain);
        sp->plain = NULL;
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (!(q = sp->call[argc - 1])) {
        char sql[32 + ARGS_MAX * 6] = "SELECT printf(?1";
        size_t len = strlen(sql);
        for (int i = 2; i <= argc; i++)
            len += (size_t)snprintf(sql + len, sizeof(sql) - len, ",?%d", i);
        snprintf(sql + len, sizeof(sql) - len, ")");
        if (sqlite3_prepare_v2(sp->plain, sql, -1, &sp->call[argc - 1], NULL) != SQLITE_OK) {
            sqlite3_result_error(ctx, sqlite3_errmsg(sp->plain), -1);
            return;
        }
        q = sp->call[argc - 1];
    }
    for (int i = 0; i < argc; i++)
        sqlite3_bind_value(q, i + 1, argv[i]);
    if (sqlite3_step(q) == SQLITE_ROW)
        sqlite3_result_value(ctx, sqlite3_column_value(q, 0));
    else
        sqlite3_result_error(ctx, sqlite3_errmsg(sp->plain), -1);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
}

int sqlprintf_register(sqlite3 *db, int max_width)
{
    struct sqlprintf *sp = calloc(1, sizeof(*sp));
    int rc;

    if (!sp)
        return SQLITE_NOMEM;
    sp->max_width = max_width;
    /* printf's copy is freed with the connection; format() borrows the same */
    rc = sqlite3_create_function_v2(db, "printf", -1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, sp,
                                    fn_printf, NULL, NULL, sqlprintf_free);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function_v2(db, "format", -1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, sp,
                                        fn_printf, NULL, NULL, NULL);
    return rc;
}
