/* dump.c - see dump.h. */
#define _GNU_SOURCE
#include "common/dump.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <time.h>
#include <unistd.h>

#include "common/procfs.h"
#include "stub/stub_proto.h"
#include "pyframes_native.h"

#define THREADS_CAP 4096 /* libpyframes' THREAD_SPANS_MAX */
#define TORN_RETRIES 20  /* a busy target can tear a read; each retry is a fresh snapshot */
/* --native on a live process: while its threads are held, each one's registers and the top of
 * its stack are copied, and the copies unwound once they run again (unwinding a held thread
 * took 2-5 ms, the whole hold 40-90 ms for 18 threads here, 292 ms for a CUDA job's 19). */
#define COPY_BYTES (256 * 1024) /* of a thread's stack above its sp: 512 frames fit */
#define COPY_TOTAL (64 << 20)   /* of all threads' together: fewer bytes each past 256 threads */
#define COPY_MIN (32 * 1024)

/* One thread as read: its stack, or why it could not be read. */
struct bt_thread {
    struct pyf_thread th;
    bool native_only; /* --native: a thread with no Python state (OpenMP, NCCL, a C library's) */
    char name[64];    /* threading's name for it, else its OS name */
    char os_name[32]; /* /proc/PID/task/TID/comm */
    struct pyf_stack st;
    char error[240];
    uint64_t *pcs; /* --native: its native return addresses, innermost first */
    size_t n_pcs;
    bool native_truncated;
    char native_error[240];
};

/* The threads, retrying torn reads: the list can change while we walk it. */
static int read_threads(struct pyf_target *t, struct pyf_thread *th, size_t *n, struct pyf_err *e)
{
    int r = 0;

    for (int i = 0; i < TORN_RETRIES; i++) {
        r = pyf_target__threads(t, th, THREADS_CAP, n, e);
        if (r == 0 || pyf_err_fatal(e))
            return r;
    }
    return r;
}

static void read_stack(struct pyf_target *t, struct bt_thread *bt, pid_t pid)
{
    struct pyf_err e;
    int r = 0;

    if (!pyf_target__info(t)->core) /* a core keeps no thread names: threading's only */
        pyf_thread_name(pid, bt->th.tid, bt->os_name, sizeof(bt->os_name));
    /* the registry is read once for all the threads (a miss re-reads it, rate-limited) */
    if (pyf_target__thread_py_name(t, bt->th.ident, bt->name, sizeof(bt->name), &e) < 0 ||
        !bt->name[0])
        snprintf(bt->name, sizeof(bt->name), "%s", bt->os_name);
    for (int i = 0; i < TORN_RETRIES; i++) {
        r = pyf_target__stack(t, &bt->th, &bt->st, &e);
        if (r == 0 || pyf_err_fatal(&e))
            break;
    }
    if (r < 0)
        snprintf(bt->error, sizeof(bt->error), "%s", e.msg);
}

/* ---- JSON output --------------------------------------------------------------------- */

static int json_local(void *ctx, const char *name, const char *value)
{
    json_t *arr = ctx;
    return json_array_append_new(arr, json_pack("{s:s, s:s}", "name", name, "value", value));
}

static json_t *frame_json(struct pyf_target *t, const struct pyf_frame *f, bool with_locals)
{
    json_t *jf = json_pack("{s:s, s:s, s:i, s:i}", "function", f->func, "file", f->file, "line",
                           (json_int_t)f->line, "first_line", (json_int_t)f->first_line);
    struct pyf_err e;

    if (jf && with_locals) {
        json_t *locals = json_array();
        if (pyf_target__locals(t, f, json_local, locals, &e) < 0)
            json_object_set_new(jf, "locals_error", json_string(e.msg));
        json_object_set_new(jf, "locals", locals);
    }
    return jf;
}

static json_t *native_frame_json(const struct pyf_native_frame *f)
{
    char hex[24];

    snprintf(hex, sizeof(hex), "0x%llx", (unsigned long long)f->pc);
    return json_pack("{s:s, s:s?, s:I, s:s?, s:I, s:s?, s:i, s:s}", "kind", "native", "function",
                     f->function, "offset", (json_int_t)f->function_offset, "object", f->object,
                     "object_offset", (json_int_t)f->object_offset, "file", f->src_file, "line",
                     f->src_file ? f->src_line : 0, "pc", hex);
}

static json_t *python_frame_json(struct pyf_target *t, const struct pyf_frame *f, bool locals)
{
    json_t *pf = frame_json(t, f, locals);

    json_object_set_new(pf, "kind", json_string("python"));
    return pf;
}

/* probed's own code in a job's thread: the torch trace's and the collective tracer's wrappers
 * ("<probed torch>"), an eval's ("<probed>"), the stub's ("<probed stub>"). Left out of the
 * stacks shown, so that they read as the job's program. */
static bool probed_frame(const struct pyf_frame *f)
{
    return f->file && strncmp(f->file, "<probed", 7) == 0;
}

/* One stack of both kinds, innermost first: the native frames, with the Python frames in
 * place of the interpreter's eval loop (pyf_mixed_order). The threads were held while both
 * were read, so the two agree; Python frames left over (the native unwind stopped early) go
 * last all the same. */
static json_t *mixed_frames(struct pyf_target *t, struct pyf_native *nat,
                            const struct bt_thread *bt, int depth, bool show_probed)
{
    struct pyf_native_frame *nf = calloc(bt->n_pcs + 1, sizeof(*nf));
    bool *eval_loop = calloc(bt->n_pcs + 1, sizeof(*eval_loop));
    int32_t *order = calloc(bt->n_pcs + bt->st.n_frames + 1, sizeof(*order));
    json_t *frames = json_array();
    size_t n;
    bool agree;

    if (!nf || !eval_loop || !order) {
        free(nf), free(eval_loop), free(order);
        return frames; /* out of memory: an empty stack rather than none */
    }
    for (size_t i = 0; i < bt->n_pcs; i++) {
        pyf_native__symbol(nat, bt->pcs[i], i == 0, &nf[i]);
        pyf_native__source(nat, &nf[i], i == 0);
        eval_loop[i] = nf[i].eval_loop;
    }
    n = pyf_mixed_order(eval_loop, bt->n_pcs, &bt->st, order, &agree);
    for (size_t k = 0; k < n; k++) {
        int32_t py = -order[k] - 1;
        if (order[k] < 0 && !show_probed && probed_frame(&bt->st.frames[py]))
            continue;
        json_array_append_new(frames, order[k] >= 0
                                          ? native_frame_json(&nf[order[k]])
                                          : python_frame_json(t, &bt->st.frames[py], py < depth));
    }
    free(nf), free(eval_loop), free(order);
    return frames;
}

#define RUNNING_TASKS_MAX 256 /* asyncio tasks running at once: one per thread with a loop */

static json_t *thread_json(struct pyf_target *t, struct pyf_native *nat, const struct bt_thread *bt,
                           int depth, bool show_probed, const struct pyf_running_task *run,
                           size_t n_run)
{
    const struct pyf_running_task *task = pyf_running_task_on(&bt->st, run, n_run, NULL);
    json_t *frames = json_array();
    json_t *jt =
        json_pack("{s:i, s:s, s:s, s:I, s:b, s:b, s:b, s:b}", "tid", (int)bt->th.tid, "name",
                  bt->name, "os_name", bt->os_name, "interpreter", (json_int_t)bt->th.interp_id,
                  "holds_gil", bt->th.holds_gil, "on_cpu", bt->th.on_cpu, "gc_collecting",
                  bt->th.gc_collecting, "truncated", bt->st.truncated);

    if (nat)
        json_object_set_new(jt, "python", json_boolean(!bt->native_only));
    if (task) {
        char id[24];

        snprintf(id, sizeof(id), "0x%" PRIx64, task->task);
        json_object_set_new(jt, "task", json_pack("{s:s, s:s}", "id", id, "name", task->name));
    }

    if (nat && bt->n_pcs > 0) {
        json_decref(frames);
        frames = mixed_frames(t, nat, bt, depth, show_probed);
        json_object_set_new(jt, "native_truncated", json_boolean(bt->native_truncated));
    } else {
        for (size_t i = 0; i < bt->st.n_frames; i++)
            if (show_probed || !probed_frame(&bt->st.frames[i]))
                json_array_append_new(frames, frame_json(t, &bt->st.frames[i], (int)i < depth));
    }
    if (nat && bt->native_error[0])
        json_object_set_new(jt, "native_error", json_string(bt->native_error));
    json_object_set_new(jt, "frames", frames);
    if (bt->error[0])
        json_object_set_new(jt, "error", json_string(bt->error));
    return jt;
}

static json_t *process_json(struct pyf_target *t, struct pyf_native *nat,
                            const struct bt_thread *bts, size_t n, const char *cmdline, int depth,
                            bool show_probed)
{
    const struct pyf_target_info *info = pyf_target__info(t);
    json_t *threads = json_array();
    json_t *root;
    int own = 0;
    struct pyf_running_task *run = calloc(RUNNING_TASKS_MAX, sizeof(*run));
    size_t n_run = 0;
    struct pyf_err e;

    /* read after the stacks: a thread is said to run a task only when its stack then held
     * that task's coroutine frame, and still does (pyf_running_task_on) */
    if (run && pyf_target__running_tasks(t, NULL, 0, run, RUNNING_TASKS_MAX, &n_run, &e) < 0)
        n_run = 0;

    for (size_t i = 0; i < n; i++) {
        bool stub = strcmp(bts[i].os_name, STUB_THREAD_NAME) == 0; /* stub.c's, not the job's */
        json_t *jt;
        if (stub && !show_probed) {
            own++;
            continue;
        }
        jt = thread_json(t, nat, &bts[i], depth, show_probed, run, n_run);
        if (jt && stub)
            json_object_set_new(jt, "probed", json_true());
        json_array_append_new(threads, jt);
    }
    root = json_pack("{s:i, s:s, s:s, s:s, s:o}", "pid", (int)info->pid, "python_version",
                     info->version_str, "command", cmdline, "runtime_file", info->runtime_file,
                     "threads", threads);
    if (root && nat)
        json_object_set_new(root, "native", json_true());
    if (root && own) /* left out: probed's own threads, said so */
        json_object_set_new(root, "probed_threads", json_integer(own));
    if (root && info->note[0]) /* a version newer than this build knows, and how it is read */
        json_object_set_new(root, "note", json_string(info->note));
    free(run);
    return root;
}

static bool tid_in(pid_t tid, const pid_t *tids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tids[i] == tid)
            return true;
    return false;
}

/* Whether thread @tid of @pid runs (state R in its stat), or -1 when it cannot be read. */
static int thread_runs(pid_t pid, pid_t tid)
{
    char stat[512], *paren;

    snprintf(stat, sizeof(stat), "task/%d/stat", (int)tid);
    if (procfs_read(pid, stat, stat, sizeof(stat)) <= 0 || !(paren = strrchr(stat, ')')))
        return -1;
    return paren[1] && paren[2] == 'R';
}

/* --native: each thread's state read just before the threads are held (held, every one would
 * read as stopped: `t`), kept by tid for the threads read while held. */
struct running_before {
    pid_t tids[THREADS_CAP];
    int8_t runs[THREADS_CAP]; /* 1, 0, or -1: not known */
    size_t n;
};

static void read_running(pid_t pid, struct running_before *rb)
{
    char path[64];
    struct dirent *e;
    DIR *dir;

    rb->n = 0;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if (!(dir = opendir(path)))
        return;
    while ((e = readdir(dir)) != NULL && rb->n < THREADS_CAP) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0) {
            rb->tids[rb->n] = tid;
            rb->runs[rb->n++] = (int8_t)thread_runs(pid, tid);
        }
    }
    closedir(dir);
}

/* -1 when @tid was not read before the hold */
static int ran_before(const struct running_before *rb, pid_t tid)
{
    for (size_t i = 0; rb && i < rb->n; i++)
        if (rb->tids[i] == tid)
            return rb->runs[i];
    return -1;
}

/* --native: the held threads (@tids: stopped, or a core's) that have no Python state, after the
 * @n Python ones in @bts (room for every held thread); returns how many were added. */
static size_t add_native_only(const pid_t *tids, size_t n_tids, bool core, struct bt_thread *bts,
                              size_t n, pid_t pid, const struct running_before *rb)
{
    size_t added = 0;

    for (size_t i = 0; i < n_tids; i++) {
        pid_t tid = tids[i];
        bool python = false;
        for (size_t k = 0; k < n && !python; k++)
            python = bts[k].th.tid == tid;
        if (python)
            continue;
        bts[n + added] =
            (struct bt_thread){.th = {.tid = tid, .interp_id = -1}, .native_only = true};
        added++;
        if (core)
            continue;
        pyf_thread_name(pid, tid, bts[n + added - 1].os_name, sizeof(bts[n + added - 1].os_name));
        snprintf(bts[n + added - 1].name, sizeof(bts[n + added - 1].name), "%s",
                 bts[n + added - 1].os_name);
        bts[n + added - 1].th.on_cpu = ran_before(rb, tid) == 1;
    }
    return added;
}

/* --native, while the threads are held: each Python thread's native return addresses. */
static void unwind_threads(struct pyf_native *nat, const pid_t *tids, size_t n_tids,
                           struct bt_thread *bts, size_t n, uint64_t *pcs)
{
    struct pyf_err e;

    for (size_t i = 0; i < n; i++) {
        struct bt_thread *bt = &bts[i];
        bt->pcs = pcs + i * PYF_NATIVE_DEPTH_MAX;
        if (!bt->th.tid || !tid_in(bt->th.tid, tids, n_tids))
            snprintf(bt->native_error, sizeof(bt->native_error), "the thread could not be stopped");
        else if (pyf_native__unwind(nat, bt->th.tid, bt->pcs, PYF_NATIVE_DEPTH_MAX, &bt->n_pcs,
                                    &bt->native_truncated, &e) < 0)
            snprintf(bt->native_error, sizeof(bt->native_error), "%s", e.msg);
    }
}

/* A held thread's registers and stack, for the unwind after it runs again. */
struct stack_copy {
    struct pyf_stack_copy c;
    char why[160]; /* why there is none (c.size 0) */
};

#if defined(__x86_64__)
static void copy_thread(pid_t pid, pid_t tid, uint8_t *buf, size_t cap, struct stack_copy *sc)
{
    struct user_regs_struct r;
    struct iovec local = {buf, cap}, remote;
    ssize_t n;

    sc->c = (struct pyf_stack_copy){.tid = tid, .stack = buf};
    if (ptrace(PTRACE_GETREGS, tid, 0, &r) < 0) {
        snprintf(sc->why, sizeof(sc->why), "its registers could not be read: %s", strerror(errno));
        return;
    }
    /* DWARF's order (pyframes_native.h): rax rdx rcx rbx rsi rdi rbp rsp r8-r15 rip */
    memcpy(sc->c.regs,
           (uint64_t[PYF_DWARF_REGS]){r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8,
                                      r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rip},
           sizeof(sc->c.regs));
    remote = (struct iovec){(void *)(uintptr_t)r.rsp, cap};
    n = process_vm_readv(pid, &local, 1, &remote, 1, 0); /* stops at the stack's end */
    if (n <= 0)
        snprintf(sc->why, sizeof(sc->why), "its stack could not be read at 0x%llx: %s",
                 (unsigned long long)r.rsp, n < 0 ? strerror(errno) : "nothing there");
    else
        sc->c.size = (size_t)n;
}
#else
static void copy_thread(pid_t pid, pid_t tid, uint8_t *buf, size_t cap, struct stack_copy *sc)
{
    (void)pid, (void)buf, (void)cap;
    sc->c = (struct pyf_stack_copy){.tid = tid};
    snprintf(sc->why, sizeof(sc->why), "native stacks are read on x86-64 only");
}
#endif

/* Copies each held thread's registers and stack (@*ret_buf: their bytes); NULL when memory is
 * short. */
static struct stack_copy *copy_threads(pid_t pid, const pid_t *tids, size_t n, uint8_t **ret_buf)
{
    size_t each = n && COPY_TOTAL / n < COPY_BYTES ? COPY_TOTAL / n : COPY_BYTES;
    struct stack_copy *copies = calloc(n ? n : 1, sizeof(*copies));

    each = each < COPY_MIN ? COPY_MIN : each;
    *ret_buf = malloc((n ? n : 1) * each);
    if (!copies || !*ret_buf) {
        free(copies);
        free(*ret_buf);
        *ret_buf = NULL;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        copy_thread(pid, tids[i], *ret_buf + i * each, each, &copies[i]);
    return copies;
}

/* Unwinds the copies (the threads run again) into the threads' native stacks. */
static void unwind_copies(struct pyf_native *nat, const struct stack_copy *copies, size_t n_copies,
                          struct bt_thread *bts, size_t n, uint64_t *pcs)
{
    struct pyf_err e;

    for (size_t i = 0; i < n; i++) {
        struct bt_thread *bt = &bts[i];
        const struct stack_copy *sc = NULL;

        bt->pcs = pcs + i * PYF_NATIVE_DEPTH_MAX;
        for (size_t k = 0; bt->th.tid && k < n_copies && !sc; k++)
            sc = copies[k].c.tid == bt->th.tid ? &copies[k] : NULL;
        if (!sc)
            snprintf(bt->native_error, sizeof(bt->native_error), "the thread could not be stopped");
        else if (!sc->c.size)
            snprintf(bt->native_error, sizeof(bt->native_error), "%s", sc->why);
        else if (pyf_native__unwind_copy(nat, &sc->c, bt->pcs, PYF_NATIVE_DEPTH_MAX, &bt->n_pcs,
                                         &bt->native_truncated, &e) < 0)
            snprintf(bt->native_error, sizeof(bt->native_error), "%s", e.msg);
        else if (bt->n_pcs == 0)
            snprintf(bt->native_error, sizeof(bt->native_error),
                     "its stack could not be unwound from pc 0x%llx",
                     (unsigned long long)sc->c.regs[PYF_DWARF_REGS - 1]);
    }
}

static int64_t monotonic_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct dump {
    pid_t pid;
    bool native;
    bool unwind_held; /* dump_unwind_held() */
    bool show_probed; /* dump_show_probed() */
    char *core;       /* dump_open_core: the core file's path */
    struct pyf_target *t;
    struct pyf_native *nat;
    /* the last capture */
    struct pyf_thread *threads;
    struct bt_thread *bts;
    struct pyf_frame *frames;
    uint64_t *pcs;
    size_t n;
    bool captured;
    char cmdline[512];
    int64_t held_ns, read_ns;
};

static void drop_capture(struct dump *d)
{
    free(d->pcs);
    free(d->frames);
    free(d->bts);
    free(d->threads);
    d->pcs = NULL;
    d->frames = NULL;
    d->bts = NULL;
    d->threads = NULL;
    d->n = 0;
    d->captured = false;
}

void dump_free(struct dump *d)
{
    if (!d)
        return;
    drop_capture(d);
    pyf_native_free(d->nat);
    pyf_target_free(d->t);
    free(d->core);
    free(d);
}

int dump_open(pid_t pid, bool native, struct dump **ret, struct pyf_err *e)
{
    struct dump *d = calloc(1, sizeof(*d));
    int r;

    *ret = NULL;
    if (!d) {
        snprintf(e->msg, sizeof(e->msg), "pid %d: out of memory reading its stacks", (int)pid);
        return -ENOMEM;
    }
    d->pid = pid;
    d->native = native;
    r = pyf_target_open(pid, &d->t, e);
    if (r == 0 && native)
        r = pyf_native_open(pid, NULL, &d->nat, e);
    if (r < 0) {
        dump_free(d);
        return r;
    }
    *ret = d;
    return 0;
}

int dump_open_core(const char *core_path, const char *executable, bool native, struct dump **ret,
                   struct pyf_err *e)
{
    struct dump *d = calloc(1, sizeof(*d));
    int r;

    *ret = NULL;
    if (!d || !(d->core = strdup(core_path))) {
        free(d);
        snprintf(e->msg, sizeof(e->msg), "%s: out of memory", core_path);
        return -ENOMEM;
    }
    d->native = native;
    r = pyf_target_open_core(core_path, executable, &d->t, e);
    if (r == 0)
        d->pid = pyf_target__info(d->t)->pid;
    if (r == 0 && native)
        r = pyf_native_open_core(core_path, executable, &d->nat, e);
    if (r < 0) {
        dump_free(d);
        return r;
    }
    *ret = d;
    return 0;
}

void dump_unwind_held(struct dump *d)
{
    d->unwind_held = true;
}

void dump_show_probed(struct dump *d)
{
    d->show_probed = true;
}

int dump_capture(struct dump *d, struct pyf_err *e)
{
    struct pyf_stopped *held = NULL;
    struct timespec now;
    pid_t *tids = NULL; /* the threads held, or the core's */
    size_t n_tids = 0;
    struct stack_copy *copies = NULL; /* a live process's: unwound once its threads run */
    uint8_t *copy_bytes = NULL;
    struct running_before *rb = NULL; /* --native on a live process */
    int r = 0;

    drop_capture(d);
    clock_gettime(CLOCK_REALTIME, &now);
    d->read_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (d->native && !d->core && (rb = malloc(sizeof(*rb))) != NULL)
        read_running(d->pid, rb);
    if (d->native && !d->core) /* from here on, every path lets the threads go */
        r = pyf_stop_process(d->pid, &held, e);
    d->held_ns = d->native && !d->core ? monotonic_ns() : 0;
    if (r < 0)
        return r;
    if (d->core)
        snprintf(d->cmdline, sizeof(d->cmdline), "%s", pyf_target__core_command(d->t));
    else
        procfs_cmdline(d->pid, d->cmdline, sizeof(d->cmdline));
    if (d->native && (tids = calloc(THREADS_CAP, sizeof(*tids))) != NULL) {
        n_tids = d->core ? pyf_target__core_tids(d->t, tids, THREADS_CAP) : pyf_stopped__n(held);
        for (size_t i = 0; !d->core && i < n_tids && i < THREADS_CAP; i++)
            tids[i] = pyf_stopped__tid(held, i);
        n_tids = n_tids < THREADS_CAP ? n_tids : THREADS_CAP;
    }
    d->threads = calloc(THREADS_CAP, sizeof(*d->threads));
    r = d->threads && (tids || !d->native) ? read_threads(d->t, d->threads, &d->n, e) : -ENOMEM;
    if (r == 0) { /* room for the held threads without Python state too */
        size_t all = d->n + n_tids + 1;
        d->bts = calloc(all, sizeof(*d->bts));
        d->frames = calloc((d->n ? d->n : 1) * PYF_DEPTH_MAX, sizeof(*d->frames));
        d->pcs = d->native ? calloc(all * PYF_NATIVE_DEPTH_MAX, sizeof(*d->pcs)) : NULL;
        r = d->bts && d->frames && (d->pcs || !d->native) ? 0 : -ENOMEM;
    }
    for (size_t i = 0; r == 0 && i < d->n; i++) {
        d->bts[i].th = d->threads[i];
        if (rb && ran_before(rb, d->threads[i].tid) >= 0) /* held now: what it did before */
            d->bts[i].th.on_cpu = ran_before(rb, d->threads[i].tid) == 1;
        d->bts[i].st =
            (struct pyf_stack){.frames = d->frames + i * PYF_DEPTH_MAX, .cap = PYF_DEPTH_MAX};
        read_stack(d->t, &d->bts[i], d->pid);
    }
    if (r == 0 && d->native) {
        d->n += add_native_only(tids, n_tids, d->core != NULL, d->bts, d->n, d->pid, rb);
        if (d->core || d->unwind_held)
            unwind_threads(d->nat, tids, n_tids, d->bts, d->n, d->pcs);
        else if (!(copies = copy_threads(d->pid, tids, n_tids, &copy_bytes)))
            r = -ENOMEM;
    }
    pyf_stopped_free(held); /* before unwinding and naming the addresses: those take longer */
    d->held_ns = d->native ? monotonic_ns() - d->held_ns : 0;
    if (copies)
        unwind_copies(d->nat, copies, n_tids, d->bts, d->n, d->pcs);
    free(copies);
    free(copy_bytes);
    free(tids);
    free(rb);
    if (r == -ENOMEM)
        snprintf(e->msg, sizeof(e->msg), "pid %d: out of memory reading its stacks", (int)d->pid);
    if (r < 0)
        drop_capture(d);
    d->captured = r == 0;
    return r;
}

int64_t dump_read_ns(const struct dump *d)
{
    return d->read_ns;
}

int dump_render(struct dump *d, int locals_depth, json_t **ret, struct pyf_err *e)
{
    if (!d->captured) {
        snprintf(e->msg, sizeof(e->msg), "pid %d: no stacks captured", (int)d->pid);
        return -EINVAL;
    }
    *ret = process_json(d->t, d->nat, d->bts, d->n, d->cmdline, locals_depth, d->show_probed);
    if (!*ret) {
        snprintf(e->msg, sizeof(e->msg), "pid %d: out of memory reading its stacks", (int)d->pid);
        return -ENOMEM;
    }
    if (d->native && !d->core) /* how long the threads were held: what the target lost */
        json_object_set_new(*ret, "native_pause_ms", json_real((double)d->held_ns / 1e6));
    if (d->core) {
        json_object_set_new(*ret, "core", json_string(d->core));
        json_object_set_new(*ret, "signal", json_integer(pyf_target__core_signal(d->t)));
    }
    return 0;
}

int dump_json(pid_t pid, int locals_depth, unsigned flags, json_t **ret, struct pyf_err *e)
{
    struct dump *d = NULL;
    int r = dump_open(pid, (flags & DUMP_NATIVE) != 0, &d, e);

    if (r == 0 && (flags & DUMP_PROBED))
        dump_show_probed(d);
    if (r == 0)
        r = dump_capture(d, e);
    if (r == 0)
        r = dump_render(d, locals_depth, ret, e);
    dump_free(d);
    return r;
}
