/*
 * livetab.h - python.backtrace and python.tasks: the live Python stacks and asyncio tasks of
 * the targets, as virtual tables.
 *
 * Columns: pid, tid, thread, depth (0 = innermost), func, file, lineno, first_line, holds_gil,
 * on_cpu, locals (a JSON object of the frame's locals, read only when the column is asked
 * for), task (the asyncio task the thread runs now: its name, else its id; NULL: none). Each
 * scan reads the stacks afresh with its own libpyframes handle (the sampler's is not shared
 * across threads): the attached targets in scope, or the one pid of the scope.
 * Threads: the query connection's. Memory: rows live in the cursor, freed with it.
 */
#ifndef PROBED_LIVETAB_H
#define PROBED_LIVETAB_H

#include <sqlite3.h>

#include "query/query.h"

/* Registers module "probed_backtrace"; @scope must outlive the connection. */
int livetab_register(sqlite3 *db, const struct query_scope *scope);

/*
 * python.tasks: the asyncio tasks of the same targets (pyf_target__tasks), one row per frame of
 * each task's stack, innermost first (a task with no frames, done or cancelled, has one row
 * with NULL depth, func, file and lineno). Columns: pid, task (its address, "0x..."), name,
 * state (waiting, running, scheduled, done, cancelled), tid (running: its thread), depth,
 * func, file, lineno, waits_for (the awaited future's type), awaited_by (a JSON array of the
 * tasks awaiting it). Registers module "probed_tasks".
 */
int livetab_register_tasks(sqlite3 *db, const struct query_scope *scope);

#endif
