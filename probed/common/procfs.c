/* procfs.c - see procfs.h. */
#define _GNU_SOURCE
#include "common/procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ssize_t procfs_read(pid_t pid, const char *name, char *buf, size_t size)
{
    char path[64];
    ssize_t n, total = 0;
    int fd;

    if (size == 0)
        return -EINVAL;
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        buf[0] = '\0';
        return -errno;
    }
    while ((size_t)total < size - 1 && (n = read(fd, buf + total, size - 1 - (size_t)total)) > 0)
        total += n;
    close(fd);
    buf[total] = '\0';
    return total;
}

void procfs_cmdline(pid_t pid, char *buf, size_t size)
{
    ssize_t n = procfs_read(pid, "cmdline", buf, size);

    while (n > 0 && buf[n - 1] == '\0') /* the terminator of the last argument */
        n--;
    for (ssize_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20) /* NULs between arguments, and newlines */
            buf[i] = ' ';
    if (n >= 0)
        buf[n] = '\0';
}

/* Fields of a stat file (/proc/PID/stat or /proc/PID/task/TID/stat) that probed uses. */
struct stat_fields {
    char state;                      /* R, S, D, ... Z a zombie, X dead */
    unsigned long long utime, stime; /* clock ticks */
    long long threads, start_time;
    unsigned long long start_stack;
};

static int read_stat(const char *name, pid_t pid, struct stat_fields *f)
{
    char buf[1024], *p;
    ssize_t n = procfs_read(pid, name, buf, sizeof(buf));

    if (n <= 0)
        return n < 0 ? (int)n : -EIO;
    /* The command name can hold spaces and parentheses: fields start after the last ')'.
     * From field 3 (state): 14 utime, 15 stime, 20 num_threads, 22 starttime, 28 startstack. */
    p = strrchr(buf, ')');
    if (!p ||
        sscanf(p + 2,
               "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d "
               "%*d %lld %*d %lld %*u %*d %*u %*u %*u %llu",
               &f->state, &f->utime, &f->stime, &f->threads, &f->start_time, &f->start_stack) != 6)
        return -EPROTO;
    return 0;
}

static int64_t ticks_ns(unsigned long long ticks)
{
    long hz = sysconf(_SC_CLK_TCK);

    return (int64_t)ticks * (1000000000LL / (hz > 0 ? hz : 100));
}

int procfs_start_time(pid_t pid, int64_t *ret)
{
    struct stat_fields f;
    int r = read_stat("stat", pid, &f);

    if (r == 0)
        *ret = f.start_time;
    return r;
}

int procfs_identity(pid_t pid, int64_t *ret_start_time, uint64_t *ret_start_stack)
{
    struct stat_fields f;
    int r = read_stat("stat", pid, &f);

    /* A zombie has exited: only its status waits for its parent (or, its leader a zombie, its
     * other threads are being torn down: what its pid reaches has no memory left either). */
    if (r == 0 && (f.state == 'Z' || f.state == 'X'))
        return -ESRCH;
    if (r == 0) {
        *ret_start_time = f.start_time;
        *ret_start_stack = f.start_stack;
    }
    return r;
}

int procfs_thread_cpu(pid_t pid, pid_t tid, int64_t *cpu_ns)
{
    char name[48];
    struct stat_fields f;
    int r;

    snprintf(name, sizeof(name), "task/%d/stat", (int)tid);
    r = read_stat(name, pid, &f);
    if (r == 0)
        *cpu_ns = ticks_ns(f.utime + f.stime);
    return r;
}

/* The value of "@key:   123 kB" lines, in bytes (0 when absent). */
static int64_t rollup_field(const char *text, const char *key)
{
    size_t n = strlen(key);

    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == ':')
            return strtoll(p + n + 1, NULL, 10) * 1024;
    return 0;
}

int procfs_usage(pid_t pid, struct proc_usage *u)
{
    char buf[2048];
    struct stat_fields f;
    ssize_t n;
    int r = read_stat("stat", pid, &f);

    if (r < 0)
        return r;
    /* smaps_rollup: one walk of the mappings in the kernel (Linux 4.14+) */
    n = procfs_read(pid, "smaps_rollup", buf, sizeof(buf));
    if (n <= 0)
        return n < 0 ? (int)n : -ESRCH; /* empty: a zombie, or a kernel thread */
    *u = (struct proc_usage){
        .rss = rollup_field(buf, "Rss"),
        .pss = rollup_field(buf, "Pss"),
        .uss = rollup_field(buf, "Private_Clean") + rollup_field(buf, "Private_Dirty"),
        .swap = rollup_field(buf, "Swap"),
        .cpu_ns = ticks_ns(f.utime + f.stime),
        .start_time = f.start_time,
        .threads = (int32_t)f.threads,
    };
    return 0;
}

bool procfs_in_initial_pidns(void)
{
    char buf[4096];
    const char *line;

    if (procfs_read(getpid(), "status", buf, sizeof(buf)) <= 0 || !(line = strstr(buf, "\nNSpid:")))
        return false;
    line += strlen("\nNSpid:");
    line += strspn(line, " \t");
    line += strspn(line, "0123456789");
    return *line == '\n' || *line == '\0';
}
