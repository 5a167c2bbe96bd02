/*
 * store.h - the SQLite writer: schema migrations, batched writes, retention (outbox -> DB).
 *
 * store_open() applies the schema files the database has not seen (PRAGMA user_version),
 * switches it to WAL (readers never block the writer, a crash loses at most the last
 * uncommitted transaction) and prepares every statement once. store__write() writes one
 * outbox half in one transaction.
 * Threads: one connection, used by one thread at a time (the writer thread after start-up).
 * Memory: statements prepared once at open; a write binds the outbox half's rows in place.
 * Failure: -errno-style codes with a message in @err (what failed, SQLite's reason).
 */
#ifndef PROBED_STORE_H
#define PROBED_STORE_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errbuf.h"

#include "sample/outbox.h"

struct store;

int store_open(const char *path, struct store **ret, struct errbuf *err);

/* A read-write connection of a worker's own to the database at @path, for the rows written
 * outside the writer thread (records.h); waits up to 5 s on a lock. -EIO with the reason in
 * @err. Close with sqlite3_close(). */
int store_connect(const char *path, sqlite3 **ret, struct errbuf *err);
void store_free(struct store *st); /* NULL is a no-op */

/* Writes @h (targets, definitions, samples, ends) in one transaction. */
int store__write(struct store *st, const struct ob_half *h, struct errbuf *err);

/* The next free targets.id. */
int store__next_target_id(struct store *st, int64_t *ret, struct errbuf *err);

/* Calls @fn for each target the store says was being sampled (not ended). */
#define STORE_FOLLOW_CHILDREN 1u     /* attach --children */
#define STORE_ALLOCATION_TRACKING 2u /* allocation tracking was on */
#define STORE_TORCH_TRACING 4u       /* the torch trace was on */
#define STORE_NATIVE 8u              /* attach --native */
#define STORE_CATCHING 16u           /* `probectl catch` was on */
#define STORE_NCCL 32u               /* attach --nccl */
typedef void (*store_target_fn)(int64_t id, int32_t pid, int64_t start_time, int32_t rate_hz,
                                unsigned flags, void *ctx);
int store__live_targets(struct store *st, store_target_fn fn, void *ctx, struct errbuf *err);

/* Deletes samples older than @before_ns, then the oldest ones until the live data fits in
 * @max_bytes (0: no limit). Returns the number of samples deleted, or < 0. */
int64_t store__retain(struct store *st, int64_t before_ns, int64_t max_bytes, struct errbuf *err);

/* Merges each thread's sample blocks that start in [@from_ns, @to_ns) (a minute: the writer
 * calls it for each one past) into as few as hold them (blocks.h: a block spans at most
 * BLOCK_SPAN_NS): a row, its key and its stack list per minute instead of per write, and a
 * run of one stack longer than a write. The samples and stack_counts stay as they were. A
 * thread whose blocks of the range do not all decode keeps them as written; the others are
 * merged. One transaction. Returns the blocks merged away. */
int64_t store__compact(struct store *st, int64_t from_ns, int64_t to_ns, struct errbuf *err);

/* Keeps, of each thread's CPU readings (thread_cpu) in [@from_ns, @to_ns), the last: the
 * writer thins each minute an hour old to one reading per thread, as a week of a reading per
 * thread a second would outweigh the samples. Deltas between the readings kept still give
 * each thread's CPU use (view thread_cpu_usage). One transaction. Returns the rows deleted. */
int64_t store__thin(struct store *st, int64_t from_ns, int64_t to_ns, struct errbuf *err);

/* Bytes of live data (pages in use x page size). */
int64_t store__size(struct store *st);

/* The writer's page cache: bytes it holds now (at most about STORE_CACHE_KIB KiB), or -1. */
#define STORE_CACHE_KIB "2000"
int64_t store__cache_bytes(struct store *st);

#endif
