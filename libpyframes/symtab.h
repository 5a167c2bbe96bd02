/*
 * symtab.h - the functions of one ELF file, sorted by address, and a cache of them shared by the
 * processes that map the same file (struct pyf_symcache, keyed by build-id).
 *
 * libdw's own lookup (dwfl_module_addrinfo) scans a module's whole symbol table each time: ~70 us
 * in libpython, far more in libtorch. A symtab makes it a binary search. Its addresses are the
 * file's own (before the load bias) and its names are copies, so one table serves every process
 * that maps the file, wherever it maps it: the ranks of a torch job read and sort libtorch's
 * table once between them (native.c keeps, per process, which table serves which module).
 *
 * Threads: a pyf_symcache is shared by threads (a mutex guards its list); a symtab never
 * changes once built, but for each function's demangled name, published once with an atomic
 * compare-and-swap. Memory: the cache owns the tables; symcache__get() takes a reference that
 * symcache__put() gives back, the last one freeing the table. Failure: NULL (no memory).
 */
#ifndef PYF_SYMTAB_H
#define PYF_SYMTAB_H

#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pyframes_native.h"

#define SYMTAB_BUILD_ID_MAX 64

struct sym {
    uint64_t start, end; /* in the file's addresses */
    const char *name;    /* in the table's names */
    const char *shown;   /* the C++ name, else name; NULL until first asked (symtab__shown) */
};

struct symtab {
    uint8_t build_id[SYMTAB_BUILD_ID_MAX];
    size_t build_id_len; /* 0: the file has none, the table is not shared */
    int refs;            /* under the cache's lock */
    struct sym *syms;
    size_t n;
    char *names;
    size_t bytes;         /* held by the table, for the cache's figures */
    bool from_debug_file; /* its functions came from a separate debug file */
};

/* Builds @m's table (.symtab, else .dynsym, or separate debug info); @bias is its load bias. */
struct symtab *symtab_build(Dwfl_Module *m, Dwarf_Addr bias);
void symtab_free(struct symtab *t); /* NULL is a no-op */

/* The function covering file address @addr, or NULL. */
struct sym *symtab__find(const struct symtab *t, uint64_t addr);
/* The name of @s as C++ shows it (demangled once, kept), or its name. */
const char *symtab__shown(struct sym *s);

/* @m's table from @c: the one already built for its build-id, else built now. A module with no
 * build-id gets a table of its own (shared with no one). NULL: no memory. */
struct symtab *symcache__get(struct pyf_symcache *c, Dwfl_Module *m, Dwarf_Addr bias);
void symcache__put(struct pyf_symcache *c, struct symtab *t); /* NULL is a no-op */
/* The cache's debuginfod fetcher (fetchdbg.h); NULL: it fetches nothing. A table built
 * without the debug file that the fetcher has since landed is not handed out again: the
 * next symcache__get() of that build-id builds it anew, from a module that has the file. */
struct fetchdbg *symcache__fetcher(struct pyf_symcache *c);

#endif
