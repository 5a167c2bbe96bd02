/*
 * livetab.h - python.backtrace: the live Python stacks of the targets, as a virtual table.
 *
 * Columns: pid, tid, thread, depth (0 = innermost), func, file, lineno, first_line, holds_gil,
 * on_cpu, locals (a JSON object of the frame's locals, read only when the column is asked
 * for). Each scan reads the stacks afresh with its own libpyframes handle (the sampler's is
 * not shared across threads): the attached targets in scope, or the one pid of the scope.
 * Threads: the query connection's. Memory: rows live in the cursor, freed with it.
 */
#ifndef PROBED_LIVETAB_H
#define PROBED_LIVETAB_H

#include <sqlite3.h>

#include "query/query.h"

/* Registers module "probed_backtrace"; @scope must outlive the connection. */
int livetab_register(sqlite3 *db, const struct query_scope *scope);

#endif
