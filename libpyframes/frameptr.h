/*
 * frameptr.h - the frame pointer an unwind from only a stack pointer and a pc lacks.
 *
 * A blocked thread is unwound from its sp and pc alone (/proc/PID/task/TID/syscall, native.c):
 * a frame whose CFA its CFI keeps in rbp (a function built with a frame pointer) stops that
 * unwind unless an inner frame saved rbp. Then rbp still holds that frame's own value, which
 * is found in the stack copy, scanning up from the frame's sp: the first slot from which
 * rbp + the CFI's offset - 8 holds a return address right after a call instruction (read from
 * the target's code). A direct call must go to that very function's first byte: proof that
 * no stale word or function pointer passes. An indirect call says nothing of its target: the
 * caller keeps what it finds that way only when the unwind from there reaches the thread's
 * first function (native.c). Words in the frame's own locals between sp and rbp are not
 * return addresses; stale ones lie below sp, where the scan does not look.
 *
 * Threads: any (the caller's Dwfl). Memory: none kept. Failure: -1, nothing found.
 */
#ifndef PYF_FRAMEPTR_H
#define PYF_FRAMEPTR_H

#include <elfutils/libdwfl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pyframes_native.h"

/* rbp in the frame of return address @pc (the innermost pc when @innermost), whose stack
 * pointer was @sp, in @copy of @pid's thread, and how its caller called it: FRAMEPTR_DIRECT
 * or FRAMEPTR_INDIRECT, or -1 (none found). */
#define FRAMEPTR_DIRECT 1
#define FRAMEPTR_INDIRECT 2
int frameptr_find(Dwfl *dwfl, pid_t pid, const struct pyf_stack_copy *copy, uint64_t pc,
                  bool innermost, uint64_t sp, uint64_t *ret_rbp);

/* The length of the indirect call (ff /2, an optional REX prefix) at @c, of @avail bytes, or 0
 * when it is no such call (exposed for the unit tests). */
size_t frameptr_indirect_call_len(const uint8_t *c, size_t avail);

#endif
