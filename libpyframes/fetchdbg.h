/*
 * fetchdbg.h - debug files fetched from debuginfod servers in the background, by build-id.
 *
 * A library with no symbol table (Ubuntu's libc) and no debug file on this machine has its
 * functions named by library and offset. Where the daemon runs with DEBUGINFOD_URLS (the
 * variable elfutils, gdb and perf read), its debug file is asked of those servers with
 * elfutils' client (libdebuginfod), which keeps it in its cache by build-id, where
 * modfiles.c looks (DEBUGINFOD_CACHE_PATH, else ~/.cache/debuginfod_client). A fetch can take
 * seconds to minutes (DEBUGINFOD_TIMEOUT, DEBUGINFOD_MAXSIZE bound it), so it never runs in
 * the thread that asked: fetchdbg_request() queues the build-id and returns; one thread of
 * the fetcher's own fetches them in turn; each file that lands bumps a generation, and the
 * processes' symbol readers start again from their files when they see it changed
 * (pyf_native__reread_maps), the shared table of that build-id built anew (symtab.c).
 *
 * Bounded: FETCHDBG_PENDING build-ids wait at most (more are dropped, and asked again when
 * next wanted), each build-id is asked once (a failure again after FETCHDBG_RETRY_S), and
 * FETCHDBG_KNOWN are remembered (then the oldest answers are forgotten).
 * Threads: request/landed/generation/stats from any thread; start/stop from the owner's.
 * Memory: a fixed table, allocated at start. Failure: fetchdbg_start() returns -errno with a
 * message (no DEBUGINFOD_URLS, no memory, no thread); a fetch that fails is counted.
 */
#ifndef PYF_FETCHDBG_H
#define PYF_FETCHDBG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pyframes.h"

#define FETCHDBG_PENDING 64
#define FETCHDBG_KNOWN 1024
#define FETCHDBG_RETRY_S 600
#define FETCHDBG_ID_MAX 64

struct fetchdbg;

struct fetchdbg_stats {
    uint64_t requested; /* build-ids queued */
    uint64_t fetched;   /* debug files that landed */
    uint64_t failed;    /* fetches that found nothing or failed (no server has it, timeout) */
    uint64_t dropped;   /* requests refused: the queue was full */
};

int fetchdbg_start(struct fetchdbg **ret, struct pyf_err *reterr);
void fetchdbg_stop(struct fetchdbg *f); /* a fetch under way is cut short; NULL: a no-op */

/* Queues build-id @id (@len bytes) unless asked already; never blocks on a fetch. */
void fetchdbg_request(struct fetchdbg *f, const uint8_t *id, size_t len);
/* Whether a debug file for @id landed through this fetcher. */
bool fetchdbg_landed(struct fetchdbg *f, const uint8_t *id, size_t len);
/* Counts the files landed: a reader that saw another value reads its modules again. */
uint64_t fetchdbg_generation(struct fetchdbg *f);
void fetchdbg_stats(struct fetchdbg *f, struct fetchdbg_stats *ret);

#endif
