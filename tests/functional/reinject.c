/*
 * reinject.c - loads a library into a process N times with probed's injector (inject.c), each
 * time from a fresh copy (a path dlopen() has not seen), for tests/functional/test_eval.py.
 * usage: reinject <pid> <library> <dir as the target sees it> <dir as we reach it> <n> [kill_us]
 * Prints {"ok": n, "failed": n, "last_error": "..."}; exit 0 when all loads succeeded.
 * With kill_us, each load runs in a child (the injector, as the daemon would) that is killed
 * with SIGKILL at a random instant within kill_us microseconds: a daemon dying at any point of
 * an injection. Then "ok" counts the loads that ended before the kill; the target must go on
 * correctly whatever the instant.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "intarget/inject.h"

static int copy(const char *from, const char *to)
{
    char buf[65536];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    ssize_t n;
    int r = in >= 0 && out >= 0 ? 0 : -1;

    while (r == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            r = -1;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return r;
}

/* One load by a child killed at a random instant within @kill_us: 1 when it finished first. */
static int killed_while_injecting(const struct proc_grant *g, const char *in_target, int kill_us)
{
    int status = 0;
    pid_t child = fork();

    if (child == 0) {
        struct errbuf err;
        _exit(inject_library(g, in_target, &err) < 0 ? 1 : 0);
    }
    if (child < 0)
        return 0;
    usleep((useconds_t)(random() % kill_us));
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv)
{
    char path[4096], in_target[4096];
    struct errbuf err = {""};
    int ok = 0, failed = 0, n, kill_us;
    pid_t pid;

    if (argc != 6 && argc != 7)
        return fprintf(stderr, "usage: reinject <pid> <lib> <dir in target> <dir> <n> [kill_us]\n"),
               2;
    pid = atoi(argv[1]);
    n = atoi(argv[5]);
    kill_us = argc == 7 ? atoi(argv[6]) : 0;
    struct proc_grant g = {.pid = pid, .root = true}; /* root, on the process as it is now */
    if (procfs_start_time(pid, &g.start_time) < 0)
        return fprintf(stderr, "reinject: no process %d\n", (int)pid), 1;
    srandom((unsigned)getpid());
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/noop-%d.so", argv[4], i);
        snprintf(in_target, sizeof(in_target), "%s/noop-%d.so", argv[3], i);
        if (copy(argv[2], path) < 0)
            failed++;
        else if (kill_us > 0)
            ok += killed_while_injecting(&g, in_target, kill_us);
        else if (inject_library(&g, in_target, &err) < 0)
            failed++;
        else
            ok++;
        unlink(path);
        if (kill(pid, 0) < 0) {
            errbuf_set(&err, 0, "the target is gone after load %d", i);
            failed++;
            break;
        }
    }
    printf("{\"ok\": %d, \"failed\": %d, \"last_error\": \"%s\"}\n", ok, failed, err.msg);
    return failed ? 1 : 0;
}
