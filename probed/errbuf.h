/*
 * errbuf.h - the daemon's one error convention: a call that can fail returns -errno, the kind
 * of failure (which only the API turns into an HTTP status: api/http.c), and fills a
 * caller-owned struct errbuf with what failed and why, for a person (the pid, the path,
 * errno's text, SQLite's reason), so that a failure path is one line:
 *     return errbuf_set(err, -errno, "open %s: %s", path, strerror(errno));
 * Reads of a target report in libpyframes' struct pyf_err instead, the same convention with
 * a kind that says whether to drop the sample, stop, or refuse the process.
 * Threads: any. Memory: the caller's; nothing allocates. Failure: none.
 */
#ifndef PROBED_ERRBUF_H
#define PROBED_ERRBUF_H

#include <stddef.h>

#include "pyframes.h"

struct errbuf {
    char msg[512];
};

/* Formats the message into @err (NULL: none wanted) and returns @r. */
int errbuf_set(struct errbuf *err, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A libpyframes error as the daemon's: its message, and -ESRCH gone, -EPERM denied, -ENOEXEC
 * not a CPython we read (or not Python at all), -EAGAIN torn, else -EIO. */
int errbuf_from_pyf(struct errbuf *err, const struct pyf_err *e);

#endif
