/* spawn.c - see spawn.h. */
#define _GNU_SOURCE
#include "spawn.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

pid_t spawn_target(const char *python, const char *script)
{
    int fds[2];
    char buf[4096];
    pid_t pid;
    FILE *f;

    if (pipe(fds) < 0)
        return -1;
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execl(python, python, script, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    f = fdopen(fds[0], "r");
    while (f && fgets(buf, sizeof(buf), f))
        if (strncmp(buf, "READY", 5) == 0)
            return pid; /* the pipe stays open: the target may print more */
    return -1;
}
