/* native.c - see include/pyframes_native.h. */
#define _GNU_SOURCE
#include "pyframes_native.h"

#include <dirent.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <libelf.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <inttypes.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "frameptr.h"
#include "modfiles.h"
#include "procmaps.h"
#include "fetchdbg.h"
#include "symtab.h"
#include "target.h"

#define TASK_PASSES 8 /* reads of /proc/PID/task until no thread is new (threads being born) */

struct held_thread {
    pid_t tid;
    int pending_signal; /* a signal that stopped it first: delivered when it is let go */
};

struct pyf_stopped {
    pid_t pid;
    struct held_thread *threads;
    size_t n, cap;
};

struct pyf_native {
    pid_t pid;
    Dwfl_Callbacks callbacks; /* libdw keeps a pointer: it lives as long as the Dwfl */
    char *debuginfo_path;     /* a core's: NULL, libdw's default places */
    struct modfiles files;    /* a live process's: how its modules' files are found */
    Dwfl *dwfl;
    enum { UNATTACHED, HELD_THREADS, STACK_COPIES } mode; /* how libdw reads thread state */
    const struct pyf_stack_copy *copy; /* STACK_COPIES: the sample being unwound */
    struct pyf_symcache *symbols;      /* the function tables (symtab.h) */
    bool own_symbols;                  /* opened without a shared cache: ours to free */
    uint64_t fetched_seen;             /* the debuginfod generation its modules were read at */
    /* which table serves each module, found at its first use; the module's libdw userdata
     * points at its entry too, so a lookup (each frame of each sample) is no search */
    struct module_table **tables;
    size_t n_tables, cap_tables;
    Elf *core_elf; /* pyf_native_open_core: the core, read by libdw */
    int core_fd;
    /* a core's threads, unwound all at once at the first pyf_native__unwind() */
    struct core_stack {
        pid_t tid;
        uint64_t *pcs;
        size_t n;
        bool truncated;
    } * core_stacks;
    size_t n_core_stacks;
    bool core_unwound;
    uint8_t *blocked_stack; /* pyf_native__unwind_blocked's copy (PYF_BLOCKED_STACK_BYTES) */
    uint64_t *fp_pcs;       /* its second unwind, with a frame pointer (PYF_NATIVE_DEPTH_MAX) */
};

/* A module of this process and its functions (a table shared with every process that maps
 * the same file, symtab.h). */
struct module_table {
    Dwarf_Addr bias;     /* where the file is loaded: file address + bias = address here */
    bool live;           /* still reported (pyf_native__reread_maps) */
    struct symtab *tab;  /* a reference; NULL: no table (no memory) */
    bool object_unclean; /* its path (/proc/PID/maps') is not UTF-8: shown as object */
    char *object;        /* that path made UTF-8 (NULL: no memory, a placeholder shown) */
};

/* ---- holding the threads ---- */

bool pyf_stopped__holds(const struct pyf_stopped *s, pid_t tid)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (s->threads[i].tid == tid)
            return true;
    return false;
}

size_t pyf_stopped__n(const struct pyf_stopped *s)
{
    return s ? s->n : 0;
}

pid_t pyf_stopped__tid(const struct pyf_stopped *s, size_t i)
{
    return s->threads[i].tid;
}

/* Waits for the stop PTRACE_INTERRUPT asked for. 1: held, 0: the thread is gone. */
static int wait_stop(pid_t tid, int *ret_signal)
{
    int status;

    for (;;) {
        pid_t r = waitpid(tid, &status, __WALL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || WIFEXITED(status) || WIFSIGNALED(status))
            return 0;
        if (WIFSTOPPED(status)) {
            /* PTRACE_EVENT_STOP: our interrupt (or a group stop); else a signal-delivery
             * stop, the signal to be delivered when we let it go */
            *ret_signal = (status >> 16) == PTRACE_EVENT_STOP ? 0 : WSTOPSIG(status);
            return 1;
        }
    }
}

/* True when the thread is a zombie or dead (its /proc state is Z or X), or gone. */
static bool thread_exiting(pid_t pid, pid_t tid)
{
    char path[64], buf[512], *paren;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    f = fopen(path, "re");
    if (!f)
        return true;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    paren = strrchr(buf, ')');
    return !paren || paren[1] == '\0' || paren[2] == 'Z' || paren[2] == 'X';
}

/* Seizes and stops one thread; 0 when held or gone, -errno (with @e) when we may not. */
static int hold_thread(struct pyf_stopped *s, pid_t tid, struct pyf_err *e)
{
    int sig = 0;

    if (pyf_stopped__holds(s, tid))
        return 0;
    if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
        int err = errno;
        if (err == ESRCH)
            return 0; /* exited meanwhile */
        /* a thread that is exiting refuses with EPERM too: once another thread of the
         * process let us in, the right to trace is not in question */
        if (err == EPERM && (s->n > 0 || thread_exiting(s->pid, tid)))
            return s->n > 0 ? 0
                            : pyf_fail(e, PYF_GONE, ESRCH, 0, "pid %d: the process is exiting",
                                       (int)s->pid);
        return pyf_fail(e, err == EPERM ? PYF_DENIED : PYF_INVALID, err, 0,
                        "pid %d: cannot trace thread %d: %s (native stacks need root with "
                        "CAP_SYS_PTRACE, or the process's owner where ptrace_scope allows)",
                        (int)s->pid, (int)tid, strerror(err));
    }
    if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0 || !wait_stop(tid, &sig))
        return 0; /* gone: a seized thread that exits needs no detach */
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct held_thread *p = realloc(s->threads, cap * sizeof(*p));
        if (!p) {
            ptrace(PTRACE_DETACH, tid, NULL, (void *)(intptr_t)sig);
            return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "pid %d: out of memory", (int)s->pid);
        }
        s->threads = p;
        s->cap = cap;
    }
    s->threads[s->n++] = (struct held_thread){tid, sig};
    return 0;
}

/* One pass over /proc/PID/task; *ret_new: threads held in this pass. */
static int hold_pass(struct pyf_stopped *s, size_t *ret_new, struct pyf_err *e)
{
    char path[64];
    DIR *d;
    struct dirent *de;
    size_t before = s->n;
    int r = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)s->pid);
    d = opendir(path);
    if (!d)
        return pyf_fail(e, errno == ENOENT ? PYF_GONE : PYF_DENIED, errno, 0,
                        "pid %d: cannot list its threads (%s): %s", (int)s->pid, path,
                        strerror(errno));
    while (r == 0 && (de = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(de->d_name);
        if (tid > 0)
            r = hold_thread(s, tid, e);
    }
    closedir(d);
    *ret_new = s->n - before;
    return r;
}

int pyf_stop_process(pid_t pid, struct pyf_stopped **ret_stopped, struct pyf_err *reterr)
{
    struct pyf_stopped *s = calloc(1, sizeof(*s));
    size_t fresh = 1;
    int r = 0;

    if (!s)
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "pid %d: out of memory", (int)pid);
    s->pid = pid;
    for (int pass = 0; r == 0 && fresh > 0 && pass < TASK_PASSES; pass++)
        r = hold_pass(s, &fresh, reterr); /* threads started meanwhile are caught next pass */
    if (r == 0 && s->n == 0)
        r = pyf_fail(reterr, PYF_GONE, ESRCH, 0, "pid %d: no thread could be stopped (gone?)",
                     (int)pid);
    if (r < 0) {
        pyf_stopped_free(s);
        return r;
    }
    *ret_stopped = s;
    return 0;
}

/* A held thread that was killed (SIGKILL wakes even a stopped one) cannot be detached: it
 * waits, a zombie, for its tracer to collect it, and while it does its process cannot be
 * reaped by its parent. Collects those of @tids (they may take a moment to die; the group's
 * leader only once the others are collected). */
static void reap(pid_t *tids, size_t n)
{
    size_t left = n;

    for (int round = 0; left > 0 && round < 200; round++) {
        for (size_t i = 0; i < n; i++) {
            int status;
            pid_t r = tids[i] ? waitpid(tids[i], &status, __WALL | WNOHANG) : 0;
            if (r == tids[i] || (r < 0 && errno != EINTR)) {
                tids[i] = 0; /* collected, or not ours to collect (no longer traced) */
                left--;
            }
        }
        if (left > 0)
            usleep(1000);
    }
}

void pyf_stopped_free(struct pyf_stopped *s)
{
    size_t n_failed = 0;

    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) /* the threads not let go are kept at the front */
        if (ptrace(PTRACE_DETACH, s->threads[i].tid, NULL,
                   (void *)(intptr_t)s->threads[i].pending_signal) < 0)
            s->threads[n_failed++].tid = s->threads[i].tid;
    if (n_failed > 0) {
        pid_t *tids = malloc(n_failed * sizeof(*tids));
        for (size_t i = 0; tids && i < n_failed; i++)
            tids[i] = s->threads[i].tid;
        if (tids)
            reap(tids, n_failed);
        free(tids);
    }
    free(s->threads);
    free(s);
}

/* ---- unwinding and naming ---- */

int pyf_native_open(pid_t pid, struct pyf_symcache *symbols, struct pyf_native **ret_native,
                    struct pyf_err *reterr)
{
    struct pyf_native *n = calloc(1, sizeof(*n));
    bool own_symbols = !symbols;
    int r;

    if (!n || (own_symbols && pyf_symcache_new(&symbols) < 0)) {
        free(n);
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "pid %d: out of memory", (int)pid);
    }
    n->pid = pid;
    n->symbols = symbols;
    n->own_symbols = own_symbols;
    modfiles_init(&n->files, pid);
    n->files.fetch = symcache__fetcher(symbols);
    n->fetched_seen = fetchdbg_generation(n->files.fetch);
    modfiles_enter(&n->files);
    n->callbacks =
        (Dwfl_Callbacks){.find_elf = modfiles_find_elf, .find_debuginfo = modfiles_find_debuginfo};
    n->dwfl = dwfl_begin(&n->callbacks);
    if (!n->dwfl) {
        pyf_native_free(n);
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "pid %d: libdw: %s", (int)pid,
                        dwfl_errmsg(-1));
    }
    r = dwfl_linux_proc_report(n->dwfl, pid); /* the mappings of /proc/PID/maps */
    if (r != 0 || dwfl_report_end(n->dwfl, NULL, NULL) != 0) {
        int err = r > 0 ? r : EINVAL;
        pyf_native_free(n);
        return pyf_fail(reterr,
                        err == ENOENT || err == ESRCH   ? PYF_GONE
                        : err == EACCES || err == EPERM ? PYF_DENIED
                                                        : PYF_INVALID,
                        err, 0, "pid %d: reading its mappings for symbols: %s", (int)pid,
                        r > 0 ? strerror(r) : dwfl_errmsg(-1));
    }
    *ret_native = n;
    return 0;
}

/* A core: libdw finds its modules from the core's notes (NT_FILE, build-ids) and reads its
 * threads' registers from NT_PRSTATUS; every thread is "held" for good. */
int pyf_native_open_core(const char *core_path, const char *executable,
                         struct pyf_native **ret_native, struct pyf_err *reterr)
{
    struct pyf_native *n = calloc(1, sizeof(*n));
    int r = 0;

    if (!n || pyf_symcache_new(&n->symbols) < 0) {
        free(n);
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "%s: out of memory", core_path);
    }
    n->own_symbols = true;
    n->callbacks = (Dwfl_Callbacks){.find_elf = dwfl_build_id_find_elf,
                                    .find_debuginfo = dwfl_standard_find_debuginfo,
                                    .debuginfo_path = &n->debuginfo_path};
    n->core_fd = open(core_path, O_RDONLY | O_CLOEXEC);
    elf_version(EV_CURRENT);
    n->core_elf = n->core_fd >= 0 ? elf_begin(n->core_fd, ELF_C_READ_MMAP, NULL) : NULL;
    n->dwfl = n->core_elf ? dwfl_begin(&n->callbacks) : NULL;
    if (n->dwfl)
        r = dwfl_core_file_report(n->dwfl, n->core_elf, executable);
    if (!n->dwfl || r < 0 || dwfl_report_end(n->dwfl, NULL, NULL) != 0 ||
        (r = dwfl_core_file_attach(n->dwfl, n->core_elf)) < 0) {
        int err = n->core_fd < 0 ? errno : EINVAL;
        pyf_fail(reterr, PYF_INVALID, err, 0, "%s: libdw cannot read it%s%s", core_path,
                 n->core_fd < 0 ? "" : ": ", n->core_fd < 0 ? "" : dwfl_errmsg(-1));
        pyf_native_free(n);
        return -err;
    }
    n->pid = (pid_t)r; /* dwfl_core_file_attach: the core's pid */
    n->mode = HELD_THREADS;
    *ret_native = n;
    return 0;
}

void pyf_native_free(struct pyf_native *n)
{
    if (!n)
        return;
    if (n->dwfl)
        dwfl_end(n->dwfl);
    for (size_t i = 0; i < n->n_core_stacks; i++)
        free(n->core_stacks[i].pcs);
    free(n->core_stacks);
    free(n->blocked_stack);
    free(n->fp_pcs);
    if (n->core_elf)
        elf_end(n->core_elf);
    if (n->core_elf || n->core_fd > 0)
        close(n->core_fd);
    for (size_t i = 0; i < n->n_tables; i++) {
        symcache__put(n->symbols, n->tables[i]->tab);
        free(n->tables[i]->object);
        free(n->tables[i]);
    }
    free(n->tables);
    if (n->own_symbols)
        pyf_symcache_free(n->symbols);
    modfiles_release(&n->files);
    free(n);
}

struct unwind_ctx {
    struct pyf_native *n;
    uint64_t *pcs;
    size_t n_pcs, cap;
    bool truncated;
    uint64_t last_sp; /* the stack pointer of the last frame taken; 0: not known */
};

static const char *function_at(struct pyf_native *n, uint64_t pc);

/* Whether @function starts threads (clone, clone3, glibc's aliases) or the process (_start):
 * nothing called it, whatever its CFI lets an unwinder read past it. */
static bool is_first_function(const char *function)
{
    if (!function)
        return false;
    if (strcmp(function, "_start") == 0)
        return true;
    if (strncmp(function, "__GI_", 5) == 0)
        function += 5;
    function += strspn(function, "_");
    return strcmp(function, "clone") == 0 || strcmp(function, "clone3") == 0;
}

static int take_frame(Dwfl_Frame *state, void *arg)
{
    struct unwind_ctx *c = arg;
    Dwarf_Addr pc;

    if (!dwfl_frame_pc(state, &pc, NULL) || pc == 0)
        return DWARF_CB_ABORT;
    /* a frame read past a thread's first one is whatever that stack held (seen: a garbage
     * pc after clone3 on some runs) */
    if (c->n_pcs > 0 && is_first_function(function_at(c->n, c->pcs[c->n_pcs - 1])))
        return DWARF_CB_ABORT;
    if (c->n_pcs == c->cap) {
        c->truncated = true;
        return DWARF_CB_ABORT;
    }
    c->pcs[c->n_pcs++] = pc;
    if (dwfl_frame_reg(state, PYF_DWARF_SP, &c->last_sp) != 0)
        c->last_sp = 0;
    return DWARF_CB_OK;
}

/* dwfl_getthreads() over a core: each thread's return addresses kept. A walk to the end, not
 * dwfl_getthread_frames() per tid: libdw's core reader frees its iterator only at the end. */
static int take_core_thread(Dwfl_Thread *thread, void *arg)
{
    struct pyf_native *n = arg;
    struct core_stack *grown = realloc(n->core_stacks, (n->n_core_stacks + 1) * sizeof(*grown));
    struct core_stack *cs;
    struct unwind_ctx c = {.n = n, .cap = PYF_NATIVE_DEPTH_MAX};

    if (!grown)
        return DWARF_CB_ABORT;
    n->core_stacks = grown;
    c.pcs = calloc(PYF_NATIVE_DEPTH_MAX, sizeof(*c.pcs));
    if (!c.pcs)
        return DWARF_CB_ABORT;
    dwfl_thread_getframes(thread, take_frame, &c);
    cs = &n->core_stacks[n->n_core_stacks++];
    *cs = (struct core_stack){
        .tid = dwfl_thread_tid(thread), .pcs = c.pcs, .n = c.n_pcs, .truncated = c.truncated};
    return DWARF_CB_OK;
}

static int unwind_core(struct pyf_native *n, pid_t tid, uint64_t *ret_pcs, size_t cap,
                       size_t *ret_n, bool *ret_truncated, struct pyf_err *reterr)
{
    if (!n->core_unwound) {
        n->core_unwound = true;
        dwfl_getthreads(n->dwfl, take_core_thread, n);
    }
    for (size_t i = 0; i < n->n_core_stacks; i++) {
        const struct core_stack *cs = &n->core_stacks[i];
        if (cs->tid != tid)
            continue;
        *ret_n = cs->n < cap ? cs->n : cap;
        memcpy(ret_pcs, cs->pcs, *ret_n * sizeof(*ret_pcs));
        *ret_truncated = cs->truncated || cs->n > cap;
        return 0;
    }
    return pyf_fail(reterr, PYF_GONE, ESRCH, 0, "core of pid %d: thread %d: cannot unwind: %s",
                    (int)n->pid, (int)tid, dwfl_errmsg(-1));
}

int pyf_native__unwind(struct pyf_native *n, pid_t tid, uint64_t *ret_pcs, size_t cap,
                       size_t *ret_n, bool *ret_truncated, struct pyf_err *reterr)
{
    modfiles_enter(&n->files); /* libdw may open the module files now (modfiles.h) */
    struct unwind_ctx c = {.n = n, .pcs = ret_pcs, .cap = cap};

    if (n->core_elf)
        return unwind_core(n, tid, ret_pcs, cap, ret_n, ret_truncated, reterr);

    /* libdw, not libunwind-ptrace: libdw also unwinds out of the vDSO (time.time() is in
     * it half the time), whose unwind info it reads from the process's memory. The threads
     * are held already: libdw only reads their registers and memory. */
    if (n->mode == STACK_COPIES)
        return pyf_fail(reterr, PYF_INVALID, EINVAL, 0,
                        "pid %d: this pyf_native unwinds stack copies", (int)n->pid);
    if (n->mode == UNATTACHED) {
        int r = dwfl_linux_proc_attach(n->dwfl, n->pid, true);
        if (r != 0)
            return pyf_fail(reterr, r == ESRCH || r == ENOENT ? PYF_GONE : PYF_INVALID,
                            r > 0 ? r : EINVAL, 0, "pid %d: libdw cannot unwind it: %s",
                            (int)n->pid, r > 0 ? strerror(r) : dwfl_errmsg(-1));
        n->mode = HELD_THREADS;
    }
    /* -1 at the outermost frame (no return address past it) is the normal end */
    if (dwfl_getthread_frames(n->dwfl, tid, take_frame, &c) != 0 && c.n_pcs == 0)
        return pyf_fail(reterr, PYF_GONE, ESRCH, 0, "pid %d: thread %d: cannot unwind: %s",
                        (int)n->pid, (int)tid, dwfl_errmsg(-1));
    *ret_n = c.n_pcs;
    *ret_truncated = c.truncated;
    return 0;
}

/* ---- unwinding a copy of the stack (no ptrace) ---- */

static pid_t copy_next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
    struct pyf_native *n = arg;

    (void)dwfl;
    if (*thread_argp)
        return 0; /* one thread: the sample's */
    *thread_argp = n;
    return n->copy->tid;
}

static bool copy_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
    struct pyf_native *n = arg;

    (void)dwfl;
    *thread_argp = n;
    return tid == n->copy->tid;
}

/* Only the copied bytes: the rest of the process may have changed since the sample. */
static bool copy_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    const struct pyf_stack_copy *c = ((struct pyf_native *)arg)->copy;
    uint64_t sp = c->regs[PYF_DWARF_SP];

    (void)dwfl;
    if (addr < sp || addr - sp > c->size || c->size - (addr - sp) < sizeof(*result))
        return false;
    memcpy(result, c->stack + (addr - sp), sizeof(*result));
    return true;
}

static bool copy_set_registers(Dwfl_Thread *thread, void *thread_arg)
{
    const struct pyf_stack_copy *c = ((struct pyf_native *)thread_arg)->copy;
    Dwarf_Word regs[PYF_DWARF_REGS];

    for (int i = 0; i < PYF_DWARF_REGS; i++)
        regs[i] = c->regs[i];
    if (!c->regs_known)
        return dwfl_thread_state_registers(thread, 0, PYF_DWARF_REGS, regs);
    /* only those known: libdw leaves the others unset, and an unwind that needs one stops */
    for (int i = 0; i < PYF_DWARF_REGS; i++)
        if ((c->regs_known & (1u << i)) && !dwfl_thread_state_registers(thread, i, 1, &regs[i]))
            return false;
    return true;
}

static const Dwfl_Thread_Callbacks copy_callbacks = {
    .next_thread = copy_next_thread,
    .get_thread = copy_get_thread,
    .memory_read = copy_memory_read,
    .set_initial_registers = copy_set_registers,
};

/* The copy's unwind into @c. */
static int unwind_copy(struct pyf_native *n, const struct pyf_stack_copy *copy,
                       struct unwind_ctx *c, struct pyf_err *reterr)
{

    if (n->mode == HELD_THREADS)
        return pyf_fail(reterr, PYF_INVALID, EINVAL, 0,
                        "pid %d: this pyf_native unwinds held threads", (int)n->pid);
    if (n->mode == UNATTACHED) {
        if (!dwfl_attach_state(n->dwfl, NULL, n->pid, &copy_callbacks, n))
            return pyf_fail(reterr, PYF_INVALID, EINVAL, 0, "pid %d: libdw: %s", (int)n->pid,
                            dwfl_errmsg(-1));
        n->mode = STACK_COPIES;
    }
    n->copy = copy;
    /* an error past the first frames is the end of what the copy holds, or of the stack */
    dwfl_getthread_frames(n->dwfl, copy->tid, take_frame, c);
    n->copy = NULL;
    return 0;
}

int pyf_native__unwind_copy(struct pyf_native *n, const struct pyf_stack_copy *copy,
                            uint64_t *ret_pcs, size_t cap, size_t *ret_n, bool *ret_truncated,
                            struct pyf_err *reterr)
{
    modfiles_enter(&n->files); /* libdw may open the module files now (modfiles.h) */
    struct unwind_ctx c = {.n = n, .pcs = ret_pcs, .cap = cap};
    int r = unwind_copy(n, copy, &c, reterr);

    *ret_n = c.n_pcs;
    *ret_truncated = c.truncated;
    return r;
}

/* /proc/PID/task/TID/@name into @buf, NUL-terminated: its length, or -errno. */
static ssize_t read_task_file(pid_t pid, pid_t tid, const char *name, char *buf, size_t size)
{
    char path[64];
    ssize_t len;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)pid, (int)tid, name);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -errno;
    len = read(fd, buf, size - 1);
    close(fd);
    if (len <= 0)
        return len < 0 ? -errno : -ENODATA;
    buf[len] = '\0';
    return len;
}

/* The three numbers of /proc/PID/task/TID/schedstat into @ret. */
static int read_schedstat(pid_t pid, pid_t tid, uint64_t ret[3])
{
    char buf[96];
    ssize_t len = read_task_file(pid, tid, "schedstat", buf, sizeof(buf));

    if (len < 0)
        return (int)len;
    return procmaps_schedstat(buf, ret) ? 0 : -EBADMSG;
}

/* Thread @tid's numbers that move when it is switched in or out: the run-state source's where
 * it knows the thread (-EAGAIN where it says the thread runs), else schedstat's. */
static int switch_numbers(pid_t pid, pid_t tid, uint64_t ret[3])
{
    int r = threads__source_running(pid, tid, ret);

    if (r == 1)
        return -EAGAIN;
    if (r == 0 || r == -ESRCH)
        return r;
    return read_schedstat(pid, tid, ret);
}

/* Where blocked thread @tid entered the kernel: its user sp and pc. -EAGAIN: it runs. */
static int blocked_sp_pc(pid_t pid, pid_t tid, uint64_t *ret_sp, uint64_t *ret_pc)
{
    char buf[256];
    unsigned long long v[9] = {0};
    long long nr = 0;
    ssize_t len = read_task_file(pid, tid, "syscall", buf, sizeof(buf));
    int got;

    if (len < 0)
        return (int)len;
    if (strncmp(buf, "running", 7) == 0)
        return -EAGAIN;
    /* "nr a0 .. a5 sp pc" in a syscall; "-1 sp pc" blocked outside one (a page fault) */
    got = sscanf(buf, "%lld %llx %llx %llx %llx %llx %llx %llx %llx", &nr, &v[0], &v[1], &v[2],
                 &v[3], &v[4], &v[5], &v[6], &v[7]);
    if (nr == -1 && got >= 3) {
        *ret_sp = v[0];
        *ret_pc = v[1];
        return 0;
    }
    if (got != 9)
        return -EBADMSG;
    *ret_sp = v[6];
    *ret_pc = v[7];
    return 0;
}

/* Up to @cap bytes of the stack from @sp, page by page: a read stops at the mapping's end. */
static size_t read_stack(pid_t pid, uint64_t sp, uint8_t *buf, size_t cap)
{
    struct iovec local[PYF_BLOCKED_STACK_BYTES / 4096 + 1],
        remote[PYF_BLOCKED_STACK_BYTES / 4096 + 1];
    size_t n = 0, off = 0;
    ssize_t got;

    while (off < cap && n < sizeof(local) / sizeof(local[0])) {
        size_t len = 4096 - ((sp + off) & 4095);
        if (len > cap - off)
            len = cap - off;
        local[n] = (struct iovec){.iov_base = buf + off, .iov_len = len};
        remote[n++] = (struct iovec){.iov_base = (void *)(uintptr_t)(sp + off), .iov_len = len};
        off += len;
    }
    got = process_vm_readv(pid, local, n, remote, n, 0);
    return got > 0 ? (size_t)got : 0;
}

/*
 * A blocked thread's unwind (@first) that stopped short of its first function: at a frame
 * whose CFA is kept in rbp, which sp and pc alone do not give (frameptr.h). With rbp found
 * in that frame, the unwind is made again, and kept when it reaches the first function.
 */
static void again_with_frame_pointer(struct pyf_native *n, struct pyf_stack_copy *copy,
                                     struct unwind_ctx *first)
{
    struct unwind_ctx c = {.n = n, .cap = first->cap};
    struct pyf_err e;
    uint64_t rbp;

    if (!first->last_sp || first->cap > PYF_NATIVE_DEPTH_MAX ||
        (!n->fp_pcs && !(n->fp_pcs = malloc(PYF_NATIVE_DEPTH_MAX * sizeof(*n->fp_pcs)))) ||
        frameptr_find(n->dwfl, n->pid, copy, first->pcs[first->n_pcs - 1], first->n_pcs == 1,
                      first->last_sp, &rbp) < 0)
        return;
    c.pcs = n->fp_pcs;
    copy->regs[PYF_DWARF_BP] = rbp;
    copy->regs_known |= 1u << PYF_DWARF_BP;
    if (unwind_copy(n, copy, &c, &e) == 0 && !c.truncated && c.n_pcs > first->n_pcs &&
        is_first_function(function_at(n, c.pcs[c.n_pcs - 1]))) {
        memcpy(first->pcs, c.pcs, c.n_pcs * sizeof(*c.pcs));
        first->n_pcs = c.n_pcs;
    }
}

int pyf_native__unwind_blocked(struct pyf_native *n, pid_t tid, uint64_t *ret_pcs, size_t cap,
                               size_t *ret_n, uint64_t ret_sched[3], struct pyf_err *reterr)
{
    modfiles_enter(&n->files); /* libdw may open the module files now (modfiles.h) */
    struct pyf_stack_copy copy = {.tid = tid,
                                  .regs_known = 1u << PYF_DWARF_SP | 1u << PYF_DWARF_IP};
    struct unwind_ctx c = {.n = n, .pcs = ret_pcs, .cap = cap};
    uint64_t after[3];
    int r;

    if (!n->blocked_stack && !(n->blocked_stack = malloc(PYF_BLOCKED_STACK_BYTES)))
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "pid %d: out of memory", (int)n->pid);
    if ((r = switch_numbers(n->pid, tid, ret_sched)) < 0 ||
        (r = blocked_sp_pc(n->pid, tid, &copy.regs[PYF_DWARF_SP], &copy.regs[PYF_DWARF_IP])) < 0)
        return pyf_fail(reterr,
                        r == -EAGAIN                  ? PYF_TORN
                        : r == -ENOENT || r == -ESRCH ? PYF_GONE
                                                      : PYF_INVALID,
                        -r, 0, "pid %d thread %d: where it waits: %s", (int)n->pid, (int)tid,
                        r == -EAGAIN ? "it runs" : strerror(-r));
    copy.stack = n->blocked_stack;
    copy.size =
        read_stack(n->pid, copy.regs[PYF_DWARF_SP], n->blocked_stack, PYF_BLOCKED_STACK_BYTES);
    if (copy.size == 0)
        return pyf_fail(reterr, PYF_TORN, EFAULT, copy.regs[PYF_DWARF_SP],
                        "pid %d thread %d: its stack: %s", (int)n->pid, (int)tid, strerror(errno));
    if (switch_numbers(n->pid, tid, after) < 0 || memcmp(after, ret_sched, sizeof(after)) != 0)
        return pyf_fail(reterr, PYF_TORN, EAGAIN, 0,
                        "pid %d thread %d ran while its stack was read", (int)n->pid, (int)tid);
    r = unwind_copy(n, &copy, &c, reterr);
    if (r == 0 && !c.truncated && c.n_pcs > 0 &&
        !is_first_function(function_at(n, c.pcs[c.n_pcs - 1])))
        again_with_frame_pointer(n, &copy, &c);
    *ret_n = c.n_pcs;
    return r;
}

static bool is_eval_loop(const char *function)
{
    static const char eval[] =
        "_PyEval_EvalFrameDefault"; /* and its .cold part (named by evalcold.c where stripped) */
    size_t len = sizeof(eval) - 1;

    return function && strncmp(function, eval, len) == 0 &&
           (function[len] == '\0' || function[len] == '.');
}

/* The table serving @m: found at its first use (shared by build-id, symtab.h). */
static struct module_table *table_of(struct pyf_native *n, Dwfl_Module *m)
{
    struct module_table *t;
    Dwarf_Addr bias = 0;
    void **userdata = NULL;

    dwfl_module_info(m, &userdata, NULL, NULL, NULL, NULL, NULL, NULL);
    if (userdata && *userdata)
        return *userdata;
    if (n->n_tables == n->cap_tables) {
        size_t cap = n->cap_tables ? 2 * n->cap_tables : 16;
        struct module_table **p = realloc(n->tables, cap * sizeof(*p));
        if (!p)
            return NULL;
        n->tables = p;
        n->cap_tables = cap;
    }
    if (!(t = malloc(sizeof(*t))))
        return NULL;
    if (!dwfl_module_getelf(m, &bias))
        dwfl_module_info(m, NULL, &bias, NULL, NULL, NULL, NULL, NULL); /* no file: its start */
    *t = (struct module_table){.bias = bias, .tab = symcache__get(n->symbols, m, bias)};
    const char *path = dwfl_module_info(m, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    size_t len = path ? strlen(path) : 0;
    /* a file's name is any bytes: checked once here, not at each frame; without memory for
     * the clean copy, a placeholder, never the bytes */
    t->object_unclean = path && !pyf_utf8_valid(path, len);
    if (t->object_unclean && (t->object = malloc(3 * len + 1)))
        pyf_utf8_clean(t->object, 3 * len + 1, path, len);
    n->tables[n->n_tables++] = t;
    if (userdata)
        *userdata = t;
    return t;
}

/* The function of @m covering address @addr of this process, or NULL. */
static struct sym *sym_at(struct pyf_native *n, Dwfl_Module *m, uint64_t addr, uint64_t *ret_bias)
{
    struct module_table *t = table_of(n, m);

    if (!t || !t->tab)
        return NULL;
    *ret_bias = t->bias;
    return symtab__find(t->tab, addr - t->bias);
}

static int prepare_module(Dwfl_Module *m, void **userdata, const char *name, Dwarf_Addr start,
                          void *arg)
{
    Dwarf_Addr bias;

    (void)userdata, (void)name, (void)start;
    if (dwfl_module_getelf(m, &bias)) {
        dwfl_module_eh_cfi(m, &bias); /* loaded once, kept by libdw */
        table_of(arg, m);
    }
    return DWARF_CB_OK;
}

void pyf_native__prepare(struct pyf_native *n)
{
    modfiles_enter(&n->files); /* libdw may open the module files now (modfiles.h) */
    dwfl_getmodules(n->dwfl, prepare_module, n, 0);
}

static int mark_module(Dwfl_Module *m, void **userdata, const char *name, Dwarf_Addr start,
                       void *arg)
{
    struct module_table *t = *userdata;

    (void)m, (void)name, (void)start, (void)arg;
    if (t)
        t->live = true;
    return DWARF_CB_OK;
}

/* Frees the tables of modules libdw dropped: a new module may be given the same address. */
static void drop_dead_tables(struct pyf_native *n)
{
    size_t kept = 0;

    for (size_t i = 0; i < n->n_tables; i++)
        n->tables[i]->live = false;
    dwfl_getmodules(n->dwfl, mark_module, n, 0);
    for (size_t i = 0; i < n->n_tables; i++) {
        if (n->tables[i]->live) {
            n->tables[kept++] = n->tables[i];
            continue;
        }
        symcache__put(n->symbols, n->tables[i]->tab);
        free(n->tables[i]->object);
        free(n->tables[i]);
    }
    n->n_tables = kept;
}

bool pyf_native__stale(const struct pyf_native *n)
{
    return fetchdbg_generation(n->files.fetch) != n->fetched_seen;
}

/* A new libdw session with no module: a module keeps the debug file it was first reported
 * with, so one fetched since is read only by a module reported anew. 0, or -1. */
static int renew(struct pyf_native *n)
{
    for (size_t i = 0; i < n->n_tables; i++) {
        symcache__put(n->symbols, n->tables[i]->tab);
        free(n->tables[i]->object);
        free(n->tables[i]);
    }
    n->n_tables = 0;
    n->fetched_seen = fetchdbg_generation(n->files.fetch);
    dwfl_end(n->dwfl);
    n->mode = UNATTACHED; /* a stack copy's state is attached again at the next unwind */
    n->dwfl = dwfl_begin(&n->callbacks);
    return n->dwfl ? 0 : ENOMEM;
}

int pyf_native__reread_maps(struct pyf_native *n, struct pyf_err *reterr)
{
    modfiles_enter(&n->files); /* libdw may open the module files now (modfiles.h) */
    int r;

    /* Everything again, not only what was added: a library loaded since may lie between two
     * mappings of one that was there (a gap libdw counted as that one's). Modules reported as
     * before are kept by libdw, with their tables; the others are dropped. */
    modfiles_forget_maps(&n->files);
    if (pyf_native__stale(n) && n->mode != HELD_THREADS && (r = renew(n)) != 0)
        return pyf_fail(reterr, PYF_INVALID, r, 0, "pid %d: libdw: %s", (int)n->pid,
                        dwfl_errmsg(-1));
    dwfl_report_begin(n->dwfl);
    r = dwfl_linux_proc_report(n->dwfl, n->pid);
    if (dwfl_report_end(n->dwfl, NULL, NULL) != 0 && r == 0)
        r = EINVAL;
    drop_dead_tables(n);
    if (r != 0)
        return pyf_fail(reterr, r == ENOENT || r == ESRCH ? PYF_GONE : PYF_INVALID,
                        r > 0 ? r : EINVAL, 0, "pid %d: rereading its mappings: %s", (int)n->pid,
                        r > 0 ? strerror(r) : dwfl_errmsg(-1));
    pyf_native__prepare(n); /* the new ones' tables now, as at open */
    return 0;
}

size_t pyf_mixed_order(const bool *eval_loop, size_t n_native, const struct pyf_stack *st,
                       int32_t *ret_order, bool *ret_agree)
{
    size_t n = 0, py = 0, entries = 0, evals = 0;

    for (size_t k = 0; k < st->n_frames; k++)
        entries += st->frames[k].entry;
    for (size_t i = 0; i < n_native; i++) {
        evals += eval_loop[i];
        if (!eval_loop[i] || py >= st->n_frames) {
            ret_order[n++] = (int32_t)i;
            continue;
        }
        do
            ret_order[n++] = -(int32_t)py - 1;
        while (!st->frames[py++].entry && py < st->n_frames);
    }
    while (py < st->n_frames)
        ret_order[n++] = -(int32_t)py++ - 1;
    *ret_agree = evals == entries && (st->n_frames == 0 || entries > 0);
    return n;
}

/* The symbol (as in the object: not demangled) of the function @pc returns into, or NULL. */
static const char *function_at(struct pyf_native *n, uint64_t pc)
{
    Dwfl_Module *m = dwfl_addrmodule(n->dwfl, pc - 1);
    uint64_t bias;
    struct sym *sym = m ? sym_at(n, m, pc - 1, &bias) : NULL;

    return sym ? sym->name : NULL;
}

/* Whether @addr lies in one of @elf's loaded segments. libdw gives a module the whole range
 * from its first mapping to its last, so another library mapped since into a gap between two
 * of them (seen: liblzma's, on 3.13) would otherwise be named as that module. */
static bool in_loaded_segment(Elf *elf, Dwarf_Addr bias, Dwarf_Addr addr)
{
    size_t n_phdrs;

    if (elf_getphdrnum(elf, &n_phdrs) != 0)
        return true; /* cannot tell: trust the module's range */
    for (size_t i = 0; i < n_phdrs; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && addr - bias >= ph.p_vaddr &&
            addr - bias < ph.p_vaddr + ph.p_memsz)
            return true;
    }
    return false;
}

void pyf_native__symbol(struct pyf_native *n, uint64_t pc, bool innermost,
                        struct pyf_native_frame *ret_frame)
{
    modfiles_enter(&n->files); /* libdw may open the module files now (modfiles.h) */
    /* a return address points past its call, maybe into the next function or line */
    Dwarf_Addr lookup = innermost || pc == 0 ? pc : pc - 1, start = 0, bias = 0;
    Dwfl_Module *m = dwfl_addrmodule(n->dwfl, lookup);
    Elf *elf = m ? dwfl_module_getelf(m, &bias) : NULL;
    uint64_t table_bias = 0;
    struct module_table *t;
    struct sym *sym;

    *ret_frame = (struct pyf_native_frame){.pc = pc, .object_offset = pc};
    if (!m || (elf && !in_loaded_segment(elf, bias, lookup)))
        return; /* memory mapped from no file known (JIT code, or loaded since) */
    ret_frame->object = dwfl_module_info(m, NULL, &start, NULL, NULL, NULL, NULL, NULL);
    ret_frame->object_offset = elf ? pc - bias : pc - start;
    sym = sym_at(n, m, lookup, &table_bias);
    if (ret_frame->object && (t = table_of(n, m)) && t->object_unclean) /* sym_at found it */
        ret_frame->object = t->object ? t->object : "<a path that is not UTF-8>";
    if (sym) {
        ret_frame->function = symtab__shown(sym);
        ret_frame->function_offset = pc - (sym->start + table_bias);
        ret_frame->eval_loop = is_eval_loop(sym->name);
    }
}

void pyf_native__source(struct pyf_native *n, struct pyf_native_frame *frame, bool innermost)
{
    modfiles_enter(&n->files); /* libdw may open the module files now (modfiles.h) */
    Dwarf_Addr lookup = innermost || frame->pc == 0 ? frame->pc : frame->pc - 1;
    Dwfl_Module *m = dwfl_addrmodule(n->dwfl, lookup);
    Dwfl_Line *line = m ? dwfl_module_getsrc(m, lookup) : NULL;
    int lineno = 0;

    if (line) {
        frame->src_file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
        frame->src_line = lineno;
    }
}
