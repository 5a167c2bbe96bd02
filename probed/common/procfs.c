/* procfs.c - see procfs.h. */
#define _GNU_SOURCE
#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

int procfs_start_time(pid_t pid, int64_t *ret)
{
    char buf[1024], *p;
    long long start = -1;
    ssize_t n = procfs_read(pid, "stat", buf, sizeof(buf));

    if (n <= 0)
        return n < 0 ? (int)n : -EIO;
    /* The command name can hold spaces and parentheses: fields start after the last ')'. */
    p = strrchr(buf, ')');
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
                     "%*d %*d %*d %lld",
                     &start) != 1)
        return -EPROTO;
    *ret = start;
    return 0;
}
