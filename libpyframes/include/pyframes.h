/*
 * pyframes.h - the Python stacks of another, running process, read from outside.
 *
 * libpyframes finds the CPython runtime in a target process from its ELF files, picks the
 * layout of its version (3.6-3.15; a later one through the offsets it publishes), and reads
 * interpreters, threads, frames and locals with process_vm_readv() only: the target is never
 * stopped, traced or written to (pyf_target__remote_exec() only says where a debugger would
 * write).
 *
 *   struct pyf_target *t;  struct pyf_err err;
 *   pyf_target_open(pid, &t, &err);                  who: root or the target's owner
 *   pyf_target__threads(t, threads, cap, &n, &err);  every thread of every interpreter
 *   pyf_target__stack(t, &threads[i], &stack, &err); innermost frame first
 *   pyf_target_free(t);
 *
 * Threads: a pyf_target is used by one thread at a time; distinct targets are independent.
 * Memory:  pyf_target_open() sizes every buffer; reading a stack allocates only when it
 *          meets a code object it has not seen before. Strings in a pyf_frame are borrowed
 *          from the target's code cache: valid until the next pyf_target__stack() call.
 * Failure: functions return 0 or a negative errno and fill a caller-owned struct pyf_err.
 *          The target changes under us, so a torn read (PYF_TORN) is normal: drop the sample
 *          and read again. PYF_GONE and PYF_DENIED mean stop; the rest mean "cannot read
 *          this process at all" and come from pyf_target_open().
 */
#ifndef PYFRAMES_H
#define PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum pyf_err_kind {
    PYF_OK = 0,
    PYF_TORN,        /* the target changed while we read it: drop this sample, retry */
    PYF_GONE,        /* the process (or thread) no longer exists */
    PYF_DENIED,      /* no permission to read the process */
    PYF_NOT_PYTHON,  /* no CPython runtime in the process */
    PYF_UNSUPPORTED, /* a CPython we do not read (2.7, < 3.6, an unknown layout) */
    PYF_INVALID,     /* bad argument or corrupt file */
};

struct pyf_err {
    enum pyf_err_kind kind;
    int sys;        /* errno of the failing call, or 0 */
    uint64_t raddr; /* target address being read, or 0 */
    char msg[240];  /* what failed and why, for a person; formatted without allocating */
};

/* Stops reading: the process is gone, or we may not read it. */
bool pyf_err_fatal(const struct pyf_err *e);
const char *pyf_err_kind_name(enum pyf_err_kind kind);

#define PYF_VERSION_MAJOR(v) ((v) >> 8)
#define PYF_VERSION_MINOR(v) ((v)&0xff)
#define PYF_DEPTH_MAX 1024 /* deepest stack pyf_target__stack() reads; deeper is truncated */
#define PYF_HIDDEN_MAX 16  /* interpreter shim frames remembered per stack */
#define PYF_RECENT_MAX 16  /* frames outside the guess remembered per stack (stack.c) */

struct pyf_target_info {
    pid_t pid;
    uint32_t version;       /* (major << 8) | minor */
    char version_str[32];   /* "3.11.7", or "3.11" when the patch level is not found */
    char runtime_file[512]; /* the ELF file that holds the runtime (executable or libpython) */
    uint64_t runtime_raddr; /* _PyRuntime, or interp_head on 3.6 */
    bool debug_offsets;     /* the layout was read from the target's _Py_DebugOffsets */
    bool core;              /* read from a core file (pyf_target_open_core) */
    char note[200];         /* "" or what the user should know: a version newer than this
                             * build knows, read through the offsets it publishes */
};

struct pyf_target;

int pyf_target_open(pid_t pid, struct pyf_target **ret_target, struct pyf_err *reterr);
/* A process as its core file (the kernel's, or gcore's) left it: read like a live one, memory
 * from the core and, for the pages it left out, from the files it mapped, found on this
 * machine (@executable, or NULL: the core's own path, stands for its main program). Every
 * thread reads as not on a CPU. PYF_INVALID not a core, PYF_UNSUPPORTED another architecture,
 * PYF_NOT_PYTHON no CPython runtime among its files here. */
int pyf_target_open_core(const char *core_path, const char *executable,
                         struct pyf_target **ret_target, struct pyf_err *reterr);
void pyf_target_free(struct pyf_target *t); /* NULL is a no-op */
/* Borrowed: valid until pyf_target_free(t). */
const struct pyf_target_info *pyf_target__info(const struct pyf_target *t);
/* A core's (pyf_target_open_core) threads, its command line and the signal that ended it
 * (0: none, a gcore); 0, NULL and 0 for a live process. */
size_t pyf_target__core_tids(const struct pyf_target *t, pid_t *tids, size_t cap);
const char *pyf_target__core_command(const struct pyf_target *t);
int pyf_target__core_signal(const struct pyf_target *t);

struct pyf_thread {
    uint64_t tstate_raddr; /* PyThreadState in the target */
    int64_t interp_id;     /* 0 for the main interpreter; -1 where the version has no ids */
    pid_t tid;             /* kernel thread id; 0 if the thread has no OS thread (yet) */
    uint64_t ident;        /* threading.get_ident(): its pthread_t */
    bool holds_gil;
    bool on_cpu; /* running or runnable now (state R), not sleeping or blocked */
    /* its interpreter's garbage collector was running (a collection, and any __del__ or
     * weakref callback it called, in whichever thread); false where the version does not
     * say (3.6) */
    bool gc_collecting;
    /* /proc/PID/task/TID/schedstat as this read saw it (run time ns, run-queue wait ns, times
     * run; all 0 where unknown), or the run-state source's numbers (pyf_runstate_source): the
     * same numbers again mean the thread was not switched in or out in between */
    uint64_t sched[3];
};

/* Whether thread @tid of the target (a host tid) runs or is runnable (1: state R) or waits
 * (0), with its schedstat numbers in @ret_sched (all 0 where unknown): what
 * pyf_target__threads() fills on_cpu and sched with, for any thread of the process (one with
 * no Python state too). The run-state source answers first where one is set and knows the
 * thread (pyf_runstate_source, below: then @ret_sched holds its numbers). Else stat is read
 * only when schedstat moved; both files stay open for up to 256 threads a target, recycled
 * beyond, within pyf_keep_files_max(). -ESRCH: the thread is gone. 0 for a core. */
int pyf_target__thread_running(struct pyf_target *t, pid_t tid, uint64_t ret_sched[3]);

/* At most @max of those /proc files kept open by all the targets of this process together
 * (they save an open and a close a read); past it a thread's files are opened, read and
 * closed each time. Until set: a quarter of the open-files soft limit at the first open. A
 * program with many targets sets it, or their threads take every descriptor it has. */
void pyf_keep_files_max(size_t max);

/*
 * A source of threads' run state cheaper than /proc (the daemon's eBPF board,
 * probed/sample/runstate.h), asked first by pyf_target__thread_running() and by the waiting
 * reads of pyframes_native.h. running() answers for thread @tid of process @pid (the caller's
 * ids) as pyf_target__thread_running() does: 1 running or runnable, 0 waiting, -ESRCH gone,
 * with @ret_sched numbers that read the same again only if the thread was not switched in or
 * out in between, and that never equal a schedstat's (ret_sched[1] == PYF_RUNSTATE_MARK). Any
 * other negative errno: it does not know that thread, and /proc is read. forget() is told
 * when a pyf_target of @pid is freed: what it keeps for those threads may go. Set it once,
 * before any target is read (@src is copied; NULL: /proc only); both are called from every
 * thread that reads or frees a target.
 */
#define PYF_RUNSTATE_MARK UINT64_MAX
struct pyf_runstate_source {
    int (*running)(void *ctx, pid_t pid, pid_t tid, uint64_t ret_sched[3]);
    void (*forget)(void *ctx, pid_t pid);
    void *ctx;
};
void pyf_runstate_source(const struct pyf_runstate_source *src);

/* Every thread of every interpreter, newest first within an interpreter. Writes at most
 * @cap threads; *ret_n is the number written. */
int pyf_target__threads(struct pyf_target *t, struct pyf_thread *ret_threads, size_t cap,
                        size_t *ret_n, struct pyf_err *reterr);

struct pyf_frame {
    const char *func; /* qualified name where the version has one (3.11+), else the name */
    const char *file;
    int32_t line;       /* line being executed: an instruction the line table gives no line
                         * (3.10/3.11's jump back at a loop's end) is on the line before it,
                         * as py-spy reads it; -1 only for an offset past the table */
    int32_t first_line; /* line of the def */
    uint64_t frame_raddr;
    uint64_t code_raddr;
    /* Entered from C: a call of the interpreter's eval loop runs this frame and the inner
     * frames up to the next entry (<= 3.10 every frame has a call of its own; 3.11+ runs
     * Python-to-Python calls inline). Where a mixed stack puts Python frames. */
    bool entry;
    /* Its code is a coroutine's (async def, or a generator made one by @types.coroutine):
     * the outermost such frame on a stack is, in an event loop's thread, the task's. */
    bool coroutine;
};

/* Caller-owned. Reuse one pyf_stack per thread across samples: the frames of the previous
 * sample are read speculatively in the same syscall as the thread state, so a stack that
 * changed only at the top costs one or two syscalls instead of one per frame. */
struct pyf_stack {
    struct pyf_frame *frames; /* array of @cap, owned by the caller */
    size_t cap;
    size_t n_frames;
    bool truncated; /* deeper than cap (or PYF_DEPTH_MAX): the outermost frames are missing */
    bool torn;      /* pyf_target__sample() could not read this thread consistently: empty */
    bool unchanged; /* pyf_target__sample(): the thread has not run since the last call, whose
                     * frames these are, not read again */

    /* Private to libpyframes: what the next call on this stack guesses it will find (the
     * frames above, the interpreter's shim frames that are not shown, the 3.11/3.12 cframe).
     * Zero-initialise the struct and reuse it for the same thread. */
    uint64_t hidden[PYF_HIDDEN_MAX];
    size_t n_hidden;
    uint64_t cframe_hint;
    uint64_t cframe_alt; /* the one before (a thread calling Python through C flips between) */
    /* <= 3.10: the caller the last resolved read found standing where it calls no Python
     * function (stack.c: caller_suspect()), as frame, instruction and its callee's code: a
     * read that finds the same again confirms it (0: none) */
    uint64_t suspect[3];
    /* Frames recent reads of this stack found outside their guess, read with it too: a thread
     * that flips between a few stacks (a generator's frame, a call through C) has them all in
     * one copy. recent_at[i]: the read (reads) that last met recent[i]. */
    uint64_t recent[PYF_RECENT_MAX];
    uint32_t recent_at[PYF_RECENT_MAX];
    size_t n_recent;
    uint32_t reads;
    /* The thread these frames were read from by pyf_target__sample() (0: none) and its
     * schedstat read just before: while it still reads the same and the thread is not
     * running, the thread has not run since, and the frames are kept, not read again. */
    pid_t kept_tid;
    uint64_t kept_sched[3];
};

/* The frames of @th, innermost first. On error @st is left empty. */
int pyf_target__stack(struct pyf_target *t, const struct pyf_thread *th, struct pyf_stack *st,
                      struct pyf_err *reterr);

/*
 * One sample of the whole process: the threads (as pyf_target__threads) and the stack of
 * each into @stacks[i] (as pyf_target__stack), every thread's snapshot in one syscall.
 * Pass the same @stacks again next time: stack i is the guess for thread i. A thread whose
 * stack kept changing gets torn = true and no frames; other errors fail the call.
 */
int pyf_target__sample(struct pyf_target *t, struct pyf_thread *ret_threads,
                       struct pyf_stack *stacks, size_t cap, size_t *ret_n, struct pyf_err *reterr);

/*
 * Frames copied by someone else in one instant: the eBPF sampler (bpf/oncpu.bpf.c) copies a
 * thread's chain while the thread is interrupted, so the copy cannot tear. pyf_target__chain()
 * says where the chain starts and how far to copy each frame; pyf_target__stack_of_copy()
 * decodes such a copy into a stack (reading only the code objects, which do not change). It
 * joins the walk of the last pyf_target__sample() or pyf_target__stack(): the strings of the
 * stacks those returned stay valid, as do those of every copy decoded since.
 */
struct pyf_chain {
    int32_t ts_frame;     /* PyThreadState -> the innermost frame, or the _PyCFrame holding it */
    int32_t cframe_frame; /* >= 0: _PyCFrame -> the innermost frame (3.11, 3.12); -1: none */
    int32_t fr_back;      /* frame -> its caller */
    uint32_t fr_bytes;    /* bytes of each frame the decoding reads */
};
void pyf_target__chain(const struct pyf_target *t, struct pyf_chain *ret_chain);

struct pyf_frames_copy {
    const uint64_t *raddrs; /* innermost first */
    const uint8_t *bytes;   /* frame i at bytes + i * stride: at least fr_bytes of it */
    size_t stride;
    size_t n;
};
/* The frames of @c, as pyf_target__stack() would give them. A copy whose chain does not hold
 * together, or that names what is no longer a code object, is PYF_TORN. */
int pyf_target__stack_of_copy(struct pyf_target *t, const struct pyf_frames_copy *c,
                              struct pyf_stack *st, struct pyf_err *reterr);

/*
 * PEP 768 (3.14+): where a debugger asks thread @th to run a Python script at its next safe
 * point, as sys.remote_exec() does: the script's path goes into script_raddr (NUL-terminated,
 * at most script_size bytes), then 1 into the int32 at pending_raddr, then eval_breaker_bit
 * is OR-ed into the word at eval_breaker_raddr. The thread clears the pending call and runs
 * the file the next time it checks its eval breaker (a thread in a blocking C call does not
 * until the call returns). PYF_UNSUPPORTED (-EOPNOTSUPP): the version has no such hook, or
 * the interpreter was started with it off (-X disable_remote_debug,
 * PYTHON_DISABLE_REMOTE_DEBUG); the message says which.
 */
struct pyf_remote_exec {
    uint64_t script_raddr;
    uint32_t script_size;
    uint64_t pending_raddr;
    uint64_t eval_breaker_raddr;
    uint64_t eval_breaker_bit;
};
int pyf_target__remote_exec(struct pyf_target *t, const struct pyf_thread *th,
                            struct pyf_remote_exec *ret, struct pyf_err *reterr);

/* Calls @fn once per bound local variable of @fr (from the latest pyf_target__stack()), in
 * definition order, with the value rendered: None, True, 42, 1.5, 'text', b'bytes', lists,
 * tuples, dicts and sets as repr() gives them (bounded in depth and length, cut with ...),
 * numpy scalars by value, <TypeName at 0x7f...> for other objects, and
 * <invalid object at 0x...> for one that cannot be read. A non-zero return from @fn stops
 * the walk and is returned. */
typedef int (*pyf_local_fn)(void *ctx, const char *name, const char *value);
int pyf_target__locals(struct pyf_target *t, const struct pyf_frame *fr, pyf_local_fn fn, void *ctx,
                       struct pyf_err *reterr);

/* The thread's name from /proc (comm); "" when it cannot be read. */
void pyf_thread_name(pid_t pid, pid_t tid, char *buf, size_t size);

/* Text from a target (a thread's name, a command line, a path, a symbol) can be any bytes;
 * what libpyframes and the daemon hand on is valid UTF-8, made so where it enters: each byte of
 * an invalid sequence becomes U+FFFD. */
bool pyf_utf8_valid(const char *s, size_t n);
/* @in's @n bytes, cleaned, into @out: at most @cap - 1 bytes and a NUL, cut at a character's
 * end; returns the length written. */
size_t pyf_utf8_clean(char *out, size_t cap, const char *in, size_t n);
/* The NUL-terminated text in @buf (of @cap bytes) cleaned in place (cut to fit). */
void pyf_utf8_scrub(char *buf, size_t cap);

/* The name the threading module gives the thread @ident (pyf_thread.ident) of the main
 * interpreter: "MainThread", "Thread-3 (worker)", a name the program chose; "" when it has
 * none (a thread threading did not start or has not registered yet, an interpreter with no
 * threading module). The module's registry (threading._active) is copied when an ident is
 * missing from the last copy, at most five times a second: once per new thread, never per
 * sample. A thread renamed later keeps the name it had when first looked up. */
int pyf_target__thread_py_name(struct pyf_target *t, uint64_t ident, char *buf, size_t size,
                               struct pyf_err *reterr);

/*
 * The asyncio tasks of the main interpreter, as asyncio.all_tasks() and
 * asyncio.print_call_graph() would show them from inside: each task's name and state, the
 * coroutine stack it is suspended in (or, running, its thread's frames down to its
 * coroutine), the future it waits for, and which tasks await it (directly, through gather()
 * or as a TaskGroup's parent). At most @max tasks; a task that kept changing while read is
 * left out and counted in torn. *ret is the caller's: pyf_tasks_free(). No asyncio imported:
 * no tasks. PYF_UNSUPPORTED: asyncio without its C module, a stripped 3.6 (whose tasks only a
 * symbol finds) or a 3.6 core.
 */
enum pyf_task_state {
    PYF_TASK_WAITING,   /* suspended in an await */
    PYF_TASK_RUNNING,   /* its coroutine runs on a thread now (pyf_task.tid) */
    PYF_TASK_SCHEDULED, /* created, not started yet */
    PYF_TASK_DONE,
    PYF_TASK_CANCELLED,
};
#define PYF_TASK_FRAMES_MAX 64 /* frames of a task's stack kept; deeper is cut */

struct pyf_task_frame {
    char func[128];
    char file[256];
    int32_t line;
};

struct pyf_task {
    uint64_t raddr;
    char name[128]; /* "" where the version has no names (3.7) */
    enum pyf_task_state state;
    pid_t tid;                 /* PYF_TASK_RUNNING: the thread running it */
    uint64_t waits_for;        /* the future it waits for; 0: none */
    char waits_for_type[64];   /* that future's type name: "_asyncio.Future", "_GatheringFuture" */
    size_t frame0, n_frames;   /* its stack: pyf_tasks.frames[frame0...], innermost first */
    size_t parent0, n_parents; /* the tasks awaiting it: pyf_tasks.parents[parent0...] */
};

struct pyf_tasks {
    struct pyf_task *tasks;
    size_t n_tasks;
    struct pyf_task_frame *frames;
    size_t n_frames;
    size_t *parents; /* indices into tasks */
    size_t n_parents;
    size_t total; /* tasks found: more than n_tasks when @max was reached */
    size_t torn;  /* tasks left out: they changed every time they were read */
};

int pyf_target__tasks(struct pyf_target *t, size_t max, struct pyf_tasks **ret,
                      struct pyf_err *reterr);
void pyf_tasks_free(struct pyf_tasks *tasks); /* NULL is a no-op */
/* "waiting", "running", "scheduled", "done", "cancelled". */
const char *pyf_task_state_name(enum pyf_task_state s);

/*
 * The asyncio tasks running now, each with the frame of its own coroutine (on the stack of the
 * thread that runs it) and that frame's code object: a stack read just before that holds a
 * frame at that address with that code ran the task then (the stack's thread ran it; the
 * caller matches them). Cheap, whatever the number of tasks: only asyncio's own record of each
 * loop's current task is read (a few reads; from 3.14 each thread state's, of @threads, the
 * caller's last pyf_target__sample() or pyf_target__threads(), or NULL: read here). At most
 * @cap; no asyncio, none running: *ret_n 0.
 */
struct pyf_running_task {
    uint64_t task, coro, coro_frame, code;
    char name[128]; /* "" where the version has no names (3.6, 3.7) */
};
int pyf_target__running_tasks(struct pyf_target *t, const struct pyf_thread *threads,
                              size_t n_threads, struct pyf_running_task *ret, size_t cap,
                              size_t *ret_n, struct pyf_err *reterr);
/* Cheaper still: the tasks asyncio says run now, with their coroutines, not read further. A
 * task that is among them, with the same coroutine, before and after a read of the stacks
 * was pending throughout, and so its coroutine alive (its frame's address its own). */
struct pyf_current_task {
    uint64_t task, coro;
};
int pyf_target__current_tasks(struct pyf_target *t, const struct pyf_thread *threads,
                              size_t n_threads, struct pyf_current_task *ret, size_t cap,
                              size_t *ret_n, struct pyf_err *reterr);
/* The one of @run[0..n_run) whose coroutine's frame, with its code, is on @st, that frame's
 * index in *ret_frame (may be NULL); NULL: none. */
const struct pyf_running_task *pyf_running_task_on(const struct pyf_stack *st,
                                                   const struct pyf_running_task *run, size_t n_run,
                                                   size_t *ret_frame);

/* A target's files, opened for reading only once they are regular files: each name is looked
 * up first (O_PATH), so no device or FIFO a target's user puts at a name is opened as root.
 * Both return a descriptor, or -1 with errno (EINVAL: not a regular file). */
int pyf_open_regular(int path_fd); /* what O_PATH descriptor @path_fd names; it is closed */
/* @path (absolute, as process @pid names it) inside its root: symlinks resolve in that root,
 * never into the caller's (openat2 RESOLVE_IN_ROOT). */
int pyf_open_in_root(pid_t pid, const char *path);

#endif
