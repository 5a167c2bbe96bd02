/* blocks.c - see blocks.h: the encoding of a block of samples. */
#include "store/blocks.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#define VARINT_MAX 10 /* bytes of a 64-bit LEB128 value */

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* The varint at *@p into @ret, advancing *@p; false when it runs past @end or is too long. */
static bool get_varint(const uint8_t **p, const uint8_t *end, uint64_t *ret)
{
    uint64_t v = 0;

    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *ret = v;
            return true;
        }
    }
    return false;
}

static uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

size_t blocks_encode_max(size_t n, size_t k)
{
    return VARINT_MAX * (1 + k + 2 * n);
}

/* Microseconds from @first_ns to @ts_ns, rounded to the nearest. */
static int64_t offset_us(int64_t ts_ns, int64_t first_ns)
{
    int64_t d = ts_ns - first_ns;

    return d >= 0 ? (d + 500) / 1000 : -((-d + 500) / 1000);
}

size_t blocks_encode(const struct block_sample *s, const uint32_t *idx, size_t n,
                     const int64_t *stacks, size_t k, int64_t first_ns, uint8_t *out,
                     int64_t *ret_last_ns)
{
    uint8_t *p = put_varint(out, k);
    int64_t prev_us = 0, d_prev = 0;

    for (size_t i = 0; i < k; i++)
        p = put_varint(p, (uint64_t)stacks[i]);
    for (size_t i = 0; i < n; i++) {
        int64_t us = offset_us(s[i].ts_ns, first_ns), d = us - prev_us;
        p = put_varint(p, (uint64_t)idx[i] << 3 | ((uint64_t)s[i].state & 7));
        p = put_varint(p, zigzag(d - d_prev));
        prev_us = us;
        d_prev = d;
    }
    *ret_last_ns = first_ns + prev_us * 1000;
    return (size_t)(p - out);
}

int blocks_reader_init(struct block_reader *r, const uint8_t *data, size_t len, int64_t first_ns)
{
    uint64_t k, id;

    r->p = data;
    r->end = data + len;
    r->first_ns = first_ns;
    r->offset_us = r->d_prev = 0;
    if (!get_varint(&r->p, r->end, &k) || k > BLOCK_STACKS_MAX)
        return -EBADMSG;
    for (uint64_t i = 0; i < k; i++) {
        if (!get_varint(&r->p, r->end, &id))
            return -EBADMSG;
        r->ids[i] = (int64_t)id;
    }
    r->k = (uint32_t)k;
    return 0;
}

int blocks_next(struct block_reader *r, struct block_sample *ret)
{
    uint64_t code, dd;

    if (r->p == r->end)
        return 0;
    if (!get_varint(&r->p, r->end, &code) || !get_varint(&r->p, r->end, &dd) ||
        (code >> 3) >= r->k) {
        r->p = r->end; /* nothing past the damage */
        return -EBADMSG;
    }
    /* unsigned: a damaged block wraps around instead of overflowing */
    r->d_prev += (uint64_t)unzigzag(dd);
    r->offset_us += r->d_prev;
    ret->ts_ns = (int64_t)((uint64_t)r->first_ns + r->offset_us * 1000);
    ret->stack_id = r->ids[code >> 3];
    ret->state = (int32_t)(code & 7);
    return 1;
}

/* ---- the builder ---- */

#define SLOTS (2 * BLOCK_STACKS_MAX) /* stack id -> its index + 1, at most half full */

struct block_builder {
    int64_t target_id;
    int32_t tid;
    size_t n, cap, k;
    struct block_sample *s;
    uint32_t *idx;
    uint8_t *buf;
    int64_t stacks[BLOCK_STACKS_MAX];
    uint32_t slots[SLOTS];
};

int block_builder_new(struct block_builder **ret)
{
    *ret = calloc(1, sizeof(**ret));
    return *ret ? 0 : -ENOMEM;
}

void block_builder_free(struct block_builder *b)
{
    if (!b)
        return;
    free(b->s);
    free(b->idx);
    free(b->buf);
    free(b);
}

static size_t slot_of(int64_t id)
{
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ULL;

    return (size_t)(h >> 32) & (SLOTS - 1);
}

/* @id's index in the block, added when new; -1 when the block has no room for another. */
static int64_t stack_index(struct block_builder *b, int64_t id)
{
    size_t i = slot_of(id);

    for (; b->slots[i]; i = (i + 1) & (SLOTS - 1))
        if (b->stacks[b->slots[i] - 1] == id)
            return b->slots[i] - 1;
    if (b->k == BLOCK_STACKS_MAX)
        return -1;
    b->stacks[b->k] = id;
    b->slots[i] = (uint32_t)++b->k;
    return (int64_t)b->k - 1;
}

/* Empties @b: its used slots are cleared one by one (all of them: no probe chain is left
 * half), cheaper than the whole table for a block of few stacks. */
static void reset(struct block_builder *b)
{
    for (size_t j = 0; j < b->k; j++) {
        size_t i = slot_of(b->stacks[j]);
        while (b->slots[i] != j + 1)
            i = (i + 1) & (SLOTS - 1);
        b->slots[i] = 0;
    }
    b->n = b->k = 0;
}

void block_builder_drop(struct block_builder *b)
{
    reset(b);
}

int block_builder_flush(struct block_builder *b, block_emit_fn emit, void *ctx)
{
    struct block_out out = {.target_id = b->target_id, .tid = b->tid, .n = b->n};
    int r;

    if (!b->n)
        return 0;
    out.first_ns = b->s[0].ts_ns;
    out.len =
        blocks_encode(b->s, b->idx, b->n, b->stacks, b->k, out.first_ns, b->buf, &out.last_ns);
    out.data = b->buf;
    r = emit(ctx, &out);
    reset(b);
    return r;
}

/* Room for @n samples (and their encoding) in @b. */
static int grow(struct block_builder *b, size_t n)
{
    size_t cap = b->cap ? b->cap : 256;
    struct block_sample *s;
    uint32_t *idx;
    uint8_t *buf;

    if (n <= b->cap)
        return 0;
    while (cap < n)
        cap *= 2;
    s = realloc(b->s, cap * sizeof(*s));
    if (s)
        b->s = s;
    idx = s ? realloc(b->idx, cap * sizeof(*idx)) : NULL;
    if (idx)
        b->idx = idx;
    buf = idx ? realloc(b->buf, blocks_encode_max(cap, BLOCK_STACKS_MAX)) : NULL;
    if (!buf)
        return -ENOMEM;
    b->buf = buf;
    b->cap = cap;
    return 0;
}

int block_builder_add(struct block_builder *b, int64_t target_id, int32_t tid,
                      const struct block_sample *s, block_emit_fn emit, void *ctx)
{
    int64_t i;
    int r;

    if (b->n && (target_id != b->target_id || tid != b->tid ||
                 s->ts_ns - b->s[0].ts_ns > BLOCK_SPAN_NS || b->n == BLOCK_SAMPLES_MAX)) {
        if ((r = block_builder_flush(b, emit, ctx)) < 0)
            return r;
    }
    if ((r = grow(b, b->n + 1)) < 0)
        return r;
    if ((i = stack_index(b, s->stack_id)) < 0) { /* the block's stacks are full */
        if ((r = block_builder_flush(b, emit, ctx)) < 0)
            return r;
        i = stack_index(b, s->stack_id);
    }
    b->target_id = target_id;
    b->tid = tid;
    b->s[b->n] = *s;
    b->idx[b->n++] = (uint32_t)i;
    return 0;
}
