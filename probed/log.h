/*
 * log.h - the daemon's log: one line per event on stderr (journald stores it under systemd).
 *
 * Libraries never log (they return errors); the daemon code that decides what to do logs
 * once. Per-sample failures are counted, never logged. Threads: any (one fprintf per line).
 */
#ifndef PROBED_LOG_H
#define PROBED_LOG_H

enum log_level { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Logs @msg as a warning: the callback of a library that says what it did (connlimit.h). */
void log_warning(const char *msg);

/* Logs "@fmt: strerror(-@neg_errno)" and returns @neg_errno, for `return log_errno(...)`. */
int log_errno(enum log_level level, int neg_errno, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
