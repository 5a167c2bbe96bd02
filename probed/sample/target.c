/* target.c - see target.h. */
#define _GNU_SOURCE
#include "sample/target.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "native/native.h"
#include "common/procfs.h"

const char *target_state_name(enum target_state s)
{
    static const char *const names[] = {"sampling", "exited", "detached", "failed"};
    return names[s];
}

/* RANK, LOCAL_RANK and WORLD_SIZE as torchrun sets them; else Slurm's SLURM_PROCID,
 * SLURM_LOCALID and SLURM_NTASKS (srun starting the ranks itself); -1 when absent. */
static void read_ranks(struct target *t)
{
    static const char *const names[6] = {
        "RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "SLURM_PROCID=", "SLURM_LOCALID=", "SLURM_NTASKS="};
    size_t size = 64 * 1024;
    char *env = malloc(size);
    ssize_t n = env ? procfs_read(t->pid, "environ", env, size) : -ENOMEM;
    int v[6] = {-1, -1, -1, -1, -1, -1};

    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(env + i) + 1)
        for (int k = 0; k < 6; k++)
            if (strncmp(env + i, names[k], strlen(names[k])) == 0)
                v[k] = atoi(env + i + strlen(names[k]));
    free(env);
    t->rank = v[0] >= 0 ? v[0] : v[3];
    t->local_rank = v[1] >= 0 ? v[1] : v[4];
    t->world_size = v[2] >= 0 ? v[2] : v[5];
}

static void free_buffers(struct target *t)
{
    for (size_t i = 0; t->deep && i < t->threads_cap; i++)
        free(t->deep[i]);
    free(t->deep);
    t->deep = NULL;
    free(t->stack_ids);
    t->stack_ids = NULL;
    free(t->threads);
    free(t->stacks);
    free(t->frame_pool);
    t->threads = NULL;
    t->stacks = NULL;
    t->frame_pool = NULL;
    t->threads_cap = 0;
    t->n_threads = 0;
}

/* Room for @cap threads' stacks (TARGET_DEPTH_MAX frames each); the old buffers are kept when
 * the new ones cannot be had. */
static int alloc_buffers(struct target *t, size_t cap)
{
    struct pyf_thread *threads = calloc(cap, sizeof(*threads));
    struct pyf_stack *stacks = calloc(cap, sizeof(*stacks));
    struct pyf_frame *pool = calloc(cap * TARGET_DEPTH_MAX, sizeof(*pool));
    struct pyf_frame **deep = calloc(cap, sizeof(*deep));
    int64_t *stack_ids = calloc(cap, sizeof(*stack_ids));

    if (!threads || !stacks || !pool || !deep || !stack_ids) {
        free(threads);
        free(stacks);
        free(pool);
        free(deep);
        free(stack_ids);
        return -ENOMEM;
    }
    for (size_t i = 0; i < cap; i++) {
        stacks[i].frames = pool + i * TARGET_DEPTH_MAX;
        stacks[i].cap = TARGET_DEPTH_MAX;
    }
    free_buffers(t);
    t->threads = threads;
    t->stacks = stacks;
    t->frame_pool = pool;
    t->deep = deep;
    t->stack_ids = stack_ids;
    t->threads_cap = cap;
    return 0;
}

int target__deepen(struct target *t, size_t i)
{
    struct pyf_stack *st = &t->stacks[i];
    struct pyf_frame *frames;

    if (st->cap >= TARGET_READ_DEPTH)
        return -ENOSPC;
    frames = calloc(TARGET_READ_DEPTH, sizeof(*frames));
    if (!frames)
        return -ENOMEM;
    memcpy(frames, st->frames, st->n_frames * sizeof(*frames));
    t->deep[i] = frames;
    st->frames = frames;
    st->cap = TARGET_READ_DEPTH;
    return 0;
}

int target__grow_threads(struct target *t)
{
    size_t cap = t->threads_cap * 2 > TARGET_THREADS_MAX ? TARGET_THREADS_MAX : t->threads_cap * 2;
    int r = cap > t->threads_cap ? alloc_buffers(t, cap) : -ENOSPC;

    if (r == 0)
        log_msg(LOG_INFO, "pid %d: room for %zu threads (it has %zu or more)", (int)t->pid, cap,
                cap / 2);
    return r;
}

int target_new(pid_t pid, uint32_t rate_hz, struct target **ret, struct pyf_err *err)
{
    struct target *t = calloc(1, sizeof(*t));
    int64_t start_time;
    uint64_t start_stack;
    struct stat st;
    char path[64];
    int r;

    if (!t)
        return -ENOMEM;
    t->pid = pid;
    t->gpu_bytes = -1;
    r = procfs_identity(pid, &t->start_time, &t->start_stack);
    snprintf(path, sizeof(path), "/proc/%d", pid);
    if (r < 0 || stat(path, &st) < 0) {
        r = r < 0 ? r : -errno;
        /* only a pid that is not there is gone: EMFILE, ENOMEM say nothing about it */
        bool gone = r == -ENOENT || r == -ESRCH;
        snprintf(err->msg, sizeof(err->msg), "pid %d: %s (%s)", pid,
                 gone ? "no such process" : "cannot read /proc", strerror(-r));
        err->kind = gone ? PYF_GONE : PYF_INVALID;
        err->sys = -r;
        goto fail;
    }
    t->uid = st.st_uid;
    r = pyf_target_open(pid, &t->pyf, err);
    if (r < 0)
        goto fail;
    /* A process that exec'd while it was opened (a launcher's fork, or probectl run's, turning
     * into the program) has the new program's layout read under the old one's identity: its
     * first tick would end it as "exec'd another program". So does one opened in the last
     * moments of its exec: the program and its loader are mapped, but the kernel sets the start
     * of its stack only after (load_elf_binary()), and it reads 0 until then (CI: probectl
     * run's child ended as "exec'd" 4.5 ms after its attach). Torn: the caller tries again. */
    if (procfs_identity(pid, &start_time, &start_stack) < 0 || start_time != t->start_time ||
        start_stack != t->start_stack || start_stack == 0) {
        snprintf(err->msg, sizeof(err->msg),
                 "pid %d was exec'ing (or exiting) while it was being attached: try again", pid);
        err->kind = PYF_TORN;
        err->sys = EAGAIN;
        r = -EAGAIN;
        goto fail;
    }
    r = alloc_buffers(t, TARGET_THREADS_MIN);
    if (r < 0) {
        snprintf(err->msg, sizeof(err->msg), "pid %d: out of memory for sampling buffers", pid);
        goto fail;
    }
    snprintf(t->py_version, sizeof(t->py_version), "%s", pyf_target__info(t->pyf)->version_str);
    if (pyf_target__info(t->pyf)->note[0])
        log_msg(LOG_WARN, "pid %d: %s", pid, pyf_target__info(t->pyf)->note);
    procfs_cmdline(pid, t->cmdline, sizeof(t->cmdline));
    read_ranks(t);
    t->rate_hz = rate_hz;
    t->period_ns = 1000000000LL / rate_hz;
    t->next_ns = clock_tick_at_or_after(mono_ns(), t->period_ns);
    t->attached_ns = real_ns();
    *ret = t;
    return 0;
fail:
    target_free(t);
    return r;
}

int target_native_open(pid_t pid, uint32_t rate_hz, const struct pyf_chain *chain, bool perf_only,
                       struct pyf_symcache *symbols, struct native **ret, struct errbuf *err)
{
    int r = native_open(pid, rate_hz, chain, perf_only ? NATIVE_PERF_ONLY : NATIVE_ANY, symbols,
                        ret, err);

    if (r < 0) {
        *ret = NULL;
        log_msg(LOG_WARN, "pid %d: native stacks unavailable, Python frames only: %s", (int)pid,
                err->msg);
        return r;
    }
    err->msg[0] = '\0';
    if (native__ebpf_error(*ret)[0])
        log_msg(LOG_WARN,
                "pid %d: the eBPF sampler is unavailable, native stacks come from perf: %s",
                (int)pid, native__ebpf_error(*ret));
    return 0;
}

int target__open_native(struct target *t, struct pyf_symcache *symbols)
{
    struct pyf_chain chain;

    pyf_target__chain(t->pyf, &chain);
    return target_native_open(t->pid, t->rate_hz, &chain, t->native_perf_only, symbols, &t->native,
                              &t->native_error);
}

const char *target_mode(const struct target *t)
{
    if (!t->native)
        return "python";
    return strcmp(native__backend(t->native), "ebpf") == 0 ? "native-ebpf" : "native-perf";
}

void target_release(struct target *t)
{
    native_free(t->native);
    t->native = NULL;
    pyf_target_free(t->pyf);
    t->pyf = NULL;
    free_buffers(t);
    free(t->known_tids);
    t->known_tids = NULL;
    t->n_known_tids = t->known_tids_cap = 0;
}

void target_free(struct target *t)
{
    if (!t)
        return;
    target_release(t);
    free(t);
}
