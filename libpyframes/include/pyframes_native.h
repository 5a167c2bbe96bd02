/*
 * pyframes_native.h - the native (C, C++) frames of a process's threads, for mixed stacks.
 *
 * Unlike the rest of libpyframes this stops the target, briefly: pyf_stop_process() seizes
 * every thread with ptrace and interrupts it (PTRACE_SEIZE + PTRACE_INTERRUPT: no signal the
 * process could see), and pyf_stopped_free() lets every one go again, in every path, errors
 * and threads that exit included. While they are held, pyf_native__unwind() walks a thread's
 * stack with libdw (DWARF CFI from .eh_frame, the vDSO's included: no frame pointers needed) and
 * the caller reads the Python frames with libpyframes, which then cannot tear. Naming the addresses
 * (pyf_native__symbol(), libdw: function, else the mapped file and offset; pyf_native__source():
 * file:line where debug info is found) is done after the threads are let go.
 *
 *   pyf_native_open(pid, &nat, &err);
 *   pyf_stop_process(pid, &held, &err);
 *   pyf_native__unwind(nat, tid, pcs, cap, &n, &err);      per held thread
 *   pyf_stopped_free(held);                                  every thread runs again
 *   pyf_native__symbol(nat, pcs[i], i == 0, &frame);
 *   pyf_native__source(nat, &frame, i == 0);                 file:line, if wanted
 *
 * Threads: ptrace ties a held thread to the thread that seized it: stop, unwind and free on
 * one thread; a pyf_native unwinds the threads of one stop only. Memory: strings in a
 * pyf_native_frame belong to the pyf_native (valid until pyf_native_free()). Failure: 0 or -errno
 * with a pyf_err; PYF_DENIED without the right to trace (root with CAP_SYS_PTRACE, or the owner
 * where ptrace_scope allows).
 */
#ifndef PYFRAMES_NATIVE_H
#define PYFRAMES_NATIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pyframes.h"

#define PYF_NATIVE_DEPTH_MAX 512 /* deepest native stack unwound; deeper is truncated */

/* The threads of a process, held by ptrace. */
struct pyf_stopped;

int pyf_stop_process(pid_t pid, struct pyf_stopped **ret_stopped, struct pyf_err *reterr);
/* Whether thread @tid is held (it existed, and stopped). */
bool pyf_stopped__holds(const struct pyf_stopped *s, pid_t tid);
/* The held threads, in the order they were stopped (@i < pyf_stopped__n()). */
size_t pyf_stopped__n(const struct pyf_stopped *s);
pid_t pyf_stopped__tid(const struct pyf_stopped *s, size_t i);
/* Lets every held thread go (a signal that arrived meanwhile is delivered); NULL is a no-op. */
void pyf_stopped_free(struct pyf_stopped *s);

struct pyf_native_frame {
    uint64_t pc;
    const char *function; /* NULL when no symbol covers pc */
    uint64_t function_offset;
    const char *object;     /* the mapped file; NULL for memory mapped from no file known (JIT,
                               or a library loaded after pyf_native_open / reread_maps) */
    uint64_t object_offset; /* pc as an address of that file (what addr2line takes) */
    const char *src_file;   /* NULL without debug info */
    int32_t src_line;
    bool eval_loop; /* the interpreter's eval loop: a mixed stack puts Python frames here */
};

/* Function tables of ELF files, shared by the pyf_natives opened with the same cache: keyed by
 * build-id, a library that many processes map (libtorch, in every rank of a job) is read and
 * sorted once, and held once, while any of them uses it. Threads: any (it has a lock). Free it
 * after every pyf_native that uses it. */
struct pyf_symcache;
struct pyf_symcache_stats {
    uint64_t tables; /* held now, shared by build-id */
    uint64_t builds; /* tables built */
    uint64_t hits;   /* a process found its table built already (by another process) */
    uint64_t bytes;  /* held now */
    /* debug files asked of debuginfod servers (pyf_symcache__fetch_debuginfo), landed, found
     * nowhere (or failed: timeout, server down), and not asked: the queue was full */
    uint64_t debuginfod_requested, debuginfod_fetched, debuginfod_failed, debuginfod_dropped;
};
int pyf_symcache_new(struct pyf_symcache **ret); /* -ENOMEM */
void pyf_symcache_free(struct pyf_symcache *c);  /* NULL is a no-op */
void pyf_symcache__stats(struct pyf_symcache *c, struct pyf_symcache_stats *ret);
/* Asks the debuginfod servers of DEBUGINFOD_URLS, in a thread of the cache's own, for the
 * debug file of each module that has no symbol table and no debug file on this machine
 * (fetchdbg.h); once one lands, pyf_native__stale() says so to each process's reader.
 * -ENOENT: DEBUGINFOD_URLS is not set; -errno: the thread did not start. */
int pyf_symcache__fetch_debuginfo(struct pyf_symcache *c, struct pyf_err *reterr);

/* The symbol tables of a process (libdw) and an unwinder for its held threads. */
struct pyf_native;

/* @symbols: the shared function tables to use (NULL: tables of its own). */
int pyf_native_open(pid_t pid, struct pyf_symcache *symbols, struct pyf_native **ret_native,
                    struct pyf_err *reterr);
/* The same for a core file (pyf_target_open_core): its threads are unwound from the registers
 * and stack the core holds, with pyf_native__unwind() and no pyf_stop_process(). */
int pyf_native_open_core(const char *core_path, const char *executable,
                         struct pyf_native **ret_native, struct pyf_err *reterr);
void pyf_native_free(struct pyf_native *n); /* NULL is a no-op */

/* The return addresses of held thread @tid, innermost first (the first is where it is).
 * *ret_truncated: the stack goes deeper than @cap. */
int pyf_native__unwind(struct pyf_native *n, pid_t tid, uint64_t *ret_pcs, size_t cap,
                       size_t *ret_n, bool *ret_truncated, struct pyf_err *reterr);

/* A thread's user registers and the top of its stack as the kernel copied them at a sample
 * (perf PERF_SAMPLE_REGS_USER + PERF_SAMPLE_STACK_USER, or BPF), x86-64. */
#define PYF_DWARF_REGS 17 /* rax rdx rcx rbx rsi rdi rbp rsp r8-r15 rip: DWARF's numbering */
#define PYF_DWARF_BP 6
#define PYF_DWARF_SP 7
#define PYF_DWARF_IP 16
struct pyf_stack_copy {
    pid_t tid;
    uint64_t regs[PYF_DWARF_REGS];
    const uint8_t *stack; /* @size bytes from regs[PYF_DWARF_SP] up */
    size_t size;
    /* bit i: regs[i] is known; 0: all are. An unknown register the unwind needs ends it there
     * (never a guessed value: a wrong frame is worse than a stack cut short). */
    uint32_t regs_known;
};

/* The return addresses of a sampled thread, unwound from @copy alone: the process is neither
 * stopped nor read (it ran on since the sample). A pyf_native unwinds either held threads
 * (pyf_native__unwind) or copies, whichever it is first asked for. */
int pyf_native__unwind_copy(struct pyf_native *n, const struct pyf_stack_copy *copy,
                            uint64_t *ret_pcs, size_t cap, size_t *ret_n, bool *ret_truncated,
                            struct pyf_err *reterr);

/*
 * The return addresses of thread @tid while it waits (blocked in a syscall, or asleep): read
 * from the process without stopping it. Its user sp and pc where it entered the kernel come
 * from /proc/PID/task/TID/syscall, the top of its stack (PYF_BLOCKED_STACK_BYTES) from its
 * memory, and the unwind needs no other register (the CFI of code built without frame
 * pointers finds every frame from sp). The thread is proven to have waited throughout: its
 * schedstat (run time, wait, times run), or the run-state source's numbers
 * (pyf_runstate_source), are the same before and after the reads, so it was not switched in;
 * *ret_sched gets those numbers, by which a caller knows the stack still holds while they stay
 * the same (pyf_thread.sched). -EAGAIN (PYF_TORN): it ran meanwhile, or runs.
 */
#define PYF_BLOCKED_STACK_BYTES 32768
int pyf_native__unwind_blocked(struct pyf_native *n, pid_t tid, uint64_t *ret_pcs, size_t cap,
                               size_t *ret_n, uint64_t ret_sched[3], struct pyf_err *reterr);

/* Loads every module's unwind tables and symbols now rather than at the first samples, whose
 * unwinding would otherwise take milliseconds each while samples pile up. */
void pyf_native__prepare(struct pyf_native *n);

/* Reads the process's mappings again (they were read at open), for the libraries loaded since,
 * and prepares the new ones. Call it when a copy could not be unwound past its first frame,
 * or when pyf_native__stale(): then every module is read afresh from its files, so that one
 * named by library and offset gets the functions of its debug file. The names it gave before
 * (pointers into its tables) are not valid after it. */
int pyf_native__reread_maps(struct pyf_native *n, struct pyf_err *reterr);
/* Whether debug files were fetched since its modules were read (pyf_symcache__fetch_debuginfo):
 * pyf_native__reread_maps() then names their functions. */
bool pyf_native__stale(const struct pyf_native *n);

/* Names @pc (@innermost: the thread's own pc, not a return address, which points past its
 * call): object and function, from tables pyf_native__prepare() can load ahead. Always fills
 * @ret_frame; what cannot be found stays NULL, src_file/src_line included. */
void pyf_native__symbol(struct pyf_native *n, uint64_t pc, bool innermost,
                        struct pyf_native_frame *ret_frame);
/* The order of a mixed stack, innermost first: where @st's Python frames go among @n_native
 * native ones, given which of those are the interpreter's eval loop (@eval_loop[i], from
 * pyf_native_frame.eval_loop). A call of the eval loop runs one entry frame and the frames it
 * called inline (3.11+; <= 3.10 every frame is an entry), so each eval-loop frame stands for
 * the Python frames up to and including the next entry. An eval loop with no Python frame left
 * stays; Python frames left over go last. @ret_order (room for @n_native + st->n_frames) gets
 * native index i as i, Python index k as -(k + 1). *ret_agree: as many eval loops as entry
 * frames (a stack read at another instant than the native one may not be). Returns the count. */
size_t pyf_mixed_order(const bool *eval_loop, size_t n_native, const struct pyf_stack *st,
                       int32_t *ret_order, bool *ret_agree);

/* Adds source file:line to a frame pyf_native__symbol() named, where debug info has them. The
 * first lookup in an object loads its line table (hundreds of ms for libpython with debug
 * info): for a backtrace, not for a sampler naming frames while its rings fill. */
void pyf_native__source(struct pyf_native *n, struct pyf_native_frame *frame, bool innermost);

#endif
