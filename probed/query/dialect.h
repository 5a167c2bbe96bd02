/*
 * dialect.h - the seed tools' SQL (DataFusion's and Postgres's small conveniences) run as
 * written, on SQLite.
 *
 * Two parts:
 *   - functions, registered on each query connection (dialect_register): now() (the time now,
 *     as the views' `timestamp` text: UTC, 'YYYY-MM-DD HH:MM:SS.fff'), year() month() day()
 *     hour() minute() second(), date_part('hour', t), date_trunc('hour', t), to_timestamp(t).
 *     A time is either such text or a number: nanoseconds since the epoch (ts_ns, any
 *     magnitude past 1e14) or seconds; date_trunc() answers in the kind it was given.
 *   - a rewrite of what SQLite cannot parse or compute (dialect_rewrite), over SQLite's tokens
 *     (string literals, quoted identifiers and comments kept whole, never searched inside):
 *       interval '5 min'                   -> (300), seconds (us ... weeks; singular, plural,
 *                                             abbreviated; several units: '1 hour 30 minutes')
 *       now() - interval '5 min', now() - 60
 *                                          -> now_offset(-300), now_offset(-60): the text time
 *       ts_ns > now() - interval '5 min'   -> ts_ns > (now_ns() + ...): beside a column whose
 *                                             name ends in _ns (either side of the comparison),
 *                                             the time in nanoseconds
 *     Anything else is copied byte for byte: a query the rewrite does not touch is run as given.
 * Threads: any (no state). Memory: dialect_rewrite's result and swaps are malloc'd, the
 * caller's to free.
 * Failure: dialect_rewrite returns 0 (nothing to rewrite; *ret NULL), 1 (rewritten), or
 * -ENOMEM.
 */
#ifndef PROBED_QUERY_DIALECT_H
#define PROBED_QUERY_DIALECT_H

#include <sqlite3.h>
#include <stddef.h>

/* What a rewrite wrote for what the user wrote, to name result columns in the user's words
 * (SQLite names an unaliased column by its expression's text: now_offset(-300)). */
struct dialect_swap {
    char *made, *written;
};
struct dialect_swaps {
    struct dialect_swap *v;
    size_t n;
};

int dialect_register(sqlite3 *db); /* SQLITE_OK or an SQLite error code */
/* @swaps (NULL: not wanted) gets each replacement; free it with dialect_swaps_free(). */
int dialect_rewrite(const char *sql, char **ret, struct dialect_swaps *swaps);
void dialect_swaps_free(struct dialect_swaps *swaps);
/* @name with each replacement in it given back its user's text: malloc'd, NULL when @name
 * holds none (or no memory: @name is then shown as it is). */
char *dialect_column_name(const struct dialect_swaps *swaps, const char *name);

/* Parses @s, 'N unit [N unit ...]' as interval literals say it, into seconds: 0, or -EINVAL. */
int dialect_interval_seconds(const char *s, size_t len, double *ret);

#endif
