/*
 * runstate.h - the run-state board: whether each thread the sampler looks at runs, and whether
 * it was switched in or out since its last look, kept by the kernel (bpf/runboard.bpf.c, at
 * each sched_switch) in memory the daemon maps, and given to libpyframes as its run-state
 * source (pyf_runstate_source). A look is a load from that memory, where /proc costs a
 * schedstat read a thread a tick and a stat read for each thread that ran (3 reads a tick,
 * 6-20 us at 100 Hz here, half a lone target's tick).
 *
 * A thread is watched from libpyframes' first question about it: its slot is set, its tid put
 * in the program's map, then its state read once from /proc/PID/task/TID/stat (the program
 * notes every switch after that). A thread the program saw exit frees its slot at its next
 * look, or at the next sweep (when a new thread is watched, at most once a second); a
 * process's go when a pyf_target of it is freed (a detach, a backtrace's one-off read). The
 * program is attached only while some thread is watched: without targets, a switch costs
 * nothing. Past RUNBOARD_SLOTS threads, and wherever the board is not running, libpyframes
 * reads /proc as before.
 *
 * One board a process, as libpyframes' source is: runstate_start() from main before any target
 * is read, runstate_stop() after the last read. Threads: any; one mutex, held for a look (a
 * few loads) or a watch (two syscalls and a /proc read). Memory: 512 KiB mapped and about
 * 1 MiB of index, at start. Failure: runstate_start() says why the board cannot run (built
 * without eBPF, no CAP_BPF, a kernel without BTF, a daemon in a pid namespace of a container:
 * the program sees global tids); the daemon then reads /proc, and GET /v1/status says why.
 */
#ifndef PROBED_RUNSTATE_H
#define PROBED_RUNSTATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

int runstate_start(struct errbuf *err);
void runstate_stop(void); /* no-op when not started */

struct runstate_stats {
    bool running;     /* the board answers; else error says why not */
    uint64_t watched; /* threads with a slot now */
    uint64_t watches; /* since start: slots set */
    uint64_t exited;  /* slots freed because the program saw the thread exit */
    uint64_t full;    /* questions answered from /proc because no slot was free */
    char error[512];
};
void runstate_stats(struct runstate_stats *ret);

#endif
