/*
 * modfiles.h - the files libdw reads for a live process's modules (its libraries and their
 * debug info), found and opened here rather than by libdw's own callbacks.
 *
 * libdw's dwfl_linux_proc_find_elf opens the path /proc/PID/maps names, as the daemon sees
 * paths: the wrong file for a process in a container, and a blocking open of whatever is at
 * that path now (a FIFO a user put there hangs the thread that reads symbols). Its
 * dwfl_standard_find_debuginfo likewise opens .gnu_debuglink names beside the library, in a
 * folder the target's owner may control, and reads a whole candidate for its CRC. Here:
 *   - a module's file is the mapped file itself, /proc/PID/map_files/START-END (a deleted or
 *     replaced file included, in any mount namespace); without the capability that needs, its
 *     path inside the target's root (/proc/PID/root, openat2 RESOLVE_IN_ROOT: symlinks stay
 *     in that root); anything not a regular file is refused, and opens never block
 *     (O_NONBLOCK);
 *   - its debug info (for functions its own file has no symbol table for, as Ubuntu's libc)
 *     is looked for by build-id in the target's /usr/lib/debug/.build-id and the host's, then
 *     by its .gnu_debuglink name beside it, in its .debug folder and under /usr/lib/debug
 *     (those in the target's root, no symlinks followed), then in debuginfod's cache (files
 *     fetched by `debuginfod-find` or by the daemon, below, keyed by build-id); a candidate is
 * taken only when its build-id is the module's (or, for a module without one, the debuglink's CRC
 * matches a file of at most 256 MiB);
 *   - a module with no symbol table whose debug file is nowhere here is asked of debuginfod
 *     servers in the background (fetchdbg.h), when the daemon runs with DEBUGINFOD_URLS;
 *     modules with a symbol table are not (their DWARF, for source lines, can weigh GBs).
 * Which process a callback is for: libdw does not pass it, so the thread that calls libdw for
 * a process says so first (modfiles_enter), as native.c does at each of its entry points.
 * Threads: any; the process is the calling thread's. Memory: the names returned are malloc'd
 * for libdw to free. Failure: -1 (libdw's "not found"): the module then has no symbols, and
 * its frames are named by library and offset.
 */
#ifndef PYF_MODFILES_H
#define PYF_MODFILES_H

#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <sys/types.h>

#include "fetchdbg.h"
#include "procmaps.h"

/* One process's: its pid, and its maps as last read (which mapping a module's file is). */
struct modfiles {
    pid_t pid;
    struct fetchdbg *fetch; /* asked for a debug file found nowhere here; NULL: none */
    struct procmaps maps;
    bool maps_read;
};

void modfiles_init(struct modfiles *m, pid_t pid);
void modfiles_forget_maps(struct modfiles *m); /* the process mapped or unmapped files */
void modfiles_release(struct modfiles *m);

/* The process the calling thread's next libdw calls are for (NULL: none, the callbacks
 * refuse); @m stays the caller's, and must outlive those calls. */
void modfiles_enter(struct modfiles *m);

/* Dwfl_Callbacks.find_elf and .find_debuginfo for a live process. */
int modfiles_find_elf(Dwfl_Module *mod, void **userdata, const char *module_name, Dwarf_Addr base,
                      char **file_name, Elf **elfp);
int modfiles_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *module_name,
                            Dwarf_Addr base, const char *file_name, const char *debuglink_file,
                            GElf_Word debuglink_crc, char **debuginfo_file_name);

#endif
