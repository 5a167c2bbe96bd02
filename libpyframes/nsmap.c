/*
 * nsmap.c - see nsmap.h. One scan reads /proc/PID/task/ *\/status (the NSpid line) of every
 * thread: about 10 us a thread, done when the thread set changed, not per sample.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nsmap.h"

#define RESCAN_MIN_NS 5000000ull /* 5 ms between scans caused by misses */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The last id of the NSpid line of a /proc status file: the id in the innermost namespace.
 * 0 when the line is missing (a kernel before 4.1) or unreadable. */
static pid_t innermost_id(int dirfd, const char *path)
{
    char buf[2048];
    const char *line, *last;
    ssize_t n;
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    line = strstr(buf, "\nNSpid:");
    if (!line)
        return 0;
    line += strlen("\nNSpid:");
    last = line;
    for (const char *p = line; *p && *p != '\n'; p++)
        if ((*p == ' ' || *p == '\t') && p[1] >= '0' && p[1] <= '9')
            last = p + 1;
    return (pid_t)atoi(last);
}

void nsmap_init(struct nsmap *m, pid_t pid)
{
    char path[64];
    struct stat ours, theirs;

    *m = (struct nsmap){.ns_pid = pid};
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
    if (stat("/proc/self/ns/pid", &ours) < 0 || stat(path, &theirs) < 0)
        return;
    if (ours.st_ino == theirs.st_ino && ours.st_dev == theirs.st_dev)
        return;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    m->ns_pid = innermost_id(AT_FDCWD, path);
    m->active = m->ns_pid > 0;
    if (!m->active)
        m->ns_pid = pid;
}

void nsmap_free(struct nsmap *m)
{
    free(m->pairs);
    *m = (struct nsmap){0};
}

static void rescan(struct nsmap *m, pid_t pid)
{
    char path[64];
    struct dirent *d;
    DIR *dir;

    m->refreshed_ns = now_ns();
    m->n = 0;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    dir = opendir(path);
    if (!dir)
        return;
    while ((d = readdir(dir)) != NULL) {
        char status[300];
        pid_t host = (pid_t)atoi(d->d_name), ns;

        if (host <= 0)
            continue;
        snprintf(status, sizeof(status), "%s/status", d->d_name);
        ns = innermost_id(dirfd(dir), status);
        if (ns <= 0)
            continue;
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 64;
            struct nsmap_pair *p = realloc(m->pairs, cap * sizeof(*p));

            if (!p)
                break;
            m->pairs = p;
            m->cap = cap;
        }
        m->pairs[m->n++] = (struct nsmap_pair){.ns = ns, .host = host};
    }
    closedir(dir);
}

static pid_t lookup(const struct nsmap *m, pid_t ns_tid)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->pairs[i].ns == ns_tid)
            return m->pairs[i].host;
    return 0;
}

pid_t nsmap_host_tid(struct nsmap *m, pid_t pid, pid_t ns_tid)
{
    pid_t host;

    if (!m->active || ns_tid <= 0)
        return ns_tid;
    host = lookup(m, ns_tid);
    if (host == 0 && now_ns() - m->refreshed_ns >= RESCAN_MIN_NS) {
        rescan(m, pid);
        host = lookup(m, ns_tid);
    }
    return host;
}

void nsmap_thread_count(struct nsmap *m, size_t n)
{
    if (m->active && n != m->n_threads) {
        m->n = 0;
        m->refreshed_ns = 0;
        m->n_threads = n;
    }
}

size_t nsmap_ns_tids(struct nsmap *m, pid_t pid, pid_t *tids, size_t cap)
{
    size_t n = 0;

    rescan(m, pid);
    for (size_t i = 0; i < m->n && n < cap; i++)
        tids[n++] = m->pairs[i].ns;
    return n;
}
