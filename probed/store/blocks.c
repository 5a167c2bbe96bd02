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
    return VARINT_MAX * (3 + k + 3 * n);
}

/* Microseconds from @first_ns to @ts_ns, rounded to the nearest. */
static int64_t offset_us(int64_t ts_ns, int64_t first_ns)
{
    int64_t d = ts_ns - first_ns;

    return d >= 0 ? (d + 500) / 1000 : -((-d + 500) / 1000);
}

/* The code of sample @i: its stack's place and state bits. */
static uint64_t code_of(const struct block_sample *s, const uint32_t *idx, size_t i)
{
    return (uint64_t)idx[i] << 3 | ((uint64_t)s[i].state & 7);
}

size_t blocks_encode(const struct block_sample *s, const uint32_t *idx, size_t n,
                     const int64_t *stacks, size_t k, int64_t first_ns, uint8_t *out,
                     int64_t *ret_last_ns)
{
    uint8_t *p = out;
    int64_t prev_us = 0, d_prev = 0;

    *p++ = 0; /* no stacks, as version 1 would read it: the mark of a later version */
    p = put_varint(p, BLOCKS_VERSION);
    p = put_varint(p, k);
    for (size_t i = 0; i < k; i++)
        p = put_varint(p, (uint64_t)stacks[i]);
    for (size_t i = 0; i < n;) {
        int64_t us = offset_us(s[i].ts_ns, first_ns), d = us - prev_us;
        uint64_t code = code_of(s, idx, i);
        size_t more = 0;

        prev_us = us;
        /* the samples after it with its code, each as far from the one before as it is */
        while (i + 1 + more < n && code_of(s, idx, i + 1 + more) == code &&
               offset_us(s[i + 1 + more].ts_ns, first_ns) - prev_us == d) {
            prev_us += d;
            more++;
        }
        p = put_varint(p, code << 1 | (more > 0));
        p = put_varint(p, zigzag(d - d_prev));
        if (more)
            p = put_varint(p, more);
        d_prev = d;
        i += 1 + more;
    }
    *ret_last_ns = first_ns + prev_us * 1000;
    return (size_t)(p - out);
}

int blocks_reader_init(struct block_reader *r, const uint8_t *data, size_t len, int64_t first_ns)
{
    uint64_t k, id, version = 1;

    *r = (struct block_reader){.p = data, .end = data + len, .first_ns = first_ns};
    if (!get_varint(&r->p, r->end, &k))
        return -EBADMSG;
    if (k == 0 && r->p < r->end) { /* version 1 with no stacks has no samples either */
        if (!get_varint(&r->p, r->end, &version) || version != BLOCKS_VERSION ||
            !get_varint(&r->p, r->end, &k))
            return -EBADMSG;
    }
    if (k > BLOCK_STACKS_MAX)
        return -EBADMSG;
    for (uint64_t i = 0; i < k; i++) {
        if (!get_varint(&r->p, r->end, &id))
            return -EBADMSG;
        r->ids[i] = (int64_t)id;
    }
    r->k = (uint32_t)k;
    r->version = (uint32_t)version;
    return 0;
}

/* The next entry of the block into the reader: its code, and the samples it repeats. */
static int next_entry(struct block_reader *r)
{
    uint64_t code, dd, more = 0;

    if (!get_varint(&r->p, r->end, &code) || !get_varint(&r->p, r->end, &dd))
        return -EBADMSG;
    if (r->version > 1) {
        if ((code & 1) && (!get_varint(&r->p, r->end, &more) || more == 0))
            return -EBADMSG;
        code >>= 1;
    }
    /* a damaged count could ask for any number of samples: a block holds no more than this */
    if ((code >> 3) >= r->k || more > BLOCK_SAMPLES_MAX - r->n || r->n == BLOCK_SAMPLES_MAX)
        return -EBADMSG;
    /* unsigned: a damaged block wraps around instead of overflowing */
    r->d_prev += (uint64_t)unzigzag(dd);
    r->code = code;
    r->repeat = (uint32_t)more;
    return 0;
}

int blocks_next(struct block_reader *r, struct block_sample *ret)
{
    if (r->repeat)
        r->repeat--;
    else if (r->p == r->end)
        return 0;
    else if (next_entry(r) < 0) {
        r->p = r->end; /* nothing past the damage */
        return -EBADMSG;
    }
    r->n++;
    r->offset_us += r->d_prev;
    ret->ts_ns = (int64_t)((uint64_t)r->first_ns + r->offset_us * 1000);
    ret->stack_id = r->ids[r->code >> 3];
    ret->state = (int32_t)(r->code & 7);
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

    /* (a sample before the last one, which only blocks that overlap could give, starts a
     * block too: a block's last_ns is its latest) */
    if (b->n &&
        (target_id != b->target_id || tid != b->tid || s->ts_ns - b->s[0].ts_ns > BLOCK_SPAN_NS ||
         s->ts_ns < b->s[b->n - 1].ts_ns || b->n == BLOCK_SAMPLES_MAX)) {
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
