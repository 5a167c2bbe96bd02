/*
 * walk.c - interpreters -> threads -> frames, read while the target runs.
 *
 * Everything read here can change or be freed between two reads, so every pointer is
 * checked for plausibility, every loop is bounded, cycles are detected, and each code
 * object is checked to still be a code object. A sample costs few syscalls: the thread
 * state and the previous sample's frames come in one process_vm_readv(), the heads of all
 * code objects in a second one; names and line tables come from the code cache.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "linetable.h"
#include "pyobj.h"
#include "remote.h"
#include "target.h"

#define INTERPS_MAX 256
#define THREADS_MAX 4096
#define LINETABLE_MAX (1u << 20)
#define PTHREAD_SCAN_BYTES 2048
#define VERIFY_ATTEMPTS 4 /* re-reads of a stack that changed during the read */

static int fail_read(const struct pyf_target *t, struct pyf_err *e, int r, uint64_t raddr,
                     const char *what)
{
    return pyf_fail(e, pyf_read_err_kind(-r), -r, raddr, "pid %d: read %s at 0x%" PRIx64,
                    t->info.pid, what, raddr);
}

static int read_u64(const struct pyf_target *t, uint64_t raddr, uint64_t *v, struct pyf_err *e,
                    const char *what)
{
    int r;

    if (!remote_plausible(raddr))
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "pid %d: %s: bad pointer 0x%" PRIx64,
                        t->info.pid, what, raddr);
    r = remote_read_u64(t->info.pid, raddr, v);
    return r < 0 ? fail_read(t, e, r, raddr, what) : 0;
}

/* ---- threads ------------------------------------------------------------------------- */

/* The tids of the process, from /proc/PID/task; at most @cap. */
static size_t task_tids(pid_t pid, pid_t *tids, size_t cap)
{
    char path[64];
    struct dirent *d;
    size_t n = 0;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    dir = opendir(path);
    if (!dir)
        return 0;
    while (n < cap && (d = readdir(dir)) != NULL)
        if (d->d_name[0] >= '0' && d->d_name[0] <= '9')
            tids[n++] = (pid_t)atoi(d->d_name);
    closedir(dir);
    return n;
}

static bool tid_in(pid_t tid, const pid_t *tids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tids[i] == tid)
            return true;
    return false;
}

/*
 * Before 3.11 a PyThreadState knows only its pthread_t, which in glibc is the address of
 * the thread's struct pthread, where the kernel tid is kept at an offset private to glibc.
 * Rather than hard-code one glibc, find the offset at which every thread's struct holds one
 * of the process's tids (the main thread's holds the pid), once per target.
 */
static int calibrate_pthread_tid(struct pyf_target *t, const uint64_t *pthreads, size_t n)
{
    pid_t tids[THREADS_MAX];
    size_t n_tids = task_tids(t->info.pid, tids, THREADS_MAX);
    uint8_t *bufs;
    size_t best_matches = 0;
    int best = -1;

    if (n == 0 || n_tids == 0)
        return -ENOENT;
    bufs = malloc(n * PTHREAD_SCAN_BYTES);
    if (!bufs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (remote_read(t->info.pid, pthreads[i], bufs + i * PTHREAD_SCAN_BYTES,
                        PTHREAD_SCAN_BYTES) < 0)
            memset(bufs + i * PTHREAD_SCAN_BYTES, 0, PTHREAD_SCAN_BYTES);
    /* A thread that is exiting may already be gone from /proc while its thread state is
     * still listed, so take the offset that matches the most threads, among those at which
     * some thread (the main one) holds the pid itself. */
    for (int off = 0; off + 4 <= PTHREAD_SCAN_BYTES; off += 4) {
        size_t matches = 0;
        bool has_pid = false;
        for (size_t i = 0; i < n; i++) {
            int32_t v = field_i32(bufs + i * PTHREAD_SCAN_BYTES, off);
            matches += v > 0 && tid_in(v, tids, n_tids);
            has_pid |= v == t->info.pid;
        }
        if (has_pid && matches * 2 > n && matches > best_matches) {
            best = off;
            best_matches = matches;
        }
    }
    free(bufs);
    if (best < 0)
        return -ENOENT;
    t->pthread_tid_off = best;
    return 0;
}

/* Fills th[i].tid for threads known only by pthread_t (stashed in tid_raddr[i]). */
static void tids_from_pthreads(struct pyf_target *t, struct pyf_thread *th, const uint64_t *pt,
                               size_t n)
{
    size_t m = 0;

    if (t->pthread_tid_off < 0 && calibrate_pthread_tid(t, pt, n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (!remote_plausible(pt[i]))
            continue;
        t->liov[m] = (struct iovec){.iov_base = &th[i].tid, .iov_len = sizeof(th[i].tid)};
        t->riov[m] =
            (struct iovec){.iov_base = (void *)(uintptr_t)(pt[i] + (uint64_t)t->pthread_tid_off),
                           .iov_len = sizeof(th[i].tid)};
        m++;
    }
    if (m && remote_readv(t->info.pid, t->liov, t->riov, m) < 0)
        for (size_t i = 0; i < n; i++)
            th[i].tid = 0;
}

/* /proc/PID/task/TID/stat stays open per thread: one pread() per sample, not three calls. */
static int stat_fd(struct pyf_target *t, pid_t tid)
{
    struct statfd *free_slot = NULL;
    char path[64];
    int fd;

    for (int i = 0; i < STATFD_SLOTS; i++) {
        if (t->statfds[i].tid == tid)
            return t->statfds[i].fd;
        if (!t->statfds[i].tid && !free_slot)
            free_slot = &t->statfds[i];
    }
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)t->info.pid, (int)tid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (!free_slot) { /* full: recycle a slot (cheap enough, and bounded) */
        free_slot = &t->statfds[tid % STATFD_SLOTS];
        close(free_slot->fd);
    }
    free_slot->tid = tid;
    free_slot->fd = fd;
    return fd;
}

static bool thread_on_cpu(struct pyf_target *t, pid_t tid)
{
    char buf[512];
    const char *paren;
    ssize_t n;
    int fd = tid > 0 ? stat_fd(t, tid) : -1;

    if (fd < 0)
        return false;
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) { /* the thread ended: forget its fd */
        for (int i = 0; i < STATFD_SLOTS; i++)
            if (t->statfds[i].tid == tid) {
                close(t->statfds[i].fd);
                t->statfds[i].tid = 0;
            }
        return false;
    }
    buf[n] = '\0';
    paren = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    return paren && paren[1] == ' ' && paren[2] == 'R';
}

/* The PyThreadState that holds the GIL (@gil: the interpreter's ceval.gil, 3.12+), or 0. */
static uint64_t gil_holder(const struct pyf_target *t, uint64_t gil)
{
    const struct pyf_layout *l = &t->lay;
    uint64_t holder = 0;
    uint8_t g[64];

    if (l->gil_model != PYF_GIL_INTERP) {
        if (t->tstate_current_raddr)
            remote_read_u64(t->info.pid, t->tstate_current_raddr, &holder);
        return holder;
    }
    if (!remote_plausible(gil) || l->gil_locked + 4 > (int32_t)sizeof(g) ||
        l->gil_last_holder + 8 > (int32_t)sizeof(g) ||
        remote_read(t->info.pid, gil, g,
                    (size_t)(l->gil_locked > l->gil_last_holder ? l->gil_locked + 4
                                                                : l->gil_last_holder + 8)) < 0)
        return 0;
    return field_i32(g, l->gil_locked) == 1 ? field_u64(g, l->gil_last_holder) : 0;
}

/* The first interpreter; on a stripped 3.6, the one of the thread holding the GIL. */
static int first_interp(const struct pyf_target *t, uint64_t *ret, struct pyf_err *e)
{
    uint64_t ts;
    int r;

    if (t->interp_head_raddr)
        return read_u64(t, t->interp_head_raddr, ret, e, "interpreter list head");
    r = read_u64(t, t->tstate_current_raddr, &ts, e, "current thread state");
    if (r < 0 || ts == 0) {
        *ret = 0;
        return r;
    }
    return read_u64(t, ts + (uint64_t)t->lay.ts_interp, ret, e, "thread's interpreter");
}

/* The fields of a PyInterpreterState we use; they can sit kilobytes apart (3.13). */
struct interp_fields {
    uint64_t next, id, tstate_head, gil;
};

static int read_interp(const struct pyf_target *t, uint64_t interp, struct interp_fields *f,
                       struct pyf_err *e)
{
    const struct pyf_layout *l = &t->lay;
    const int32_t offs[] = {l->is_next, l->is_id, l->is_tstate_head, l->is_gil};
    uint64_t *dst[] = {&f->next, &f->id, &f->tstate_head, &f->gil};
    struct iovec liov[4], riov[4];
    size_t n = 0;
    int r;

    *f = (struct interp_fields){.id = (uint64_t)-1};
    if (!remote_plausible(interp))
        return pyf_fail(e, PYF_TORN, EFAULT, interp, "pid %d: bad interpreter pointer 0x%" PRIx64,
                        t->info.pid, interp);
    for (size_t i = 0; i < 4; i++) {
        if (offs[i] < 0)
            continue;
        liov[n] = (struct iovec){.iov_base = dst[i], .iov_len = 8};
        riov[n++] = (struct iovec){.iov_base = (void *)(uintptr_t)(interp + (uint64_t)offs[i]),
                                   .iov_len = 8};
    }
    r = remote_readv(t->info.pid, liov, riov, n);
    return r < 0 ? fail_read(t, e, r, interp, "interpreter") : 0;
}

int pyf_target__threads(struct pyf_target *t, struct pyf_thread *ret_threads, size_t cap,
                        size_t *ret_n, struct pyf_err *reterr)
{
    const struct pyf_layout *l = &t->lay;
    size_t n = 0, n_interps = 0;
    uint64_t interp, *pthreads = t->frame_raddr; /* scratch: pthread_t per thread */
    uint8_t *tsbuf = t->frame_buf;
    struct interp_fields is;
    int r;

    if (cap > PYF_DEPTH_MAX)
        cap = PYF_DEPTH_MAX; /* pthreads[] scratch */
    r = first_interp(t, &interp, reterr);
    if (r < 0)
        return r;
    while (interp) {
        uint64_t ts, head, holder;

        if (++n_interps > INTERPS_MAX)
            return pyf_fail(reterr, PYF_TORN, ELOOP, interp, "pid %d: interpreter list loops",
                            t->info.pid);
        r = read_interp(t, interp, &is, reterr);
        if (r < 0)
            return r;
        holder = gil_holder(t, is.gil);
        head = ts = is.tstate_head;
        for (size_t k = 0; ts && n < cap; k++) {
            struct pyf_thread *th = &ret_threads[n];

            if (k == THREADS_MAX || (k > 0 && ts == head) || !remote_plausible(ts))
                return pyf_fail(reterr, PYF_TORN, EFAULT, ts,
                                "pid %d: thread list broken at 0x%" PRIx64, t->info.pid, ts);
            r = remote_read(t->info.pid, ts, tsbuf, t->ts_read);
            if (r < 0)
                return fail_read(t, reterr, r, ts, "thread state");
            if (field_u64(tsbuf, l->ts_interp) != interp)
                return pyf_fail(reterr, PYF_TORN, EFAULT, ts,
                                "pid %d: thread state 0x%" PRIx64 " changed while read",
                                t->info.pid, ts);
            *th = (struct pyf_thread){
                .tstate_raddr = ts,
                .interp_id = (int64_t)is.id,
                .holds_gil = holder && holder == ts,
            };
            if (l->ts_native_thread_id >= 0)
                th->tid = (pid_t)field_u64(tsbuf, l->ts_native_thread_id);
            pthreads[n] = field_u64(tsbuf, l->ts_thread_id);
            ts = field_u64(tsbuf, l->ts_next);
            n++;
        }
        interp = is.next;
        if (n == cap)
            break;
    }
    if (l->ts_native_thread_id < 0)
        tids_from_pthreads(t, ret_threads, pthreads, n);
    for (size_t i = 0; i < n; i++)
        ret_threads[i].on_cpu = thread_on_cpu(t, ret_threads[i].tid);
    *ret_n = n;
    return 0;
}

/* ---- stacks -------------------------------------------------------------------------- */

static void parse_frame(const struct pyf_target *t, const uint8_t *buf, uint64_t raddr,
                        struct raw_frame *f)
{
    const struct pyf_layout *l = &t->lay;

    f->raddr = raddr;
    f->code = field_u64(buf, l->fr_code);
    f->back = field_u64(buf, l->fr_back);
    f->skip = l->fr_owner >= 0 && l->fr_owner_cstack >= 0 &&
              (int8_t)buf[l->fr_owner] == l->fr_owner_cstack;
    if (l->frame_model == PYF_FRAME_OBJECT) {
        f->lasti = (int64_t)field_i32(buf, l->fr_lasti) * l->fr_lasti_scale;
    } else {
        /* prev_instr / instr_ptr points into co_code_adaptive, which is inside the code
         * object; one before the start means "not started". */
        uint64_t ip = field_u64(buf, l->fr_lasti);
        uint64_t start = f->code + (uint64_t)l->co_code_adaptive;
        f->lasti = ip >= start ? (int64_t)(ip - start) : -2;
        if (f->lasti > (1 << 26))
            f->lasti = -2; /* not in this code object: torn; reported as the def line */
    }
}

/*
 * Reads the thread state and, in the same syscall, the frames of the previous sample
 * (@prev, @n_prev), into t->frame_buf slots 0 (tstate) and 1.. (frames).
 */
static int read_tstate_and_guess(struct pyf_target *t, uint64_t tstate, const uint64_t *prev,
                                 size_t n_prev, struct pyf_err *e)
{
    size_t slot = t->fr_read > t->ts_read ? t->fr_read : t->ts_read;
    size_t n = 0;
    int r;

    t->liov[n] = (struct iovec){.iov_base = t->frame_buf, .iov_len = t->ts_read};
    t->riov[n++] = (struct iovec){.iov_base = (void *)(uintptr_t)tstate, .iov_len = t->ts_read};
    for (size_t i = 0; i < n_prev; i++) {
        t->liov[n] =
            (struct iovec){.iov_base = t->frame_buf + (i + 1) * slot, .iov_len = t->fr_read};
        t->riov[n++] =
            (struct iovec){.iov_base = (void *)(uintptr_t)prev[i], .iov_len = t->fr_read};
    }
    r = remote_readv(t->info.pid, t->liov, t->riov, n);
    if (r == -EFAULT && n > 1) /* a guessed frame was freed and unmapped: drop the guesses */
        r = remote_readv(t->info.pid, t->liov, t->riov, 1), n_prev = 0;
    if (r < 0)
        return fail_read(t, e, r, tstate, "thread state");
    return (int)n_prev;
}

static int first_frame(const struct pyf_target *t, uint64_t *ret, struct pyf_err *e)
{
    uint64_t f = field_u64(t->frame_buf, t->lay.ts_frame);

    if (t->lay.ts_cframe_frame >= 0 && f) /* 3.11/3.12: tstate->cframe->current_frame */
        return read_u64(t, f + (uint64_t)t->lay.ts_cframe_frame, ret, e, "cframe");
    *ret = f;
    return 0;
}

/* Follows the frame chain from @f; guessed frames come from the batch, others one by one. */
static int chain(struct pyf_target *t, uint64_t f, size_t n_guess, struct raw_frame *raw,
                 size_t limit, size_t *ret_n, bool *ret_more, size_t *ret_misses, struct pyf_err *e)
{
    size_t misses = 0;
    size_t slot = t->fr_read > t->ts_read ? t->fr_read : t->ts_read;
    size_t n = 0, g = 0;
    uint8_t one[512];

    while (f && n < limit) {
        const uint8_t *buf = NULL;

        if (!remote_plausible(f) || (f & 7))
            return pyf_fail(e, PYF_TORN, EFAULT, f, "pid %d: bad frame pointer 0x%" PRIx64,
                            t->info.pid, f);
        /* The guesses are the previous chain; once we meet it we stay on it. */
        for (size_t k = g; k < n_guess && !buf; k++)
            if (t->frame_raddr[k] == f) {
                buf = t->frame_buf + (k + 1) * slot;
                g = k + 1;
            }
        if (!buf) {
            int r = remote_read(t->info.pid, f, one, t->fr_read);
            if (r < 0)
                return fail_read(t, e, r, f, "frame");
            buf = one;
            misses++;
        }
        parse_frame(t, buf, f, &raw[n]);
        if (raw[n].back == f)
            return pyf_fail(e, PYF_TORN, ELOOP, f, "pid %d: frame 0x%" PRIx64 " is its own caller",
                            t->info.pid, f);
        f = raw[n].back;
        n++;
    }
    *ret_n = n;
    *ret_more = f != 0;
    *ret_misses = misses;
    return 0;
}

/*
 * The chain above mixes frames read at two instants (the batch, then the misses), which can
 * pair a new callee with its caller as it was before the call. Re-read the thread state, the
 * cframe word and every frame of the chain in one process_vm_readv() and check each link:
 * then the stack is one the target had, give or take the microsecond the copy takes.
 * Returns 1 when consistent (raw[] refreshed), 0 when the target moved on, or -errno.
 */
static int reread_and_verify(struct pyf_target *t, uint64_t tstate, struct raw_frame *raw, size_t n,
                             bool more, struct pyf_err *e)
{
    const struct pyf_layout *l = &t->lay;
    size_t slot = t->fr_read > t->ts_read ? t->fr_read : t->ts_read;
    uint64_t cframe = 0, cur = 0;
    size_t m = 0;
    int r;

    t->liov[m] = (struct iovec){.iov_base = t->frame_buf, .iov_len = t->ts_read};
    t->riov[m++] = (struct iovec){.iov_base = (void *)(uintptr_t)tstate, .iov_len = t->ts_read};
    if (l->ts_cframe_frame >= 0) { /* 3.11/3.12: the current frame lives in the cframe */
        cframe = field_u64(t->frame_buf, l->ts_frame);
        if (!remote_plausible(cframe))
            return 0;
        t->liov[m] = (struct iovec){.iov_base = &cur, .iov_len = sizeof(cur)};
        t->riov[m++] =
            (struct iovec){.iov_base = (void *)(uintptr_t)(cframe + (uint64_t)l->ts_cframe_frame),
                           .iov_len = sizeof(cur)};
    }
    for (size_t i = 0; i < n; i++) {
        t->liov[m] =
            (struct iovec){.iov_base = t->frame_buf + (i + 1) * slot, .iov_len = t->fr_read};
        t->riov[m++] =
            (struct iovec){.iov_base = (void *)(uintptr_t)raw[i].raddr, .iov_len = t->fr_read};
    }
    r = remote_readv(t->info.pid, t->liov, t->riov, m);
    if (r == -EFAULT)
        return 0; /* a frame of the chain was freed meanwhile */
    if (r < 0)
        return fail_read(t, e, r, tstate, "thread state and frames");
    if (l->ts_cframe_frame >= 0) {
        if (field_u64(t->frame_buf, l->ts_frame) != cframe)
            return 0;
    } else {
        cur = field_u64(t->frame_buf, l->ts_frame);
    }
    if (n == 0)
        return cur == 0;
    if (cur != raw[0].raddr)
        return 0;
    for (size_t i = 0; i < n; i++) {
        parse_frame(t, t->frame_buf + (i + 1) * slot, raw[i].raddr, &raw[i]);
        if (i + 1 < n ? raw[i].back != raw[i + 1].raddr : (raw[i].back != 0) != more)
            return 0;
    }
    return 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A chain that hit the depth limit is either deep or a cycle: tell which. */
static bool chain_has_cycle(const struct raw_frame *raw, size_t n, uint64_t *scratch)
{
    for (size_t i = 0; i < n; i++)
        scratch[i] = raw[i].raddr;
    qsort(scratch, n, sizeof(*scratch), cmp_u64);
    for (size_t i = 1; i < n; i++)
        if (scratch[i] == scratch[i - 1])
            return true;
    return false;
}

/* Reads the heads of all the frames' code objects in one syscall into t->code_buf. */
static int read_code_heads(struct pyf_target *t, const struct raw_frame *raw, size_t n,
                           struct pyf_err *e)
{
    size_t m = 0;
    int r;

    for (size_t i = 0; i < n; i++) {
        if (raw[i].skip)
            continue;
        if (!remote_plausible(raw[i].code))
            return pyf_fail(e, PYF_TORN, EFAULT, raw[i].code,
                            "pid %d: frame 0x%" PRIx64 " has a bad code pointer", t->info.pid,
                            raw[i].raddr);
        t->liov[m] =
            (struct iovec){.iov_base = t->code_buf + i * t->co_read, .iov_len = t->co_read};
        t->riov[m++] =
            (struct iovec){.iov_base = (void *)(uintptr_t)raw[i].code, .iov_len = t->co_read};
    }
    r = remote_readv(t->info.pid, t->liov, t->riov, m);
    return r < 0 ? fail_read(t, e, r, 0, "code objects") : 0;
}

static void code_key(const struct pyf_target *t, const uint8_t *head, uint64_t *key)
{
    const struct pyf_layout *l = &t->lay;

    key[0] = field_u64(head, l->ob_type);
    key[1] = field_u64(head, l->co_filename);
    key[2] = field_u64(head, l->co_qualname >= 0 ? l->co_qualname : l->co_name);
    key[3] = field_u64(head, l->co_linetable);
    key[4] = (uint64_t)(uint32_t)field_i32(head, l->co_firstlineno);
}

/* A code object met for the first time: its names and line table, into the cache. */
static int load_code(struct pyf_target *t, uint64_t raddr, const uint64_t *key,
                     struct code_info **ret, struct pyf_err *e)
{
    struct code_info *ci;
    char *func = NULL, *file = NULL;
    uint8_t *lines = NULL;
    size_t n_lines = 0;
    int r;

    r = pyobj_str(t, key[2], PYOBJ_NAME_MAX, &func, e);
    if (r == 0)
        r = pyobj_str(t, key[1], PYOBJ_NAME_MAX, &file, e);
    if (r == 0)
        r = pyobj_bytes(t, key[3], LINETABLE_MAX, &lines, &n_lines, e);
    if (r == 0 && n_lines > LINETABLE_MAX)
        n_lines = LINETABLE_MAX; /* lines past 1 MiB of table are reported as -1 */
    ci = r == 0 ? codecache__insert(t->codes, raddr, key) : NULL;
    if (!ci) {
        free(func);
        free(file);
        free(lines);
        return r < 0 ? r : pyf_fail(e, PYF_INVALID, ENOMEM, 0, "code cache");
    }
    ci->func = func;
    ci->file = file;
    ci->lines = lines;
    ci->n_lines = n_lines;
    ci->first_line = (int32_t)key[4];
    *ret = ci;
    return 0;
}

static int32_t code_line(const struct pyf_target *t, struct code_info *ci, int64_t lasti)
{
    if (ci->memo_addr != lasti) {
        ci->memo_line =
            linetable_line(t->lay.line_format, ci->lines, ci->n_lines, ci->first_line, lasti);
        ci->memo_addr = lasti;
    }
    return ci->memo_line;
}

static int resolve_frames(struct pyf_target *t, const struct raw_frame *raw, size_t n,
                          struct pyf_stack *st, struct pyf_err *e)
{
    int r = read_code_heads(t, raw, n, e);

    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *head = t->code_buf + i * t->co_read;
        uint64_t key[CODE_KEY_WORDS];
        struct code_info *ci;
        struct pyf_frame *fr;

        if (raw[i].skip)
            continue;
        code_key(t, head, key);
        if (t->types.code && key[0] != t->types.code) {
            if (t->lay.frame_model == PYF_FRAME_INTERP && t->lay.fr_owner_cstack >= 0)
                continue; /* 3.13: a frame whose f_executable is not code (a shim) */
            return pyf_fail(e, PYF_TORN, EFAULT, raw[i].code,
                            "pid %d: 0x%" PRIx64 " is no longer a code object", t->info.pid,
                            raw[i].code);
        }
        ci = codecache__find(t->codes, raw[i].code, key);
        if (!ci) {
            r = load_code(t, raw[i].code, key, &ci, e);
            if (r < 0)
                return r;
        }
        fr = &st->frames[st->n_frames++];
        *fr = (struct pyf_frame){
            .func = ci->func,
            .file = ci->file,
            .line = code_line(t, ci, raw[i].lasti),
            .first_line = ci->first_line,
            .frame_raddr = raw[i].raddr,
            .code_raddr = raw[i].code,
        };
    }
    return 0;
}

int pyf_target__stack(struct pyf_target *t, const struct pyf_thread *th, struct pyf_stack *st,
                      struct pyf_err *reterr)
{
    struct raw_frame *raw = t->raw;
    size_t limit = st->cap < PYF_DEPTH_MAX ? st->cap : PYF_DEPTH_MAX;
    size_t n_prev = st->n_frames < limit ? st->n_frames : limit, n = 0;
    uint64_t f;
    bool more;
    int r;

    /* The previous sample's frames become this sample's guesses. */
    for (size_t i = 0; i < n_prev; i++)
        t->frame_raddr[i] = st->frames[i].frame_raddr;
    st->n_frames = 0;
    st->truncated = false;
    codecache__begin(t->codes);
    if (!remote_plausible(th->tstate_raddr))
        return pyf_fail(reterr, PYF_INVALID, EINVAL, th->tstate_raddr, "bad thread state");
    for (int attempt = 0;; attempt++) {
        size_t misses = 0;

        r = read_tstate_and_guess(t, th->tstate_raddr, t->frame_raddr, n_prev, reterr);
        if (r < 0)
            return r;
        n_prev = (size_t)r;
        r = first_frame(t, &f, reterr);
        if (r == 0)
            r = chain(t, f, n_prev, raw, limit, &n, &more, &misses, reterr);
        if (r < 0)
            break;
        /* Read in one syscall already (tstate + guessed frames): consistent as it is.
         * On 3.11+ the innermost frame changes so often that a re-read mostly finds it
         * moved (measured: 69% torn at 3.12), so it is verified only for heap frames. */
        if ((misses == 0 && t->lay.ts_cframe_frame < 0) || t->lay.frame_model == PYF_FRAME_INTERP)
            break;
        r = reread_and_verify(t, th->tstate_raddr, raw, n, more, reterr);
        if (r != 0)
            break;
        if (attempt == VERIFY_ATTEMPTS - 1) {
            r = pyf_fail(reterr, PYF_TORN, EAGAIN, th->tstate_raddr,
                         "pid %d: stack kept changing while read", t->info.pid);
            break;
        }
        /* This chain is the best guess for the next attempt. */
        for (size_t i = 0; i < n; i++)
            t->frame_raddr[i] = raw[i].raddr;
        n_prev = n;
    }
    if (r > 0)
        r = 0;
    if (r == 0 && more && n == PYF_DEPTH_MAX && chain_has_cycle(raw, n, t->frame_raddr))
        r = pyf_fail(reterr, PYF_TORN, ELOOP, f, "pid %d: frame chain loops", t->info.pid);
    if (r == 0)
        r = resolve_frames(t, raw, n, st, reterr);
    if (r < 0) {
        st->n_frames = 0;
        return r;
    }
    st->truncated = more;
    return 0;
}
