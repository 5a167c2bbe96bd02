/*
 * evalcold.h - the cold part of a stripped interpreter's eval loop, from its unwind tables
 * (evalcold.c says how, and why it can be trusted).
 *
 * Threads: any. Memory: none kept; @elf is the caller's. Failure: -1 when the file has no
 * such part that can be proven to be the function's (the caller names nothing then).
 */
#ifndef PYF_EVALCOLD_H
#define PYF_EVALCOLD_H

#include <libelf.h>
#include <stddef.h>
#include <stdint.h>

/* The file addresses of the cold part of the function at [@hot_start, @hot_end). */
int evalcold_find(Elf *elf, uint64_t hot_start, uint64_t hot_end, uint64_t *ret_start,
                  uint64_t *ret_end);

/* The same over the bytes of .eh_frame (at file address @eh_addr) and of the code section
 * holding the hot part (at @code_addr): what evalcold_find() reads from @elf. */
int evalcold_scan(const uint8_t *eh_frame, size_t eh_size, uint64_t eh_addr, const uint8_t *code,
                  size_t code_size, uint64_t code_addr, uint64_t hot_start, uint64_t hot_end,
                  uint64_t *ret_start, uint64_t *ret_end);

#endif
