/* core.c - see core.h. The core's layout is the kernel's ELF core format (fs/binfmt_elf.c):
 * PT_LOAD segments of memory, and notes (NT_PRSTATUS per thread, NT_PRPSINFO, NT_AUXV,
 * NT_FILE: the file mappings). Everything in it is checked before use: a core is input. */
#define _GNU_SOURCE
#include "core.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/procfs.h>
#include <unistd.h>

#include "err.h"

#define CORE_THREADS_MAX 65536
#define CORE_FILES_MAX 4096 /* distinct mapped files opened */
#ifndef NT_FILE
#define NT_FILE 0x46494c45
#endif

struct core_seg {
    uint64_t vaddr, memsz, filesz, offset;
};

struct core_fmap {
    uint64_t start, end, offset; /* offset in bytes */
    int file;                    /* index in files, or -1 */
};

struct core_file {
    char *path;  /* as the core names it */
    char *local; /* where it is read here */
    int fd;      /* -1: not found here */
};

struct pyf_core {
    char *path;
    int fd;
    struct core_seg *segs;
    size_t n_segs;
    struct core_fmap *fmaps;
    size_t n_fmaps;
    struct core_file *files;
    size_t n_files;
    struct procmaps maps;
    pid_t pid;
    int signal;
    char command[96];
    const char *exe; /* a files[].path, or "" */
    pid_t *tids;
    size_t n_tids;
    uint64_t at_phdr; /* NT_AUXV: where the main program's program headers are */
};

static int by_vaddr(const void *a, const void *b)
{
    const struct core_seg *x = a, *y = b;
    return x->vaddr < y->vaddr ? -1 : x->vaddr > y->vaddr;
}

static int by_start(const void *a, const void *b)
{
    const struct core_fmap *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int file_index(struct pyf_core *c, const char *path, size_t len)
{
    for (size_t i = 0; i < c->n_files; i++)
        if (strlen(c->files[i].path) == len && memcmp(c->files[i].path, path, len) == 0)
            return (int)i;
    if (c->n_files == CORE_FILES_MAX)
        return -1;
    c->files[c->n_files] = (struct core_file){.path = strndup(path, len), .fd = -1};
    if (!c->files[c->n_files].path)
        return -1;
    return (int)c->n_files++;
}

/* NT_FILE: count, page size, count x (start, end, page offset), then the names. */
static int parse_files(struct pyf_core *c, const uint8_t *d, size_t size)
{
    uint64_t count, page;
    const char *names;
    size_t names_len;

    if (size < 16)
        return -EINVAL;
    memcpy(&count, d, 8);
    memcpy(&page, d + 8, 8);
    if (count > (size - 16) / 24 || page == 0 || page > (1u << 30))
        return -EINVAL;
    names = (const char *)d + 16 + count * 24;
    names_len = size - 16 - count * 24;
    c->fmaps = calloc(count ? count : 1, sizeof(*c->fmaps));
    c->files = calloc(CORE_FILES_MAX, sizeof(*c->files));
    c->maps.maps = calloc(count ? count : 1, sizeof(*c->maps.maps));
    if (!c->fmaps || !c->files || !c->maps.maps)
        return -ENOMEM;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t e[3];
        const char *nul = memchr(names, '\0', names_len);
        size_t len = nul ? (size_t)(nul - names) : 0;
        const char *del = " (deleted)";

        if (!nul)
            return -EINVAL;
        memcpy(e, d + 16 + i * 24, sizeof(e));
        if (e[1] <= e[0] || e[2] > UINT64_MAX / page)
            return -EINVAL;
        if (len > strlen(del) && strcmp(names + len - strlen(del), del) == 0)
            len -= strlen(del);
        c->fmaps[c->n_fmaps] = (struct core_fmap){
            .start = e[0], .end = e[1], .offset = e[2] * page, .file = file_index(c, names, len)};
        if (c->fmaps[c->n_fmaps].file < 0)
            return -ENOMEM;
        c->maps.maps[c->maps.n++] =
            (struct procmap){.start = e[0],
                             .end = e[1],
                             .offset = e[2] * page,
                             .perms = "r--p",
                             .path = c->files[c->fmaps[c->n_fmaps].file].path};
        c->n_fmaps++;
        names_len -= (size_t)(nul + 1 - names);
        names = nul + 1;
    }
    qsort(c->fmaps, c->n_fmaps, sizeof(*c->fmaps), by_start);
    return 0;
}

static void parse_auxv(struct pyf_core *c, const uint8_t *d, size_t size)
{
    for (size_t off = 0; off + 16 <= size; off += 16) {
        uint64_t kv[2];
        memcpy(kv, d + off, sizeof(kv));
        if (kv[0] == AT_PHDR)
            c->at_phdr = kv[1];
    }
}

static int parse_note(struct pyf_core *c, const GElf_Nhdr *nh, const char *name,
                      const uint8_t *desc)
{
    if (!name || nh->n_namesz != 5 || memcmp(name, "CORE", 5) != 0)
        return 0;
    if (nh->n_type == NT_PRSTATUS && nh->n_descsz >= sizeof(struct elf_prstatus) &&
        c->n_tids < CORE_THREADS_MAX) {
        struct elf_prstatus ps;
        memcpy(&ps, desc, sizeof(ps));
        if (c->n_tids == 0)
            c->signal = ps.pr_cursig;
        c->tids[c->n_tids++] = ps.pr_pid;
    } else if (nh->n_type == NT_PRPSINFO && nh->n_descsz >= sizeof(struct elf_prpsinfo)) {
        struct elf_prpsinfo pi;
        memcpy(&pi, desc, sizeof(pi));
        c->pid = pi.pr_pid;
        snprintf(c->command, sizeof(c->command), "%.*s", (int)sizeof(pi.pr_psargs), pi.pr_psargs);
    } else if (nh->n_type == NT_AUXV) {
        parse_auxv(c, desc, nh->n_descsz);
    } else if (nh->n_type == NT_FILE && !c->fmaps) {
        return parse_files(c, desc, nh->n_descsz);
    }
    return 0;
}

static int parse(struct pyf_core *c, Elf *elf, struct pyf_err *e)
{
    GElf_Ehdr eh;
    size_t n_ph;

    if (elf_kind(elf) != ELF_K_ELF)
        return pyf_fail(e, PYF_INVALID, ENOEXEC, 0, "%s is not an ELF file", c->path);
    if (!gelf_getehdr(elf, &eh) || eh.e_type != ET_CORE)
        return pyf_fail(e, PYF_INVALID, ENOEXEC, 0, "%s is not a core file (ELF type core)",
                        c->path);
    if (gelf_getclass(elf) != ELFCLASS64 || eh.e_machine != EM_X86_64)
        return pyf_fail(e, PYF_UNSUPPORTED, ENOTSUP, 0,
                        "%s is a core of another architecture (machine %u): probed reads "
                        "x86-64 cores",
                        c->path, (unsigned)eh.e_machine);
    if (elf_getphdrnum(elf, &n_ph) < 0)
        return pyf_fail(e, PYF_INVALID, ENOEXEC, 0, "%s: %s", c->path, elf_errmsg(-1));
    c->segs = calloc(n_ph ? n_ph : 1, sizeof(*c->segs));
    c->tids = calloc(CORE_THREADS_MAX, sizeof(*c->tids));
    if (!c->segs || !c->tids)
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "%s: out of memory", c->path);
    for (size_t i = 0; i < n_ph; i++) {
        GElf_Phdr ph;
        Elf_Data *d;
        size_t off = 0, name_off, desc_off;
        GElf_Nhdr nh;

        if (!gelf_getphdr(elf, (int)i, &ph))
            continue;
        if (ph.p_type == PT_LOAD && ph.p_memsz > 0)
            c->segs[c->n_segs++] = (struct core_seg){.vaddr = ph.p_vaddr,
                                                     .memsz = ph.p_memsz,
                                                     .filesz = ph.p_filesz,
                                                     .offset = ph.p_offset};
        if (ph.p_type != PT_NOTE ||
            !(d = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_NHDR)))
            continue;
        while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0)
            if (parse_note(c, &nh, (const char *)d->d_buf + name_off,
                           (const uint8_t *)d->d_buf + desc_off) < 0)
                return pyf_fail(e, PYF_INVALID, ENOEXEC, 0, "%s: a malformed NT_FILE note",
                                c->path);
    }
    qsort(c->segs, c->n_segs, sizeof(*c->segs), by_vaddr);
    if (!c->fmaps || c->n_tids == 0)
        return pyf_fail(e, PYF_INVALID, ENOEXEC, 0,
                        "%s: a core without %s (truncated, or not made by Linux or gcore)", c->path,
                        !c->fmaps ? "the list of mapped files (NT_FILE)" : "threads");
    return 0;
}

static const struct core_fmap *fmap_at(const struct pyf_core *c, uint64_t a)
{
    size_t lo = 0, hi = c->n_fmaps;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->fmaps[mid].end <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->n_fmaps && c->fmaps[lo].start <= a ? &c->fmaps[lo] : NULL;
}

static const struct core_seg *seg_at(const struct pyf_core *c, uint64_t a)
{
    size_t lo = 0, hi = c->n_segs;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->segs[mid].vaddr + c->segs[mid].memsz <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->n_segs && c->segs[lo].vaddr <= a ? &c->segs[lo] : NULL;
}

/* Opens each mapped file here; the main program (AT_PHDR's mapping) is @executable if given. */
static void open_files(struct pyf_core *c, const char *executable)
{
    const struct core_fmap *m = c->at_phdr ? fmap_at(c, c->at_phdr) : NULL;

    c->exe = m && m->file >= 0 ? c->files[m->file].path : "";
    for (size_t i = 0; i < c->n_files; i++) {
        struct core_file *f = &c->files[i];
        f->local = strdup(executable && f->path == c->exe ? executable : f->path);
        f->fd = f->local && f->local[0] == '/' ? open(f->local, O_RDONLY | O_CLOEXEC) : -1;
    }
}

int core_open(const char *path, const char *executable, struct pyf_core **ret, struct pyf_err *e)
{
    struct pyf_core *c = calloc(1, sizeof(*c));
    Elf *elf = NULL;
    int r;

    if (!c || !(c->path = strdup(path))) {
        free(c);
        return pyf_fail(e, PYF_INVALID, ENOMEM, 0, "out of memory");
    }
    c->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0) {
        r = errno;
        core_free(c);
        return pyf_fail(e, r == EACCES || r == EPERM ? PYF_DENIED : PYF_INVALID, r, 0,
                        "cannot open the core %s", path);
    }
    elf_version(EV_CURRENT);
    elf = elf_begin(c->fd, ELF_C_READ_MMAP, NULL);
    r = elf ? parse(c, elf, e)
            : pyf_fail(e, PYF_INVALID, ENOEXEC, 0, "%s is not an ELF file (%s)", path,
                       elf_errmsg(-1));
    if (elf)
        elf_end(elf);
    if (r < 0) {
        core_free(c);
        return r;
    }
    if (executable && access(executable, R_OK) < 0) {
        r = errno;
        core_free(c);
        return pyf_fail(e, PYF_INVALID, r, 0, "--executable %s", executable);
    }
    open_files(c, executable);
    if (c->pid <= 0)
        c->pid = c->tids[0];
    *ret = c;
    return 0;
}

void core_free(struct pyf_core *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_files; i++) {
        if (c->files[i].fd >= 0)
            close(c->files[i].fd);
        free(c->files[i].path);
        free(c->files[i].local);
    }
    if (c->fd >= 0)
        close(c->fd);
    free(c->files);
    free(c->fmaps);
    free(c->maps.maps); /* its paths are the files' */
    free(c->segs);
    free(c->tids);
    free(c->path);
    free(c);
}

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n <= 0)
            return -EFAULT;
        got += (size_t)n;
    }
    return 0;
}

static int read_range(const struct pyf_core *c, uint64_t a, uint8_t *out, size_t len)
{
    while (len > 0) {
        const struct core_seg *s = seg_at(c, a);
        const struct core_fmap *m;
        size_t chunk;

        if (s && a < s->vaddr + s->filesz) { /* in the core */
            chunk = s->vaddr + s->filesz - a < len ? (size_t)(s->vaddr + s->filesz - a) : len;
            if (pread_all(c->fd, out, chunk, s->offset + (a - s->vaddr)) < 0)
                return -EFAULT;
        } else { /* left out of it: a mapped file's page that was never written */
            m = fmap_at(c, a);
            if (!m || m->file < 0 || c->files[m->file].fd < 0)
                return -EFAULT;
            chunk = m->end - a < len ? (size_t)(m->end - a) : len;
            if (s && s->vaddr + s->memsz - a < chunk)
                chunk = (size_t)(s->vaddr + s->memsz - a);
            if (pread_all(c->files[m->file].fd, out, chunk, m->offset + (a - m->start)) < 0)
                return -EFAULT;
        }
        a += chunk;
        out += chunk;
        len -= chunk;
    }
    return 0;
}

int core_readv(const struct pyf_core *c, const struct iovec *local, const struct iovec *remote,
               size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (read_range(c, (uint64_t)(uintptr_t)remote[i].iov_base, local[i].iov_base,
                       remote[i].iov_len) < 0)
            return -EFAULT;
    return 0;
}

pid_t core__pid(const struct pyf_core *c)
{
    return c->pid;
}

const char *core__command(const struct pyf_core *c)
{
    return c->command;
}

const char *core__executable(const struct pyf_core *c)
{
    return c->exe;
}

int core__signal(const struct pyf_core *c)
{
    return c->signal;
}

size_t core__tids(const struct pyf_core *c, pid_t *tids, size_t cap)
{
    size_t n = c->n_tids < cap ? c->n_tids : cap;

    memcpy(tids, c->tids, n * sizeof(*tids));
    return n;
}

const struct procmaps *core__maps(const struct pyf_core *c)
{
    return &c->maps;
}

const char *core__path(const struct pyf_core *c)
{
    return c->path;
}

const char *core__local_path(const struct pyf_core *c, const char *path)
{
    for (size_t i = 0; i < c->n_files; i++)
        if (strcmp(c->files[i].path, path) == 0)
            return c->files[i].local;
    return path;
}
