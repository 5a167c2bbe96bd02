/*
 * errbuf.h - the error message of a call that reports into a caller's buffer: formats what
 * failed and why into @err and returns @r (a -errno), so that a failure path is one line:
 *     return errbuf_set(err, errlen, -errno, "open %s: %s", path, strerror(errno));
 * Also the HTTP status a libpyframes error means to the API, and the monotonic clock in
 * milliseconds that such calls time themselves with.
 */
#ifndef PROBED_ERRBUF_H
#define PROBED_ERRBUF_H

#include <stddef.h>

#include "pyframes.h"

int errbuf_set(char *err, size_t errlen, int r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* 404 gone, 403 denied, 422 not Python or unsupported, else 500. */
int errbuf_http_status(const struct pyf_err *e);

/* CLOCK_MONOTONIC in milliseconds. */
double mono_ms(void);

#endif
