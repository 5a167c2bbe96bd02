/*
 * elfimg.h - symbols and version strings of one ELF file on disk (libelf).
 *
 * Finds where the CPython runtime lives in the file that holds it (the executable or
 * libpython): symbol values from .symtab, falling back to .dynsym when the file is stripped,
 * and the PY_VERSION string in .rodata when the version has no Py_Version symbol.
 * Memory: elfimg_open() maps the file; elfimg_free() unmaps it.
 * Failure: -errno with a message in the pyf_err.
 */
#ifndef PYF_ELFIMG_H
#define PYF_ELFIMG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pyframes.h"

struct elfimg;

/* @path is opened as given: pass /proc/PID/root/<path> to see the target's mount namespace.
 * The target's user may have swapped that file for a link to anything since it was mapped
 * (the daemon opens it as root): it is opened without blocking (a FIFO) or taking a terminal,
 * must be a regular file, and when @inode is not 0 the very file mapped (its inode, from
 * /proc/PID/maps); else -EPERM, PYF_DENIED. */
int elfimg_open(const char *path, uint64_t inode, struct elfimg **ret_img, struct pyf_err *reterr);
void elfimg_free(struct elfimg *img);

/* The symbol's link-time address (st_value); -ENOENT when neither table has it. */
int elfimg__symbol(const struct elfimg *img, const char *name, uint64_t *ret_vaddr);
bool elfimg__has_symtab(const struct elfimg *img);

/* p_vaddr and p_offset of the first PT_LOAD segment, page-aligned down: the load bias of
 * the file in a process is (where file offset @ret_offset is mapped) - @ret_vaddr. */
int elfimg__first_load(const struct elfimg *img, uint64_t *ret_vaddr, uint64_t *ret_offset);

/* The first NUL-terminated "M.N.P" string (with an optional a1/b2/rc3 and +) in the read-only
 * data whose major.minor is @major.@minor, or any 2.x/3.x one when @minor < 0. */
int elfimg__find_version(const struct elfimg *img, int major, int minor, char *buf, size_t size);

/* Scanner used by elfimg__find_version(), exposed for the fuzzer and unit tests. */
int elfimg_scan_version(const unsigned char *data, size_t len, int major, int minor, char *buf,
                        size_t size);

#endif
