/*
 * export.h - `probectl export --db FILE`: a self-contained SQLite copy of what the caller may
 * read of the daemon's database, for sqlite3, DuckDB or pandas.
 *
 * Everything goes through /v1/query, so the copy holds what the caller's queries see (their
 * own processes' rows): each table of the daemon's schema (its DDL from sqlite_master), the
 * samples unpacked into rows of a plain table `samples` (paged by time, target by target),
 * the indexes, and the documented views (TEMP on the daemon's query connections) as real
 * views, minute_counts one over stack_counts; a view that needs the daemon's functions is left
 * out and said. --pid and --since narrow it. Rows written while the copy runs may or may not
 * be in it; none is in it twice.
 * Threads: one. Memory: a page of rows (100 000) at a time. Failure: exit 1 after saying why,
 * the half-written file removed; 2 on usage.
 */
#ifndef PROBECTL_EXPORT_H
#define PROBECTL_EXPORT_H

int export_main(int argc, char **argv);

#endif
