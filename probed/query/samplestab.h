/*
 * samplestab.h - `samples`: every stored sample as a row (target_id, ts_ns, tid, stack_id,
 * state), a virtual table over the blocks they are stored in (store/blocks.h, table
 * sample_blocks).
 *
 * Eponymous (main.samples, as the table of a row per sample was): a query's equality on
 * target_id and tid and its bounds on ts_ns choose the blocks read (the key of sample_blocks
 * is target_id, first_ns, tid), and only those are unpacked; the rows come in block order
 * (per target, per thread, by time), and SQLite sorts them when asked to.
 *
 * `minute_counts` (target_id, ts_ns, tid, stack_id, state, n): stack_counts' minutes, a row
 * per thread, stack and state of each minute (ts_ns its start), read the same way: an equality
 * on target_id and tid and bounds on ts_ns choose the key ranges read (target by target: a
 * query of the last 5 minutes reads 5 minutes of each, whatever the store holds), where a
 * plain view over stack_counts would compute every row's start to compare it.
 * Threads: the query connection's. Memory: a cursor holds one block's reader (~33 KB) and its
 * own statement. Failure: a damaged block ends the scan with an error naming it.
 */
#ifndef PROBED_SAMPLESTAB_H
#define PROBED_SAMPLESTAB_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

/* What the modules share with the connection's owner (query.c). */
struct samplestab_state {
    bool internal;         /* a module prepares its own read of main's tables (which a user's
                            * statements may not read): the authorizer lets it */
    uint64_t samples_read; /* samples unpacked, for the statement's owner to reset and read */
};

/* Registers `samples` and `minute_counts` on @db, sharing @state. */
int samplestab_register(sqlite3 *db, struct samplestab_state *state);

#endif
