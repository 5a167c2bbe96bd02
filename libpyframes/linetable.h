/*
 * linetable.h - bytecode offset -> source line, for each CPython line-table format.
 *
 * Pure functions over a copy of the code object's table: lnotab (3.6-3.9), the 3.10
 * linetable, and the 3.11+ location table. Each mirrors CPython's own PyCode_Addr2Line() for
 * its version, including what it answers for offsets before the first instruction, but is
 * bounded for hostile input: any bytes give an answer or -1, never an overread or a hang.
 * Threads: any. Memory: none.
 */
#ifndef PYF_LINETABLE_H
#define PYF_LINETABLE_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* The line of the instruction at byte offset @addr, or -1 when the table has no line for it. */
int linetable_line(enum pyf_line_format fmt, const uint8_t *tab, size_t len, int first_line,
                   int64_t addr);

#endif
