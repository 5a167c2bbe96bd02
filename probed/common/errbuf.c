/* errbuf.c - see errbuf.h. */
#include "errbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

int errbuf_set(char *err, size_t errlen, int r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return r;
}

int errbuf_http_status(const struct pyf_err *e)
{
    switch (e->kind) {
    case PYF_GONE:
        return 404;
    case PYF_DENIED:
        return 403;
    case PYF_NOT_PYTHON:
    case PYF_UNSUPPORTED:
        return 422;
    default:
        return 500;
    }
}

double mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
