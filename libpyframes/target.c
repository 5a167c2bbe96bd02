/*
 * target.c - pyf_target_open(): from a pid to a readable CPython runtime.
 *
 * The runtime lives in one ELF file mapped by the target: libpython (pyenv, conda: shared
 * builds) or the executable itself (Debian's python3.11). We look at the mapped files whose
 * name says python, in the target's own mount namespace (/proc/PID/root), for the runtime's
 * symbol (.symtab first, .dynsym when stripped), place it in the target's address space with
 * the load bias of that file's first segment, then learn the version (Py_Version, or the
 * PY_VERSION string in .rodata) and pick the layout.
 */
#define _GNU_SOURCE
#include "target.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elfimg.h"
#include "err.h"
#include "procmaps.h"
#include "core.h"
#include "remote.h"

#define CODECACHE_SETS 1024
#define BATCH_BYTES (1u << 20)

/* How the runtime showed itself in a candidate file. */
enum runtime_kind { RUNTIME_NONE, RUNTIME_3, RUNTIME_36, RUNTIME_2 };

struct runtime_file {
    const char *path; /* as in /proc/PID/maps; borrowed from the maps list */
    struct elfimg *img;
    enum runtime_kind kind;
    uint64_t bias; /* add to a link-time address to get the target address */
};

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static enum runtime_kind runtime_kind_of(const struct elfimg *img)
{
    uint64_t v;

    /* _PyRuntime first: 3.7+ is what runs, and each miss scans every symbol. Python 2 also
     * has interp_head and _PyThreadState_Current: rule it out before 3.6. */
    if (elfimg__symbol(img, "_PyRuntime", &v) == 0)
        return RUNTIME_3;
    if (elfimg__symbol(img, "Py_InitModule4_64", &v) == 0 ||
        elfimg__symbol(img, "Py_InitModule4", &v) == 0)
        return RUNTIME_2;
    if (elfimg__symbol(img, "interp_head", &v) == 0 ||
        elfimg__symbol(img, "_PyThreadState_Current", &v) == 0)
        return RUNTIME_36;
    return RUNTIME_NONE;
}

/* Candidates, best first: libpython*, then the executable, then anything named *python*. */
static int candidate_rank(const char *path, const char *exe)
{
    const char *b = base_name(path);

    if (strncmp(b, "libpython", 9) == 0)
        return 0;
    if (exe[0] && strcmp(path, exe) == 0)
        return 1;
    if (strstr(b, "python"))
        return 2;
    return -1;
}

/* Where a file the target maps is read: through /proc/PID/root (the target's own mount
 * namespace), or for a core where it is on this machine. */
static void local_path(const struct remote_src *src, const char *path, char *buf, size_t size)
{
    if (src->core)
        snprintf(buf, size, "%s", core__local_path(src->core, path));
    else
        snprintf(buf, size, "/proc/%d/root%s", (int)src->pid, path);
}

static int open_candidate(const struct remote_src *src, const struct procmaps *pm, const char *path,
                          struct runtime_file *rf, struct pyf_err *e)
{
    char full[PATH_MAX + 32];
    uint64_t vaddr, off, at;
    pid_t pid = src->core ? core__pid(src->core) : src->pid;
    uint64_t inode = 0; /* a core's files are this machine's, where they are now */
    int r;

    for (size_t i = 0; !src->core && i < pm->n && !inode; i++)
        if (strcmp(pm->maps[i].path, path) == 0)
            inode = pm->maps[i].inode;
    local_path(src, path, full, sizeof(full));
    r = elfimg_open(full, inode, &rf->img, e);
    if (r < 0)
        return r;
    rf->path = path;
    rf->kind = runtime_kind_of(rf->img);
    if (rf->kind == RUNTIME_NONE)
        return 0;
    r = elfimg__first_load(rf->img, &vaddr, &off);
    at = r == 0 ? procmaps__addr_of_offset(pm, path, off) : 0;
    if (!at)
        return pyf_fail(e, PYF_INVALID, ENOENT, 0, "%s: first segment is not mapped in pid %d",
                        path, (int)pid);
    rf->bias = at - vaddr;
    return 0;
}

static int find_runtime_file(const struct remote_src *src, const struct procmaps *pm,
                             struct runtime_file *ret_rf, struct pyf_err *e)
{
    char exe_link[64], exe[PATH_MAX] = "";
    ssize_t n;
    bool saw_py2 = false, denied = false;
    struct pyf_err swapped = {0}; /* why a mapped file was refused: swapped since */
    pid_t pid = src->core ? core__pid(src->core) : src->pid;

    snprintf(exe_link, sizeof(exe_link), "/proc/%d/exe", (int)pid);
    if (src->core) {
        n = snprintf(exe, sizeof(exe), "%s", core__executable(src->core));
    } else {
        n = readlink(exe_link, exe, sizeof(exe) - 1);
        denied = n < 0 && (errno == EACCES || errno == EPERM);
    }
    exe[n > 0 ? n : 0] = '\0';
    if (n > 10 && strcmp(exe + n - 10, " (deleted)") == 0)
        exe[n - 10] = '\0';
    for (int rank = 0; rank <= 2; rank++) {
        for (size_t i = 0; i < pm->n; i++) {
            const char *path = pm->maps[i].path;
            struct runtime_file rf = {0};
            struct pyf_err ce = {0};
            bool dup = false;

            if (path[0] != '/' || pm->maps[i].offset != 0 || candidate_rank(path, exe) != rank)
                continue;
            for (size_t j = 0; j < i && !dup; j++)
                dup = pm->maps[j].offset == 0 && strcmp(pm->maps[j].path, path) == 0;
            if (dup)
                continue;
            if (open_candidate(src, pm, path, &rf, &ce) < 0 || rf.kind == RUNTIME_NONE ||
                rf.kind == RUNTIME_2) {
                saw_py2 |= rf.kind == RUNTIME_2;
                if (ce.kind == PYF_DENIED && !denied && ce.sys == EPERM)
                    swapped = ce; /* elfimg_open: not the file mapped */
                denied |= ce.kind == PYF_DENIED;
                elfimg_free(rf.img);
                continue;
            }
            *ret_rf = rf;
            return 0;
        }
    }
    if (saw_py2)
        return pyf_fail(e, PYF_UNSUPPORTED, ENOTSUP, 0,
                        "pid %d runs Python 2, which is not supported (probed reads CPython "
                        "3.6 to 3.%u)",
                        (int)pid, PYF_VERSION_MINOR(layout_newest()->version));
    /* Without CAP_SYS_PTRACE another user's /proc/PID/root and exe are closed to us: that
     * is not "not Python", and the user should hear why. */
    if (denied && swapped.kind == PYF_DENIED)
        return pyf_fail(e, PYF_DENIED, EPERM, 0, "pid %d: %s", (int)pid, swapped.msg);
    if (denied)
        return pyf_fail(e, PYF_DENIED, EACCES, 0,
                        "pid %d: permission denied opening its files through /proc/%d/root "
                        "(run as root with CAP_SYS_PTRACE, or as the process's owner)",
                        (int)pid, (int)pid);
    if (src->core)
        return pyf_fail(e, PYF_NOT_PYTHON, ENOENT, 0,
                        "the core of pid %d (%s) is not of a CPython 3 process as found here: "
                        "none of its mapped files holds a Python runtime (is its program "
                        "elsewhere? --executable)",
                        (int)pid, exe[0] ? base_name(exe) : "?");
    return pyf_fail(e, PYF_NOT_PYTHON, ENOENT, 0,
                    "pid %d (%s) is not a CPython 3 process: none of its mapped files holds "
                    "a Python runtime",
                    (int)pid, exe[0] ? base_name(exe) : "?");
}

static int symbol_raddr(const struct runtime_file *rf, const char *name, uint64_t *ret)
{
    uint64_t v;
    int r = elfimg__symbol(rf->img, name, &v);

    if (r == 0)
        *ret = v + rf->bias;
    return r;
}

/* "3.11.7" from PY_VERSION_HEX 0x030b07f0, with a1/b2/rc3 for pre-releases. */
static void version_from_hex(uint64_t hex, char *buf, size_t size)
{
    static const char *const level[] = {"a", "a", "a", "a", "a",  "a", "a", "a",
                                        "a", "a", "a", "b", "rc", "",  "",  ""};
    unsigned lvl = (hex >> 4) & 0xf, serial = hex & 0xf;

    if (lvl == 0xf)
        snprintf(buf, size, "%u.%u.%u", (unsigned)(hex >> 24) & 0xff, (unsigned)(hex >> 16) & 0xff,
                 (unsigned)(hex >> 8) & 0xff);
    else
        snprintf(buf, size, "%u.%u.%u%s%u", (unsigned)(hex >> 24) & 0xff,
                 (unsigned)(hex >> 16) & 0xff, (unsigned)(hex >> 8) & 0xff, level[lvl], serial);
}

/* The minor version named in a file name like libpython3.9.so or python3.11, or -1. */
static int minor_from_name(const char *path)
{
    const char *p = strstr(base_name(path), "python3.");

    if (!p || !isdigit((unsigned char)p[8]))
        return -1;
    return atoi(p + 8);
}

static int find_version(struct pyf_target *t, const struct runtime_file *rf, struct pyf_err *e)
{
    uint64_t raddr, hex;
    int minor;

    if (symbol_raddr(rf, "Py_Version", &raddr) == 0 && remote_read(&t->mem, raddr, &hex, 4) == 0) {
        hex &= 0xffffffffu;
        if ((hex >> 24) == 3) {
            t->info.version = PYF_VER(3, (uint32_t)(hex >> 16) & 0xff);
            version_from_hex(hex, t->info.version_str, sizeof(t->info.version_str));
            return 0;
        }
    }
    minor = rf->kind == RUNTIME_36 ? 6 : minor_from_name(rf->path);
    if (elfimg__find_version(rf->img, 3, minor, t->info.version_str, sizeof(t->info.version_str)) ==
        0) {
        minor = atoi(strchr(t->info.version_str, '.') + 1);
    } else if (minor >= 0) {
        snprintf(t->info.version_str, sizeof(t->info.version_str), "3.%d", minor);
    } else {
        return pyf_fail(e, PYF_UNSUPPORTED, ENOENT, 0,
                        "pid %d: cannot tell the Python version of %s", t->info.pid, rf->path);
    }
    t->info.version = PYF_VER(3, (uint32_t)minor);
    return 0;
}

/*
 * The layout: our table, overlaid (3.13+) with the offsets the target publishes. A version
 * newer than every table is read only through what it publishes, laid over the newest
 * table's shapes, once those offsets check out (layout.c); it is read with a note saying so.
 */
static int choose_layout(struct pyf_target *t, struct pyf_err *e)
{
    const struct pyf_layout *table = layout_for_version(t->info.version);
    const struct pyf_layout *newest = layout_newest();
    bool newer = !table && t->info.version > newest->version;
    uint8_t raw[LAYOUT_DEBUG_BYTES];
    char why[160] = "";
    int r = -EOPNOTSUPP;

    if (PYF_VERSION_MINOR(t->info.version) >= 13) {
        r = remote_read(&t->mem, t->info.runtime_raddr, raw, sizeof(raw));
        if (r == 0)
            r = layout_from_debug_offsets(raw, sizeof(raw), t->info.version, table ? table : newest,
                                          &t->lay, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "_Py_DebugOffsets unreadable (%s)", strerror(-r));
    }
    if (r == 0) {
        t->info.debug_offsets = true;
        if (newer)
            snprintf(t->info.note, sizeof(t->info.note),
                     "Python %s is newer than this probed knows (3.6 to 3.%u): read through the "
                     "offsets it publishes, with 3.%u's shapes",
                     t->info.version_str, PYF_VERSION_MINOR(newest->version),
                     PYF_VERSION_MINOR(newest->version));
        return 0;
    }
    if (r == -ENOEXEC)
        return pyf_fail(e, PYF_UNSUPPORTED, ENOTSUP, 0, "pid %d runs Python %s, %s", t->info.pid,
                        t->info.version_str, why);
    if (!table)
        return pyf_fail(e, PYF_UNSUPPORTED, ENOTSUP, 0,
                        "pid %d runs Python %s, which this probed does not read (it reads "
                        "CPython 3.6 to 3.%u%s%s)",
                        t->info.pid, t->info.version_str, PYF_VERSION_MINOR(newest->version),
                        newer ? ", and later ones whose _Py_DebugOffsets check out: " : "",
                        newer ? why : "");
    t->lay = *table;
    return 0;
}

static size_t max_plus(size_t size, const int32_t *offs, size_t n)
{
    size_t m = 0;

    for (size_t i = 0; i < n; i++)
        if (offs[i] >= 0 && (size_t)offs[i] + size > m)
            m = (size_t)offs[i] + size;
    return (m + 7) & ~(size_t)7;
}

static void size_reads(struct pyf_target *t)
{
    const struct pyf_layout *l = &t->lay;
    int32_t ts[] = {l->ts_next, l->ts_interp, l->ts_frame, l->ts_thread_id, l->ts_native_thread_id};
    int32_t fr[] = {l->fr_back, l->fr_code, l->fr_lasti, l->fr_owner, l->fr_state, l->fr_running};
    size_t n_fr_copy = sizeof(fr) / sizeof(fr[0]) - 1; /* all but fr_running */
    int32_t co[] = {l->ob_type,      l->co_filename,    l->co_name,  l->co_qualname,
                    l->co_linetable, l->co_firstlineno, l->co_flags, l->co_code};

    t->ts_read = max_plus(8, ts, sizeof(ts) / sizeof(ts[0]));
    t->fr_read = max_plus(8, fr, sizeof(fr) / sizeof(fr[0]));
    if (l->fr_state_model == PYF_STATE_REFCNT &&
        t->fr_read < (size_t)l->fr_localsplus + 8 * FRAME_LOCALS_CHECKED)
        t->fr_read = (size_t)l->fr_localsplus + 8 * FRAME_LOCALS_CHECKED;
    t->fr_copy_read = max_plus(8, fr, n_fr_copy);
    t->co_read = max_plus(8, co, sizeof(co) / sizeof(co[0]));
}

static int find_addresses(struct pyf_target *t, const struct runtime_file *rf, struct pyf_err *e)
{
    static const struct {
        const char *name;
        size_t at;
    } types[] = {
        {"PyCode_Type", offsetof(struct pyf_types, code)},
        {"PyUnicode_Type", offsetof(struct pyf_types, str)},
        {"PyBytes_Type", offsetof(struct pyf_types, bytes)},
        {"PyLong_Type", offsetof(struct pyf_types, long_)},
        {"PyBool_Type", offsetof(struct pyf_types, bool_)},
        {"PyFloat_Type", offsetof(struct pyf_types, float_)},
        {"_Py_NoneStruct", offsetof(struct pyf_types, none)},
        {"PyCell_Type", offsetof(struct pyf_types, cell)},
        {"PyTuple_Type", offsetof(struct pyf_types, tuple)},
        {"PyList_Type", offsetof(struct pyf_types, list)},
        {"PyDict_Type", offsetof(struct pyf_types, dict)},
        {"PySet_Type", offsetof(struct pyf_types, set)},
        {"PyFrozenSet_Type", offsetof(struct pyf_types, frozenset)},
        {"PyCoro_Type", offsetof(struct pyf_types, coro)},
        {"PyGen_Type", offsetof(struct pyf_types, gen)},
    };

    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        symbol_raddr(rf, types[i].name, (uint64_t *)((char *)&t->types + types[i].at));
    if (rf->kind == RUNTIME_36) {
        /* interp_head is static (.symtab only); stripped 3.6 falls back, in threads.c, to the
         * interpreter of the thread holding the GIL. */
        if (symbol_raddr(rf, "interp_head", &t->interp_head_raddr) < 0)
            t->interp_head_raddr = 0;
        symbol_raddr(rf, "_PyThreadState_Current", &t->tstate_current_raddr);
        t->info.runtime_raddr = t->interp_head_raddr;
    } else {
        if (symbol_raddr(rf, "_PyRuntime", &t->info.runtime_raddr) < 0)
            return pyf_fail(e, PYF_NOT_PYTHON, ENOENT, 0, "%s: no _PyRuntime", rf->path);
    }
    return 0;
}

static int finish_addresses(struct pyf_target *t)
{
    const struct pyf_layout *l = &t->lay;

    if (l->rt_interp_head >= 0)
        t->interp_head_raddr = t->info.runtime_raddr + (uint64_t)l->rt_interp_head;
    if (l->gil_model == PYF_GIL_RUNTIME)
        t->tstate_current_raddr = t->info.runtime_raddr + (uint64_t)l->rt_tstate_current;
    return 0;
}

static int alloc_scratch(struct pyf_target *t)
{
    size_t n = SCRATCH_SLOTS;

    /* Frames, code heads and thread states of one sample, with room for merged gaps. */
    if (batch_init(&t->batch, BATCH_BYTES, 2 * n + 2 * GUESS_THREADS_MAX + 8) < 0)
        return -ENOMEM;
    t->guess_u64 = calloc(n, sizeof(*t->guess_u64));
    t->scratch_u64 = calloc(n, sizeof(*t->scratch_u64));
    t->pthread_u64 = calloc(THREAD_ROOM_MIN, sizeof(*t->pthread_u64));
    t->liov = calloc(n, sizeof(*t->liov));
    t->riov = calloc(n, sizeof(*t->riov));
    t->code_buf = calloc(n, t->co_read);
    t->heads = calloc(n, sizeof(*t->heads));
    t->raw = calloc(n, sizeof(*t->raw));
    t->ts_buf = calloc(1, t->ts_read);
    t->thread_spans = calloc(THREAD_ROOM_MIN, sizeof(*t->thread_spans));
    t->thread_room = THREAD_ROOM_MIN;
    t->codes = codecache_new(CODECACHE_SETS);
    if (!t->guess_u64 || !t->scratch_u64 || !t->pthread_u64 || !t->liov || !t->riov ||
        !t->code_buf || !t->heads || !t->raw || !t->ts_buf || !t->thread_spans || !t->codes)
        return -ENOMEM;
    return 0;
}

size_t target__thread_room(struct pyf_target *t, size_t cap)
{
    uint64_t *pthreads;
    struct thread_spans *spans;

    if (cap > THREAD_SPANS_MAX)
        cap = THREAD_SPANS_MAX;
    if (cap <= t->thread_room)
        return cap;
    pthreads = realloc(t->pthread_u64, cap * sizeof(*pthreads));
    if (pthreads)
        t->pthread_u64 = pthreads;
    spans = pthreads ? realloc(t->thread_spans, cap * sizeof(*spans)) : NULL;
    if (!spans)
        return t->thread_room; /* both hold thread_room at least */
    t->thread_spans = spans;
    t->thread_room = cap;
    return cap;
}

/* A read that fails here fails for a reason worth telling: permission, or gone. */
static int check_readable(struct pyf_target *t, struct pyf_err *e)
{
    uint64_t word;
    uint64_t at = t->info.runtime_raddr ? t->info.runtime_raddr : t->tstate_current_raddr;
    int r = remote_read(&t->mem, at, &word, sizeof(word));

    if (r == -EPERM || r == -EACCES)
        return pyf_fail(e, PYF_DENIED, -r, at,
                        "pid %d: cannot read its memory (run as root or as the process's "
                        "owner; the process may also be non-dumpable)",
                        t->info.pid);
    if (r < 0)
        return pyf_fail(e, pyf_read_err_kind(-r), -r, at, "pid %d: read the runtime at 0x%" PRIx64,
                        t->info.pid, at);
    return 0;
}

static int open_procmaps(pid_t pid, struct procmaps *pm, struct pyf_err *e)
{
    int r = procmaps_read(pid, pm);

    if (r == -ENOENT || r == -ESRCH)
        return pyf_fail(e, PYF_GONE, ESRCH, 0, "pid %d does not exist (or has exited)", (int)pid);
    if (r == -EACCES || r == -EPERM)
        return pyf_fail(e, PYF_DENIED, -r, 0,
                        "pid %d: cannot read /proc/%d/maps (run as root or as the process's "
                        "owner)",
                        (int)pid, (int)pid);
    if (r < 0)
        return pyf_fail(e, PYF_INVALID, -r, 0, "pid %d: read /proc/%d/maps", (int)pid, (int)pid);
    return 0;
}

/* Opens the target whose memory @src reads and whose mappings are @pm. */
static int target_open(const struct remote_src *src, const struct procmaps *pm,
                       struct pyf_target **ret_target, struct pyf_err *reterr)
{
    struct runtime_file rf = {0};
    struct pyf_target *t = NULL;
    pid_t pid = src->core ? core__pid(src->core) : src->pid;
    int r = find_runtime_file(src, pm, &rf, reterr);

    if (r < 0)
        goto out;
    t = calloc(1, sizeof(*t));
    if (!t) {
        r = pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "pyf_target");
        goto out;
    }
    t->info.pid = pid;
    t->info.core = src->core != NULL;
    t->mem = *src;
    t->pthread_tid_off = -1;
    if (src->core)
        t->ns = (struct nsmap){.ns_pid = pid}; /* a core's ids are its own: nothing to map */
    else
        nsmap_init(&t->ns, pid);
    snprintf(t->info.runtime_file, sizeof(t->info.runtime_file), "%s", rf.path);
    r = find_addresses(t, &rf, reterr);
    if (r == 0)
        r = check_readable(t, reterr);
    if (r == 0)
        r = find_version(t, &rf, reterr);
    if (r == 0 && PYF_VERSION_MINOR(t->info.version) < 6)
        r = pyf_fail(reterr, PYF_UNSUPPORTED, ENOTSUP, 0,
                     "pid %d runs Python %s; probed reads CPython 3.6 to 3.%u", (int)pid,
                     t->info.version_str, PYF_VERSION_MINOR(layout_newest()->version));
    if (r == 0)
        r = choose_layout(t, reterr);
    if (r < 0)
        goto out;
    finish_addresses(t);
    size_reads(t);
    if (alloc_scratch(t) < 0) {
        r = pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "pid %d: sample buffers", (int)pid);
        goto out;
    }
    *ret_target = t;
    t = NULL;
out:
    if (t)
        t->mem.core = NULL; /* the caller's still */
    pyf_target_free(t);
    elfimg_free(rf.img);
    return r;
}

int pyf_target_open(pid_t pid, struct pyf_target **ret_target, struct pyf_err *reterr)
{
    struct procmaps pm = {0};
    int r;

    if (pid <= 0)
        return pyf_fail(reterr, PYF_INVALID, EINVAL, 0, "invalid pid %d", (int)pid);
    r = open_procmaps(pid, &pm, reterr);
    if (r == 0)
        r = target_open(&(struct remote_src){.pid = pid}, &pm, ret_target, reterr);
    procmaps_free(&pm);
    return r;
}

int pyf_target_open_core(const char *core_path, const char *executable,
                         struct pyf_target **ret_target, struct pyf_err *reterr)
{
    struct pyf_core *core = NULL;
    int r = core_open(core_path, executable, &core, reterr);

    if (r == 0)
        r = target_open(&(struct remote_src){.core = core}, core__maps(core), ret_target, reterr);
    if (r < 0)
        core_free(core);
    return r; /* the target owns the core now */
}

void pyf_target_free(struct pyf_target *t)
{
    if (!t)
        return;
    for (int i = 0; i < STATFD_SLOTS; i++)
        threads__forget_statfd(&t->statfds[i]);
    if (!t->mem.core)
        threads__source_forget(t->info.pid);
    core_free((struct pyf_core *)t->mem.core);
    codecache_free(t->codes);
    nsmap_free(&t->ns);
    free(t->pynames);
    batch_free(&t->batch);
    free(t->guess_u64);
    free(t->scratch_u64);
    free(t->pthread_u64);
    free(t->liov);
    free(t->riov);
    free(t->code_buf);
    free(t->heads);
    free(t->raw);
    free(t->ts_buf);
    free(t->thread_spans);
    free(t->aio.scratch);
    free(t);
}

int target_fail_read(const struct pyf_target *t, struct pyf_err *e, int r, uint64_t raddr,
                     const char *what)
{
    return pyf_fail(e, pyf_read_err_kind(-r), -r, raddr, "pid %d: read %s at 0x%" PRIx64,
                    t->info.pid, what, raddr);
}

int target_read_u64(const struct pyf_target *t, uint64_t raddr, uint64_t *ret_value,
                    struct pyf_err *e, const char *what)
{
    int r;

    if (!remote_plausible(raddr))
        return pyf_fail(e, PYF_TORN, EFAULT, raddr, "pid %d: %s: bad pointer 0x%" PRIx64,
                        t->info.pid, what, raddr);
    r = remote_read_u64(&t->mem, raddr, ret_value);
    return r < 0 ? target_fail_read(t, e, r, raddr, what) : 0;
}

const struct pyf_target_info *pyf_target__info(const struct pyf_target *t)
{
    return &t->info;
}

size_t pyf_target__core_tids(const struct pyf_target *t, pid_t *tids, size_t cap)
{
    return t->mem.core ? core__tids(t->mem.core, tids, cap) : 0;
}

const char *pyf_target__core_command(const struct pyf_target *t)
{
    return t->mem.core ? core__command(t->mem.core) : NULL;
}

int pyf_target__core_signal(const struct pyf_target *t)
{
    return t->mem.core ? core__signal(t->mem.core) : 0;
}

void pyf_thread_name(pid_t pid, pid_t tid, char *buf, size_t size)
{
    char path[64];
    ssize_t n = -1;
    int fd;

    if (size == 0)
        return;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pid, (int)tid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, size - 1);
        close(fd);
    }
    if (n < 0)
        n = 0;
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    pyf_utf8_scrub(buf, size); /* prctl(PR_SET_NAME) takes any bytes */
}
