/* err.c - struct pyf_err helpers; see err.h. */
#include "err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pyf_fail(struct pyf_err *e, enum pyf_err_kind kind, int sys, uint64_t raddr, const char *fmt,
             ...)
{
    if (e) {
        va_list ap;
        int n;

        e->kind = kind;
        e->sys = sys;
        e->raddr = raddr;
        va_start(ap, fmt);
        n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        if (n < 0)
            n = 0;
        /* the errno text says why a call failed; "not Python" and "unsupported" are findings,
         * their errno a code for the caller, and its text would only repeat them */
        if (sys && kind != PYF_NOT_PYTHON && kind != PYF_UNSUPPORTED && (size_t)n < sizeof(e->msg))
            snprintf(e->msg + n, sizeof(e->msg) - n, ": %s", strerror(sys));
    }
    return sys ? -sys : -EIO;
}

enum pyf_err_kind pyf_read_err_kind(int sys)
{
    switch (sys) {
    case ESRCH:
        return PYF_GONE;
    case EPERM:
    case EACCES:
        return PYF_DENIED;
    default: /* EFAULT, short reads: memory that moved under us */
        return PYF_TORN;
    }
}

bool pyf_err_fatal(const struct pyf_err *e)
{
    return e->kind != PYF_OK && e->kind != PYF_TORN;
}

const char *pyf_err_kind_name(enum pyf_err_kind kind)
{
    static const char *const names[] = {
        [PYF_OK] = "ok",
        [PYF_TORN] = "torn",
        [PYF_GONE] = "gone",
        [PYF_DENIED] = "denied",
        [PYF_NOT_PYTHON] = "not-python",
        [PYF_UNSUPPORTED] = "unsupported",
        [PYF_INVALID] = "invalid",
    };
    if ((unsigned)kind < sizeof(names) / sizeof(names[0]) && names[kind])
        return names[kind];
    return "unknown";
}
