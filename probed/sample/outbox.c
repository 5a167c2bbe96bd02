/* outbox.c - see outbox.h. */
#include "sample/outbox.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void half_free(struct ob_half *h)
{
    free(h->samples);
    free(h->frames);
    free(h->strings);
    free(h->stacks);
    free(h->threads);
    free(h->arena);
    free(h->usage);
    free(h->thread_cpu);
    free(h->comms);
}

static int half_init(struct ob_half *h, const struct outbox *ob)
{
    *h = (struct ob_half){0};
    h->samples = calloc(ob->cap_samples, sizeof(*h->samples));
    h->frames = calloc(ob->cap_defs, sizeof(*h->frames));
    h->strings = calloc(ob->cap_defs, sizeof(*h->strings));
    h->stacks = calloc(ob->cap_defs, sizeof(*h->stacks));
    h->threads = calloc(ob->cap_defs, sizeof(*h->threads));
    h->arena = malloc(ob->cap_arena);
    h->usage = calloc(OB_USAGE_MAX, sizeof(*h->usage));
    h->thread_cpu = calloc(OB_THREAD_CPU_MAX, sizeof(*h->thread_cpu));
    h->comms = calloc(OB_COMMS_MAX, sizeof(*h->comms));
    if (!h->samples || !h->frames || !h->strings || !h->stacks || !h->threads || !h->arena ||
        !h->usage || !h->thread_cpu || !h->comms)
        return -ENOMEM;
    return 0;
}

int outbox_new(size_t cap_samples, struct outbox **ret)
{
    struct outbox *ob = calloc(1, sizeof(*ob));

    if (!ob)
        return -ENOMEM;
    pthread_mutex_init(&ob->lock, NULL);
    ob->cap_samples = cap_samples;
    ob->cap_defs = cap_samples / 4 + 1024;
    ob->cap_arena = ob->cap_defs * 128;
    if (half_init(&ob->halves[0], ob) < 0 || half_init(&ob->halves[1], ob) < 0) {
        outbox_free(ob);
        return -ENOMEM;
    }
    ob->fill = &ob->halves[0];
    ob->spare = &ob->halves[1];
    *ret = ob;
    return 0;
}

void outbox_free(struct outbox *ob)
{
    if (!ob)
        return;
    half_free(&ob->halves[0]);
    half_free(&ob->halves[1]);
    pthread_mutex_destroy(&ob->lock);
    free(ob);
}

void outbox__forget_sent(struct outbox *ob)
{
    atomic_store(&ob->forget_sent, true);
}

bool outbox__take_forget(struct outbox *ob)
{
    return atomic_exchange(&ob->forget_sent, false);
}

struct ob_half *outbox__lock(struct outbox *ob)
{
    pthread_mutex_lock(&ob->lock);
    return ob->fill;
}

void outbox__unlock(struct outbox *ob)
{
    pthread_mutex_unlock(&ob->lock);
}

bool ob_half__sample(struct outbox *ob, struct ob_half *h, const struct ob_sample *s)
{
    if (h->n_samples == ob->cap_samples) {
        h->n_dropped++;
        return false;
    }
    h->samples[h->n_samples++] = *s;
    return true;
}

bool ob_half__frame(struct outbox *ob, struct ob_half *h, const struct ob_frame *f)
{
    if (h->n_frames == ob->cap_defs)
        return false;
    h->frames[h->n_frames++] = *f;
    return true;
}

/* Copies @len bytes into the arena; false when they do not fit. */
static bool arena_put(struct outbox *ob, struct ob_half *h, const void *p, size_t len,
                      uint32_t *ret_off)
{
    if (len > ob->cap_arena - h->arena_used)
        return false;
    memcpy(h->arena + h->arena_used, p, len);
    *ret_off = (uint32_t)h->arena_used;
    h->arena_used += (len + 7) & ~(size_t)7; /* keeps int64 frame ids aligned */
    if (h->arena_used > ob->cap_arena)
        h->arena_used = ob->cap_arena;
    return true;
}

static bool add_def(struct outbox *ob, struct ob_half *h, struct ob_def *defs, size_t *n,
                    const struct ob_def *d, const void *p, size_t bytes)
{
    struct ob_def copy = *d;

    if (*n == ob->cap_defs)
        return false;
    if (!arena_put(ob, h, p, bytes, &copy.off))
        return false;
    defs[(*n)++] = copy;
    return true;
}

bool ob_half__string(struct outbox *ob, struct ob_half *h, int64_t id, const char *s)
{
    size_t len = strlen(s);
    struct ob_def d = {.id = id, .len = (uint32_t)len};

    return add_def(ob, h, h->strings, &h->n_strings, &d, s, len);
}

bool ob_half__stack(struct outbox *ob, struct ob_half *h, int64_t id, const int64_t *frame_ids,
                    size_t n, int64_t task_id)
{
    struct ob_def d = {.id = id, .extra = task_id, .len = (uint32_t)n};

    return add_def(ob, h, h->stacks, &h->n_stacks, &d, frame_ids, n * sizeof(*frame_ids));
}

bool ob_half__thread(struct outbox *ob, struct ob_half *h, int64_t target_id, int32_t tid,
                     const char *name, const char *os_name)
{
    char both[128]; /* "name\0os_name": the store splits them at the NUL */
    int len = snprintf(both, sizeof(both), "%.63s%c%.63s", name, '\0', os_name);
    struct ob_def d = {.id = target_id, .extra = tid, .len = (uint32_t)len};

    return add_def(ob, h, h->threads, &h->n_threads, &d, both, (size_t)len);
}

bool ob_half__target(struct ob_half *h, const struct ob_target *t)
{
    if (h->n_targets == OB_TARGETS_MAX)
        return false;
    h->targets[h->n_targets++] = *t;
    return true;
}

bool ob_half__end(struct ob_half *h, int64_t target_id, int64_t ended_ns, const char *reason)
{
    struct ob_end *e;

    if (h->n_ends == OB_TARGETS_MAX)
        return false;
    e = &h->ends[h->n_ends++];
    e->target_id = target_id;
    e->ended_ns = ended_ns;
    snprintf(e->reason, sizeof(e->reason), "%s", reason);
    return true;
}

bool ob_half__crash(struct ob_half *h, const struct ob_crash *c)
{
    if (h->n_crashes == OB_CRASHES_MAX)
        return false;
    h->crashes[h->n_crashes++] = *c;
    return true;
}

bool ob_half__usage(struct ob_half *h, const struct ob_usage *u)
{
    if (h->n_usage == OB_USAGE_MAX) {
        h->n_usage_dropped++;
        return false;
    }
    h->usage[h->n_usage++] = *u;
    return true;
}

bool ob_half__gpu(struct ob_half *h, const struct ob_gpu *g)
{
    if (h->n_gpus == OB_GPU_MAX) {
        h->n_gpu_dropped++;
        return false;
    }
    h->gpus[h->n_gpus++] = *g;
    return true;
}

bool ob_half__gpu_proc(struct ob_half *h, const struct ob_gpu_proc *p)
{
    if (h->n_gpu_procs == OB_GPU_PROCS_MAX) {
        h->n_gpu_dropped++;
        return false;
    }
    h->gpu_procs[h->n_gpu_procs++] = *p;
    return true;
}

bool ob_half__gpu_xid(struct ob_half *h, const struct ob_gpu_xid *x)
{
    if (h->n_gpu_xids == OB_GPU_XIDS_MAX) {
        h->n_gpu_dropped++;
        return false;
    }
    h->gpu_xids[h->n_gpu_xids++] = *x;
    return true;
}

bool ob_half__comm(struct ob_half *h, const struct ob_comm *c)
{
    if (h->n_comms == OB_COMMS_MAX) {
        h->n_comms_dropped++;
        return false;
    }
    h->comms[h->n_comms++] = *c;
    return true;
}

bool ob_half__thread_cpu(struct ob_half *h, const struct ob_thread_cpu *c)
{
    if (h->n_thread_cpu == OB_THREAD_CPU_MAX) {
        h->n_usage_dropped++;
        return false;
    }
    h->thread_cpu[h->n_thread_cpu++] = *c;
    return true;
}

struct ob_half *outbox__swap(struct outbox *ob)
{
    struct ob_half *full, *empty = ob->spare;

    /* Empty the spare before taking the lock: the sampler is not touching it. */
    empty->n_samples = empty->n_frames = empty->n_strings = 0;
    empty->n_stacks = empty->n_threads = 0;
    empty->n_targets = empty->n_ends = empty->n_crashes = 0;
    empty->arena_used = 0;
    empty->n_dropped = 0;
    empty->n_usage = empty->n_thread_cpu = 0;
    empty->n_usage_dropped = 0;
    empty->n_gpus = empty->n_gpu_procs = empty->n_gpu_xids = 0;
    empty->n_gpu_dropped = 0;
    empty->n_comms = empty->n_comms_dropped = 0;
    pthread_mutex_lock(&ob->lock);
    full = ob->fill;
    ob->fill = empty;
    ob->spare = full;
    pthread_mutex_unlock(&ob->lock);
    return full;
}

/* Makes room for @more elements in a growable array of *@n used, *@cap allocated. */
static bool grow(void **arr, size_t *cap, size_t n, size_t more, size_t size)
{
    size_t want = *cap ? *cap : 1024;
    void *p;

    if (*arr && n + more <= *cap) /* (never NULL after: no arithmetic on a NULL array) */
        return true;
    while (want < n + more)
        want *= 2;
    p = realloc(*arr, want * size);
    if (!p)
        return false;
    *arr = p;
    *cap = want;
    return true;
}

/* memcpy() that may be given no bytes and a NULL (an array never grown) */
static void copy_in(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

#define APPEND(b, field, nfield, capfield, src)                                                    \
    (grow((void **)&(b)->h.field, &(b)->capfield, (b)->h.nfield, (src)->nfield,                    \
          sizeof(*(src)->field)) &&                                                                \
     (copy_in((b)->h.field + (b)->h.nfield, (src)->field, (src)->nfield * sizeof(*(src)->field)),  \
      (b)->h.nfield += (src)->nfield, true))

/* Definitions point into their half's arena: moved, they point @base further. */
static void rebase(struct ob_def *defs, size_t from, size_t to, size_t base)
{
    for (size_t i = from; i < to; i++)
        defs[i].off += (uint32_t)base;
}

int ob_backlog_add(struct ob_backlog *b, const struct ob_half *h, size_t max_bytes)
{
    size_t bytes = h->n_samples * sizeof(*h->samples) + h->n_frames * sizeof(*h->frames) +
                   (h->n_strings + h->n_stacks + h->n_threads) * sizeof(struct ob_def) +
                   h->arena_used + h->n_usage * sizeof(*h->usage) +
                   h->n_thread_cpu * sizeof(*h->thread_cpu) + h->n_comms * sizeof(*h->comms);
    size_t base = b->h.arena_used, strings = b->h.n_strings, stacks = b->h.n_stacks,
           threads = b->h.n_threads;
    struct {
        size_t n_samples, n_frames, n_usage, n_thread_cpu, n_comms;
    } n = {b->h.n_samples, b->h.n_frames, b->h.n_usage, b->h.n_thread_cpu, b->h.n_comms};

    if (b->bytes + bytes > max_bytes || b->h.n_targets + h->n_targets > OB_TARGETS_MAX ||
        b->h.n_ends + h->n_ends > OB_TARGETS_MAX ||
        b->h.n_crashes + h->n_crashes > OB_CRASHES_MAX || b->h.n_gpus + h->n_gpus > OB_GPU_MAX ||
        b->h.n_gpu_procs + h->n_gpu_procs > OB_GPU_PROCS_MAX ||
        b->h.n_gpu_xids + h->n_gpu_xids > OB_GPU_XIDS_MAX || base + h->arena_used > UINT32_MAX)
        return -ENOSPC;
    if (!APPEND(b, samples, n_samples, cap_samples, h) ||
        !APPEND(b, frames, n_frames, cap_frames, h) ||
        !APPEND(b, strings, n_strings, cap_strings, h) ||
        !APPEND(b, stacks, n_stacks, cap_stacks, h) ||
        !APPEND(b, threads, n_threads, cap_threads, h) ||
        !APPEND(b, usage, n_usage, cap_usage, h) ||
        !APPEND(b, thread_cpu, n_thread_cpu, cap_thread_cpu, h) ||
        !APPEND(b, comms, n_comms, cap_comms, h) ||
        !grow((void **)&b->h.arena, &b->cap_arena, b->h.arena_used, h->arena_used, 1)) {
        /* all of @h or none of it: the counts go back (the memory grown stays) */
        b->h.n_samples = n.n_samples;
        b->h.n_frames = n.n_frames;
        b->h.n_strings = strings;
        b->h.n_stacks = stacks;
        b->h.n_threads = threads;
        b->h.n_usage = n.n_usage;
        b->h.n_thread_cpu = n.n_thread_cpu;
        b->h.n_comms = n.n_comms;
        return -ENOMEM;
    }
    copy_in(b->h.arena + base, h->arena, h->arena_used);
    b->h.arena_used += h->arena_used;
    rebase(b->h.strings, strings, b->h.n_strings, base);
    rebase(b->h.stacks, stacks, b->h.n_stacks, base);
    rebase(b->h.threads, threads, b->h.n_threads, base);
    memcpy(b->h.targets + b->h.n_targets, h->targets, h->n_targets * sizeof(*h->targets));
    b->h.n_targets += h->n_targets;
    memcpy(b->h.ends + b->h.n_ends, h->ends, h->n_ends * sizeof(*h->ends));
    b->h.n_ends += h->n_ends;
    memcpy(b->h.crashes + b->h.n_crashes, h->crashes, h->n_crashes * sizeof(*h->crashes));
    b->h.n_crashes += h->n_crashes;
    memcpy(b->h.gpus + b->h.n_gpus, h->gpus, h->n_gpus * sizeof(*h->gpus));
    b->h.n_gpus += h->n_gpus;
    memcpy(b->h.gpu_procs + b->h.n_gpu_procs, h->gpu_procs, h->n_gpu_procs * sizeof(*h->gpu_procs));
    b->h.n_gpu_procs += h->n_gpu_procs;
    memcpy(b->h.gpu_xids + b->h.n_gpu_xids, h->gpu_xids, h->n_gpu_xids * sizeof(*h->gpu_xids));
    b->h.n_gpu_xids += h->n_gpu_xids;
    b->bytes += bytes;
    return 0;
}

void ob_backlog_clear(struct ob_backlog *b)
{
    half_free(&b->h);
    *b = (struct ob_backlog){0};
}
