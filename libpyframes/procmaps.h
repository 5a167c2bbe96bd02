/*
 * procmaps.h - the file-backed mappings of a process, from /proc/PID/maps; and the one
 * parser of a thread's /proc schedstat line.
 *
 * The maps are read once per pyf_target_open() to find the ELF file that holds the Python
 * runtime and to turn a file offset of that file into an address in the target.
 * Memory: procmaps_read() allocates the list; procmaps_free() frees it.
 * Failure: -errno; ENOENT/ESRCH mean the process is gone, EACCES that we may not look.
 */
#ifndef PYF_PROCMAPS_H
#define PYF_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct procmap {
    uint64_t start, end, offset;
    uint64_t inode;
    char perms[5];
    char *path; /* owned by the list; "" for anonymous mappings; " (deleted)" stripped */
};

struct procmaps {
    struct procmap *maps;
    size_t n;
};

int procmaps_read(pid_t pid, struct procmaps *ret_maps);
void procmaps_free(struct procmaps *pm);

/* /proc/PID/task/TID/schedstat's three numbers (run time ns, run-queue wait ns, times run)
 * from @text into @ret; false when it does not hold them. Read per thread per tick, so no
 * sscanf (a microsecond here). */
bool procmaps_schedstat(const char *text, uint64_t ret[3]);

/* The address at which byte @file_offset of @path is mapped, or 0 if it is not. */
uint64_t procmaps__addr_of_offset(const struct procmaps *pm, const char *path,
                                  uint64_t file_offset);

#endif
