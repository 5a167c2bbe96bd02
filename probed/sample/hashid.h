/*
 * hashid.h - ids of strings, frames and stacks: 64-bit content hashes (xxh3).
 *
 * The same content always gets the same id, in every daemon run, so ids need no table to be
 * handed out and a definition sent twice is harmless. 0 is reserved (the empty stack), and
 * ids are signed because SQLite integers are.
 */
#ifndef PROBED_HASHID_H
#define PROBED_HASHID_H

#include <stdint.h>
#include <string.h>
#include <xxhash.h>

static inline int64_t hashid_of(const void *p, size_t len)
{
    uint64_t h = XXH3_64bits(p, len);
    return (int64_t)(h ? h : 1);
}

static inline int64_t hashid_string(const char *s)
{
    return hashid_of(s, strlen(s));
}

static inline int64_t hashid_frame(int64_t func_id, int64_t file_id, int32_t line,
                                   int32_t first_line)
{
    int64_t key[3] = {func_id, file_id,
                      (int64_t)(((uint64_t)(uint32_t)line << 32) | (uint32_t)first_line)};
    return hashid_of(key, sizeof(key));
}

#endif
