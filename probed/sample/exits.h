/*
 * exits.h - how every attached process ended, with no injection: the kernel tells root of
 * every process's exit, with its status (the netlink process connector, PROC_EVENT_EXIT),
 * and logs what it did to it (/dev/kmsg: the OOM killer's "Killed process N", a
 * "python3[N]: segfault at ..."). For each exit of a target, a row of the crashes table goes
 * through the outbox: kind exit (its status), signal (its number, core dumped or not) or
 * oom-kill (a SIGKILL the OOM killer logged), the message in words, and the kernel's lines.
 *
 * Threads: exits_start/stop from main; the thread reads the registry and appends to the
 * outbox. The counters are read by /metrics. An exit is held EXITS_SETTLE_MS before it is
 * written, so that the kernel's lines about it (logged before the exit, read a moment later)
 * are with it. Memory: fixed, sized here.
 * Failure: without the connector (no CAP_NET_ADMIN) or /dev/kmsg (no CAP_SYSLOG), exits_start
 * logs why and the daemon goes on without rows, or without the kernel's lines.
 */
#ifndef PROBED_EXITS_H
#define PROBED_EXITS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sample/outbox.h"
#include "sample/targets.h"

#define EXITS_SETTLE_MS 300
#define EXITS_PENDING_MAX 256   /* exits of targets waiting for their kernel lines */
#define EXITS_RECORDED 256      /* targets whose end was recorded, remembered: each once */
#define EXITS_KMSG_LINES 128    /* the kernel's recent lines kept */
#define EXITS_REMEMBER_MS 60000 /* how long a target that ended is still matched to an exit */

enum exit_kind { EXIT_CLEAN, EXIT_SIGNAL, EXIT_OOM, EXIT_KINDS };

struct exits;

/* The thread starts at once; -errno when it cannot (neither source could be opened). */
int exits_start(struct targets *reg, struct outbox *ob, struct exits **ret);
void exits_stop(struct exits *e); /* NULL is a no-op */
/* Rows written, by kind ("exit", "signal", "oom-kill"), for /metrics; and the exits of
 * targets lost (the outbox full, the connector's buffer overrun). */
uint64_t exits__count(const struct exits *e, enum exit_kind kind);
uint64_t exits__lost(const struct exits *e);
const char *exit_kind_name(enum exit_kind kind);

/* What the kernel's line @text says of a process: its pid, and whether the OOM killer killed it
 * (*ret_oom) or it faulted (a segfault, a trap); 0 when it names none. For tests too. */
pid_t exits_kmsg_pid(const char *text, bool *ret_oom);

#endif
