/* nccl.c - see nccl.h. */
#define _GNU_SOURCE
#include "gpu/nccl.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "common/procfs.h"
#include "pyframes.h"

#ifdef PROBED_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ncclcalls.h"
#include "ncclcalls.skel.h"

#define PROCS_MAX 1024 /* processes watched (the registry's targets are fewer) */

/* Each entry point and the function its probe's cookie names. A symbol the library lacks (an
 * older NCCL) is skipped; a library with none of the calls' is not NCCL's. ncclBcast is not
 * probed: NCCL's calls ncclBroadcast, whose probe sees it (a probe on both counts it twice);
 * NCCL's plain calls and their Config variants share an inner function, never calling one
 * another. */
static const struct probe {
    const char *func;
    enum nccl_fn fn;
} PROBES[] = {
    {"ncclAllReduce", NCCL_FN_ALL_REDUCE},
    {"ncclBroadcast", NCCL_FN_BROADCAST},
    {"ncclReduce", NCCL_FN_REDUCE},
    {"ncclAllGather", NCCL_FN_ALL_GATHER},
    {"ncclReduceScatter", NCCL_FN_REDUCE_SCATTER},
    {"ncclSend", NCCL_FN_SEND},
    {"ncclRecv", NCCL_FN_RECV},
    {"ncclAlltoAll", NCCL_FN_ALL_TO_ALL},
    {"ncclGather", NCCL_FN_GATHER},
    {"ncclScatter", NCCL_FN_SCATTER},
    /* the per-call config variants (NCCLs after 2.28, ncclCollConfig_t): the same arguments, then
       the config */
    {"ncclAllReduceConfig", NCCL_FN_ALL_REDUCE},
    {"ncclBroadcastConfig", NCCL_FN_BROADCAST},
    {"ncclReduceConfig", NCCL_FN_REDUCE},
    {"ncclAllGatherConfig", NCCL_FN_ALL_GATHER},
    {"ncclReduceScatterConfig", NCCL_FN_REDUCE_SCATTER},
    {"ncclAlltoAllConfig", NCCL_FN_ALL_TO_ALL},
    {"ncclGatherConfig", NCCL_FN_GATHER},
    {"ncclScatterConfig", NCCL_FN_SCATTER},
    {"ncclCommInitRank", NCCL_FN_INIT_RANK},
    {"ncclCommInitRankConfig", NCCL_FN_INIT_RANK},
    {"ncclCommInitRankScalable", NCCL_FN_INIT_SCALABLE},
    {"ncclCommSplit", NCCL_FN_SPLIT},
    {"ncclCommShrink", NCCL_FN_SHRINK},
    {"ncclCommInitAll", NCCL_FN_INIT_ALL},
    {"ncclCommDestroy", NCCL_FN_COMM_END},
    {"ncclCommAbort", NCCL_FN_COMM_END},
};
#define N_PROBES (sizeof(PROBES) / sizeof(PROBES[0]))

/* A communicator's making: its return is probed too (the new handle is written then). */
static bool makes_comm(enum nccl_fn fn)
{
    return fn == NCCL_FN_INIT_RANK || fn == NCCL_FN_INIT_SCALABLE || fn == NCCL_FN_SPLIT ||
           fn == NCCL_FN_SHRINK || fn == NCCL_FN_INIT_ALL;
}

static const char *const OPS[NCCL_OP_N] = {"all_reduce",     "broadcast", "reduce", "all_gather",
                                           "reduce_scatter", "send",      "recv",   "all_to_all",
                                           "gather",         "scatter"};

/* ncclDataType_t: torch's name and its size in bytes */
static const struct {
    const char *name;
    int size;
} DTYPES[] = {{"int8", 1},    {"uint8", 1},    {"int32", 4},         {"uint32", 4},
              {"int64", 8},   {"uint64", 8},   {"float16", 2},       {"float32", 4},
              {"float64", 8}, {"bfloat16", 2}, {"float8_e4m3fn", 1}, {"float8_e5m2", 1}};
#define N_DTYPES (sizeof(DTYPES) / sizeof(DTYPES[0]))

/* A file: the device and inode /proc/PID/maps names it by. */
struct file_id {
    unsigned long long inode;
    unsigned dev_major, dev_minor;
};

/* A file a process maps whole from offset 0 that may hold NCCL's calls. */
struct mapped {
    char path[PATH_MAX]; /* as the maps name it */
    unsigned long long start, end;
    struct file_id id;
    int kind; /* library_kind() */
};

#define LIBRARIES_MAX 8 /* files a process maps that may hold NCCL's calls */

struct proc {
    struct nccl_target t;
    struct bpf_link *links[2 * N_PROBES]; /* perf-event probes, where there is no uprobe_multi */
    size_t n_links;
    int multi[2];      /* else the uprobe_multi links' descriptors: entries, returns; -1 none */
    size_t n_probes;   /* attached; 0: not watched */
    char library[256]; /* the mapped file's path, "" none found */
    struct file_id without[LIBRARIES_MAX]; /* torch libraries found without NCCL (or closed) */
    size_t n_without;
    int64_t next_look_ns;
    bool given; /* in this pass's targets */
};

struct nccl_watch {
    struct ncclcalls_bpf *skel;
    struct ring_buffer *rb;
    struct proc *procs;
    size_t n;
    int64_t real_minus_mono; /* at this drain */
    nccl_call_fn fn;         /* this drain's */
    void *ctx;
    size_t drained;
    uint64_t calls, unknown;
    bool multi; /* the kernel has uprobe_multi links (entry_multi, made_return_multi loaded) */
};

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    (void)level, (void)fmt, (void)ap;
    return 0;
}

/* Gives back @n of @uid's share of the communicators table (per_uid), through the program's
 * give_back: atomically against the probes' increments (another process of that user making
 * communicators at that instant). */
static void give_back_share(struct nccl_watch *w, uint32_t uid, uint32_t n)
{
    struct nccl_give_back a = {.uid = uid, .n = n};
    LIBBPF_OPTS(bpf_test_run_opts, run, .ctx_in = &a, .ctx_size_in = sizeof(a));

    if (n && bpf_prog_test_run_opts(bpf_program__fd(w->skel->progs.give_back), &run) < 0)
        log_msg(LOG_WARN, "nccl: giving back %u communicators of uid %u's share: %s", n, uid,
                strerror(errno));
}

/* Deletes @pid's communicators and makings in progress from the program's maps, so those of
 * ended processes never fill them (their keys hold the pid), and gives back their user's
 * share. The keys are gathered first: a hash map's walk restarts when the key it stands on is
 * deleted. */
static void forget_pid(struct nccl_watch *w, pid_t pid)
{
    int comms = bpf_map__fd(w->skel->maps.comms), pending = bpf_map__fd(w->skel->maps.pending);
    struct nccl_comm_key *keys = calloc(NCCL_COMMS_MAX, sizeof(*keys)), k;
    __u64 *tids = calloc(NCCL_PENDING_MAX, sizeof(*tids)), t;
    size_t n = 0, nt = 0;
    uint32_t uid = 0, given = 0;
    void *at = NULL;

    while (keys && n < NCCL_COMMS_MAX && bpf_map_get_next_key(comms, at, &k) == 0) {
        if (k.pid == (__u32)pid)
            keys[n++] = k;
        at = &k;
    }
    for (size_t i = 0; i < n; i++) { /* a process's are all one user's: given back at once */
        struct nccl_comm c;
        if (bpf_map_lookup_elem(comms, &keys[i], &c) == 0 &&
            bpf_map_delete_elem(comms, &keys[i]) == 0) {
            if (given && c.uid != uid) {
                give_back_share(w, uid, given);
                given = 0;
            }
            uid = c.uid;
            given++;
        }
    }
    give_back_share(w, uid, given);
    at = NULL;
    while (tids && nt < NCCL_PENDING_MAX && bpf_map_get_next_key(pending, at, &t) == 0) {
        if ((pid_t)(t >> 32) == pid)
            tids[nt++] = t;
        at = &t;
    }
    for (size_t i = 0; i < nt; i++)
        bpf_map_delete_elem(pending, &tids[i]);
    bpf_map_delete_elem(bpf_map__fd(w->skel->maps.per_pid), &(__u32){(__u32)pid});
    free(keys);
    free(tids);
}

static void unwatch(struct nccl_watch *w, struct proc *p)
{
    for (size_t i = 0; i < p->n_links; i++)
        bpf_link__destroy(p->links[i]);
    for (int i = 0; i < 2; i++)
        if (p->multi[i] >= 0)
            close(p->multi[i]);
    if (p->n_probes)
        forget_pid(w, p->t.pid);
    p->n_links = 0;
    p->multi[0] = p->multi[1] = -1;
    p->n_probes = 0;
}

/* Where a process has NCCL's API: a library of its own (libnccl.so*, or ROCm's RCCL,
 * librccl.so*, which exports the same calls with the same arguments), else linked into one of
 * torch's (conda's builds and the pytorch/pytorch images link NCCL statically into
 * libtorch_cuda.so, which exports its calls: the dynamic symbols resolve() reads). 0 a library
 * of its own, 1 a torch library that may hold it, -1 neither. */
static int library_kind(const char *base)
{
    if (strncmp(base, "libnccl.so", 10) == 0 || strncmp(base, "librccl.so", 10) == 0)
        return 0;
    if (strncmp(base, "libtorch", 8) == 0 && strstr(base, ".so"))
        return 1;
    return -1;
}

static bool same_file(const struct file_id *a, const struct file_id *b)
{
    return a->inode == b->inode && a->dev_major == b->dev_major && a->dev_minor == b->dev_minor;
}

/* The files @p maps that may hold NCCL's calls, its own libraries before torch's: how many
 * (at most @max), or -errno with @err. */
static int mapped_libraries(struct proc *p, struct mapped *out, int max, struct errbuf *err)
{
    char name[64], *line = NULL;
    size_t cap = 0;
    int n = 0;
    FILE *f;

    snprintf(name, sizeof(name), "/proc/%d/maps", (int)p->t.pid);
    if (!(f = fopen(name, "re")))
        return errbuf_set(err, -errno, "%s: %s", name, strerror(errno));
    while (getline(&line, &cap, f) > 0) {
        struct mapped m = {0};
        unsigned long long offset;
        const char *base;
        bool seen = false;
        int at = 0;

        if (sscanf(line, "%llx-%llx %*4s %llx %x:%x %llu %n", &m.start, &m.end, &offset,
                   &m.id.dev_major, &m.id.dev_minor, &m.id.inode, &at) != 6 ||
            at == 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        base = strrchr(line + at, '/');
        if (offset != 0 || line[at] != '/' || !base || (m.kind = library_kind(base + 1)) < 0 ||
            strlen(line + at) >= sizeof(m.path))
            continue;
        for (int i = 0; i < n; i++) /* a file is mapped from offset 0 once, but be sure */
            seen |= same_file(&out[i].id, &m.id);
        if (seen)
            continue;
        memcpy(m.path, line + at, strlen(line + at) + 1);
        /* its own libraries first: where a process has both, the calls go there; when full, a
           library of its own takes the place of the last torch one */
        if (n == max && out[n - 1].kind <= m.kind)
            continue;
        int i = n < max ? n++ : n - 1;
        while (i > 0 && out[i - 1].kind > m.kind) {
            out[i] = out[i - 1];
            i--;
        }
        out[i] = m;
    }
    free(line);
    fclose(f);
    return n;
}

/* Opens the file @m that @p maps: the very file it runs, through its map_files link where the
 * daemon may follow those (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE: not the packaged unit's),
 * else by its path in the process's mount namespace, taken only while that is still the inode
 * mapped (a library replaced or deleted since is then not probed: its path names another
 * file). The probes go on the file opened, through /proc/self/fd/N: no path is looked up
 * twice. -errno with @err, or the fd. */
static int open_mapped(struct proc *p, const struct mapped *m, struct errbuf *err)
{
    char name[PATH_MAX + 64];
    struct stat st;
    int fd;

    /* looked up without opening (O_PATH): no device or FIFO a user put at the name is opened */
    snprintf(name, sizeof(name), "/proc/%d/map_files/%llx-%llx", (int)p->t.pid, m->start, m->end);
    fd = pyf_open_regular(open(name, O_PATH | O_CLOEXEC));
    if (fd < 0 && (errno == EPERM || errno == EACCES)) {
        size_t len = strlen(m->path);
        /* a file deleted since is named with this suffix; its path may name another now */
        if (len > 10 && strcmp(m->path + len - 10, " (deleted)") == 0)
            len -= 10;
        snprintf(name, sizeof(name), "%.*s", (int)len, m->path);
        fd = pyf_open_in_root(p->t.pid, name);
        if (fd >= 0 && (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != m->id.inode)) {
            close(fd);
            return errbuf_set(err, -ESTALE,
                              "%s is not the file it maps (replaced or deleted since; its "
                              "map_files need CAP_CHECKPOINT_RESTORE)",
                              m->path);
        }
    }
    if (fd < 0)
        return errbuf_set(err, -errno, "opening %s: %s", m->path, strerror(errno));
    return fd;
}

/* The file offset of link-time address @vaddr, in an executable segment: where the kernel
 * places a uprobe. */
static bool code_offset(Elf *elf, uint64_t vaddr, uint64_t *ret)
{
    size_t n;

    if (elf_getphdrnum(elf, &n) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) &&
            vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_filesz) {
            *ret = vaddr - ph.p_vaddr + ph.p_offset;
            return true;
        }
    }
    return false;
}

/* endbr64: CET's landing pad, the first instruction of each function of a library built with
 * -fcf-protection (the default of Debian 13's, Ubuntu's and Fedora's compilers). The kernel
 * steps it out of line (two traps: +9.7 us a call here, bench/nccl.py) where it emulates the
 * push that follows in a function that calls others, as NCCL's entry points do (+1.1 us). It
 * changes no register and not the stack, so a probe past it reads the same arguments, and a
 * return probe the same return address. */
static const unsigned char ENDBR64[4] = {0xf3, 0x0f, 0x1e, 0xfa};

/* Each entry point's file offset (0: the library lacks it) in @offs, from the dynamic symbols
 * (the exported API; a weak definition counts) of the library open at @fd, past an endbr64
 * (*past counts those). The file is the target's: every name is bounds-checked by libelf, and
 * every address must fall in code. How many were found. */
static size_t resolve(int fd, uint64_t offs[N_PROBES], size_t *past)
{
    Elf_Scn *scn = NULL;
    size_t found = 0;
    Elf *elf;

    memset(offs, 0, N_PROBES * sizeof(*offs));
    *past = 0;
    if (elf_version(EV_CURRENT) == EV_NONE || !(elf = elf_begin(fd, ELF_C_READ_MMAP, NULL)))
        return 0;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        Elf_Data *data;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || sh.sh_entsize == 0 ||
            !(data = elf_getdata(scn, NULL)))
            continue;
        for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym sym;
            const char *name;
            if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
                GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value == 0 ||
                !(name = elf_strptr(elf, sh.sh_link, sym.st_name)) || strncmp(name, "nccl", 4))
                continue;
            for (size_t k = 0; k < N_PROBES; k++)
                if (!offs[k] && strcmp(name, PROBES[k].func) == 0 &&
                    code_offset(elf, sym.st_value, &offs[k])) {
                    unsigned char first[sizeof(ENDBR64)];
                    if (pread(fd, first, sizeof(first), (off_t)offs[k]) == sizeof(first) &&
                        memcmp(first, ENDBR64, sizeof(first)) == 0) {
                        offs[k] += sizeof(ENDBR64);
                        (*past)++;
                    }
                    found++;
                }
        }
    }
    elf_end(elf);
    return found;
}

/* BPF_LINK_CREATE of a uprobe_multi link (kernel 6.6+), its attribute laid out as the kernel's
 * union bpf_attr has it: libbpf 1.1 (Debian 12's) predates the link. One link holds all of a
 * process's entry probes (or return probes), and its removal waits for one grace period where
 * a perf-event probe each waits for its own. */
struct uprobe_multi_attr {
    uint32_t prog_fd, target_fd, attach_type, flags;
    uint64_t path, offsets, ref_ctr_offsets, cookies;
    uint32_t cnt, multi_flags, pid;
};
#define ATTACH_UPROBE_MULTI 48 /* BPF_TRACE_UPROBE_MULTI */
#define UPROBE_MULTI_RETURN 1u /* BPF_F_UPROBE_MULTI_RETURN */

static int uprobe_multi(int prog_fd, const char *path, const uint64_t *offs,
                        const uint64_t *cookies, uint32_t n, uint32_t flags, uint32_t pid)
{
    struct uprobe_multi_attr a = {.prog_fd = (uint32_t)prog_fd,
                                  .attach_type = ATTACH_UPROBE_MULTI,
                                  .path = (uint64_t)(uintptr_t)path,
                                  .offsets = (uint64_t)(uintptr_t)offs,
                                  .cookies = (uint64_t)(uintptr_t)cookies,
                                  .cnt = n,
                                  .multi_flags = flags,
                                  .pid = pid};
    int fd = (int)syscall(__NR_bpf, BPF_LINK_CREATE, &a, sizeof(a));

    return fd < 0 ? -errno : fd;
}

/* Whether the kernel has uprobe_multi links that filter by process: libbpf 1.2+'s test. A
 * link into "/" (a directory) fails with EBADF where the link exists; with pid -1 it fails
 * with EINVAL only where the pid filter is the process's (6.6 to 6.8 filtered by thread, and
 * would miss the calls of every thread but the main one: DDP's Reducer issues its buckets'
 * from autograd's). PROBED_UPROBE_MULTI=0 in the daemon's environment says no (the tests try
 * the perf-event probes so). */
static bool kernel_has_uprobe_multi(void)
{
    const struct bpf_insn ret0[] = {{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0},
                                    {.code = BPF_JMP | BPF_EXIT}};
    LIBBPF_OPTS(bpf_prog_load_opts, opts,
                .expected_attach_type = (enum bpf_attach_type)ATTACH_UPROBE_MULTI);
    const char *env = getenv("PROBED_UPROBE_MULTI");
    uint64_t off = 0;
    int prog, r1, r2;

    if (env && strcmp(env, "0") == 0)
        return false;
    prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, NULL, "GPL", ret0, 2, &opts);
    if (prog < 0)
        return false;
    r1 = uprobe_multi(prog, "/", &off, NULL, 1, 0, 0);
    r2 = r1 == -EBADF ? uprobe_multi(prog, "/", &off, NULL, 1, 0, (uint32_t)-1) : 0;
    if (r1 >= 0)
        close(r1);
    if (r2 >= 0)
        close(r2);
    close(prog);
    return r1 == -EBADF && r2 == -EINVAL;
}

/* Attaches the probes at @offs to @p's library (@link): two uprobe_multi links, else a
 * perf-event probe each. 0, or -errno (with what was attached left for unwatch()). */
static int attach(struct nccl_watch *w, struct proc *p, const char *link,
                  const uint64_t offs[N_PROBES])
{
    uint64_t at[2][N_PROBES], cookie[2][N_PROBES];
    uint32_t n[2] = {0, 0};
    int err = 0;

    for (size_t k = 0; k < N_PROBES; k++) { /* a symbol twice (aliased): probed once */
        bool dup = false;
        for (size_t j = 0; j < k; j++)
            dup |= offs[j] == offs[k];
        if (!offs[k] || dup)
            continue;
        for (int ret = 0; ret < 1 + makes_comm(PROBES[k].fn); ret++) {
            at[ret][n[ret]] = offs[k];
            cookie[ret][n[ret]++] = PROBES[k].fn;
        }
    }
    if (w->multi) {
        int entry = bpf_program__fd(w->skel->progs.entry_multi);
        int made = bpf_program__fd(w->skel->progs.made_return_multi);
        for (int ret = 0; ret < 2 && n[ret] && !err; ret++) {
            int fd = uprobe_multi(ret ? made : entry, link, at[ret], cookie[ret], n[ret],
                                  ret ? UPROBE_MULTI_RETURN : 0, (uint32_t)p->t.pid);
            if (fd < 0)
                err = fd;
            else
                p->multi[ret] = fd, p->n_probes += n[ret];
        }
        return err;
    }
    for (int ret = 0; ret < 2; ret++)
        for (uint32_t i = 0; i < n[ret] && !err; i++) {
            LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie[ret][i], .retprobe = ret);
            struct bpf_link *l = bpf_program__attach_uprobe_opts(
                ret ? w->skel->progs.made_return : w->skel->progs.entry, p->t.pid, link,
                (size_t)at[ret][i], &opts);
            if (!l)
                err = -errno;
            else
                p->links[p->n_links++] = l, p->n_probes++;
        }
    return err;
}

/* Whether @m is a torch library @p's looks have found without NCCL, or could not open. */
static bool known_without(const struct proc *p, const struct mapped *m)
{
    for (size_t i = 0; i < p->n_without; i++)
        if (same_file(&p->without[i], &m->id))
            return true;
    return false;
}

/* Attaches the probes to the first library @p maps that exports NCCL's calls, if it is still
 * the process given. A torch library without them (libtorch_cpu.so, or libtorch_cuda.so of
 * builds that load libnccl) is remembered and never read again for this process. */
static void look(struct nccl_watch *w, struct proc *p)
{
    struct mapped libs[LIBRARIES_MAX];
    uint64_t offs[N_PROBES];
    size_t past = 0;
    char link[32];
    int64_t start = 0;
    struct errbuf e = {{0}};
    int fd = -1, n, err;

    p->next_look_ns = mono_ns() + NCCL_RESCAN_NS;
    if (procfs_start_time(p->t.pid, &start) < 0 || start != p->t.start_time)
        return;
    if ((n = mapped_libraries(p, libs, LIBRARIES_MAX, &e)) < 0) {
        log_msg(LOG_WARN, "NCCL calls of pid %d: %s", (int)p->t.pid, e.msg);
        return;
    }
    for (int i = 0; i < n && fd < 0; i++) {
        size_t calls = 0;

        if (libs[i].kind == 1 && known_without(p, &libs[i]))
            continue;
        if ((fd = open_mapped(p, &libs[i], &e)) < 0) {
            /* say why it is not probed: each look for a library of NCCL's, once for a torch
               one (most hold no NCCL: an upgraded environment would say so every 5 s) */
            log_msg(LOG_WARN, "NCCL calls of pid %d: %s", (int)p->t.pid, e.msg);
            if (libs[i].kind == 1 && p->n_without < LIBRARIES_MAX)
                p->without[p->n_without++] = libs[i].id;
            continue;
        }
        resolve(fd, offs, &past);
        for (size_t k = 0; k < N_PROBES; k++)
            calls += offs[k] && PROBES[k].fn < NCCL_FN_CALLS;
        if (libs[i].kind == 0 || calls)
            snprintf(p->library, sizeof(p->library), "%.*s", (int)sizeof(p->library) - 1,
                     libs[i].path); /* shown only: a longer path is cut */
        if (calls == 0) {
            if (libs[i].kind == 0)
                log_msg(LOG_WARN, "NCCL calls of pid %d: %s exports none of NCCL's calls",
                        (int)p->t.pid, libs[i].path);
            else if (p->n_without < LIBRARIES_MAX)
                p->without[p->n_without++] = libs[i].id;
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0)
        return;
    /* the file opened, for the kernel: it takes its inode (uprobes hold it) as it links */
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    err = attach(w, p, link, offs);
    close(fd);
    /* the pid may have been reused meanwhile: then the probes are another process's */
    if (err < 0 || procfs_start_time(p->t.pid, &start) < 0 || start != p->t.start_time) {
        if (err < 0)
            log_msg(LOG_WARN, "NCCL calls of pid %d: attaching the probes to %s: %s", (int)p->t.pid,
                    p->library, strerror(-err));
        unwatch(w, p);
        return;
    }
    log_msg(LOG_INFO, "NCCL calls of pid %d: %zu probes on %s (%s%s)", (int)p->t.pid, p->n_probes,
            p->library, w->multi ? "uprobe_multi" : "perf events",
            past ? ", past CET's endbr64" : "");
}

void nccl__watch(struct nccl_watch *w, const struct nccl_target *targets, size_t n)
{
    int64_t now = mono_ns();

    for (size_t k = 0; k < w->n; k++)
        w->procs[k].given = false;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < w->n && !(w->procs[k].t.pid == targets[i].pid &&
                             w->procs[k].t.start_time == targets[i].start_time))
            k++;
        if (k == w->n) {
            if (w->n == PROCS_MAX)
                continue;
            w->procs[w->n++] =
                (struct proc){.t = targets[i], .next_look_ns = now, .multi = {-1, -1}};
        }
        w->procs[k].t.id = targets[i].id;
        w->procs[k].given = true;
        if (w->procs[k].n_probes == 0 && now >= w->procs[k].next_look_ns)
            look(w, &w->procs[k]);
    }
    for (size_t k = 0; k < w->n;) /* the others: detached, or ended */
        if (!w->procs[k].given) {
            unwatch(w, &w->procs[k]);
            w->procs[k] = w->procs[--w->n];
        } else {
            k++;
        }
}

static int on_event(void *ctx, void *data, size_t size)
{
    struct nccl_watch *w = ctx;
    const struct nccl_event *e = data;
    struct nccl_call c = {0};
    size_t k = 0;
    int64_t bytes;

    if (size < sizeof(*e))
        return 0;
    while (k < w->n && w->procs[k].t.pid != (pid_t)e->pid)
        k++;
    if (k == w->n) { /* let go of between the call and this drain */
        w->unknown++;
        return 0;
    }
    c.target_id = w->procs[k].t.id;
    c.ts_ns = (int64_t)e->ts_ns + w->real_minus_mono;
    c.tid = (int32_t)e->tid;
    c.op = e->op < NCCL_OP_N ? OPS[e->op] : "?";
    c.dtype = e->dtype >= 0 && (size_t)e->dtype < N_DTYPES ? DTYPES[e->dtype].name : "?";
    /* the count and ranks are the process's to choose: a product past int64 is said as its max */
    if (e->count > INT64_MAX ||
        __builtin_mul_overflow(
            (int64_t)e->count,
            (int64_t)(e->dtype >= 0 && (size_t)e->dtype < N_DTYPES ? DTYPES[e->dtype].size : 1),
            &bytes) ||
        /* their counts are each rank's share: the bytes are the input's, as torch's */
        ((e->op == NCCL_OP_REDUCE_SCATTER || e->op == NCCL_OP_ALL_TO_ALL) && e->nranks > 0 &&
         __builtin_mul_overflow(bytes, (int64_t)e->nranks, &bytes)))
        bytes = INT64_MAX;
    c.bytes = bytes;
    c.group_size = e->nranks;
    c.peer = e->peer;
    c.seq = (int64_t)e->seq;
    c.source = e->from_init && e->op != NCCL_OP_SEND && e->op != NCCL_OP_RECV ? "nccl" : "trace";
    if (e->id)
        snprintf(c.group, sizeof(c.group), "nccl:%016" PRIx64, (uint64_t)e->id);
    else
        snprintf(c.group, sizeof(c.group), "nccl@%" PRIx64, (uint64_t)e->comm);
    w->fn(w->ctx, &c);
    w->calls++;
    w->drained++;
    return 0;
}

size_t nccl__drain(struct nccl_watch *w, nccl_call_fn fn, void *ctx)
{
    w->real_minus_mono = real_ns() - mono_ns();
    w->fn = fn;
    w->ctx = ctx;
    w->drained = 0;
    ring_buffer__consume(w->rb);
    return w->drained;
}

void nccl__stats(struct nccl_watch *w, struct nccl_stats *ret)
{
    int ncpu = libbpf_num_possible_cpus();
    uint64_t lost = 0;

    *ret = (struct nccl_stats){.calls = w->calls, .unknown = w->unknown};
    for (size_t k = 0; k < w->n; k++)
        ret->processes += w->procs[k].n_probes > 0;
    if (ncpu > 0) {
        uint64_t *per = calloc((size_t)ncpu, sizeof(*per));
        for (uint32_t key = 0; per && key < 2; key++)
            if (bpf_map_lookup_elem(bpf_map__fd(w->skel->maps.lost), &key, per) == 0)
                for (int c = 0; c < ncpu; c++)
                    lost += per[c];
        free(per);
    }
    ret->lost = lost;
}

const char *nccl__library(struct nccl_watch *w, pid_t pid)
{
    for (size_t k = 0; k < w->n; k++)
        if (w->procs[k].t.pid == pid && w->procs[k].n_probes)
            return w->procs[k].library;
    return "";
}

int nccl_open(struct nccl_watch **ret, struct errbuf *err)
{
    struct nccl_watch *w;
    int r;

    if (!procfs_in_initial_pidns())
        return errbuf_set(err, -EOPNOTSUPP,
                          "probed runs outside the initial pid namespace: the probes' pids would"
                          " not be its own");
    w = calloc(1, sizeof(*w));
    if (!w || !(w->procs = calloc(PROCS_MAX, sizeof(*w->procs)))) {
        free(w);
        return errbuf_set(err, -ENOMEM, "out of memory");
    }
    libbpf_set_print(quiet);
    w->multi = kernel_has_uprobe_multi();
    w->skel = ncclcalls_bpf__open();
    if (w->skel) { /* one pair of programs loaded: uprobe_multi's, or the perf events' */
        struct bpf_program *entry = w->skel->progs.entry, *made = w->skel->progs.made_return;
        struct bpf_program *entry_multi = w->skel->progs.entry_multi;
        struct bpf_program *made_multi = w->skel->progs.made_return_multi;
        bpf_program__set_autoload(w->multi ? entry : entry_multi, false);
        bpf_program__set_autoload(w->multi ? made : made_multi, false);
        bpf_program__set_expected_attach_type(entry_multi,
                                              (enum bpf_attach_type)ATTACH_UPROBE_MULTI);
        bpf_program__set_expected_attach_type(made_multi,
                                              (enum bpf_attach_type)ATTACH_UPROBE_MULTI);
        if (ncclcalls_bpf__load(w->skel) < 0) {
            r = errno;
            ncclcalls_bpf__destroy(w->skel);
            w->skel = NULL;
            errno = r;
        }
    }
    if (!w->skel) {
        r = -errno;
        nccl_free(w);
        return errbuf_set(err, r ? r : -EINVAL,
                          "loading the NCCL uprobes: %s (needs CAP_BPF and CAP_PERFMON, and a"
                          " kernel with BTF)",
                          strerror(r ? -r : EINVAL));
    }
    w->rb = ring_buffer__new(bpf_map__fd(w->skel->maps.events), on_event, w, NULL);
    if (!w->rb) {
        r = -errno;
        nccl_free(w);
        return errbuf_set(err, r ? r : -ENOMEM, "the NCCL uprobes' ring buffer: %s",
                          strerror(r ? -r : ENOMEM));
    }
    *ret = w;
    return 0;
}

void nccl_free(struct nccl_watch *w)
{
    if (!w)
        return;
    for (size_t k = 0; k < w->n; k++)
        unwatch(w, &w->procs[k]);
    ring_buffer__free(w->rb);
    ncclcalls_bpf__destroy(w->skel);
    free(w->procs);
    free(w);
}

#else /* built without eBPF (PROBED_BPF=OFF) */

int nccl_open(struct nccl_watch **ret, struct errbuf *err)
{
    *ret = NULL;
    return errbuf_set(err, -EOPNOTSUPP, "probed was built without eBPF (PROBED_BPF=OFF)");
}

void nccl_free(struct nccl_watch *w)
{
    (void)w;
}

void nccl__watch(struct nccl_watch *w, const struct nccl_target *targets, size_t n)
{
    (void)w, (void)targets, (void)n;
}

size_t nccl__drain(struct nccl_watch *w, nccl_call_fn fn, void *ctx)
{
    (void)w, (void)fn, (void)ctx;
    return 0;
}

void nccl__stats(struct nccl_watch *w, struct nccl_stats *ret)
{
    (void)w;
    *ret = (struct nccl_stats){0};
}

const char *nccl__library(struct nccl_watch *w, pid_t pid)
{
    (void)w, (void)pid;
    return "";
}

#endif
