/* log.c - see log.h. */
#define _GNU_SOURCE
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const level_names[] = {"error", "warning", "info", "debug"};

static void vlog(enum log_level level, const char *fmt, va_list ap, const char *suffix)
{
    char line[1024];
    int n = vsnprintf(line, sizeof(line), fmt, ap);

    if (n < 0)
        return;
    /* One write per line so that lines of different threads do not interleave. */
    fprintf(stderr, "probed: %s: %s%s%s\n", level_names[level], line, suffix ? ": " : "",
            suffix ? suffix : "");
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vlog(level, fmt, ap, NULL);
    va_end(ap);
}

int log_errno(enum log_level level, int neg_errno, const char *fmt, ...)
{
    char buf[128];
    va_list ap;

    va_start(ap, fmt);
    vlog(level, fmt, ap, strerror_r(-neg_errno, buf, sizeof(buf)));
    va_end(ap);
    return neg_errno;
}

void log_warning(const char *msg)
{
    log_msg(LOG_WARN, "%s", msg);
}
