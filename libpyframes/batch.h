/*
 * batch.h - many small remote reads gathered into one process_vm_readv().
 *
 * A sample wants dozens of small structs: a thread state, frames, the heads of code objects.
 * A batch collects them as ranges, merges a range into the previous one when it starts
 * within BATCH_GAP bytes after it (the kernel copies one contiguous range in one go, which is
 * both cheaper than many small ones and much closer to a single instant), reads everything
 * with one syscall, and then answers "where in my buffer is remote address X".
 * Spans are copied in the order they were added, which is how a caller reads the word that
 * validates a snapshot after the data it validates.
 *
 * Threads: the owner's. Memory: the batch owns its buffers (batch_free). Failure: -errno.
 */
#ifndef PYF_BATCH_H
#define PYF_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "remote.h"

/* Less than a page minus a frame, so a merged gap never covers a whole unmapped page. */
#define BATCH_GAP 1024

struct batch_span {
    uint64_t lo, hi; /* remote [lo, hi) */
    size_t off;      /* where it lands in buf */
};

struct batch {
    uint8_t *buf;
    size_t cap, used;
    struct batch_span *spans;
    struct iovec *liov, *riov;
    size_t n, max;
};

int batch_init(struct batch *b, size_t buf_bytes, size_t max_spans);
void batch_free(struct batch *b);
void batch_reset(struct batch *b);

/* Adds remote [raddr, raddr + len): returns the index of the span that will hold it, or -1
 * when the batch is full (the range is then simply not read). batch_add_alone() never merges
 * into the previous span, so the range is copied after everything added before it. */
int batch_add(struct batch *b, uint64_t raddr, size_t len);
int batch_add_alone(struct batch *b, uint64_t raddr, size_t len);

/* Reads every span; a short read (something was unmapped) is -EFAULT. */
int batch_read(struct batch *b, const struct remote_src *src);

/* Spans [lo, hi) added by batch_add() from ascending addresses: they are then ascending and
 * disjoint, so a lookup among them is a binary search. lo == hi: none. */
struct batch_window {
    int lo, hi;
};

/* Where [raddr, raddr + len) landed, or NULL when the batch did not read it. */
const uint8_t *batch_find(const struct batch *b, uint64_t raddr, size_t len);
/* The same, looking only in @w (sorted, see above): O(log spans) instead of O(spans). */
const uint8_t *batch_find_in(const struct batch *b, struct batch_window w, uint64_t raddr,
                             size_t len);
/* The index of the span in @w that holds @raddr, or -1. */
int batch_span_in(const struct batch *b, struct batch_window w, uint64_t raddr);
/* Where span @span (an index batch_add returned) landed. */
const uint8_t *batch_span_data(const struct batch *b, int span);

#endif
