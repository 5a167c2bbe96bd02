/* batch.c - one process_vm_readv() for many small ranges; see batch.h. */
#include "batch.h"

#include <errno.h>
#include <stdlib.h>

#include "remote.h"

int batch_init(struct batch *b, size_t buf_bytes, size_t max_spans)
{
    *b = (struct batch){.cap = buf_bytes, .max = max_spans};
    b->buf = malloc(buf_bytes);
    b->spans = calloc(max_spans, sizeof(*b->spans));
    b->liov = calloc(max_spans, sizeof(*b->liov));
    b->riov = calloc(max_spans, sizeof(*b->riov));
    if (!b->buf || !b->spans || !b->liov || !b->riov) {
        batch_free(b);
        return -ENOMEM;
    }
    return 0;
}

void batch_free(struct batch *b)
{
    free(b->buf);
    free(b->spans);
    free(b->liov);
    free(b->riov);
    *b = (struct batch){0};
}

void batch_reset(struct batch *b)
{
    b->n = 0;
    b->used = 0;
}

static int add_span(struct batch *b, uint64_t raddr, size_t len)
{
    if (b->n == b->max || len > b->cap - b->used)
        return -1;
    b->spans[b->n] = (struct batch_span){.lo = raddr, .hi = raddr + len, .off = b->used};
    b->used += len;
    return (int)b->n++;
}

int batch_add(struct batch *b, uint64_t raddr, size_t len)
{
    struct batch_span *last = b->n ? &b->spans[b->n - 1] : NULL;

    if (last && raddr >= last->lo && raddr <= last->hi + BATCH_GAP) {
        uint64_t hi = raddr + len;
        if (hi <= last->hi)
            return (int)b->n - 1;
        if (hi - last->hi > b->cap - b->used)
            return -1;
        b->used += hi - last->hi; /* the last span ends the buffer, so it can grow */
        last->hi = hi;
        return (int)b->n - 1;
    }
    return add_span(b, raddr, len);
}

int batch_add_alone(struct batch *b, uint64_t raddr, size_t len)
{
    return add_span(b, raddr, len);
}

int batch_read(struct batch *b, const struct remote_src *src)
{
    for (size_t i = 0; i < b->n; i++) {
        const struct batch_span *s = &b->spans[i];
        b->liov[i] = (struct iovec){.iov_base = b->buf + s->off, .iov_len = s->hi - s->lo};
        b->riov[i] = (struct iovec){.iov_base = (void *)(uintptr_t)s->lo, .iov_len = s->hi - s->lo};
    }
    return remote_readv(src, b->liov, b->riov, b->n);
}

const uint8_t *batch_find(const struct batch *b, uint64_t raddr, size_t len)
{
    for (size_t i = 0; i < b->n; i++) {
        const struct batch_span *s = &b->spans[i];
        if (raddr >= s->lo && raddr <= s->hi && len <= s->hi - raddr)
            return b->buf + s->off + (raddr - s->lo);
    }
    return NULL;
}

int batch_span_in(const struct batch *b, struct batch_window w, uint64_t raddr)
{
    int lo = w.lo, hi = w.hi;

    while (lo < hi) { /* the last span whose start is <= raddr */
        int mid = lo + (hi - lo) / 2;
        if (b->spans[mid].lo <= raddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > w.lo && raddr < b->spans[lo - 1].hi ? lo - 1 : -1;
}

const uint8_t *batch_find_in(const struct batch *b, struct batch_window w, uint64_t raddr,
                             size_t len)
{
    int span = batch_span_in(b, w, raddr);
    const struct batch_span *s = span >= 0 ? &b->spans[span] : NULL;

    /* not raddr + len <= hi: a word from the target near 2^64 would wrap past it (CI: a
     * frame's f_back read from a dying process pointed the reader outside its buffer) */
    return s && len <= s->hi - raddr ? b->buf + s->off + (raddr - s->lo) : NULL;
}

const uint8_t *batch_span_data(const struct batch *b, int span)
{
    return b->buf + b->spans[span].off;
}
