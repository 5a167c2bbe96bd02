/* runstate.c - see runstate.h. */
#define _GNU_SOURCE
#include "sample/runstate.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "common/procfs.h"
#include "pyframes.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct runstate_stats stats; /* under lock, as everything below */

#ifdef PROBED_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <stdarg.h>
#include <sys/mman.h>

#include "runboard.h"
#include "runboard.skel.h"

#define BUCKETS 16384 /* tid -> slot chains: 2 slots a bucket when full */
/* A look for a new thread sweeps for exited ones at most this often: a sweep walks every slot.
 * Not only when every slot is taken: a thread's slot is otherwise freed only if it is looked at
 * again after it exited, and a process whose threads come and go would hold the slots of the
 * gone ones until the board filled. */
#define SWEEP_EVERY_NS 1000000000LL

/* The daemon's side of a slot (the shared side is struct runboard_slot). */
struct watch {
    pid_t pid;
    int32_t next;      /* the next slot in its bucket's chain, -1: the last */
    uint64_t serial;   /* this watch's number: numbers of an earlier watch of the tid never match */
    bool stat_running; /* what stat said when the watch began, until the program's first note */
};

static struct board {
    struct runboard_bpf *skel;
    struct bpf_link *link; /* while some thread is watched */
    int slot_of_fd;
    struct runboard_slot *slots; /* mapped, RUNBOARD_SLOTS */
    struct watch watch[RUNBOARD_SLOTS];
    int32_t bucket[BUCKETS];
    /* free slots, oldest freed first: a slot is reused as late as can be, so a note the
     * program made from a lookup just before the slot was freed lands long before */
    int32_t free_ring[RUNBOARD_SLOTS];
    size_t free_head, n_free;
    uint64_t serial;
    int64_t swept_ns; /* CLOCK_MONOTONIC of the last sweep (slots full) */
    bool broken;      /* the program could not be attached: /proc from then on */
} * board;

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    (void)level, (void)fmt, (void)ap;
    return 0;
}

static int32_t find(pid_t tid)
{
    int32_t k = board->bucket[(uint32_t)tid % BUCKETS];

    while (k >= 0 && board->slots[k].tid != (uint32_t)tid)
        k = board->watch[k].next;
    return k;
}

static void unchain(int32_t k)
{
    int32_t *at = &board->bucket[board->slots[k].tid % BUCKETS];

    while (*at >= 0 && *at != k)
        at = &board->watch[*at].next;
    if (*at == k)
        *at = board->watch[k].next;
}

static void release(int32_t k)
{
    uint32_t tid = board->slots[k].tid;

    bpf_map_delete_elem(board->slot_of_fd, &tid);
    unchain(k);
    __atomic_store_n(&board->slots[k].tid, 0, __ATOMIC_RELEASE);
    board->free_ring[(board->free_head + board->n_free++) % RUNBOARD_SLOTS] = k;
    if (--stats.watched == 0 && board->link) { /* nobody watched: no cost at any switch */
        bpf_link__destroy(board->link);
        board->link = NULL;
    }
}

/* Frees the slots of threads the program saw exit. */
static void sweep(void)
{
    for (int32_t k = 0; k < RUNBOARD_SLOTS; k++)
        if (board->slots[k].tid && (__atomic_load_n(&board->slots[k].word, __ATOMIC_ACQUIRE) &
                                    RUNBOARD_STATE_MASK) == RUNBOARD_DEAD) {
            stats.exited++;
            release(k);
        }
}

/* 1 when /proc/PID/task/TID/stat says state R, 0 another state, -errno unreadable. */
static int stat_running(pid_t pid, pid_t tid)
{
    char name[32], buf[512];
    const char *paren;
    ssize_t n;

    snprintf(name, sizeof(name), "task/%d/stat", (int)tid);
    if ((n = procfs_read(pid, name, buf, sizeof(buf))) <= 0)
        return n == 0 || n == -ENOENT ? -ESRCH : (int)n; /* it ended meanwhile */
    paren = strrchr(buf, ')');                           /* comm may hold spaces and parentheses */
    return paren && paren[1] == ' ' && paren[2] == 'R';
}

/* A slot for thread @tid of @pid, its state read from /proc after the program watches it (so
 * a switch in between is either noted or already in what stat says). -ENOSPC: none free. */
static int32_t watch(pid_t pid, pid_t tid)
{
    int32_t k;
    int r;

    if (mono_ns() - board->swept_ns > SWEEP_EVERY_NS) {
        board->swept_ns = mono_ns(); /* not at every new thread's look */
        sweep();
    }
    if (board->n_free == 0) {
        stats.full++;
        return -ENOSPC;
    }
    if (!board->link) {
        board->link = bpf_program__attach(board->skel->progs.runstate_switch);
        if (!board->link) { /* not again at every look: the board stops answering */
            r = -errno;
            snprintf(stats.error, sizeof(stats.error), "attaching to sched_switch: %s",
                     strerror(-r));
            board->broken = true;
            stats.running = false;
            return r;
        }
    }
    k = board->free_ring[board->free_head];
    board->free_head = (board->free_head + 1) % RUNBOARD_SLOTS;
    board->n_free--;
    board->slots[k].word = 0; /* no switch noted: the state is stat's */
    __atomic_store_n(&board->slots[k].tid, (uint32_t)tid, __ATOMIC_RELEASE);
    board->watch[k] = (struct watch){
        .pid = pid, .next = board->bucket[(uint32_t)tid % BUCKETS], .serial = ++board->serial};
    board->bucket[(uint32_t)tid % BUCKETS] = k;
    stats.watched++;
    stats.watches++;
    if (bpf_map_update_elem(board->slot_of_fd, &(uint32_t){(uint32_t)tid}, &k, BPF_ANY) < 0) {
        r = -errno;
        release(k);
        return r;
    }
    if ((r = stat_running(pid, tid)) < 0) {
        release(k);
        return r;
    }
    board->watch[k].stat_running = r == 1;
    return k;
}

/* The libpyframes source's running(). */
static int look(void *ctx, pid_t pid, pid_t tid, uint64_t ret_sched[3])
{
    uint64_t word, switches;
    int32_t k;
    int r;

    (void)ctx;
    pthread_mutex_lock(&lock);
    if (board->broken) {
        pthread_mutex_unlock(&lock);
        return -ENOTSUP;
    }
    k = find(tid);
    if (k >= 0 && board->watch[k].pid != pid) { /* the tid of another process by now */
        release(k);
        k = -1;
    }
    if (k >= 0 && (__atomic_load_n(&board->slots[k].word, __ATOMIC_ACQUIRE) &
                   RUNBOARD_STATE_MASK) == RUNBOARD_DEAD) {
        /* it exited; the tid may be a new thread's already (ids wrap): watched anew, or gone
         * when /proc no longer has it */
        stats.exited++;
        release(k);
        k = -1;
    }
    if (k < 0 && (k = watch(pid, tid)) < 0) {
        pthread_mutex_unlock(&lock);
        return k;
    }
    word = __atomic_load_n(&board->slots[k].word, __ATOMIC_ACQUIRE);
    switches = word >> RUNBOARD_COUNT_SHIFT;
    r = switches ? (word & RUNBOARD_STATE_MASK) == RUNBOARD_RUNNABLE : board->watch[k].stat_running;
    ret_sched[0] = switches;
    ret_sched[1] = PYF_RUNSTATE_MARK;
    ret_sched[2] = board->watch[k].serial;
    pthread_mutex_unlock(&lock);
    return r;
}

/* The libpyframes source's forget(): a pyf_target of @pid was freed (detached, or a one-off
 * read such as a backtrace's): its threads' slots go; a target of the same process still
 * sampled watches them again at its next look. */
static void forget(void *ctx, pid_t pid)
{
    (void)ctx;
    pthread_mutex_lock(&lock);
    for (int32_t k = 0; stats.watched > 0 && k < RUNBOARD_SLOTS; k++)
        if (board->slots[k].tid && board->watch[k].pid == pid)
            release(k);
    pthread_mutex_unlock(&lock);
}

static void board_free(void)
{
    if (!board)
        return;
    if (board->link)
        bpf_link__destroy(board->link);
    if (board->slots)
        munmap(board->slots, sizeof(struct runboard_slot) * RUNBOARD_SLOTS);
    runboard_bpf__destroy(board->skel);
    free(board);
    board = NULL;
}

int runstate_start(struct errbuf *err)
{
    void *mem;
    int r;

    if (!procfs_in_initial_pidns()) {
        r = errbuf_set(err, -EXDEV,
                       "the daemon runs in a pid namespace other than the initial one: the "
                       "scheduler's tracepoint names threads by their global ids");
        goto fail;
    }
    if (!(board = calloc(1, sizeof(*board)))) {
        r = errbuf_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    libbpf_set_print(quiet);
    if (!(board->skel = runboard_bpf__open_and_load())) {
        r = errbuf_set(err, -errno,
                       "loading bpf/runboard.bpf.c: %s (CAP_BPF and CAP_PERFMON needed, and a "
                       "kernel with BTF)",
                       strerror(errno));
        goto fail;
    }
    mem = mmap(NULL, sizeof(struct runboard_slot) * RUNBOARD_SLOTS, PROT_READ | PROT_WRITE,
               MAP_SHARED, bpf_map__fd(board->skel->maps.slots), 0);
    if (mem == MAP_FAILED) {
        r = errbuf_set(err, -errno, "mapping the run-state slots: %s", strerror(errno));
        goto fail;
    }
    board->slots = mem;
    board->slot_of_fd = bpf_map__fd(board->skel->maps.slot_of);
    for (int32_t k = 0; k < RUNBOARD_SLOTS; k++)
        board->free_ring[k] = k;
    board->n_free = RUNBOARD_SLOTS;
    memset(board->bucket, 0xff, sizeof(board->bucket)); /* -1: empty */
    stats.running = true;
    stats.error[0] = '\0';
    pyf_runstate_source(&(struct pyf_runstate_source){.running = look, .forget = forget});
    return 0;
fail:
    board_free();
    snprintf(stats.error, sizeof(stats.error), "%s", err ? err->msg : "");
    return r;
}

void runstate_stop(void)
{
    pyf_runstate_source(NULL);
    pthread_mutex_lock(&lock);
    board_free();
    stats.running = false;
    stats.watched = 0;
    pthread_mutex_unlock(&lock);
}

#else /* built without eBPF (PROBED_BPF=OFF): /proc alone */

int runstate_start(struct errbuf *err)
{
    int r = errbuf_set(err, -EOPNOTSUPP, "probed was built without eBPF (PROBED_BPF=OFF)");

    snprintf(stats.error, sizeof(stats.error), "%s", err ? err->msg : "");
    return r;
}

void runstate_stop(void)
{
}

#endif

void runstate_stats(struct runstate_stats *ret)
{
    pthread_mutex_lock(&lock);
    *ret = stats;
    pthread_mutex_unlock(&lock);
}
