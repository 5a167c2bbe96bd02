/*
 * sqlprintf.h - printf() and format() for queries, bounded before they run.
 *
 * SQLite's printf builds what its widths and precisions ask one character at a time, and
 * nothing stops it inside one call: SQLITE_LIMIT_LENGTH fails the result only at the end, and
 * the progress handler runs between statements' steps, not within a function.
 * `printf('%.*c', 2147483647, 'x')` ran 33 s of the daemon's CPU per call under a query time
 * limit of 10 s. These replace both names on a query connection: each width and precision
 * (written, or taken from an argument by '*') is checked against the value limit first, and
 * a call within it is run by SQLite's own printf, on a private in-memory connection, so what
 * it prints is unchanged.
 * Threads: the connection's. Memory: the private connection's statements, freed with the
 * query connection. Failure: the call fails with the limit named.
 */
#ifndef PROBED_SQLPRINTF_H
#define PROBED_SQLPRINTF_H

#include <sqlite3.h>

/* Replaces printf() and format() on @db; each width and precision at most @max_width. */
int sqlprintf_register(sqlite3 *db, int max_width);

#endif
