/*
 * blocks.h - one thread's samples over one write (or a minute, once merged: store__compact),
 * packed into one row of sample_blocks (schema/0013_sample_blocks.sql): a few bytes a run of
 * one stack, about 2 a sample of a changing one, instead of the ~34 of a row each.
 *
 * The encoding, version 2, every integer an unsigned LEB128 varint:
 *   0, 2                   the version's mark (version 1 began with k, never 0)
 *   k                      the distinct stacks of the block
 *   k stack ids            as unsigned 64-bit values (hashes: 9-10 bytes each)
 *   per run of samples, in time order:
 *     code << 1 | more?    code = idx << 3 | state: the stack's place in that list, and the
 *                          sample's 3 state bits
 *     zigzag(d - d_prev)   d: the microseconds from the previous sample (the first's from
 *                          first_ns: 0), d_prev the previous d: a steady rate is one byte
 *     more                 (when flagged) how many samples follow with the same code, each
 *                          d after the one before: a thread that waits where it waited, on
 *                          the sampler's even ticks (sampler.c: tick_time()), costs 3 bytes a
 *                          run however long
 * A sample's time is first_ns + 1000 x (the sum of its d's): kept to the microsecond, the
 * row's first_ns to the nanosecond (rounding never drifts: each d is taken from the rounded
 * offsets from first_ns, not from the previous sample's time). Version 1 (schema 0013's
 * first blocks) is the same without the mark and the runs: code, then zigzag(d - d_prev),
 * per sample; both are read.
 * The writer (store.c) encodes; the `samples` virtual table (query/samplestab.c) and
 * retention (store.c) decode.
 * Threads: any; a builder is one thread's at a time. Memory: the encoder's buffer is the
 * caller's (blocks_encode_max() bytes); a builder owns its arrays, grown as blocks need them
 * (up to BLOCK_SAMPLES_MAX samples); the decoder reads in place.
 * Failure: the decoder returns -EBADMSG for a block it cannot read whole (a truncated or
 * damaged row): nothing past the damage is returned.
 */
#ifndef PROBED_BLOCKS_H
#define PROBED_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

/* A block spans at most this much: the writer's span one write (a second), and the store
 * merges a thread's blocks of each minute into one (store.c: compaction). A query for a time
 * range looks for blocks that start at most this much before it. */
#define BLOCK_SPAN_NS 64000000000LL
#define BLOCK_SPAN_SQL "64000000000" /* the same, in SQL text */
#define BLOCK_STACKS_MAX 4096 /* distinct stacks of one block (the writer starts a new one) */
#define BLOCKS_VERSION 2      /* what blocks_encode() writes */

struct block_sample {
    int64_t ts_ns;
    int64_t stack_id;
    int32_t state; /* 3 bits: samples.state */
};

/* Bytes enough to encode @n samples with @k distinct stacks. */
size_t blocks_encode_max(size_t n, size_t k);

/* Encodes @n samples in time order, whose distinct stacks are @stacks[0..k) and each sample's
 * stack @idx[i] among them, into @out; returns the bytes written. The sample times are taken
 * relative to @first_ns (the first sample's). @ret_last_ns: the last sample's time as decoded. */
size_t blocks_encode(const struct block_sample *s, const uint32_t *idx, size_t n,
                     const int64_t *stacks, size_t k, int64_t first_ns, uint8_t *out,
                     int64_t *ret_last_ns);

/* One block, encoded, as the builder gives it. */
struct block_out {
    int64_t target_id, first_ns, last_ns;
    int32_t tid;
    size_t n;
    const uint8_t *data;
    size_t len;
};

/* The samples of one thread after another (in time order for each) into blocks: a sample that
 * cannot join the current block (another thread's, past BLOCK_SPAN_NS from its first, the
 * BLOCK_SAMPLES_MAX-th, or a new stack past BLOCK_STACKS_MAX) sends it through @emit first.
 * @emit's error (< 0) is returned, and the block is dropped. -ENOMEM: no room to grow. */
#define BLOCK_SAMPLES_MAX 65536
struct block_builder;
typedef int (*block_emit_fn)(void *ctx, const struct block_out *blk);
int block_builder_new(struct block_builder **ret);
void block_builder_free(struct block_builder *b); /* NULL is a no-op */
int block_builder_add(struct block_builder *b, int64_t target_id, int32_t tid,
                      const struct block_sample *s, block_emit_fn emit, void *ctx);
/* Sends the current block, if any; empties the builder either way. */
int block_builder_flush(struct block_builder *b, block_emit_fn emit, void *ctx);
/* Empties the builder, sending nothing (after a failed write). */
void block_builder_drop(struct block_builder *b);

/* A reader of one block. */
struct block_reader {
    const uint8_t *p, *end;
    int64_t ids[BLOCK_STACKS_MAX]; /* the block's stacks, read from its header */
    uint32_t k, version;
    int64_t first_ns;
    uint64_t offset_us, d_prev; /* the running sums (unsigned: damage wraps, never overflows) */
    uint64_t code;              /* the current run's */
    uint32_t repeat, n;         /* samples left in the run; samples read */
};

/* Starts reading @len bytes of @data of a block starting at @first_ns; -EBADMSG if its
 * header is damaged. */
int blocks_reader_init(struct block_reader *r, const uint8_t *data, size_t len, int64_t first_ns);

/* The next sample into @ret: 1, 0 at the end, -EBADMSG when the block is damaged. */
int blocks_next(struct block_reader *r, struct block_sample *ret);

#endif
