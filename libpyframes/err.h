/*
 * err.h - filling a struct pyf_err (see pyframes.h) where a failure happens.
 *
 * pyf_fail() formats the message into the caller's struct and returns -errno, so an error
 * path is one line: `return pyf_fail(e, PYF_TORN, EFAULT, raddr, "frame at depth %d", d);`.
 * It never allocates. A NULL @e is allowed (the caller wants only the return value).
 */
#ifndef PYF_ERR_H
#define PYF_ERR_H

#include "pyframes.h"

/* Returns -@sys, or -EIO when @sys is 0. */
int pyf_fail(struct pyf_err *e, enum pyf_err_kind kind, int sys, uint64_t raddr, const char *fmt,
             ...) __attribute__((format(printf, 5, 6)));

/* The kind that a failed read of the target's memory with errno @sys means. */
enum pyf_err_kind pyf_read_err_kind(int sys);

#endif
