/*
 * follow.h - the descendants of a process, for `attach --children` (torchrun ranks,
 * dataloader workers).
 *
 * Reads /proc/PID/task/TID/children (every thread's children, recursively) so that grand-
 * children started through a launcher or a shell are found too. Bounded: FOLLOW_MAX pids,
 * FOLLOW_DEPTH levels. Threads: any. Failure: none; a process that vanishes is skipped.
 */
#ifndef PROBED_FOLLOW_H
#define PROBED_FOLLOW_H

#include <stddef.h>
#include <sys/types.h>

#define FOLLOW_MAX 256
#define FOLLOW_DEPTH 8

/* Fills @out with the descendants of @pid (not @pid itself); returns how many. */
size_t follow_descendants(pid_t pid, pid_t *out, size_t cap);

#endif
