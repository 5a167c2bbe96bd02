/* errbuf.c - see errbuf.h. */
#include "errbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int errbuf_set(struct errbuf *err, int r, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return r;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return r;
}

int errbuf_from_pyf(struct errbuf *err, const struct pyf_err *e)
{
    int r;

    switch (e->kind) {
    case PYF_GONE:
        r = -ESRCH;
        break;
    case PYF_DENIED:
        r = -EPERM;
        break;
    case PYF_NOT_PYTHON:
    case PYF_UNSUPPORTED:
        r = -ENOEXEC;
        break;
    case PYF_TORN:
        r = -EAGAIN;
        break;
    default:
        r = -EIO;
        break;
    }
    return errbuf_set(err, r, "%s", e->msg);
}
