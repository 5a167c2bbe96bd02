/* test_blocks.c - store/blocks.c: samples packed into blocks read back as they were. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "store/blocks.h"
#include "unit.h"

#define MAX_BLOCKS 4096

struct got {
    struct block_out out[MAX_BLOCKS];
    uint8_t *data[MAX_BLOCKS];
    size_t n, bytes;
};

static int keep(void *ctx, const struct block_out *blk)
{
    struct got *g = ctx;

    if (g->n == MAX_BLOCKS)
        return -ENOSPC;
    g->data[g->n] = malloc(blk->len);
    if (!g->data[g->n])
        return -ENOMEM;
    memcpy(g->data[g->n], blk->data, blk->len);
    g->out[g->n] = *blk;
    g->out[g->n].data = g->data[g->n];
    g->bytes += blk->len;
    g->n++;
    return 0;
}

static void release(struct got *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->data[i]);
    g->n = g->bytes = 0;
}

static uint64_t rnd_state = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* Three threads at 100 Hz for 10 s with jitter, each from a few of 40 stacks (ids over the
 * whole 64-bit range), every state: each block decodes to its samples, times to the nearest
 * microsecond (its first one exact), and a steady thread costs under 4 bytes a sample. */
int test_blocks_round_trip(void)
{
    static struct block_sample in[3][1000];
    static struct got g;
    struct block_builder *b;
    struct block_reader *rd = malloc(sizeof(*rd));
    int64_t stacks[40];

    CHECK(rd && block_builder_new(&b) == 0);
    for (int i = 0; i < 40; i++)
        stacks[i] = (int64_t)rnd();
    stacks[0] = 0;
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 1000; i++)
            in[t][i] =
                (struct block_sample){.ts_ns = 1795000000000000000LL + t * 333 + i * 10000000LL +
                                               (int64_t)(rnd() % 200000) - 100000,
                                      .stack_id = stacks[t * 5 + (int)(rnd() % (t == 2 ? 1 : 5))],
                                      .state = (int32_t)(rnd() % 8)};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 1000; i++)
            CHECK(block_builder_add(b, 7, 100 + t, &in[t][i], keep, &g) == 0);
    CHECK(block_builder_flush(b, keep, &g) == 0);
    size_t seen[3] = {0};
    for (size_t k = 0; k < g.n; k++) {
        const struct block_out *o = &g.out[k];
        int t = o->tid - 100, got;
        struct block_sample s;
        size_t m = 0;
        CHECK(o->target_id == 7 && t >= 0 && t < 3);
        CHECK(o->last_ns - o->first_ns <= BLOCK_SPAN_NS);
        CHECK(blocks_reader_init(rd, o->data, o->len, o->first_ns) == 0);
        while ((got = blocks_next(rd, &s)) > 0) {
            const struct block_sample *want = &in[t][seen[t]++];
            int64_t off = s.ts_ns - want->ts_ns;
            CHECK(m++ > 0 || off == 0);
            CHECK(off >= -500 && off <= 500);
            CHECK(s.stack_id == want->stack_id && s.state == want->state);
        }
        CHECK(got == 0 && m == o->n && s.ts_ns == o->last_ns);
    }
    CHECK(seen[0] == 1000 && seen[1] == 1000 && seen[2] == 1000);
    CHECK(g.bytes < 4 * 3000);
    release(&g);
    block_builder_free(b);
    free(rd);
    return 0;
}

/* A thread at 100 Hz on the sampler's even ticks for 60 s, waiting in one stack but for a
 * stretch in another and one sample off the even ticks: runs of one code cost a few bytes however
 * long, and read back exactly. */
int test_blocks_runs(void)
{
    static struct block_sample in[6000];
    static struct got g;
    struct block_builder *b;
    struct block_reader *rd = malloc(sizeof(*rd));
    struct block_sample s;
    size_t i = 0;
    int got;

    CHECK(rd && block_builder_new(&b) == 0);
    for (int k = 0; k < 6000; k++)
        in[k] = (struct block_sample){.ts_ns = 1795000000123456789LL + k * 10000000LL,
                                      .stack_id = k >= 3000 && k < 3100 ? 42 : -7,
                                      .state = k >= 3000 && k < 3100 ? 3 : 0};
    in[4000].ts_ns += 5000000; /* off the even ticks */
    for (int k = 0; k < 6000; k++)
        CHECK(block_builder_add(b, 1, 9, &in[k], keep, &g) == 0);
    CHECK(block_builder_flush(b, keep, &g) == 0);
    CHECK(g.n == 1 && g.out[0].n == 6000);
    CHECK(g.bytes < 64); /* the header with its two ids (~22 bytes), then 3-5 bytes a run */
    CHECK(blocks_reader_init(rd, g.out[0].data, g.out[0].len, g.out[0].first_ns) == 0);
    while ((got = blocks_next(rd, &s)) > 0) {
        CHECK(i < 6000 && s.ts_ns == in[i].ts_ns);
        CHECK(s.stack_id == in[i].stack_id && s.state == in[i].state);
        i++;
    }
    CHECK(got == 0 && i == 6000 && g.out[0].last_ns == in[5999].ts_ns);
    release(&g);
    block_builder_free(b);
    free(rd);
    return 0;
}

/* Version 1 blocks (no mark, no runs), as schema 0013 first wrote them, still read; a run
 * whose count is damaged asks for no more than a block holds. */
int test_blocks_version_1_and_bad_runs(void)
{
    struct block_reader *rd = malloc(sizeof(*rd));
    struct block_sample s;
    /* stacks 5 and 9; samples at +0, +10 ms, +20 ms, +35 ms */
    const uint8_t v1[] = {2,    5,    9,      0 << 3 | 1, 0,      1 << 3 | 2, 0xa0,
                          0x9c, 0x01, 0 << 3, 0,          1 << 3, 0x90,       0x4e};
    const int64_t want_us[] = {0, 10000, 20000, 35000}, want_stack[] = {5, 9, 5, 9};
    /* version 2: one stack, a run whose count says 2^62 */
    const uint8_t huge[] = {0, 2, 1, 5, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40};
    size_t n = 0;
    int got;

    CHECK(rd);
    CHECK(blocks_reader_init(rd, v1, sizeof(v1), 1000) == 0);
    while ((got = blocks_next(rd, &s)) > 0) {
        CHECK(n < 4 && s.ts_ns == 1000 + want_us[n] * 1000 && s.stack_id == want_stack[n]);
        n++;
    }
    CHECK(got == 0 && n == 4);
    CHECK(blocks_reader_init(rd, huge, sizeof(huge), 0) == 0);
    CHECK(blocks_next(rd, &s) == -EBADMSG && blocks_next(rd, &s) == 0);
    free(rd);
    return 0;
}

/* A thread with more distinct stacks than a block holds: blocks of BLOCK_STACKS_MAX each. */
int test_blocks_split_at_the_stacks_limit(void)
{
    static struct got g;
    struct block_builder *b;
    struct block_reader *rd = malloc(sizeof(*rd));
    size_t total = 0;

    CHECK(rd && block_builder_new(&b) == 0);
    for (int i = 0; i < BLOCK_STACKS_MAX + 10; i++) {
        struct block_sample s = {.ts_ns = 1000000000LL + i * 1000LL, .stack_id = i + 1};
        CHECK(block_builder_add(b, 1, 1, &s, keep, &g) == 0);
    }
    CHECK(block_builder_flush(b, keep, &g) == 0);
    CHECK(g.n == 2 && g.out[0].n == BLOCK_STACKS_MAX && g.out[1].n == 10);
    for (size_t k = 0; k < g.n; k++) {
        struct block_sample s;
        CHECK(blocks_reader_init(rd, g.out[k].data, g.out[k].len, g.out[k].first_ns) == 0);
        while (blocks_next(rd, &s) > 0)
            CHECK(s.stack_id == (int64_t)++total);
    }
    CHECK(total == BLOCK_STACKS_MAX + 10);
    release(&g);
    block_builder_free(b);
    free(rd);
    return 0;
}

/* A damaged block (cut short anywhere, or a stack index past its list) reads as -EBADMSG
 * after the samples before the damage, never past its end. */
int test_blocks_damaged(void)
{
    static struct got g;
    struct block_builder *b;
    struct block_reader *rd = malloc(sizeof(*rd));
    struct block_sample s;
    uint8_t bad[] = {1, 5, 1 << 3, 0}; /* one stack (5), a sample naming stack 1 */
    int got = 0;

    CHECK(rd && block_builder_new(&b) == 0);
    for (int i = 0; i < 50; i++) {
        struct block_sample in = {.ts_ns = 5000000000LL + i * 10000000LL, .stack_id = i % 3};
        CHECK(block_builder_add(b, 1, 1, &in, keep, &g) == 0);
    }
    CHECK(block_builder_flush(b, keep, &g) == 0 && g.n == 1);
    for (size_t cut = 0; cut < g.out[0].len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exactly cut bytes: ASan sees any overread */
        size_t m = 0;
        CHECK(copy);
        memcpy(copy, g.out[0].data, cut);
        if (blocks_reader_init(rd, copy, cut, 0) == 0)
            while ((got = blocks_next(rd, &s)) > 0)
                m++;
        CHECK(m < 50);
        free(copy);
    }
    CHECK(blocks_reader_init(rd, bad, sizeof(bad), 0) == 0);
    CHECK(blocks_next(rd, &s) == -EBADMSG && blocks_next(rd, &s) == 0);
    release(&g);
    block_builder_free(b);
    free(rd);
    return 0;
}
