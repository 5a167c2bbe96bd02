/*
 * target.h - struct pyf_target, shared by the modules that read one target process.
 *
 * target.c fills it once in pyf_target_open(): where the runtime is, which layout applies,
 * the addresses of the type objects we compare against, and every buffer a sample needs.
 * threads.c, stack.c, pyobj.c (objects) and locals.c only read it, except for the
 * caches and scratch buffers, which belong to whichever call is running (one at a time).
 */
#ifndef PYF_TARGET_H
#define PYF_TARGET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "batch.h"
#include "codecache.h"
#include "layout.h"
#include "nsmap.h"
#include "pyframes.h"

/* Where one thread's part of a batch landed (stack.c): the spans of its thread state and of
 * the current-frame word read before and after its frames (-1: not read), and the window of
 * spans holding its frames. */
struct thread_spans {
    int ts, before, after;
    int alt_before, alt_after; /* 3.11/3.12: the same words of the other cframe (cframe_alt) */
    struct batch_window frames;
    struct batch_window reread; /* <= 3.10: the spans of the innermost frames, copied again */
    int root;                   /* <= 3.10: the guessed outermost frame's f_back, read again */
    pid_t pre_tid;              /* whose schedstat was read before the batch (0: none) */
    uint64_t pre_sched[3];      /* what it said */
};

/* Addresses of the type objects (and None) in the target; 0 when not exported. */
struct pyf_types {
    uint64_t code, str, bytes, long_, bool_, float_, none, cell, tuple;
    uint64_t list, dict, set, frozenset;
    uint64_t coro, gen; /* coroutines and generators (tasks.c) */
};

/* What stack.c keeps of one frame between reading it and resolving its code object. */
struct raw_frame {
    uint64_t raddr, code, back;
    int64_t lasti; /* byte offset of the instruction in the code; < 0: not started */
    int64_t state; /* the layout's fr_state field (refcount or stacktop); 0 when none */
    bool skip;     /* an interpreter shim frame, not Python code */
    bool entry;    /* 3.11: entered from C, so its caller may be anywhere (not at a call) */
    bool running;  /* <= 3.10: marked as running (always true where there is no such mark) */
};

/* Threads whose /proc stat files we keep open, by tid: 512 fds a target at most (a 150-thread
 * torch process fits; 128 slots thrashed there), and all targets together within
 * pyf_keep_files_max() (threads.c). */
#define STATFD_SLOTS 256
#define STATFD_PROBES 8       /* slots from tid % STATFD_SLOTS a thread may hold */
#define GUESS_THREADS_MAX 256 /* thread lists up to this long are read in one syscall */
#define SCRATCH_SLOTS (PYF_DEPTH_MAX + PYF_HIDDEN_MAX + PYF_RECENT_MAX + 1)
#define THREAD_SPANS_MAX 4096 /* threads one call reads (pyf_target__threads, __sample) */
#define THREAD_ROOM_MIN 64    /* per-thread scratch at first; it grows to a call's cap */

/* A thread's /proc stat and schedstat files, kept open, and what they last said. */
struct statfd {
    pid_t tid;          /* 0: free */
    int fd, sched_fd;   /* sched_fd -1: no schedstat (a kernel without CONFIG_SCHED_INFO) */
    uint64_t sched[3];  /* run time, run-queue wait, times run: at the last stat read */
    bool on_cpu, known; /* what stat said then; known: sched was read with it */
    bool kept;          /* counted in the process's budget of kept files (pyf_keep_files_max) */
};

/* <= 3.10: the words of a caller's locals compared between the two copies of a snapshot
 * (stack.c: locals_moved()); a frame holding fewer is compared over its own (ob_size) */
#define FRAME_LOCALS_CHECKED 4

struct pyf_target {
    struct pyf_target_info info;
    struct remote_src mem; /* where its memory is read: the process, or a core file */
    struct pyf_layout lay;
    uint64_t interp_head_raddr;    /* where the first PyInterpreterState pointer lives */
    uint64_t tstate_current_raddr; /* where the GIL holder's PyThreadState* lives, or 0 */
    struct pyf_types types;
    int pthread_tid_off; /* <= 3.10: offset of tid in glibc's struct pthread; -1: unknown */
    struct nsmap ns;     /* the target's thread ids -> ours, when it is in a container */

    /* bytes to read of each struct: up to the last field we use (<= 3.10: and a frame's
     * first FRAME_LOCALS_CHECKED locals, for stack.c's callers_moved()) */
    size_t ts_read, fr_read, co_read;
    /* of a frame copied in one instant (pyf_target__chain()): no running mark needed */
    size_t fr_copy_read;

    /* scratch for one sample (see stack.c, threads.c); SCRATCH_SLOTS entries each */
    struct batch batch;
    uint64_t *guess_u64, *scratch_u64; /* stack.c: guesses, sorting */
    uint64_t *pthread_u64;             /* threads.c: each thread's pthread_t (thread_room) */
    struct batch_window code_window;   /* the batch's spans of guessed code heads */
    struct iovec *liov, *riov;
    uint8_t *code_buf; /* co_read bytes per frame: code heads the batch did not have */
    const uint8_t **heads;
    struct raw_frame *raw;
    uint8_t *ts_buf;                   /* ts_read bytes */
    struct thread_spans *thread_spans; /* stack.c (thread_room) */
    size_t thread_room;                /* threads pthread_u64 and thread_spans have room for */

    /* the thread list of the last pyf_target__threads(), the guess for the next one */
    uint64_t guess_interp, guess_gil;
    uint64_t guess_tstates[GUESS_THREADS_MAX];
    uint64_t guess_pthreads[GUESS_THREADS_MAX]; /* <= 3.10: their pthread_t */
    pid_t guess_tids[GUESS_THREADS_MAX];        /* their tids (ours), as that call found them */
    size_t n_guess_tstates;                     /* 0: no guess */

    struct codecache *codes;
    struct statfd statfds[STATFD_SLOTS];

    /* pynames.c: the threading module's names of the threads, as last read */
    struct pyname {
        uint64_t ident;
        char name[64];
    } * pynames;
    size_t n_pynames;
    uint64_t pynames_read_ns; /* CLOCK_MONOTONIC of that read; 0: never */

    /* tasks.c: where asyncio says which task each loop runs, found once (see
     * pyf_target__running_tasks()); its scratch, allocated at the first call */
    struct aio_current {
        uint64_t task_type; /* asyncio.Task (_asyncio's C type); 0: not found yet */
        uint64_t dict;      /* 3.6-3.13: the dict of each loop's running task */
        uint64_t next_look_ns;
        struct running_scratch *scratch;
    } aio;
};

/*
 * threads.c, for pyf_target__sample(): the guessed thread list read in the caller's batch,
 * in the same syscall as the stacks. begin() adds the interpreter's words (returns how many
 * threads are guessed, 0: none, walk the list), add() thread i's state (returns its span),
 * and once the batch is read, check() fills @th as pyf_target__threads() would and returns 1,
 * or 0 when the list is no longer as guessed.
 */
struct threads_guess {
    size_t n;
    int head_span, gil_span;
    int ts_span[GUESS_THREADS_MAX];
    int tid_span[GUESS_THREADS_MAX]; /* <= 3.10: the tid word of the guessed pthread_t */
    /* Each guessed thread's state, read by begin() before the batch (pre_running: 1/0, or
     * -ESRCH: not read), for its tid as the last call found it: a thread asleep since its
     * frames were read need not be read again (stack.c). */
    pid_t pre_tid[GUESS_THREADS_MAX];
    int pre_running[GUESS_THREADS_MAX];
    uint64_t pre_sched[GUESS_THREADS_MAX][3];
};
void threads__forget_statfd(struct statfd *sf); /* closes its files; a free slot is a no-op */
/* What the run-state source (pyf_runstate_source) says of thread @tid of @pid: 1 runs, 0 waits,
 * -ESRCH gone, other negative errno: it does not know (or there is none). */
int threads__source_running(pid_t pid, pid_t tid, uint64_t ret_sched[3]);
void threads__source_forget(pid_t pid); /* a target of @pid is freed (not a core's) */
size_t threads__guess_begin(struct pyf_target *t, struct threads_guess *g, size_t cap);
int threads__guess_add(struct pyf_target *t, struct threads_guess *g, size_t i);
int threads__guess_check(struct pyf_target *t, const struct threads_guess *g, struct pyf_thread *th,
                         size_t *ret_n);

/* How many threads a call asking for @cap may read: the per-thread scratch grown to @cap (at
 * most THREAD_SPANS_MAX), or what it had when memory is short. */
size_t target__thread_room(struct pyf_target *t, size_t cap);

/* threads.c: the first interpreter (on a stripped 3.6, the GIL holder's). */
int threads__first_interp(const struct pyf_target *t, uint64_t *ret, struct pyf_err *e);

/* Reads a pointer-sized word, checking the pointer first; errors name @what. */
int target_read_u64(const struct pyf_target *t, uint64_t raddr, uint64_t *ret_value,
                    struct pyf_err *e, const char *what);
/* Turns a -errno from remote.h into a pyf_err naming @what at @raddr. */
int target_fail_read(const struct pyf_target *t, struct pyf_err *e, int r, uint64_t raddr,
                     const char *what);

/* A field of @size bytes at @off in a buffer read from the target (memcpy: no alignment or
 * aliasing assumptions about target data). */
static inline uint64_t field_u64(const uint8_t *buf, int32_t off)
{
    uint64_t v;
    __builtin_memcpy(&v, buf + off, sizeof(v));
    return v;
}

/* The object a frame's reference names: 3.14+ keeps _PyStackRef there, a pointer with tag
 * bits (deferred or borrowed references; NULL is the tag alone), or a small int held in the
 * reference itself, which names no object (0, as for NULL). */
static inline uint64_t stackref_object(const struct pyf_layout *l, uint64_t bits)
{
    if (l->stackref_int_tag > 0 &&
        (bits & (uint64_t)l->stackref_int_tag) == (uint64_t)l->stackref_int_tag)
        return 0;
    return bits & ~(uint64_t)l->stackref_tag_bits;
}

static inline int32_t field_i32(const uint8_t *buf, int32_t off)
{
    int32_t v;
    __builtin_memcpy(&v, buf + off, sizeof(v));
    return v;
}

#endif
