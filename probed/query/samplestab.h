/*
 * samplestab.h - `samples`: every stored sample as a row (target_id, ts_ns, tid, stack_id,
 * state), a virtual table over the blocks they are stored in (store/blocks.h, table
 * sample_blocks).
 *
 * Eponymous (main.samples, as the table of a row per sample was): a query's equality on
 * target_id and tid and its bounds on ts_ns choose the blocks read (the key of sample_blocks
 * is target_id, first_ns, tid), and only those are unpacked; the rows come in block order
 * (per target, per thread, by time), and SQLite sorts them when asked to.
 * Threads: the query connection's. Memory: a cursor holds one block's reader (~33 KB) and its
 * own statement. Failure: a damaged block ends the scan with an error naming it.
 */
#ifndef PROBED_SAMPLESTAB_H
#define PROBED_SAMPLESTAB_H

#include <sqlite3.h>
#include <stdbool.h>

/* Registers `samples` on @db. While the module prepares its own read of main.sample_blocks
 * (which a user's statements may not read), *@internal is true: the authorizer lets it. */
int samplestab_register(sqlite3 *db, bool *internal);

#endif
