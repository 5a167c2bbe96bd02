/*
 * threads.c - pyf_target__threads(): interpreters -> thread states -> OS threads.
 *
 * The list changes rarely, so the previous call's list is the guess for this one: the
 * interpreter's fields, the GIL word and every guessed thread state come in one
 * process_vm_readv() (pyf_target__sample() adds the stacks to that same syscall, through
 * threads__guess_*()), and the links read are checked against the guess. A mismatch (a thread
 * started or ended, a second interpreter) falls back to following the list struct by struct,
 * which then becomes the new guess. Every loop is bounded; a list that changes under us is a
 * torn read, not a crash.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "err.h"
#include "core.h"
#include "remote.h"
#include "procmaps.h"
#include "target.h"

#define INTERPS_MAX 256
#define THREADS_MAX 4096
#define PTHREAD_SCAN_BYTES 2048

/* The tids of the process as it knows them itself (its own pid namespace's); at most @cap. */
static size_t task_tids(struct pyf_target *t, pid_t *tids, size_t cap)
{
    pid_t pid = t->info.pid;
    char path[64];
    struct dirent *d;
    size_t n = 0;
    DIR *dir;

    if (t->mem.core)
        return core__tids(t->mem.core, tids, cap);
    if (t->ns.active)
        return nsmap_ns_tids(&t->ns, pid, tids, cap);
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
 * of the process's tids (the main thread's holds the pid), once per target. The ids are the
 * target's own: in a container, those of its pid namespace (nsmap.h).
 */
static int calibrate_pthread_tid(struct pyf_target *t, const uint64_t *pthreads, size_t n)
{
    pid_t tids[THREADS_MAX];
    size_t n_tids = task_tids(t, tids, THREADS_MAX);
    uint8_t *bufs;
    size_t best_matches = 0;
    int best = -1;

    if (n == 0 || n_tids == 0)
        return -ENOENT;
    bufs = malloc(n * PTHREAD_SCAN_BYTES);
    if (!bufs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (remote_read(&t->mem, pthreads[i], bufs + i * PTHREAD_SCAN_BYTES, PTHREAD_SCAN_BYTES) <
            0)
            memset(bufs + i * PTHREAD_SCAN_BYTES, 0, PTHREAD_SCAN_BYTES);
    /* A thread that is exiting may already be gone from /proc while its thread state is
     * still listed, so take the offset that matches the most threads, among those at which
     * some thread (the main one) holds the pid itself. Every thread's word must differ: in a
     * container the tids are 1, 2, 3..., numbers that flags and counts hold as well. */
    for (int off = 0; off + 4 <= PTHREAD_SCAN_BYTES; off += 4) {
        size_t matches = 0;
        bool has_pid = false, distinct = true;
        for (size_t i = 0; i < n && distinct; i++) {
            int32_t v = field_i32(bufs + i * PTHREAD_SCAN_BYTES, off);
            matches += v > 0 && tid_in(v, tids, n_tids);
            has_pid |= v == t->ns.ns_pid;
            for (size_t k = 0; k < i && distinct; k++)
                distinct = v != field_i32(bufs + k * PTHREAD_SCAN_BYTES, off);
        }
        if (distinct && has_pid && matches * 2 > n && matches > best_matches) {
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
    if (m && remote_readv(&t->mem, t->liov, t->riov, m) < 0)
        for (size_t i = 0; i < n; i++)
            th[i].tid = 0;
}

/*
 * The files kept open by every target of this process, and how many may be: 2 a thread, up
 * to 2 * STATFD_SLOTS a target, adds up to every descriptor a daemon has (a 300-thread target
 * under a limit of 256 left it none to accept a client with). 0: not set yet.
 */
static atomic_size_t kept_files, kept_files_max;

void pyf_keep_files_max(size_t max)
{
    atomic_store(&kept_files_max, max);
}

/* Whether two more files may be kept open; if so they are counted. */
static bool keep_two_files(void)
{
    size_t max = atomic_load(&kept_files_max), n;
    struct rlimit rl;

    if (max == 0) {
        max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                  ? (size_t)rl.rlim_cur / 4
                  : 256;
        atomic_store(&kept_files_max, max);
    }
    n = atomic_load(&kept_files);
    do {
        if (n + 2 > max)
            return false;
    } while (!atomic_compare_exchange_weak(&kept_files, &n, n + 2));
    return true;
}

void threads__forget_statfd(struct statfd *sf)
{
    if (!sf->tid)
        return;
    close(sf->fd);
    if (sf->sched_fd >= 0)
        close(sf->sched_fd);
    if (sf->kept)
        atomic_fetch_sub(&kept_files, 2);
    sf->tid = 0;
    sf->kept = false;
}

/* /proc/PID/task/TID/stat and schedstat stay open per thread: a pread() per sample, not
 * three calls. A thread holds one of the STATFD_PROBES slots from tid % STATFD_SLOTS, so a
 * look is bounded whatever the number of threads; with all of them taken, the first is
 * recycled. Past the process's budget of kept files they are opened into @once, which the
 * caller forgets after the read. NULL when the thread is gone. */
static struct statfd *stat_slot(struct pyf_target *t, pid_t tid, struct statfd *once)
{
    struct statfd *free_slot = NULL;
    size_t first = (size_t)tid % STATFD_SLOTS;
    char path[64];
    int fd;

    for (size_t k = 0; k < STATFD_PROBES; k++) {
        struct statfd *sf = &t->statfds[(first + k) % STATFD_SLOTS];
        if (sf->tid == tid)
            return sf;
        if (!sf->tid && !free_slot)
            free_slot = sf;
    }
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)t->info.pid, (int)tid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (!free_slot) { /* all taken: recycle one (cheap enough, and bounded) */
        free_slot = &t->statfds[first];
        threads__forget_statfd(free_slot);
    }
    if (!keep_two_files())
        free_slot = once;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)t->info.pid, (int)tid);
    *free_slot = (struct statfd){.tid = tid,
                                 .fd = fd,
                                 .sched_fd = open(path, O_RDONLY | O_CLOEXEC),
                                 .kept = free_slot != once};
    return free_slot;
}

/* The three numbers of a schedstat file into @ret; false when it cannot be read. */
static bool read_schedstat(int fd, uint64_t ret[3])
{
    char buf[96];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

    if (n <= 0)
        return false;
    buf[n] = '\0';
    return procmaps_schedstat(buf, ret);
}

/*
 * Whether the thread of @sf is running or runnable (state R). stat says so, but formats 52 fields
 * to (4.5 us a read here); schedstat's three numbers cost 1 us, and while none of them moved
 * the thread was neither switched out (that adds to its run time) nor in (to its count)
 * since stat was last read: its state is what stat said then. So a waiting thread, most of a
 * training job's, costs the cheap read; one that ran, both.
 */
static int thread_running(struct statfd *sf, uint64_t ret_sched[3])
{
    uint64_t sched[3];
    bool have_sched;
    char buf[512];
    const char *paren;
    ssize_t n;

    memset(ret_sched, 0, 3 * sizeof(*ret_sched));
    have_sched = sf->sched_fd >= 0 && read_schedstat(sf->sched_fd, sched);
    if (have_sched)
        memcpy(ret_sched, sched, sizeof(sched));
    if (have_sched && sf->known && memcmp(sched, sf->sched, sizeof(sched)) == 0)
        return sf->on_cpu;
    n = pread(sf->fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) { /* the thread ended: forget its files */
        threads__forget_statfd(sf);
        memset(ret_sched, 0, 3 * sizeof(*ret_sched));
        return -ESRCH;
    }
    buf[n] = '\0';
    paren = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    sf->on_cpu = paren && paren[1] == ' ' && paren[2] == 'R';
    if ((sf->known = have_sched))
        memcpy(sf->sched, sched, sizeof(sched));
    return sf->on_cpu;
}

/* The run-state source (pyf_runstate_source), set once before any read. */
static struct pyf_runstate_source runstate;

void pyf_runstate_source(const struct pyf_runstate_source *src)
{
    runstate = src ? *src : (struct pyf_runstate_source){0};
}

int threads__source_running(pid_t pid, pid_t tid, uint64_t ret_sched[3])
{
    return runstate.running && pid > 0 && tid > 0
               ? runstate.running(runstate.ctx, pid, tid, ret_sched)
               : -ENOENT;
}

void threads__source_forget(pid_t pid)
{
    if (runstate.forget && pid > 0)
        runstate.forget(runstate.ctx, pid);
}

int pyf_target__thread_running(struct pyf_target *t, pid_t tid, uint64_t ret_sched[3])
{
    struct statfd once = {0};
    struct statfd *sf;
    int r;

    if (!t->mem.core) { /* the source, where it knows the thread; else /proc */
        r = threads__source_running(t->info.pid, tid, ret_sched);
        if (r >= 0 || r == -ESRCH)
            return r;
    }
    sf = tid > 0 && !t->mem.core ? stat_slot(t, tid, &once) : NULL;
    if (!sf) {
        memset(ret_sched, 0, 3 * sizeof(*ret_sched));
        return t->mem.core ? 0 : -ESRCH;
    }
    r = thread_running(sf, ret_sched);
    threads__forget_statfd(&once);
    return r;
}

/* Where the words naming the GIL holder live: the current-thread-state word, or (3.12+)
 * the interpreter's struct _gil_runtime_state at @gil. 0 when unknown. */
static uint64_t gil_range(const struct pyf_target *t, uint64_t gil, size_t *ret_len)
{
    const struct pyf_layout *l = &t->lay;

    if (l->gil_model != PYF_GIL_INTERP) {
        *ret_len = sizeof(uint64_t);
        return t->tstate_current_raddr;
    }
    *ret_len =
        (size_t)(l->gil_locked > l->gil_last_holder ? l->gil_locked + 4 : l->gil_last_holder + 8);
    return remote_plausible(gil) && l->gil_locked >= 0 && l->gil_last_holder >= 0 ? gil : 0;
}

/* The PyThreadState that holds the GIL, from the words gil_range() named. */
static uint64_t gil_holder_in(const struct pyf_target *t, const uint8_t *buf)
{
    const struct pyf_layout *l = &t->lay;

    if (!buf)
        return 0;
    if (l->gil_model != PYF_GIL_INTERP)
        return field_u64(buf, 0);
    return field_i32(buf, l->gil_locked) == 1 ? field_u64(buf, l->gil_last_holder) : 0;
}

static uint64_t gil_holder(const struct pyf_target *t, uint64_t gil)
{
    size_t len;
    uint64_t at = gil_range(t, gil, &len);
    uint8_t g[64];

    if (!at || len > sizeof(g) || remote_read(&t->mem, at, g, len) < 0)
        return 0;
    return gil_holder_in(t, g);
}

/* The first interpreter; on a stripped 3.6, the one of the thread holding the GIL. */
int threads__first_interp(const struct pyf_target *t, uint64_t *ret, struct pyf_err *e)
{
    uint64_t ts;
    int r;

    if (t->interp_head_raddr)
        return target_read_u64(t, t->interp_head_raddr, ret, e, "interpreter list head");
    r = target_read_u64(t, t->tstate_current_raddr, &ts, e, "current thread state");
    if (r < 0 || ts == 0) {
        *ret = 0;
        return r;
    }
    return target_read_u64(t, ts + (uint64_t)t->lay.ts_interp, ret, e, "thread's interpreter");
}

/* The fields of a PyInterpreterState we use; they can sit kilobytes apart (3.13). gc: the
 * word holding the collector's int "collecting", in the interpreter or (3.7, 3.8) the
 * runtime. */
struct interp_fields {
    uint64_t next, id, tstate_head, gil, gc;
};

/* Where the collector's "collecting" flag of interpreter @interp lives; 0: not known (3.6). */
static uint64_t gc_word_at(const struct pyf_target *t, uint64_t interp)
{
    if (t->lay.is_gc_collecting >= 0)
        return interp + (uint64_t)t->lay.is_gc_collecting;
    if (t->lay.rt_gc_collecting >= 0 && t->info.runtime_raddr)
        return t->info.runtime_raddr + (uint64_t)t->lay.rt_gc_collecting;
    return 0;
}

static bool gc_collecting(uint64_t word)
{
    return (int32_t)(uint32_t)word != 0; /* an int: the low half of the word (little-endian) */
}

static int read_interp(const struct pyf_target *t, uint64_t interp, struct interp_fields *f,
                       struct pyf_err *e)
{
    const struct pyf_layout *l = &t->lay;
    const int32_t offs[] = {l->is_next, l->is_id, l->is_tstate_head, l->is_gil};
    uint64_t *dst[] = {&f->next, &f->id, &f->tstate_head, &f->gil};
    uint64_t gc_at = gc_word_at(t, interp);
    struct iovec liov[5], riov[5];
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
    if (gc_at) {
        liov[n] = (struct iovec){.iov_base = &f->gc, .iov_len = 8};
        riov[n++] = (struct iovec){.iov_base = (void *)(uintptr_t)gc_at, .iov_len = 8};
    }
    r = remote_readv(&t->mem, liov, riov, n);
    return r < 0 ? target_fail_read(t, e, r, interp, "interpreter") : 0;
}

/* What a thread state says of its thread; its pthread_t goes to *pthread (<= 3.10). */
static void thread_from_tstate(const struct pyf_target *t, const uint8_t *tsbuf, uint64_t ts,
                               const struct interp_fields *is, uint64_t holder,
                               struct pyf_thread *th, uint64_t *pthread)
{
    const struct pyf_layout *l = &t->lay;

    *th = (struct pyf_thread){
        .tstate_raddr = ts,
        .interp_id = (int64_t)is->id,
        .holds_gil = holder && holder == ts,
        .gc_collecting = gc_collecting(is->gc),
    };
    if (l->ts_native_thread_id >= 0)
        th->tid = (pid_t)field_u64(tsbuf, l->ts_native_thread_id);
    *pthread = field_u64(tsbuf, l->ts_thread_id);
    th->ident = *pthread;
}

/* A word of the interpreter as the batch read it; *ok = false when it did not. A field the
 * version lacks reads as @absent, as in read_interp(). */
static uint64_t batch_word(const struct batch *b, uint64_t base, int32_t off, uint64_t absent,
                           bool *ok)
{
    const uint8_t *p;

    if (off < 0)
        return absent;
    p = batch_find(b, base + (uint64_t)off, sizeof(uint64_t));
    if (!p)
        *ok = false;
    return p ? field_u64(p, 0) : 0;
}

size_t threads__guess_begin(struct pyf_target *t, struct threads_guess *g, size_t cap)
{
    const struct pyf_layout *l = &t->lay;
    const int32_t offs[] = {l->is_next, l->is_id, l->is_tstate_head, l->is_gil};
    struct batch *b = &t->batch;
    size_t gil_len;
    uint64_t gil_at;

    g->n = t->n_guess_tstates;
    if (g->n == 0 || g->n > cap || !t->interp_head_raddr)
        return g->n = 0;
    /* first, so the frames the batch reads are read after it (stack.c: kept frames) */
    for (size_t i = 0; i < g->n; i++) {
        g->pre_tid[i] = t->guess_tids[i];
        g->pre_running[i] = g->pre_tid[i] > 0
                                ? pyf_target__thread_running(t, g->pre_tid[i], g->pre_sched[i])
                                : -ESRCH;
    }
    g->head_span = batch_add_alone(b, t->interp_head_raddr, sizeof(uint64_t));
    for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
        if (offs[i] >= 0)
            batch_add(b, t->guess_interp + (uint64_t)offs[i], sizeof(uint64_t));
    if (gc_word_at(t, t->guess_interp))
        batch_add(b, gc_word_at(t, t->guess_interp), sizeof(uint64_t));
    gil_at = gil_range(t, t->guess_gil, &gil_len);
    g->gil_span = gil_at ? batch_add_alone(b, gil_at, gil_len) : -1;
    for (size_t i = 0; i < g->n; i++)
        g->ts_span[i] = g->tid_span[i] = -1;
    return g->n;
}

int threads__guess_add(struct pyf_target *t, struct threads_guess *g, size_t i)
{
    uint64_t pt = t->guess_pthreads[i];

    g->ts_span[i] = batch_add_alone(&t->batch, t->guess_tstates[i], t->ts_read);
    if (t->lay.ts_native_thread_id < 0 && t->pthread_tid_off >= 0 && remote_plausible(pt))
        g->tid_span[i] =
            batch_add_alone(&t->batch, pt + (uint64_t)t->pthread_tid_off, sizeof(int32_t));
    return g->ts_span[i];
}

/* The last step of either path: the tids a thread state lacks, our ids of them (a target in
 * a container knows its threads by other ids), each thread's on-CPU state, and the
 * pthread_ts as the guess of the next call. */
static void threads_complete(struct pyf_target *t, const struct threads_guess *g,
                             struct pyf_thread *th, size_t n, bool tids_known)
{
    if (t->lay.ts_native_thread_id < 0 && !tids_known)
        tids_from_pthreads(t, th, t->pthread_u64, n);
    nsmap_thread_count(&t->ns, n);
    for (size_t i = 0; i < n; i++) {
        th[i].tid = nsmap_host_tid(&t->ns, t->info.pid, th[i].tid);
        if (g && i < g->n && g->pre_tid[i] > 0 && g->pre_tid[i] == th[i].tid &&
            g->pre_running[i] >= 0) { /* read before the batch: the same thread */
            th[i].on_cpu = g->pre_running[i] == 1;
            memcpy(th[i].sched, g->pre_sched[i], sizeof(th[i].sched));
        } else {
            th[i].on_cpu = pyf_target__thread_running(t, th[i].tid, th[i].sched) == 1;
        }
        if (i < GUESS_THREADS_MAX) {
            t->guess_pthreads[i] = t->pthread_u64[i];
            t->guess_tids[i] = th[i].tid;
        }
    }
}

int threads__guess_check(struct pyf_target *t, const struct threads_guess *g, struct pyf_thread *th,
                         size_t *ret_n)
{
    const struct pyf_layout *l = &t->lay;
    const struct batch *b = &t->batch;
    uint64_t interp = t->guess_interp, holder;
    struct interp_fields is;
    bool ok = true, tids_known = true;

    if (g->n == 0 || g->head_span < 0 || field_u64(batch_span_data(b, g->head_span), 0) != interp)
        return 0;
    is = (struct interp_fields){
        .next = batch_word(b, interp, l->is_next, 0, &ok),
        .id = batch_word(b, interp, l->is_id, (uint64_t)-1, &ok),
        .tstate_head = batch_word(b, interp, l->is_tstate_head, 0, &ok),
        .gil = batch_word(b, interp, l->is_gil, 0, &ok),
    };
    if (gc_word_at(t, interp)) {
        const uint8_t *p = batch_find(b, gc_word_at(t, interp), sizeof(uint64_t));

        ok &= p != NULL;
        is.gc = p ? field_u64(p, 0) : 0;
    }
    if (!ok || is.next != 0 || is.tstate_head != t->guess_tstates[0] ||
        (l->gil_model == PYF_GIL_INTERP && is.gil != t->guess_gil))
        return 0;
    holder = g->gil_span >= 0 ? gil_holder_in(t, batch_span_data(b, g->gil_span)) : 0;
    for (size_t i = 0; i < g->n; i++) {
        const uint8_t *tsbuf = g->ts_span[i] >= 0 ? batch_span_data(b, g->ts_span[i]) : NULL;
        uint64_t next = i + 1 < g->n ? t->guess_tstates[i + 1] : 0;

        if (!tsbuf || field_u64(tsbuf, l->ts_interp) != interp ||
            field_u64(tsbuf, l->ts_next) != next)
            return 0;
        thread_from_tstate(t, tsbuf, t->guess_tstates[i], &is, holder, &th[i], &t->pthread_u64[i]);
        /* <= 3.10: the tid word was read at the guessed pthread_t, right if it still is */
        if (l->ts_native_thread_id < 0 && g->tid_span[i] >= 0 &&
            t->pthread_u64[i] == t->guess_pthreads[i])
            th[i].tid = field_i32(batch_span_data(b, g->tid_span[i]), 0);
        else if (l->ts_native_thread_id < 0)
            tids_known = false;
    }
    threads_complete(t, g, th, g->n, tids_known);
    *ret_n = g->n;
    return 1;
}

/* The fast path: the guessed list in one syscall. Returns 1 and fills @th when the links read
 * match the guess, 0 when they do not (the caller walks the list), or a negative error. */
static int threads_as_guessed(struct pyf_target *t, struct pyf_thread *th, size_t cap,
                              size_t *ret_n, struct pyf_err *e)
{
    struct threads_guess g;
    int r;

    batch_reset(&t->batch);
    if (threads__guess_begin(t, &g, cap) == 0)
        return 0;
    for (size_t i = 0; i < g.n; i++)
        threads__guess_add(t, &g, i);
    r = batch_read(&t->batch, &t->mem);
    if (r == -EFAULT)
        return 0; /* something guessed was freed */
    if (r < 0)
        return target_fail_read(t, e, r, t->guess_interp, "interpreter and thread states");
    return threads__guess_check(t, &g, th, ret_n);
}

/* The slow path: every interpreter, every thread state, one read each. */
static int threads_walked(struct pyf_target *t, struct pyf_thread *ret_threads, size_t cap,
                          size_t *ret_n, struct pyf_err *reterr)
{
    const struct pyf_layout *l = &t->lay;
    size_t n = 0, n_interps = 0;
    uint64_t interp, gil = 0;
    struct interp_fields is;
    int r;

    t->n_guess_tstates = 0;
    r = threads__first_interp(t, &interp, reterr);
    if (r < 0)
        return r;
    t->guess_interp = interp;
    while (interp) {
        uint64_t ts, head, holder;

        if (++n_interps > INTERPS_MAX)
            return pyf_fail(reterr, PYF_TORN, ELOOP, interp, "pid %d: interpreter list loops",
                            t->info.pid);
        r = read_interp(t, interp, &is, reterr);
        if (r < 0)
            return r;
        gil = is.gil;
        holder = gil_holder(t, is.gil);
        head = ts = is.tstate_head;
        for (size_t k = 0; ts && n < cap; k++) {
            if (k == THREADS_MAX || (k > 0 && ts == head) || !remote_plausible(ts))
                return pyf_fail(reterr, PYF_TORN, EFAULT, ts,
                                "pid %d: thread list broken at 0x%" PRIx64, t->info.pid, ts);
            r = remote_read(&t->mem, ts, t->ts_buf, t->ts_read);
            if (r < 0)
                return target_fail_read(t, reterr, r, ts, "thread state");
            if (field_u64(t->ts_buf, l->ts_interp) != interp)
                return pyf_fail(reterr, PYF_TORN, EFAULT, ts,
                                "pid %d: thread state 0x%" PRIx64 " changed while read",
                                t->info.pid, ts);
            thread_from_tstate(t, t->ts_buf, ts, &is, holder, &ret_threads[n], &t->pthread_u64[n]);
            ts = field_u64(t->ts_buf, l->ts_next);
            n++;
        }
        interp = is.next;
        if (n == cap)
            break;
    }
    /* One interpreter whose list we read whole: the guess for next time. */
    if (n_interps == 1 && interp == 0 && n > 0 && n < cap && n <= GUESS_THREADS_MAX) {
        for (size_t i = 0; i < n; i++)
            t->guess_tstates[i] = ret_threads[i].tstate_raddr;
        t->guess_gil = gil;
        t->n_guess_tstates = n;
    }
    *ret_n = n;
    return 0;
}

int pyf_target__threads(struct pyf_target *t, struct pyf_thread *ret_threads, size_t cap,
                        size_t *ret_n, struct pyf_err *reterr)
{
    size_t n = 0;
    int r;

    cap = target__thread_room(t, cap); /* the pthread_t scratch */
    r = threads_as_guessed(t, ret_threads, cap, &n, reterr);
    if (r == 0) {
        r = threads_walked(t, ret_threads, cap, &n, reterr);
        if (r == 0)
            threads_complete(t, NULL, ret_threads, n, false);
    }
    if (r < 0)
        return r;
    *ret_n = n;
    return 0;
}
