/*
 * tasks.c - pyf_target__tasks(): the asyncio tasks of a target, read from outside. See
 * pyframes.h.
 *
 * Where the tasks are: the WeakSet in _asyncio's C static all_tasks (3.6: found by its symbol
 * in the module's own file); asyncio.tasks._all_tasks, a WeakSet (3.7-3.11); _scheduled_tasks and
 * the plain set _eager_tasks (3.12, 3.13); from 3.14 each thread's circular list of its tasks
 * (and the interpreter's, for tasks of threads that ended), with the two sets for tasks that
 * are not _asyncio.Task. Each task (layouts/aio.c) names its coroutine; a suspended
 * coroutine's frame (layout.h's gen_* and fr_stack* fields) has on top of its value stack
 * what it awaits: another coroutine, whose frame is read in turn, down to the future the task
 * waits for. A running task's frames are its thread's, down to its coroutine's frame.
 *
 * Which task awaits which, as asyncio.print_call_graph() says from 3.14: the task whose
 * awaited future (fut_waiter) is the other task, or a gather() whose _children hold it, or
 * the TaskGroup (the self of a done callback, _on_task_done) whose _parent_task it is.
 *
 * Consistency: the target runs on. A task's chain is read twice; one that reads differently
 * is read again, up to TASK_ATTEMPTS times, then counted in pyf_tasks.torn and left out.
 *
 * Threads: the target's owner. Memory: one struct pyf_tasks the caller frees. Failure:
 * -errno + pyf_err; a task that cannot be read is left out (torn), not an error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "elfimg.h"
#include "err.h"
#include "procmaps.h"
#include "pyobj.h"
#include "remote.h"
#include "target.h"

#define TASK_ATTEMPTS 3
#define SET_SLOTS_MAX (1u << 22) /* entries of a registry set read at most */
#define CHILDREN_MAX 4096        /* a gather's children looked at */
#define THREADS_MAX 4096         /* threads searched for a running task */
#define GEN_BYTES 512            /* of a generator object: its frame's head too (3.11+) */
#define FRAME_OBJECT_BYTES 512   /* of a PyFrameObject (<= 3.10) */

struct chain;

/* One read of every task. */
struct walk {
    struct pyf_target *t;
    const struct pyf_aio_layout *a;
    uint64_t task_type, globals;
    uint64_t *found; /* task addresses, as gathered from the registries */
    size_t n_found, cap_found, total;
    struct pyf_tasks *out;
    size_t cap_tasks, cap_frames;
    struct chain *chains; /* two: a task's chain, read twice */
    struct pyf_stack one; /* one frame decoded at a time */
    struct pyf_frame one_frame;
    struct pyf_thread *threads; /* read once, when a task is found running */
    struct pyf_stack *stacks;
    size_t n_threads;
    bool threads_read;
};

/* One coroutine chain as read: each frame's address and line, and the state it ended in. */
struct chain {
    struct pyf_task_frame frames[PYF_TASK_FRAMES_MAX];
    uint64_t frame_raddrs[PYF_TASK_FRAMES_MAX];
    size_t n;
    enum pyf_task_state state;
    uint64_t running_frame; /* the running coroutine's frame, found on a thread's stack */
};

static void add_found(struct walk *w, uint64_t task)
{
    w->total++;
    if (w->n_found < w->cap_found)
        w->found[w->n_found++] = task;
}

static int cmp_raddr(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

    return a < b ? -1 : a > b;
}

/* A task in two registries at once (a 3.12 eager task moving to the scheduled set while read)
 * is one task: w->found sorted, each once. */
static void unique_found(struct walk *w)
{
    size_t kept = 0;

    qsort(w->found, w->n_found, sizeof(*w->found), cmp_raddr);
    for (size_t i = 0; i < w->n_found; i++)
        if (kept == 0 || w->found[kept - 1] != w->found[i])
            w->found[kept++] = w->found[i];
    w->total -= w->n_found - kept;
    w->n_found = kept;
}

/* Objects @raddrs[0..n) of @size bytes each into @out (object i at i * size), a batch of
 * them a syscall; ok[i]: object i was read (a batch with one unreadable, freed meanwhile, is
 * read again one by one). */
#define READ_BATCH 512
static void read_many(const struct pyf_target *t, const uint64_t *raddrs, size_t n, size_t size,
                      uint8_t *out, bool *ok)
{
    struct iovec l[READ_BATCH], r[READ_BATCH];

    for (size_t at = 0; at < n; at += READ_BATCH) {
        size_t k = n - at < READ_BATCH ? n - at : READ_BATCH, m = 0;
        size_t idx[READ_BATCH];

        for (size_t i = at; i < at + k; i++) {
            ok[i] = false;
            if (!raddrs[i] || (raddrs[i] & 7)) /* not an object's address */
                continue;
            l[m] = (struct iovec){.iov_base = out + i * size, .iov_len = size};
            r[m] = (struct iovec){.iov_base = (void *)(uintptr_t)raddrs[i], .iov_len = size};
            idx[m++] = i;
        }
        if (remote_readv(&t->mem, l, r, m) == 0) {
            for (size_t j = 0; j < m; j++)
                ok[idx[j]] = true;
            continue;
        }
        for (size_t j = 0; j < m; j++)
            ok[idx[j]] = remote_read(&t->mem, raddrs[idx[j]], out + idx[j] * size, size) == 0;
    }
}

/* The keys of set @raddr; through weakrefs (their referents) when @weak. */
static int add_set(struct walk *w, uint64_t raddr, bool weak, struct pyf_err *e)
{
    const struct pyf_layout *l = &w->t->lay;
    int64_t used = 0, mask = 0;
    uint64_t table = 0;
    size_t slots, entry = (size_t)l->set_entry_size, n = 0;
    uint8_t *tab;
    int r = pyobj_read(w->t, raddr + (uint64_t)l->set_used, &used, sizeof(used), e, "task set");

    if (r == 0)
        r = pyobj_read(w->t, raddr + (uint64_t)l->set_mask, &mask, sizeof(mask), e, "task set");
    if (r == 0)
        r = pyobj_read(w->t, raddr + (uint64_t)l->set_table, &table, sizeof(table), e, "task set");
    if (r < 0)
        return r;
    if (used < 0 || mask < 0 || (uint64_t)mask >= SET_SLOTS_MAX || used > mask + 1 || entry < 16)
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "pid %d: task set at 0x%" PRIx64 " is corrupt",
                        w->t->info.pid, raddr);
    slots = (size_t)mask + 1;
    if (!(tab = malloc(slots * entry)))
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: task set of %zu slots", w->t->info.pid,
                        slots);
    r = pyobj_read(w->t, table, tab, slots * entry, e, "task set's table");
    /* the keys, in place of the table's entries: a deleted one holds the dummy key with hash
     * -1; through weakrefs, their referents (wr_object), read a batch a syscall */
    for (size_t i = 0; r == 0 && i < slots; i++) {
        uint64_t key = field_u64(tab + i * entry, 0);

        if (key && (int64_t)field_u64(tab + i * entry, 8) != -1)
            ((uint64_t *)tab)[n++] = key;
    }
    if (r == 0 && weak) {
        size_t ref_bytes = (size_t)w->a->weakref_object + 8;
        uint8_t *refs = malloc(n * ref_bytes + 1);
        bool *ok = malloc(n * sizeof(*ok) + 1);

        if (!refs || !ok) {
            r = pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: task set of %zu", w->t->info.pid, n);
            n = 0;
        }
        read_many(w->t, (const uint64_t *)tab, n, ref_bytes, refs, ok);
        for (size_t i = 0; i < n; i++) /* an unreadable one went meanwhile */
            ((uint64_t *)tab)[i] =
                ok[i] ? field_u64(refs + i * ref_bytes, w->a->weakref_object) : 0;
        free(refs);
        free(ok);
    }
    for (size_t i = 0; r == 0 && i < n; i++) {
        uint64_t obj = ((const uint64_t *)tab)[i];

        if (obj && obj != w->t->types.none)
            add_found(w, obj);
    }
    free(tab);
    return r;
}

/* The tasks on the circular list whose head is at @head (3.14+). */
static int add_list(struct walk *w, uint64_t head, struct pyf_err *e)
{
    uint64_t node = 0;
    int r = pyobj_read(w->t, head, &node, sizeof(node), e, "task list");

    for (size_t n = 0; r == 0 && node && node != head; n++) {
        if (n >= w->cap_found * 2)
            return pyf_fail(e, PYF_TORN, EFAULT, head,
                            "pid %d: the task list at 0x%" PRIx64 " does not end", w->t->info.pid,
                            head);
        add_found(w, node - (uint64_t)w->a->task_node);
        r = pyobj_read(w->t, node, &node, sizeof(node), e, "task list node");
    }
    return r;
}

static int read_threads(struct walk *w, struct pyf_err *e)
{
    int r = 0;

    if (w->threads_read)
        return 0;
    w->threads_read = true;
    w->threads = calloc(THREADS_MAX, sizeof(*w->threads));
    if (!w->threads)
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: threads", w->t->info.pid);
    r = pyf_target__threads(w->t, w->threads, THREADS_MAX, &w->n_threads, e);
    if (r < 0)
        w->n_threads = 0;
    return r;
}

/* 3.6: _asyncio keeps its registries in C statics named in no Python object (all_tasks, the
 * WeakSet of every task; current_tasks, the dict of each loop's running task): the value of
 * static @symbol, whose address is the module file's symbol (.symtab: a build not stripped)
 * plus where that file is mapped. 0: _asyncio not loaded. */
static int registry_36(struct walk *w, const char *symbol, uint64_t *ret, struct pyf_err *e)
{
    struct procmaps pm = {0};
    struct elfimg *img = NULL;
    const struct procmap *m = NULL;
    uint64_t vaddr = 0, off = 0, at, sym = 0;
    char full[PATH_MAX + 32];
    int r;

    *ret = 0;
    if (w->t->mem.core)
        return pyf_fail(e, PYF_UNSUPPORTED, ENOTSUP, 0,
                        "Python 3.6 keeps its asyncio tasks where only a live process shows "
                        "them; tasks of a 3.6 core are not read");
    if ((r = procmaps_read(w->t->info.pid, &pm)) < 0)
        return pyf_fail(e, r == -EACCES ? PYF_DENIED : PYF_GONE, -r, 0, "pid %d: its maps",
                        w->t->info.pid);
    for (size_t i = 0; i < pm.n && !m; i++) {
        const char *b = strrchr(pm.maps[i].path, '/');

        if (b && strncmp(b + 1, "_asyncio.", 9) == 0)
            m = &pm.maps[i];
    }
    if (!m) {
        procmaps_free(&pm);
        return 0;
    }
    snprintf(full, sizeof(full), "/proc/%d/root%s", (int)w->t->info.pid, m->path);
    r = elfimg_open(full, m->inode, &img, e);
    if (r == 0 &&
        (elfimg__symbol(img, symbol, &sym) < 0 || elfimg__first_load(img, &vaddr, &off) < 0))
        r = pyf_fail(e, PYF_UNSUPPORTED, ENOTSUP, 0,
                     "pid %d: %s has no symbol table (stripped): Python 3.6 keeps its asyncio "
                     "tasks in its static %s, found only by that symbol",
                     w->t->info.pid, m->path, symbol);
    if (r == 0 && !(at = procmaps__addr_of_offset(&pm, m->path, off)))
        r = pyf_fail(e, PYF_TORN, ENOENT, 0, "pid %d: %s is no longer mapped", w->t->info.pid,
                     m->path);
    if (r == 0)
        r = pyobj_read(w->t, at - vaddr + sym, ret, sizeof(*ret), e, symbol);
    elfimg_free(img);
    procmaps_free(&pm);
    return r;
}

/* Every task the registries hold, into w->found. */
static int gather_tasks(struct walk *w, struct pyf_err *e)
{
    const struct pyf_layout *l = &w->t->lay;
    static const struct {
        const char *name;
        bool weak;
    } sets[] = {{"_all_tasks", true}, {"_scheduled_tasks", true}, {"_eager_tasks", false}};
    int r = 0;

    if (w->t->info.version == PYF_VER(3, 6)) {
        uint64_t set = 0, data = 0;

        r = registry_36(w, "all_tasks", &set, e);
        if (r == 0 && set)
            r = pyobj_attr(w->t, set, "data", &data, e);
        return r == 0 && data ? add_set(w, data, true, e) : r;
    }
    for (size_t i = 0; r == 0 && i < sizeof(sets) / sizeof(sets[0]); i++) {
        uint64_t set = 0, data = 0;

        r = pyobj_dict_get_str(w->t, w->globals, sets[i].name, &set, e);
        if (r == 0 && set && sets[i].weak)
            r = pyobj_attr(w->t, set, "data", &data, e);
        else
            data = set;
        if (r == 0 && data)
            r = add_set(w, data, sets[i].weak, e);
    }
    if (r == 0 && w->a->task_node >= 0 && l->ts_asyncio_tasks >= 0) {
        uint64_t interp = 0;

        r = read_threads(w, e);
        for (size_t i = 0; r == 0 && i < w->n_threads; i++)
            r = add_list(w, w->threads[i].tstate_raddr + (uint64_t)l->ts_asyncio_tasks, e);
        if (r == 0)
            r = threads__first_interp(w->t, &interp, e);
        if (r == 0 && interp)
            r = add_list(w, interp + (uint64_t)l->is_asyncio_tasks, e);
    }
    return r;
}

static bool chain_full(const struct chain *c)
{
    return c->n >= PYF_TASK_FRAMES_MAX;
}

/* Frame @fr (bytes @buf, @len of them, at @raddr) decoded onto @c. */
static int push_frame(struct walk *w, struct chain *c, uint64_t raddr, const uint8_t *buf,
                      size_t len, struct pyf_err *e)
{
    struct pyf_frames_copy copy = {.raddrs = &raddr, .bytes = buf, .stride = len, .n = 1};
    int r = pyf_target__stack_of_copy(w->t, &copy, &w->one, e);

    if (r < 0)
        return r;
    if (w->one.n_frames != 1)
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "pid %d: coroutine frame at 0x%" PRIx64,
                        w->t->info.pid, raddr);
    if (chain_full(c))
        return 0;
    snprintf(c->frames[c->n].func, sizeof(c->frames[0].func), "%s", w->one_frame.func);
    snprintf(c->frames[c->n].file, sizeof(c->frames[0].file), "%s", w->one_frame.file);
    c->frames[c->n].line = w->one_frame.line;
    c->frame_raddrs[c->n++] = raddr;
    return 0;
}

/* One coroutine (or generator) @gen: its frame onto @c (outermost first as we go; reversed
 * at the end), and what it awaits in *@ret_next (0: nothing to follow). */
static int read_coroutine(struct walk *w, uint64_t gen, bool is_coro, struct chain *c,
                          uint64_t *ret_next, struct pyf_err *e)
{
    const struct pyf_layout *l = &w->t->lay;
    uint8_t buf[GEN_BYTES + FRAME_OBJECT_BYTES];
    uint64_t frame = 0, top = 0;
    bool suspended = false, running = false, created = false, yield_from = is_coro;
    int r;

    *ret_next = 0;
    if (l->gen_iframe >= 0) { /* 3.11+: the frame is inside the generator */
        size_t want = (size_t)l->gen_iframe + w->t->fr_copy_read;
        int8_t state;

        if (want < (size_t)l->gen_iframe + 80)
            want = (size_t)l->gen_iframe + 80;
        if (want > sizeof(buf))
            return pyf_fail(e, PYF_INVALID, EINVAL, gen, "pid %d: generator frame too large",
                            w->t->info.pid);
        if ((r = pyobj_read(w->t, gen, buf, want, e, "coroutine")) < 0)
            return r;
        state = (int8_t)buf[l->gen_state];
        frame = gen + (uint64_t)l->gen_iframe;
        created = state == l->gen_created;
        running = state == l->gen_executing;
        suspended = state >= l->gen_suspended_lo && state <= l->gen_suspended_hi;
        if (!is_coro && l->gen_suspended_hi > l->gen_suspended_lo)
            yield_from = state > l->gen_suspended_lo; /* 3.13+ says so of a generator */
        if (!suspended && !running && !created)
            return 0; /* finished */
        /* the stack is read only where the generator waits in an await or yield from: one
           suspended at a bare yield may have an empty stack and no locals (asyncio's
           __sleep0, which `await asyncio.sleep(0)` suspends in: every such task read torn) */
        if (l->fr_stack_index >= 0 && suspended && yield_from) {
            int32_t idx = field_i32(buf + l->gen_iframe, l->fr_stack_index);

            if (idx < 1 || idx > (1 << 16))
                return pyf_fail(e, PYF_TORN, EFAULT, frame, "pid %d: coroutine stack depth %d",
                                w->t->info.pid, idx);
            top = frame + (uint64_t)l->fr_localsplus + (uint64_t)(idx - 1) * 8;
        } else if (l->fr_stackpointer >= 0 && suspended && yield_from) {
            uint64_t sp = field_u64(buf + l->gen_iframe, l->fr_stackpointer);

            uint64_t depth = (uint64_t)l->gen_yf_depth * 8;

            if (sp < frame + (uint64_t)l->fr_localsplus + depth || sp > frame + (1u << 20))
                return pyf_fail(e, PYF_TORN, EFAULT, frame, "pid %d: coroutine stack pointer",
                                w->t->info.pid);
            top = sp - depth;
        }
        r = push_frame(w, c, frame, buf + l->gen_iframe, want - (size_t)l->gen_iframe, e);
    } else { /* <= 3.10: a frame object */
        uint8_t *fb = buf + GEN_BYTES;
        size_t want =
            w->t->fr_copy_read > (size_t)l->fr_size ? w->t->fr_copy_read : (size_t)l->fr_size;

        if (want > FRAME_OBJECT_BYTES)
            want = FRAME_OBJECT_BYTES;
        if ((r = pyobj_read(w->t, gen + (uint64_t)l->gen_frame, &frame, sizeof(frame), e,
                            "coroutine")) < 0)
            return r;
        if (!frame)
            return 0; /* finished */
        if ((r = pyobj_read(w->t, frame, fb, want, e, "coroutine frame")) < 0)
            return r;
        running = (int8_t)fb[l->fr_running] == l->fr_running_value;
        if (l->fr_stacktop >= 0) { /* 3.6-3.9 */
            uint64_t stacktop = field_u64(fb, l->fr_stacktop);

            created = field_i32(fb, l->fr_lasti) < 0;
            suspended = !running && !created && stacktop;
            if (suspended)
                top = stacktop - 8;
        } else { /* 3.10 */
            int8_t state = (int8_t)fb[l->fr_running];
            int32_t depth = field_i32(fb, l->fr_stackdepth);

            created = state == l->fr_created;
            suspended = state == l->fr_suspended;
            if (suspended && yield_from && (depth < 1 || depth > (1 << 16)))
                return pyf_fail(e, PYF_TORN, EFAULT, frame, "pid %d: coroutine stack depth %d",
                                w->t->info.pid, depth);
            if (suspended && yield_from)
                top = field_u64(fb, l->fr_valuestack) + (uint64_t)(depth - 1) * 8;
        }
        /* a generator on 3.6-3.10 does not say whether it suspended in yield from */
        r = push_frame(w, c, frame, fb, want, e);
    }
    if (r < 0)
        return r;
    if (running) {
        c->state = PYF_TASK_RUNNING;
        c->running_frame = frame;
    } else if (created && c->n == 1) {
        c->state = PYF_TASK_SCHEDULED;
    }
    if (suspended && yield_from && top) {
        uint64_t bits = 0;

        if ((r = pyobj_read(w->t, top, &bits, sizeof(bits), e, "awaited object")) < 0)
            return r;
        *ret_next = stackref_object(l, bits);
    }
    return 0;
}

/* The coroutine chain of task @coro, outermost first as read, then reversed. */
static int read_chain(struct walk *w, uint64_t coro, struct chain *c, struct pyf_err *e)
{
    int r = 0;

    c->n = 0;
    c->state = PYF_TASK_WAITING;
    c->running_frame = 0;
    for (size_t depth = 0; r == 0 && coro && depth < PYF_TASK_FRAMES_MAX; depth++) {
        uint64_t type = 0, next = 0;

        if ((r = pyobj_type(w->t, coro, &type, e)) < 0)
            break;
        if (type != w->t->types.coro && type != w->t->types.gen)
            break; /* a future (FutureIter), or an awaitable we do not read into */
        r = read_coroutine(w, coro, type == w->t->types.coro, c, &next, e);
        coro = next;
    }
    for (size_t i = 0; i < c->n / 2; i++) { /* innermost first, as stacks are */
        struct pyf_task_frame f = c->frames[i];
        uint64_t a = c->frame_raddrs[i];

        c->frames[i] = c->frames[c->n - 1 - i];
        c->frames[c->n - 1 - i] = f;
        c->frame_raddrs[i] = c->frame_raddrs[c->n - 1 - i];
        c->frame_raddrs[c->n - 1 - i] = a;
    }
    return r;
}

static bool same_chain(const struct chain *a, const struct chain *b)
{
    if (a->n != b->n || a->state != b->state)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (a->frame_raddrs[i] != b->frame_raddrs[i] || a->frames[i].line != b->frames[i].line)
            return false;
    return true;
}

/* A running task: its thread, and that thread's frames down to its coroutine's. */
static int running_frames(struct walk *w, struct chain *c, pid_t *ret_tid, struct pyf_err *e)
{
    int r = read_threads(w, e);

    if (r == 0 && !w->stacks) {
        w->stacks = calloc(w->n_threads ? w->n_threads : 1, sizeof(*w->stacks));
        for (size_t i = 0; w->stacks && i < w->n_threads; i++) {
            struct pyf_err ignored;

            w->stacks[i].cap = PYF_DEPTH_MAX;
            w->stacks[i].frames = calloc(PYF_DEPTH_MAX, sizeof(struct pyf_frame));
            /* a thread that cannot be read has no frames: its task reads as it was */
            if (!w->stacks[i].frames ||
                pyf_target__stack(w->t, &w->threads[i], &w->stacks[i], &ignored) < 0)
                w->stacks[i].n_frames = 0;
        }
        if (!w->stacks)
            return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: stacks", w->t->info.pid);
    }
    for (size_t i = 0; r == 0 && i < w->n_threads; i++) {
        const struct pyf_stack *st = &w->stacks[i];

        for (size_t k = 0; k < st->n_frames; k++) {
            if (st->frames[k].frame_raddr != c->running_frame)
                continue;
            c->n = 0;
            for (size_t j = 0; j <= k && !chain_full(c); j++) {
                snprintf(c->frames[c->n].func, sizeof(c->frames[0].func), "%s", st->frames[j].func);
                snprintf(c->frames[c->n].file, sizeof(c->frames[0].file), "%s", st->frames[j].file);
                c->frames[c->n].line = st->frames[j].line;
                c->frame_raddrs[c->n++] = st->frames[j].frame_raddr;
            }
            *ret_tid = w->threads[i].tid;
            return 0;
        }
    }
    return r;
}

static int task_name(struct walk *w, uint64_t name, char *buf, size_t size)
{
    uint64_t type = 0, n = 0;
    char *text = NULL;

    buf[0] = '\0';
    if (!name || pyobj_type(w->t, name, &type, NULL) < 0)
        return 0;
    if (type == w->t->types.str && pyobj_str(w->t, name, size - 1, &text, NULL) == 0) {
        snprintf(buf, size, "%s", text);
        free(text);
    } else if (type == w->t->types.long_ && pyobj_u64(w->t, name, &n, NULL) == 0) {
        snprintf(buf, size, "Task-%" PRIu64, n); /* 3.13+ names a task when asked */
    }
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    void *q;
    size_t n = *cap ? *cap : 64;

    if (need <= *cap)
        return 0;
    while (n < need)
        n *= 2;
    if (!(q = realloc(*p, n * size)))
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* Task @raddr into w->out, or counted torn. */
static int read_task(struct walk *w, uint64_t raddr, struct pyf_err *e)
{
    const struct pyf_aio_layout *a = w->a;
    struct pyf_tasks *out = w->out;
    struct chain *c = w->chains;
    uint8_t head[256];
    struct pyf_task *task;
    int r = 0, attempt;

    if (grow((void **)&out->tasks, &w->cap_tasks, out->n_tasks + 1, sizeof(*out->tasks)) < 0)
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: tasks", w->t->info.pid);
    task = &out->tasks[out->n_tasks];
    memset(task, 0, sizeof(*task));
    task->raddr = raddr;
    for (attempt = 0; attempt < TASK_ATTEMPTS; attempt++) {
        struct pyf_err local;
        uint64_t type = 0, coro = 0;
        int32_t state;

        r = pyobj_read(w->t, raddr, head, (size_t)a->task_size, &local, "task");
        if (r == 0 && field_u64(head, w->t->lay.ob_type) != w->task_type)
            break; /* no longer a task (freed): not one to show */
        if (r < 0) {
            if (pyf_err_fatal(&local)) {
                *e = local;
                return r;
            }
            continue;
        }
        state = field_i32(head, a->task_state);
        coro = field_u64(head, a->task_coro);
        task->waits_for = field_u64(head, a->task_fut_waiter);
        task->state = state == 1   ? PYF_TASK_CANCELLED
                      : state == 2 ? PYF_TASK_DONE
                                   : PYF_TASK_WAITING;
        if (a->task_name >= 0)
            task_name(w, field_u64(head, a->task_name), task->name, sizeof(task->name));
        if (task->state != PYF_TASK_WAITING) {
            c[0].n = 0;
            break;
        }
        if (read_chain(w, coro, &c[0], &local) < 0 || read_chain(w, coro, &c[1], &local) < 0 ||
            !same_chain(&c[0], &c[1]))
            continue;
        task->state = c[0].state;
        if (task->state == PYF_TASK_RUNNING && running_frames(w, &c[0], &task->tid, &local) < 0)
            continue;
        task->waits_for_type[0] = '\0';
        if (task->waits_for && pyobj_type(w->t, task->waits_for, &type, NULL) == 0)
            pyobj_type_name(w->t, type, task->waits_for_type, sizeof(task->waits_for_type), NULL);
        break;
    }
    if (attempt == TASK_ATTEMPTS) {
        out->torn++;
        return 0;
    }
    if (r == 0 && field_u64(head, w->t->lay.ob_type) != w->task_type)
        return 0;
    if (grow((void **)&out->frames, &w->cap_frames, out->n_frames + c[0].n, sizeof(*out->frames)) <
        0)
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: task frames", w->t->info.pid);
    task->frame0 = out->n_frames;
    task->n_frames = c[0].n;
    if (c[0].n) /* none: frames may still be NULL */
        memcpy(out->frames + out->n_frames, c[0].frames, c[0].n * sizeof(*out->frames));
    out->n_frames += c[0].n;
    out->n_tasks++;
    return 0;
}

/* The index of task @raddr in out->tasks, or -1. They were read in w->found's order, which
 * unique_found() sorted by address. */
static ssize_t task_index(const struct pyf_tasks *out, uint64_t raddr)
{
    size_t lo = 0, hi = out->n_tasks;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (out->tasks[mid].raddr == raddr)
            return (ssize_t)mid;
        if (out->tasks[mid].raddr < raddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

struct edge {
    size_t child, parent;
};

static int cmp_edge(const void *x, const void *y)
{
    const struct edge *a = x, *b = y;

    if (a->child != b->child)
        return a->child < b->child ? -1 : 1;
    return a->parent < b->parent ? -1 : a->parent > b->parent;
}

static void add_edge(struct edge *edges, size_t *n, size_t cap, ssize_t child, ssize_t parent)
{
    if (child < 0 || parent < 0 || child == parent || *n >= cap)
        return;
    for (size_t i = 0; i < *n; i++)
        if (edges[i].child == (size_t)child && edges[i].parent == (size_t)parent)
            return;
    edges[(*n)++] = (struct edge){(size_t)child, (size_t)parent};
}

/* The TaskGroup whose _on_task_done is callback @cb: its _parent_task, or 0. */
static uint64_t group_parent(struct walk *w, uint64_t cb)
{
    uint64_t type = 0, self = 0, parent = 0;
    char name[32];

    if (!cb || pyobj_type(w->t, cb, &type, NULL) < 0 ||
        pyobj_type_name(w->t, type, name, sizeof(name), NULL) < 0 || strcmp(name, "method") != 0 ||
        pyobj_read(w->t, cb + (uint64_t)w->a->method_self, &self, sizeof(self), NULL, "method") <
            0 ||
        pyobj_attr(w->t, self, "_parent_task", &parent, NULL) < 0)
        return 0;
    return parent;
}

/* Which task awaits which (see the head of the file), into out->parents. */
static int link_tasks(struct walk *w, struct pyf_err *e)
{
    struct pyf_tasks *out = w->out;
    size_t cap = out->n_tasks * 4 + 16, n = 0;
    struct edge *edges = malloc(cap * sizeof(*edges));
    uint64_t *children = malloc(CHILDREN_MAX * sizeof(*children));

    if (!edges || !children) {
        free(edges);
        free(children);
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: task graph", w->t->info.pid);
    }
    for (size_t i = 0; i < out->n_tasks; i++) {
        const struct pyf_task *p = &out->tasks[i];
        uint64_t list = 0, cb0 = 0, cbs = 0;
        int64_t size = 0;

        if (p->state == PYF_TASK_WAITING && p->waits_for) {
            ssize_t direct = task_index(out, p->waits_for);

            if (direct >= 0) {
                add_edge(edges, &n, cap, direct, (ssize_t)i);
            } else if (pyobj_attr(w->t, p->waits_for, "_children", &list, NULL) == 0 && list &&
                       pyobj_read(w->t, list + (uint64_t)w->t->lay.var_size, &size, sizeof(size),
                                  NULL, "gather's children") == 0 &&
                       size > 0) {
                uint64_t items = 0;
                size_t k = size < CHILDREN_MAX ? (size_t)size : CHILDREN_MAX;

                if (pyobj_read(w->t, list + (uint64_t)w->t->lay.list_items, &items, sizeof(items),
                               NULL, "gather's children") == 0 &&
                    pyobj_read(w->t, items, children, k * 8, NULL, "gather's children") == 0)
                    for (size_t j = 0; j < k; j++)
                        add_edge(edges, &n, cap, task_index(out, children[j]), (ssize_t)i);
            }
        }
        /* a TaskGroup's child: its first done callback, or one in the list of the rest */
        if (w->a->fut_callback0 >= 0)
            pyobj_read(w->t, p->raddr + (uint64_t)w->a->fut_callback0, &cb0, sizeof(cb0), NULL,
                       "callback");
        add_edge(edges, &n, cap, (ssize_t)i, task_index(out, group_parent(w, cb0)));
        if (pyobj_read(w->t, p->raddr + (uint64_t)w->a->fut_callbacks, &cbs, sizeof(cbs), NULL,
                       "callbacks") == 0 &&
            cbs &&
            pyobj_read(w->t, cbs + (uint64_t)w->t->lay.var_size, &size, sizeof(size), NULL,
                       "callbacks") == 0 &&
            size > 0 && size <= 64) {
            uint64_t items = 0, item[64], pair[2];

            if (pyobj_read(w->t, cbs + (uint64_t)w->t->lay.list_items, &items, sizeof(items), NULL,
                           "callbacks") == 0 &&
                pyobj_read(w->t, items, item, (size_t)size * 8, NULL, "callbacks") == 0)
                for (int64_t j = 0; j < size; j++) {
                    uint64_t cb = item[j];
                    size_t got = 0;

                    if (w->a->fut_callback0 >= 0 &&
                        pyobj_tuple(w->t, item[j], pair, 2, &got, NULL) == 0 && got == 2)
                        cb = pair[0]; /* (callback, context) */
                    add_edge(edges, &n, cap, (ssize_t)i, task_index(out, group_parent(w, cb)));
                }
        }
    }
    qsort(edges, n, sizeof(*edges), cmp_edge);
    out->parents = malloc((n ? n : 1) * sizeof(*out->parents));
    if (!out->parents) {
        free(edges);
        free(children);
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: task graph", w->t->info.pid);
    }
    for (size_t k = 0; k < n; k++) {
        struct pyf_task *c = &out->tasks[edges[k].child];

        if (!c->n_parents)
            c->parent0 = k;
        c->n_parents++;
        out->parents[k] = edges[k].parent;
    }
    out->n_parents = n;
    free(edges);
    free(children);
    return 0;
}

void pyf_tasks_free(struct pyf_tasks *tasks)
{
    if (!tasks)
        return;
    free(tasks->tasks);
    free(tasks->frames);
    free(tasks->parents);
    free(tasks);
}

static int find_module(struct walk *w, struct pyf_err *e)
{
    uint64_t interp = 0, modules = 0, module = 0, task = 0;
    int64_t size = 0;
    int r = threads__first_interp(w->t, &interp, e);

    if (r == 0 && interp)
        r = target_read_u64(w->t, interp + (uint64_t)w->t->lay.is_modules, &modules, e,
                            "sys.modules");
    if (r == 0 && modules)
        r = pyobj_dict_get_str(w->t, modules, "asyncio.tasks", &module, e);
    if (r == 0 && module)
        r = target_read_u64(w->t, module + (uint64_t)w->t->lay.module_dict, &w->globals, e,
                            "asyncio.tasks' globals");
    if (r == 0 && w->globals)
        r = pyobj_dict_get_str(w->t, w->globals, "Task", &task, e);
    if (r < 0 || !task)
        return r; /* asyncio not imported: no tasks */
    r = pyobj_read(w->t, task + (uint64_t)w->t->lay.tp_basicsize, &size, sizeof(size), e,
                   "asyncio.Task");
    if (r == 0 && size != w->a->task_size)
        return pyf_fail(e, PYF_UNSUPPORTED, ENOTSUP, task,
                        "pid %d: asyncio.Task is %" PRId64 " bytes, not the %d of _asyncio.Task"
                        " in Python %s (asyncio's C module is missing or replaced)",
                        w->t->info.pid, size, w->a->task_size, w->t->info.version_str);
    w->task_type = task;
    return r;
}

/* Every task's address into w->found (at most @max, sorted, each once). */
static int find_tasks(struct walk *w, size_t max, struct pyf_err *e)
{
    int r;

    w->cap_found = max ? max : 1;
    if (!(w->found = malloc(w->cap_found * sizeof(*w->found))))
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: tasks", w->t->info.pid);
    r = find_module(w, e);
    if (r == 0 && w->task_type)
        r = gather_tasks(w, e);
    unique_found(w);
    return r;
}

static void walk_free(struct walk *w)
{
    for (size_t i = 0; w->stacks && i < w->n_threads; i++)
        free(w->stacks[i].frames);
    free(w->stacks);
    free(w->threads);
    free(w->found);
    free(w->chains);
}

int pyf_target__tasks(struct pyf_target *t, size_t max, struct pyf_tasks **ret,
                      struct pyf_err *reterr)
{
    struct walk w = {.t = t, .a = aio_layout_for_version(t->info.version)};
    int r = 0;

    *ret = NULL;
    if (!w.a || !t->types.coro || !t->types.gen)
        return pyf_fail(reterr, PYF_UNSUPPORTED, ENOTSUP, 0,
                        "pid %d: asyncio tasks of Python %s are not read (no layout of its Task)",
                        t->info.pid, t->info.version_str);
    w.out = calloc(1, sizeof(*w.out));
    w.chains = calloc(2, sizeof(*w.chains));
    w.one.frames = &w.one_frame;
    w.one.cap = 1;
    if (!w.out || !w.chains)
        r = pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "pid %d: tasks", t->info.pid);
    if (r == 0)
        r = find_tasks(&w, max, reterr);
    for (size_t i = 0; r == 0 && i < w.n_found; i++)
        r = read_task(&w, w.found[i], reterr);
    if (r == 0)
        r = link_tasks(&w, reterr);
    if (r == 0)
        w.out->total = w.total > w.out->n_tasks ? w.total : w.out->n_tasks;
    walk_free(&w);
    if (r < 0) {
        pyf_tasks_free(w.out);
        return r;
    }
    *ret = w.out;
    return 0;
}

/*
 * The tasks running now (pyf_target__running_tasks()): not every task, only those asyncio
 * itself records as each loop's current one, so that a call costs a few reads however many
 * tasks wait: the dict of each loop's running task (3.6: _asyncio's static current_tasks,
 * found by its symbol; 3.7-3.13: asyncio.tasks._current_tasks), or from 3.14 each thread
 * state's asyncio_running_task. Where the dict is is found once per target (asyncio imported
 * later is looked for again, at most once a second) and its type checked at every use.
 */
#define RUNNING_MAX 128 /* running tasks looked at: one per event loop */
#define LOOK_AGAIN_NS 1000000000ULL
#define TASK_HEAD_MAX 256

struct running_scratch {
    uint64_t tasks[RUNNING_MAX], coros[RUNNING_MAX], frames[RUNNING_MAX], loops[RUNNING_MAX];
    uint64_t slots[RUNNING_MAX];
    size_t of[RUNNING_MAX]; /* the task of coroutine j */
    bool ok[RUNNING_MAX], ok2[RUNNING_MAX];
    uint8_t heads[RUNNING_MAX * TASK_HEAD_MAX], gens[RUNNING_MAX * GEN_BYTES];
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Finds asyncio's record of the running tasks (t->aio), unless found, or looked for less
 * than LOOK_AGAIN_NS ago. Not found (asyncio not imported): t->aio.task_type stays 0. */
static int find_current(struct pyf_target *t, const struct pyf_aio_layout *a, struct pyf_err *e)
{
    struct walk w = {.t = t, .a = a};
    uint64_t now = now_ns(), dict = 0;
    int r;

    if (t->aio.task_type || now < t->aio.next_look_ns)
        return 0;
    t->aio.next_look_ns = now + LOOK_AGAIN_NS;
    r = find_module(&w, e);
    if (r < 0 || !w.task_type)
        return r;
    if (t->info.version == PYF_VER(3, 6))
        r = registry_36(&w, "current_tasks", &dict, e);
    else if (t->lay.ts_asyncio_running_task < 0)
        r = pyobj_dict_get_str(t, w.globals, "_current_tasks", &dict, e);
    if (r < 0 || (t->lay.ts_asyncio_running_task < 0 && !dict))
        return r;
    t->aio.task_type = w.task_type;
    t->aio.dict = dict;
    return 0;
}

/* The tasks asyncio says run now, into x->tasks (*ret_n of them). */
static int current_tasks(struct pyf_target *t, struct running_scratch *x,
                         const struct pyf_thread *threads, size_t n_threads, size_t *ret_n,
                         struct pyf_err *e)
{
    int r;

    *ret_n = 0;
    if (t->lay.ts_asyncio_running_task >= 0) { /* 3.14+: each thread state's */
        /* RUNNING_MAX threads a read: a process of thousands has a loop in a few */
        for (size_t at = 0; at < n_threads && *ret_n < RUNNING_MAX; at += RUNNING_MAX) {
            size_t n = n_threads - at < RUNNING_MAX ? n_threads - at : RUNNING_MAX;

            for (size_t i = 0; i < n; i++)
                x->slots[i] =
                    threads[at + i].tstate_raddr
                        ? threads[at + i].tstate_raddr + (uint64_t)t->lay.ts_asyncio_running_task
                        : 0;
            read_many(t, x->slots, n, sizeof(uint64_t), (uint8_t *)x->loops, x->ok);
            for (size_t i = 0; i < n && *ret_n < RUNNING_MAX; i++)
                if (x->ok[i] && x->loops[i])
                    x->tasks[(*ret_n)++] = x->loops[i];
        }
        return 0;
    }
    r = pyobj_small_dict_items(t, t->aio.dict, x->loops, x->tasks, RUNNING_MAX, ret_n, e);
    if (r < 0 && e->kind == PYF_TORN) {
        t->aio.task_type = 0; /* no longer that dict: looked for again */
        *ret_n = 0;
        return 0;
    }
    return r;
}

/* Of tasks x->tasks[0..n): those whose coroutine runs now, into @ret (see pyframes.h). Three
 * batched reads: the tasks, their coroutines, and (<= 3.10) the coroutines' frames. */
static void running_of(struct pyf_target *t, const struct pyf_aio_layout *a,
                       struct running_scratch *x, size_t n, struct pyf_running_task *ret,
                       size_t cap, size_t *ret_n)
{
    const struct pyf_layout *l = &t->lay;
    struct walk w = {.t = t, .a = a};
    size_t task_bytes = (size_t)a->task_size, m = 0;
    /* of a coroutine: its type, and its state and frame's code (3.11+) or its frame (<= 3.10) */
    size_t gen_bytes = l->gen_iframe >= 0 ? (size_t)l->gen_iframe + (size_t)l->fr_code + 8
                                          : (size_t)l->gen_frame + 8;

    if (task_bytes > TASK_HEAD_MAX || gen_bytes > GEN_BYTES || (size_t)l->fr_size > GEN_BYTES)
        return;
    read_many(t, x->tasks, n, task_bytes, x->heads, x->ok);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *h = x->heads + i * task_bytes;

        if (x->ok[i] && field_u64(h, l->ob_type) == t->aio.task_type &&
            field_i32(h, a->task_state) == 0)
            x->coros[m] = field_u64(h, a->task_coro), x->of[m++] = i;
    }
    read_many(t, x->coros, m, gen_bytes, x->gens, x->ok2);
    for (size_t j = 0; j < m && *ret_n < cap; j++) {
        const uint8_t *g = x->gens + j * gen_bytes;
        const uint8_t *head = x->heads + x->of[j] * task_bytes;
        uint64_t frame = 0, code = 0;

        if (!x->ok2[j] || field_u64(g, l->ob_type) != t->types.coro)
            continue;
        if (l->gen_iframe >= 0) {
            if ((int8_t)g[l->gen_state] != l->gen_executing)
                continue;
            frame = x->coros[j] + (uint64_t)l->gen_iframe;
            code = stackref_object(l, field_u64(g + l->gen_iframe, l->fr_code));
        } else {
            uint8_t fb[GEN_BYTES];

            /* few run at once: their frames are read one by one */
            frame = field_u64(g, l->gen_frame);
            if (!frame || remote_read(&t->mem, frame, fb, (size_t)l->fr_size) < 0 ||
                (int8_t)fb[l->fr_running] != l->fr_running_value)
                continue;
            code = field_u64(fb, l->fr_code);
        }
        ret[*ret_n] = (struct pyf_running_task){
            .task = x->tasks[x->of[j]], .coro = x->coros[j], .coro_frame = frame, .code = code};
        if (a->task_name >= 0)
            task_name(&w, field_u64(head, a->task_name), ret[*ret_n].name, sizeof(ret[0].name));
        (*ret_n)++;
    }
}

/* The tasks asyncio says run now into t->aio.scratch's tasks (*ret_n), or none. */
static int find_running(struct pyf_target *t, const struct pyf_aio_layout *a,
                        const struct pyf_thread *threads, size_t n_threads, size_t *ret_n,
                        struct pyf_err *e)
{
    struct pyf_thread *own = NULL;
    int r;

    *ret_n = 0;
    if (!a || !t->types.coro)
        return 0; /* no Task layout: no task is known to run */
    if (!t->aio.scratch && !(t->aio.scratch = malloc(sizeof(*t->aio.scratch))))
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: tasks", t->info.pid);
    r = find_current(t, a, e);
    if (r < 0 || !t->aio.task_type)
        return r;
    if (t->lay.ts_asyncio_running_task >= 0 && !threads) {
        if (!(own = calloc(THREADS_MAX, sizeof(*own))))
            return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: threads", t->info.pid);
        r = pyf_target__threads(t, own, THREADS_MAX, &n_threads, e);
        threads = own;
    }
    if (r == 0)
        r = current_tasks(t, t->aio.scratch, threads, n_threads, ret_n, e);
    free(own);
    return r;
}

int pyf_target__running_tasks(struct pyf_target *t, const struct pyf_thread *threads,
                              size_t n_threads, struct pyf_running_task *ret, size_t cap,
                              size_t *ret_n, struct pyf_err *reterr)
{
    const struct pyf_aio_layout *a = aio_layout_for_version(t->info.version);
    size_t n = 0;
    int r = find_running(t, a, threads, n_threads, &n, reterr);

    *ret_n = 0;
    if (r == 0 && n)
        running_of(t, a, t->aio.scratch, n, ret, cap, ret_n);
    return r;
}

int pyf_target__current_tasks(struct pyf_target *t, const struct pyf_thread *threads,
                              size_t n_threads, struct pyf_current_task *ret, size_t cap,
                              size_t *ret_n, struct pyf_err *reterr)
{
    const struct pyf_aio_layout *a = aio_layout_for_version(t->info.version);
    struct running_scratch *x;
    size_t n = 0, bytes;
    int r = find_running(t, a, threads, n_threads, &n, reterr);

    *ret_n = 0;
    if (r < 0 || !n)
        return r;
    x = t->aio.scratch;
    if ((bytes = (size_t)a->task_size) > TASK_HEAD_MAX)
        return 0;
    read_many(t, x->tasks, n, bytes, x->heads, x->ok);
    for (size_t i = 0; i < n && *ret_n < cap; i++) {
        const uint8_t *h = x->heads + i * bytes;

        if (x->ok[i] && field_u64(h, t->lay.ob_type) == t->aio.task_type &&
            field_i32(h, a->task_state) == 0)
            ret[(*ret_n)++] =
                (struct pyf_current_task){.task = x->tasks[i], .coro = field_u64(h, a->task_coro)};
    }
    return 0;
}

/* The running task whose coroutine's frame, with its code, is on @st; NULL: none. */
const struct pyf_running_task *pyf_running_task_on(const struct pyf_stack *st,
                                                   const struct pyf_running_task *run, size_t n_run,
                                                   size_t *ret_frame)
{
    for (size_t i = 0; i < st->n_frames; i++)
        for (size_t k = 0; k < n_run && st->frames[i].coroutine; k++)
            if (st->frames[i].frame_raddr == run[k].coro_frame &&
                st->frames[i].code_raddr == run[k].code) {
                if (ret_frame)
                    *ret_frame = i;
                return &run[k];
            }
    return NULL;
}

const char *pyf_task_state_name(enum pyf_task_state s)
{
    switch (s) {
    case PYF_TASK_WAITING:
        return "waiting";
    case PYF_TASK_RUNNING:
        return "running";
    case PYF_TASK_SCHEDULED:
        return "scheduled";
    case PYF_TASK_DONE:
        return "done";
    case PYF_TASK_CANCELLED:
        return "cancelled";
    }
    return "unknown";
}
