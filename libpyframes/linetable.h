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

/* The line a frame stopped at @addr is on, for a person: linetable_line(), except that an
 * instruction with no line of its own gets the line of the last instruction before it that
 * has one (else @first_line). Such an instruction is most often the jump back at the end of a
 * loop body on 3.10 and 3.11, where a thread waits for the GIL: 3.12 gives that jump the line
 * of the statement before it, as this does. -1 only for an offset past the table. */
int linetable_frame_line(enum pyf_line_format fmt, const uint8_t *tab, size_t len, int first_line,
                         int64_t addr);

#endif
