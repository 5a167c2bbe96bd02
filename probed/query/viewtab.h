/*
 * viewtab.h - a view of the main database under another schema's name: the seeds' tables
 * python.torch_trace and python.variables are the temp views torch_trace and torch_variables.
 * SQLite views cannot read across databases, and `python` is an attached in-memory database
 * (python.backtrace lives there), so each is a virtual table whose scan runs
 * `SELECT * FROM temp.<view>` on the same connection: the scope's filters and the query's
 * limits apply as they do to the view itself.
 *
 *   CREATE VIRTUAL TABLE python.torch_trace USING probed_view(torch_trace)
 *
 * Constraints are not pushed down: SQLite filters the rows of the whole view.
 * Threads: the query connection's.
 */
#ifndef PROBED_VIEWTAB_H
#define PROBED_VIEWTAB_H

#include <sqlite3.h>

/* Registers module "probed_view" on @db. */
int viewtab_register(sqlite3 *db);

#endif
