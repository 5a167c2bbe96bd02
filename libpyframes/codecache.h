/*
 * codecache.h - what we learnt about each code object: names, file, line table.
 *
 * A code object's names and line table never change, so they are read once and kept here,
 * keyed by address. Addresses are reused when code objects die (exec(), lambdas built at run
 * time), so an entry also keeps the object's identity (type, name, file and table pointers,
 * first line), re-read with every sample in one batched read, and a mismatch is a miss.
 *
 * 4-way set associative; an entry used by the walk in progress is never evicted (its strings
 * are borrowed by the caller's pyf_frames), so when a whole set is pinned the entry goes to a
 * per-walk overflow list, freed when the next walk begins.
 * Threads: the owner's. Memory: entries own their strings; codecache_free() frees all.
 */
#ifndef PYF_CODECACHE_H
#define PYF_CODECACHE_H

#include <stddef.h>
#include <stdint.h>

#define CODE_KEY_WORDS 5

struct code_info {
    uint64_t raddr;
    uint64_t key[CODE_KEY_WORDS];
    char *func, *file; /* owned, UTF-8 */
    uint8_t *lines;    /* owned copy of the line table */
    size_t n_lines;
    uint8_t *code;  /* 3.11-3.13: owned copy of the bytecode (NULL: not kept) */
    uint8_t *sites; /* owned: per code unit of it, where a caller may stand (stack.c) */
    size_t n_code;
    uint32_t code_stamp; /* the walk that copied the bytecode */
    int32_t first_line;
    uint32_t flags;    /* co_flags */
    int64_t memo_addr; /* last (offset -> line) answer: a sleeping frame asks the same */
    int32_t memo_line;
    uint32_t stamp; /* walk that last used it */
};

struct codecache;

struct codecache *codecache_new(size_t n_sets);
void codecache_free(struct codecache *cc);

/* Starts a walk: frees the previous walk's overflow entries. */
void codecache__begin(struct codecache *cc);
/* Borrowed: the entry for @raddr whose key matches, pinned for this walk, or NULL. */
struct code_info *codecache__find(struct codecache *cc, uint64_t raddr, const uint64_t *key);
/* The set entry for @raddr whose strings are @func and @file (a stack resolved by an earlier
 * walk borrows them), pinned for this walk; NULL when it was evicted since (or lives in the
 * overflow list, freed when this walk began): then those strings may be gone. */
struct code_info *codecache__pin(struct codecache *cc, uint64_t raddr, const char *func,
                                 const char *file);
/* Borrowed: an empty entry for @raddr, pinned for this walk; NULL on allocation failure.
 * The caller fills func/file/lines with malloc'd memory that the cache then owns. */
struct code_info *codecache__insert(struct codecache *cc, uint64_t raddr, const uint64_t *key);

struct codecache_stats {
    uint64_t hits, misses, evictions;
};
void codecache__stats(const struct codecache *cc, struct codecache_stats *ret_stats);

#endif
